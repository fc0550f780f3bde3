"""KafkaInput and KafkaOutput against a real broker (./scripts/kafka), driven window by window.

The operators run outside the engine here, as the engine drives them (setup,
begin_window, emit_tuples, end_window, checkpoint = pickled get_state,
committed); the end-to-end runs are in tests/e2e/kafka/test_kafka_e2e.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import pickle
import socket
import threading
import time
import uuid

import pytest
from e2ekit import wait_until

from stram.connectors.kafka import KafkaInput, KafkaOutput, assign_partitions
from stram.operator import FatalError, OperatorContext, ShutdownException


def ctx(name="op", index=0, count=1, mode="AT_LEAST_ONCE", app="app-test") -> OperatorContext:
    return OperatorContext(id=index + 1, name=name, partition_index=index, partition_count=count,
                           attributes={"PROCESSING_MODE": mode}, app_id=app, streaming_window_size_millis=100)


def make_input(servers: str, **props) -> KafkaInput:
    op = KafkaInput()
    op.bootstrap_servers = servers
    for k, v in props.items():
        setattr(op, k, v)
    out: list = []
    op.output.emit = out.append
    op.emitted = out  # type: ignore[attr-defined]
    return op


def run_windows(op: KafkaInput, first: int, windows: int | None = None, calls: int = 20) -> int:
    """Drive windows from ``first``; stop after ``windows`` windows or at ShutdownException; the next window."""
    w = first
    while windows is None or w < first + windows:
        op.begin_window(w)
        try:
            for _ in range(calls):
                op.emit_tuples()
        except ShutdownException:
            op.end_window()
            return w + 1
        op.end_window()
        w += 1
        assert w < first + 10_000, "the input never ended"
    return w


def restored(cls, state_bytes: bytes):
    op = cls()
    op.set_state(pickle.loads(state_bytes))
    return op


def test_assignment_is_deterministic_round_robin():
    keys = [("b", 0), ("a", 1), ("a", 0), ("b", 1), ("a", 2)]
    parts = [assign_partitions(keys, 2, i) for i in range(2)]
    assert parts == [[("a", 0), ("a", 2), ("b", 1)], [("a", 1), ("b", 0)]]
    assert assign_partitions(keys, 1, 0) == sorted(keys)
    assert assign_partitions(keys, 7, 6) == []


def test_partitioned_input_reads_every_record_once_and_stops_at_latest(kafka):
    topic = kafka.new_topic("in", partitions=3)
    values = [f"line {i}" for i in range(3000)]
    kafka.produce(topic, values)
    ops = [make_input(kafka.servers, topics=[topic], stop_at="latest") for _ in range(2)]
    for i, op in enumerate(ops):
        op.setup(ctx("reader", i, 2))
    kafka.produce(topic, ["after the start"] * 10)  # past the end offsets of the first start: not read
    for op in ops:
        run_windows(op, 1)
        op.teardown()
    seen = ops[0].emitted + ops[1].emitted
    assert sorted(seen) == sorted(values)
    assert set(ops[0]._assigned).isdisjoint(ops[1]._assigned) and len(ops[0]._assigned) == 2


def test_recovered_input_replays_exactly_after_its_checkpoint_and_commits_only_committed(kafka):
    topic = kafka.new_topic("in", partitions=2)
    values = [json.dumps({"n": i}) for i in range(2000)]
    kafka.produce(topic, values)
    group = f"g-{uuid.uuid4().hex[:6]}"
    op = make_input(kafka.servers, topics=topic, value_format="json", group_id=group, max_records_per_window=150,
                    stop_at="latest")
    op.setup(ctx())
    nxt = run_windows(op, 1, windows=5)
    checkpoint = pickle.dumps(op.get_state())  # the checkpoint after window nxt - 1
    before = list(op.emitted)
    assert len(before) == 750
    run_windows(op, nxt, windows=3)  # more windows, then the container "dies"
    op.teardown()
    consumer = kafka.ck.Consumer({"bootstrap.servers": kafka.servers, "group.id": group})
    tps = [kafka.ck.TopicPartition(topic, p) for p in range(2)]
    assert all(tp.offset < 0 for tp in consumer.committed(tps, timeout=10))  # nothing committed yet

    again = restored(KafkaInput, checkpoint)
    again.output.emit = (rest := []).append
    again.setup(ctx())
    again.committed(2)  # window 2 is committed: the group gets its offsets (300 records in all), asynchronously
    group_sum = lambda: sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10))  # noqa: E731
    wait_until(lambda: group_sum() == 300, timeout=30, what="the offsets of window 2 in the group")
    run_windows(again, nxt)
    assert group_sum() <= 750  # never ahead of the committed window (the checkpoint's windows are <= 5)
    again.committed(10**6)
    wait_until(lambda: group_sum() == 2000, timeout=30, what="every offset in the group")
    consumer.close()
    again.teardown()
    assert sorted((r["n"] for r in before + rest)) == list(range(2000))  # exactly once across the "restart"


def test_bad_json_fails_naming_the_record_or_is_skipped_and_counted(kafka):
    topic = kafka.new_topic("bad")
    kafka.produce(topic, [b'{"ok": 1}', b"not json {", b'{"ok": 2}'], partition=0)
    op = make_input(kafka.servers, topics=topic, value_format="json", stop_at="latest")
    op.setup(ctx())
    with pytest.raises(FatalError, match=rf"topic {topic} partition 0 offset 1 is not valid JSON"):
        run_windows(op, 1)
    op.teardown()
    op = make_input(kafka.servers, topics=topic, value_format="json", stop_at="latest", on_bad_record="skip")
    op.setup(ctx())
    run_windows(op, 1)
    op.teardown()
    assert op.emitted == [{"ok": 1}, {"ok": 2}] and op.bad_records == 1


def test_missing_topic_and_unreachable_broker_are_clear_errors(kafka):
    op = make_input(kafka.servers, topics="no-such-topic-here")
    with pytest.raises(FatalError, match="the topic 'no-such-topic-here' cannot be read from"):
        op.setup(ctx())
    op.teardown()
    out = KafkaOutput()
    out.bootstrap_servers, out.topic = kafka.servers, "no-such-topic-either"
    with pytest.raises(FatalError, match="the topic 'no-such-topic-either' cannot be written"):
        out.setup(ctx())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once the socket closes
    op = make_input(closed, topics="x", timeout_seconds=3)
    with pytest.raises(FatalError, match=rf"the Kafka broker at {closed} did not answer for \d+s"):
        op.setup(ctx())
    op.teardown()


def _output(servers: str, topic: str, mode: str, index: int = 0, app: str = "app-test") -> KafkaOutput:
    out = KafkaOutput()
    out.bootstrap_servers, out.topic = servers, topic
    out.setup(ctx("out", index, 1, mode=mode, app=app))
    return out


def _window(out: KafkaOutput, w: int, rows: list) -> None:
    out.begin_window(w)
    for row in rows:
        out.process_input(row)
    out.end_window()


def test_exactly_once_output_publishes_committed_windows_once_across_recovery(kafka):
    topic = kafka.new_topic("out", partitions=2)
    app = f"app-{uuid.uuid4().hex[:6]}"
    out = _output(kafka.servers, topic, "EXACTLY_ONCE", app=app)
    _window(out, 1, [{"w": 1, "i": i} for i in range(3)])
    checkpoint = pickle.dumps(out.get_state())  # checkpoint after window 1 (window 1 still pending)
    _window(out, 2, [{"w": 2, "i": i} for i in range(4)])
    assert kafka.read_all(topic, idle_seconds=1) == []  # nothing committed: nothing visible
    out.committed(2)  # published by the operator's publisher thread
    wait_until(lambda: out._published >= 2, timeout=60, what="windows 1 and 2 published")
    rows = [json.loads(m.value()) for m in kafka.read_all(topic, idle_seconds=1)]
    assert sorted((r["w"], r["i"]) for r in rows) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (2, 3)]
    _window(out, 3, [{"w": 3, "i": 0}])  # window 3 is never committed before the "crash"
    out.teardown()

    # recovery from the checkpoint after window 1: windows 2 and 3 are replayed (window 2 already published)
    again = restored(KafkaOutput, checkpoint)
    again.bootstrap_servers, again.topic = kafka.servers, topic
    again.setup(ctx("out", 0, 1, mode="EXACTLY_ONCE", app=app))
    wait_until(lambda: again._published == 2, timeout=30, what="the marker of window 2 read back")
    _window(again, 2, [{"w": 2, "i": i} for i in range(4)])
    _window(again, 3, [{"w": 3, "i": 0}, {"w": 3, "i": 1}])
    again.committed(3)
    again.teardown()  # waits until every committed window is published
    assert again._published == 3
    rows = [json.loads(m.value()) for m in kafka.read_all(topic, idle_seconds=1)]
    assert sorted((r["w"], r["i"]) for r in rows) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (2, 3),
                                                      (3, 0), (3, 1)]
    # the uncommitted (aborted or never committed) records are there for read_uncommitted readers only
    assert len(kafka.read_all(topic, committed_only=False, idle_seconds=1)) >= len(rows)


@contextlib.contextmanager
def broker_away(kafka, seconds: float):
    """The broker stops (now, when this returns), stays away ``seconds``, and starts again on the same
    port; leaving the block waits until it is back."""
    host, port = kafka.servers.split(",")[0].rsplit(":", 1)

    def answers() -> bool:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return True
        except OSError:
            return False
    failed: list[BaseException] = []

    def restart() -> None:
        try:
            kafka.restart(down_seconds=seconds)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            failed.append(exc)
    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    wait_until(lambda: failed or not answers(), timeout=120, interval=0.2, what="the broker to stop")
    assert not failed, failed[0]
    try:
        yield
    finally:
        thread.join(600)
    assert not failed, failed[0]


def test_exactly_once_teardown_publishes_the_last_committed_windows_when_the_broker_is_back(kafka):
    """The end of a run with the broker away: teardown waits for it, and every committed window goes out once."""
    topic = kafka.new_topic("out")
    out = KafkaOutput()
    out.bootstrap_servers, out.topic, out.timeout_seconds = kafka.servers, topic, 600
    out.setup(ctx("out", mode="EXACTLY_ONCE", app=f"app-{uuid.uuid4().hex[:6]}"))
    _window(out, 1, [{"w": 1, "i": i} for i in range(3)])
    _window(out, 2, [{"w": 2, "i": i} for i in range(2)])
    with broker_away(kafka, 8):
        out.committed(2)
        started = time.monotonic()
        out.teardown()  # returns once both windows are published
        waited = time.monotonic() - started
    assert waited > 3 and out._published == 2
    rows = [json.loads(m.value()) for m in kafka.read_all(topic, idle_seconds=1)]
    assert sorted((r["w"], r["i"]) for r in rows) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]


class LostCommit:
    """A producer whose next ``commit_transaction`` reports success without committing: what a
    broker stopped while it answered a commit was seen to do (loop round 31: the commit of windows
    14..18 reported done, then aborted with the next transaction when the broker came back)."""

    def __init__(self, producer) -> None:  # noqa: ANN001
        self._producer = producer
        self.lost = 0

    def commit_transaction(self, *args) -> None:  # noqa: ANN002
        if self.lost:
            return self._producer.commit_transaction(*args)
        self.lost += 1
        return None

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


def test_a_commit_the_broker_never_made_is_found_and_its_windows_published_again(kafka, caplog):
    """The marker read back after a commit tells: window 2's commit was never made, so window 2 (its
    records kept until the read) is published again, and a read_committed reader sees each row once."""
    topic = kafka.new_topic("out")
    out = KafkaOutput()
    out.bootstrap_servers, out.topic, out.timeout_seconds = kafka.servers, topic, 60
    out.setup(ctx("out", mode="EXACTLY_ONCE", app=f"app-{uuid.uuid4().hex[:6]}"))
    _window(out, 1, [{"w": 1, "i": i} for i in range(3)])
    out.committed(1)
    wait_until(lambda: out._published == 1 and not out.pending, timeout=60, what="window 1 published and read back")
    lost = out._producer = LostCommit(out._producer)
    _window(out, 2, [{"w": 2, "i": i} for i in range(2)])
    with caplog.at_level(logging.INFO, logger="stram.kafka"):
        out.committed(2)
        out.teardown()  # returns once window 2 is on Kafka for good
    rows = [json.loads(m.value()) for m in kafka.read_all(topic, idle_seconds=1)]
    assert sorted((r["w"], r["i"]) for r in rows) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    assert lost.lost == 1 and out._published == 2 and not out.pending
    assert "starting over with a new producer" in caplog.text


def test_at_least_once_output_delivers_each_window_at_its_end(kafka):
    topic = kafka.new_topic("out")
    out = _output(kafka.servers, topic, "AT_LEAST_ONCE")
    out.value_format = "str"
    _window(out, 1, ["a", "b", 3])
    assert sorted(m.value() for m in kafka.read_all(topic, idle_seconds=1)) == [b"3", b"a", b"b"]
    out.teardown()


def test_split_state_merges_offsets_for_every_new_partition():
    states = [{"offsets": {"t:0": 5, "t:2": 7}, "end_offsets": {"t:0": 9}, "resolved_topics": ["t"]},
              {"offsets": {"t:1": 3}, "end_offsets": {"t:1": 4}, "resolved_topics": ["t"]}]
    new = KafkaInput.split_state(states, 3, lambda k: 0)
    assert len(new) == 3
    for state in new:
        assert state["offsets"] == {"t:0": 5, "t:1": 3, "t:2": 7} and state["end_offsets"] == {"t:0": 9, "t:1": 4}
    with pytest.raises(ValueError, match="cannot be repartitioned"):
        KafkaOutput.split_state([{}], 2, lambda k: 0)


@pytest.mark.parametrize("idle_ms", [None, 300])
def test_event_time_watermark_is_the_minimum_over_kafka_partitions(kafka, idle_ms):
    """Partition 0 runs far ahead in event time, partition 1 stops early: without idle_timeout_ms
    partition 1 holds the watermark at its last timestamp; with it, once it is quiet, partition 0
    alone sets it. At stop_at: latest the watermark goes to the end of time."""
    from stram.common.watermarks import MAX_WATERMARK
    topic = kafka.new_topic("et", partitions=2)
    bound = 7
    kafka.produce(topic, [json.dumps({"i": i, "ts": 10 * i}) for i in range(200)], partition=0)
    kafka.produce(topic, [json.dumps({"i": i, "ts": 10 * i}) for i in range(5)], partition=1)
    op = make_input(kafka.servers, topics=topic, value_format="json", timestamp_field="ts",
                    out_of_orderness_ms=bound, idle_timeout_ms=idle_ms, batch_records=50)
    marks: list[int] = []
    context = ctx()
    context.emit_watermark = marks.append
    op.setup(context)
    try:
        deadline = time.monotonic() + 60
        w = 1
        while len(op.emitted) < 205 and time.monotonic() < deadline:
            w = run_windows(op, w, windows=1)
        assert sorted((r["i"], r["ts"]) for r in op.emitted) == sorted(
            [(i, 10 * i) for i in range(200)] + [(i, 10 * i) for i in range(5)])
        if idle_ms is None:
            assert marks and max(marks) <= 10 * 4 - bound  # partition 1's last record holds it back
        time.sleep(0.4)
        w = run_windows(op, w, windows=1)
        if idle_ms is None:
            assert marks[-1] == 10 * 4 - bound
        else:  # both quiet now: neither holds back, the largest stands
            assert marks[-1] == 10 * 199 - bound
            kafka.produce(topic, [json.dumps({"i": 200, "ts": 2000})], partition=0)
            deadline = time.monotonic() + 30
            while len(op.emitted) < 206 and time.monotonic() < deadline:
                w = run_windows(op, w, windows=1)
            # partition 0 speaks again, partition 1 is still quiet: partition 0 alone
            assert marks[-1] == 2000 - bound
        op.stop_at = "latest"
        op.end_offsets = dict(op.offsets)
        run_windows(op, w)
        assert marks[-1] == MAX_WATERMARK
    finally:
        op.teardown()
