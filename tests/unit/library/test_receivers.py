"""Receivers in process: block generation, backpressure, supervision, the WAL and recovery (end to end: test_receivers_e2e.py)."""

from __future__ import annotations

import pathlib
import pickle
import socket
import threading
import time
from collections import Counter
from typing import Any

import pytest
from conftest import ROOT
from e2ekit import wait_until

from stram.operator import FatalError, OperatorContext, ShutdownException, operator_properties
from stram.receivers import (Block, BlockGenerator, DirectoryReceiver, GeneratorStopped, Receiver, ReceiverSupervisor,
                             SocketTextReceiver, SupervisorState)

BASE = 7 << 32  # window ids of the in-process tests: (base seconds << 32) | index


# ---------------------------------------------------------------- block generator

def test_block_generator_cuts_by_interval():
    gen = BlockGenerator(interval_millis=50, capacity=100)
    gen.start()
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < 0.52:
        gen.add(n)
        n += 1
        time.sleep(0.002)
    time.sleep(0.08)
    gen.stop()
    blocks = []
    while (block := gen.take(timeout=0)) is not None:
        blocks.append(block)
    assert [item for b in blocks for item in b.items] == list(range(n))  # all, in order
    assert [b.seq for b in blocks] == list(range(len(blocks)))
    assert 6 <= len(blocks) <= 12, len(blocks)
    gaps = sorted(b.created - a.created for a, b in zip(blocks, blocks[1:]))
    assert 0.035 <= gaps[len(gaps) // 2] <= 0.1, gaps  # median gap: the interval
    assert blocks[-1].items_through == n


def test_backpressure_blocks_store_and_drops_nothing():
    gen = BlockGenerator(interval_millis=10, capacity=2)
    gen.start()
    stored = []

    def producer():
        for i in range(300):
            gen.add(i)
            stored.append(i)
            time.sleep(0.0005)

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    wait_until(lambda: gen.outstanding == 2, what="a full queue")
    time.sleep(0.2)
    assert t.is_alive() and len(stored) < 300  # store() waits for room
    blocked_at = len(stored)
    time.sleep(0.1)
    assert len(stored) <= blocked_at + 1
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 300 and time.monotonic() < deadline:
        block = gen.take(timeout=0.5)
        if block is not None:
            got.extend(block.items)
            gen.release()
    t.join(5)
    gen.stop()
    assert got == list(range(300))


def test_metadata_travels_with_its_block():
    gen = BlockGenerator(interval_millis=1000, capacity=5, first_seq=40)
    gen.add_many(["a", "b"], metadata={"file": "x"})
    gen.add_many([], metadata={"file": "empty"})
    block = gen.cut()
    assert block.seq == 40 and block.items == ["a", "b"]
    assert block.metadata == [{"file": "x"}, {"file": "empty"}]
    assert gen.cut() is None


# ---------------------------------------------------------------- supervisor

class _Flaky:
    """on_start fails ``failures`` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.starts: list[float] = []
        self.stops = 0

    def on_start(self) -> None:
        self.starts.append(time.monotonic())
        if len(self.starts) <= self.failures:
            raise ConnectionError(f"attempt {len(self.starts)} refused")

    def on_stop(self) -> None:
        self.stops += 1


def test_supervisor_restarts_with_doubling_backoff():
    target = _Flaky(failures=3)
    logs: list[str] = []
    sup = ReceiverSupervisor(target, label="'flaky'", max_restarts=5, backoff=(0.05, 1.0), log=logs.append)
    sup.start()
    wait_until(lambda: sup.state == SupervisorState.STARTED and len(target.starts) == 4, what="4 starts")
    gaps = [b - a for a, b in zip(target.starts, target.starts[1:])]
    for gap, expected in zip(gaps, (0.05, 0.1, 0.2)):
        assert expected * 0.9 <= gap <= expected + 0.25, gaps
    assert sup.restarts == 3 and sup.receiving
    assert "ConnectionError: attempt 3 refused" in sup.last_error
    assert len(logs) == 3 and "restart 3" in logs[-1]
    sup.request_shutdown()
    sup.join(2)
    assert sup.state == SupervisorState.SHUT_DOWN and target.stops == 4  # on_stop after every start


def test_supervisor_gives_up_past_the_limit():
    target = _Flaky(failures=100)
    sup = ReceiverSupervisor(target, label="'down'", max_restarts=2, backoff=(0.01, 0.02))
    sup.start()
    wait_until(lambda: sup.state == SupervisorState.FAILED, what="FAILED")
    assert len(target.starts) == 3 and sup.restarts == 2
    assert "receiver 'down' failed 3 times in a row (RECEIVER_MAX_RESTARTS=2)" in sup.fatal
    assert "attempt 3 refused" in sup.fatal


def test_supervisor_failures_in_a_row_reset_on_progress():
    progress = [0]

    class Worker:
        def on_start(self):
            progress[0] += 1  # stores something every time it starts
            threading.Timer(0.01, lambda: sup.request_restart("stream ended")).start()

        def on_stop(self):
            pass

    sup = ReceiverSupervisor(Worker(), lambda: progress[0], max_restarts=1, backoff=(0.01, 0.01))
    sup.start()
    wait_until(lambda: sup.restarts >= 5, what="5 restarts")
    assert sup.state != SupervisorState.FAILED and sup.failures == 1
    sup.request_shutdown()
    sup.join(2)


# ---------------------------------------------------------------- the operator, in process

SOURCES: dict[str, "_Source"] = {}


class _Source:
    """An in-memory source that, like a message queue, resends what was not acknowledged."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.acked = 0  # items[:acked] are acknowledged


class FeedReceiver(Receiver):
    """Stores a ``_Source``'s items, a few at a time, and acknowledges stored blocks."""

    source: str = ""
    transient = ("_thread", "_start")

    def on_start(self) -> None:
        src = SOURCES[self.source]
        self._start = (src.acked, self.items_stored())
        self._thread = threading.Thread(target=self._run, args=(src,), daemon=True)
        self._thread.start()

    def _run(self, src: _Source) -> None:
        pos = src.acked
        try:
            while not self.is_stopped() and pos < len(src.items):
                self.store_many(src.items[pos:pos + 3])
                pos += 3
                time.sleep(0.002)
        except GeneratorStopped:
            pass  # the operator went away

    def on_stop(self) -> None:
        self._thread.join(2)

    def on_block_stored(self, block: Block) -> None:
        first, base = self._start
        src = SOURCES[self.source]
        src.acked = max(src.acked, first + block.items_through - base)


class FailingReceiver(Receiver):
    def on_start(self) -> None:
        raise ConnectionError("no route to source")


def make_context(tmp_path: pathlib.Path | None, checkpoint: int = BASE - 1, metrics: dict | None = None,
                 **attributes: Any) -> OperatorContext:
    attrs = {"BLOCK_INTERVAL_MILLIS": 20, **attributes}
    ctx = OperatorContext(id=3, name="rx", attributes=attrs, checkpoint_window=checkpoint,
                          app_path=f"file://{tmp_path}" if tmp_path else "")
    if metrics is not None:
        ctx.set_metric = metrics.__setitem__
    return ctx


def run_window(op: Receiver, window: int, seconds: float = 0.04, commit: int | None = None,
               into: list[Any] | None = None) -> list[Any]:
    """One window: begin, emit_tuples repeatedly for ``seconds``, end; what it emitted (also into ``into``)."""
    out: list[Any] = [] if into is None else into
    op.output.emit = out.append
    op.begin_window(window)
    deadline = time.monotonic() + seconds
    while True:
        op.emit_tuples()
        if time.monotonic() >= deadline:
            break
        time.sleep(0.002)
    op.end_window()
    if commit is not None:
        op.committed(commit)
    return out


def test_restart_limit_fails_the_operator_with_fatal_error():
    op = FailingReceiver()
    op.restart_backoff = (0.05, 0.1)
    metrics: dict = {}
    op.setup(make_context(None, metrics=metrics, RECEIVER_MAX_RESTARTS=3))
    with pytest.raises(FatalError) as info:
        for i in range(200):
            run_window(op, BASE + i, 0.02)
    op.teardown()
    msg = str(info.value)
    assert "receiver 'rx' (FailingReceiver) failed 4 times in a row (RECEIVER_MAX_RESTARTS=3)" in msg
    assert "ConnectionError: no route to source" in msg and "\n" not in msg
    assert op._rx.supervisor.restarts == 3
    assert metrics["receiver"]["restarts"] >= 1  # the last window that ended saw restarts
    assert "no route to source" in metrics["receiver"]["last_error"]


def test_wal_without_app_path_is_a_clear_error():
    op = FeedReceiver()
    with pytest.raises(ValueError, match="RECEIVER_WAL is on but the operator has no APP_PATH"):
        op.setup(make_context(None, RECEIVER_WAL=True))


def test_wal_replay_repeats_windows_exactly(tmp_path):
    """A crash after the checkpoint: the redeployed receiver re-emits the same blocks in the same windows.

    window:   1 2 3 4 5 | 6 7 8 9 10 11 12 13(partly) X(crash)     downstream recovered at D in 5..12
    run 1:    emits and checkpoints after window 5, goes on into 13, dies
    run 2:    restores window 5's state; windows 6..12 equal run 1's; then the rest of the source
    """
    SOURCES["replay"] = src = _Source([f"item-{i}" for i in range(2000)])
    op = FeedReceiver()
    op.source = "replay"
    op.setup(make_context(tmp_path, RECEIVER_WAL=True))
    first = {BASE + i: run_window(op, BASE + i) for i in range(1, 6)}
    state5 = pickle.loads(pickle.dumps(op.get_state()))  # the checkpoint after window 5
    assert set(state5) == {"_block_cursor", "source"}
    first.update({BASE + i: run_window(op, BASE + i) for i in range(6, 13)})
    partial: list = []  # window 13 begins and emits, then the container dies
    op.output.emit = partial.append
    op.begin_window(BASE + 13)
    op.emit_tuples()
    time.sleep(0.1)  # meanwhile more blocks become durable and acknowledged, never emitted
    op._rx.close()  # the crash: threads gone, nothing else done
    assert any(p.name.isdigit() for p in (tmp_path / "wal" / "3").iterdir()), "blocks in the WAL"
    emitted_by_run1 = [x for w in sorted(first) for x in first[w]]
    assert emitted_by_run1 and src.acked > len(emitted_by_run1)  # acked blocks were not all emitted

    op2 = FeedReceiver()
    op2.source = "replay"
    op2.set_state(state5)
    op2.setup(make_context(tmp_path, checkpoint=BASE + 5, RECEIVER_WAL=True))
    second: dict[int, list] = {}
    w = BASE + 6
    while sum(len(v) for v in second.values()) < 4000 and w < BASE + 400:
        second[w] = run_window(op2, w)
        if w > BASE + 20 and src.acked == len(src.items) and not second[w] and op2._rx.generator.idle:
            break
        w += 1
    op2.teardown()
    for window in range(BASE + 6, BASE + 13):
        assert second[window] == first[window], f"window {window - BASE} differs after replay"
    assert second[BASE + 13][:len(partial)] == partial
    acked = set(src.items)
    for d in range(5, 13):  # whatever checkpoint downstream recovered from, it sees each item once
        seen = Counter(x for win, xs in first.items() if win <= BASE + d for x in xs)
        seen.update(x for win, xs in second.items() if win > BASE + d for x in xs)
        assert set(seen) == acked
        assert max(seen.values()) == 1, [k for k, v in seen.items() if v > 1][:5]


def test_a_window_that_ended_empty_replays_empty(tmp_path):
    """Run 1 ends window 12 without emitting (blocks were stored meanwhile), then dies.

    Downstream may have checkpointed window 12: a replay that put the stored
    blocks into window 12 would lose them for it. They must come in 13.
    """
    SOURCES["empty"] = src = _Source([f"item-{i}" for i in range(2000)])
    op = FeedReceiver()
    op.source = "empty"
    op.setup(make_context(tmp_path, RECEIVER_WAL=True))
    first = {BASE + i: run_window(op, BASE + i) for i in range(1, 6)}
    state5 = pickle.loads(pickle.dumps(op.get_state()))
    first.update({BASE + i: run_window(op, BASE + i) for i in range(6, 12)})
    op.begin_window(BASE + 12)  # ends without an emit_tuples call while blocks keep being stored
    time.sleep(0.1)
    op.end_window()
    first[BASE + 12] = []
    op._rx.close()  # the crash, before window 13 emitted anything

    op2 = FeedReceiver()
    op2.source = "empty"
    op2.set_state(state5)
    op2.setup(make_context(tmp_path, checkpoint=BASE + 5, RECEIVER_WAL=True))
    second = {BASE + i: run_window(op2, BASE + i) for i in range(6, 14)}
    op2.teardown()
    for window in range(BASE + 6, BASE + 13):
        assert second[window] == first[window], f"window {window - BASE} differs after replay"
    assert second[BASE + 13], "window 13 emits what was stored during window 12"


def test_committed_deletes_wal_blocks_and_index(tmp_path):
    SOURCES["commit"] = _Source(list(range(5000)))
    op = FeedReceiver()
    op.source = "commit"
    op.setup(make_context(tmp_path, RECEIVER_WAL=True))
    for i in range(1, 11):
        run_window(op, BASE + i)
    wal = tmp_path / "wal" / "3"
    before = sorted(int(p.name) for p in wal.iterdir() if p.name.isdigit())
    cursor_at_6 = max(int(p.name.split(".")[1]) for p in (wal / "windows").iterdir()
                      if int(p.name.split(".")[0]) <= BASE + 6)
    run_window(op, BASE + 11, commit=BASE + 6)
    after = sorted(int(p.name) for p in wal.iterdir() if p.name.isdigit())
    op.teardown()
    assert before and after and min(after) == cursor_at_6 + 1
    assert all(int(p.name.split(".")[0]) > BASE + 6 for p in (wal / "windows").iterdir())


def test_stop_ends_the_stream_after_everything_stored_is_emitted():
    class Finite(Receiver):
        transient = ("_t",)

        def on_start(self):
            def run():
                self.store_many(range(500))
                waited.append(self.wait_stored(500, timeout=5))
                self.stop("done")
            self._t = threading.Thread(target=run, daemon=True)
            self._t.start()

    waited: list[bool] = []
    op = Finite()
    op.setup(make_context(None))
    got: list = []
    with pytest.raises(ShutdownException, match="stopped: done"):
        for i in range(500):
            run_window(op, BASE + i, 0.01, into=got)
    op.teardown()
    assert sorted(got) == list(range(500)) and waited == [True]


def test_socket_receiver_acknowledges_durable_lines(tmp_path):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    acks: list[str] = []

    def serve():
        conn, _ = server.accept()
        conn.sendall(b"".join(b"line %d\n" % i for i in range(1000)) + b"last")
        conn.shutdown(socket.SHUT_WR)  # end of stream: the receiver waits for the last ACK
        buf = b""
        while not buf.endswith(b"ACK 1001\n"):
            data = conn.recv(4096)
            if not data:
                break
            buf += data
        acks.extend(buf.decode().split("\n"))
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    op = SocketTextReceiver()
    op.host, op.port, op.ack = "127.0.0.1", port, True
    metrics: dict = {}
    op.setup(make_context(tmp_path, metrics=metrics, RECEIVER_WAL=True))
    got: list = []
    for i in range(1, 200):
        got += run_window(op, BASE + i, 0.02)
        if len(got) >= 1001:
            break
    t.join(5)
    assert got == [f"line {i}" for i in range(1000)] + ["last"]
    counts = [int(a.split()[1]) for a in acks if a.startswith("ACK")]
    assert counts == sorted(counts) and counts[-1] == 1001
    # every acknowledged line was in the WAL before the ACK went out: here, all of them
    wal_items = [x for p in (tmp_path / "wal" / "3").iterdir() if p.name.isdigit()
                 for x in pickle.loads(p.read_bytes())[1]]
    assert len(wal_items) == 1001
    assert metrics["receiver"]["wal"] is True and metrics["receiver"]["records"] == 1001
    op.teardown()
    server.close()


def test_directory_receiver_emits_each_file_once_across_restarts(tmp_path):
    incoming = tmp_path / "in"
    incoming.mkdir()
    (incoming / "a.txt").write_text("a1\na2\n")
    (incoming / ".partial").write_text("ignored\n")
    op = DirectoryReceiver()
    op.path, op.poll_millis = str(incoming), 20
    op.setup(make_context(tmp_path, RECEIVER_WAL=True))
    got = []
    for i in range(1, 6):
        got += run_window(op, BASE + i)
    (incoming / "b.txt").write_text("b1\n")
    (incoming / "empty.txt").write_text("")
    for i in range(6, 12):
        got += run_window(op, BASE + i)
    state = pickle.loads(pickle.dumps(op.get_state()))
    op.teardown()
    assert sorted(got) == ["a1", "a2", "b1"]
    assert state["finished"] == {"a.txt", "b.txt", "empty.txt"}
    (incoming / "c.txt").write_text("c1\nc2")
    again = DirectoryReceiver()
    again.path, again.poll_millis = str(incoming), 20
    again.set_state(state)
    again.setup(make_context(tmp_path, checkpoint=BASE + 11, RECEIVER_WAL=True))
    more = []
    for i in range(12, 20):
        more += run_window(again, BASE + i)
    again.teardown()
    assert more == ["c1", "c2"]


def test_receivers_are_operators_in_specs():
    from stram.master.spec import AppSpec
    assert set(operator_properties(SocketTextReceiver)) == {"host", "port", "ack", "ack_wait_seconds"}
    assert set(operator_properties(DirectoryReceiver)) == {"path", "poll_millis"}
    for name in ("socket_wordcount", "directory_wordcount"):
        spec = AppSpec.from_file(str(ROOT / "specs" / f"{name}.yaml"))
        assert spec.attributes["PROCESSING_MODE"] == "EXACTLY_ONCE"


