"""Event-time watermarks through real engine nodes: JsonLinesReader partitions as origins, the minimum
over inputs, idle inputs, the end of input, and the buffer server's wire."""

from __future__ import annotations

import json
import random
import threading
import time

from stram.agent.bufferserver.server import BufferServer
from stram.agent.engine.node import Node, NodeState
from stram.agent.engine.streams import PublisherSink, QueueSink, subscribe
from stram.common.partition import partition_hash
from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.common.windows import initial_window
from stram.operator import InputOperator, InputPort, Operator, OperatorContext, OutputPort, ShutdownException
from stram.operators import io

BOUND = 50


class Recorder(Operator):
    """Keeps what arrives and, at every watermark, the largest timestamp seen so far per source file."""

    input = InputPort()

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.calls: list[tuple[int, dict[str, int]]] = []

    def process_input(self, record: dict) -> None:
        self.seen.append(record)

    def on_watermark(self, watermark: int) -> None:
        high: dict[str, int] = {}
        for r in self.seen:
            high[r["src"]] = max(high.get(r["src"], r["ts"]), r["ts"])
        self.calls.append((watermark, high))


def node(op_id: int, op: Operator, kind: str, start: int, index: int = 0, count: int = 1) -> Node:
    ctx = OperatorContext(id=op_id, name=type(op).__name__, partition_index=index, partition_count=count,
                          streaming_window_size_millis=20, attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"})
    return Node(op_id, ctx.name, op, ctx, kind, start, 1000, None)


def write_sources(tmp_path, seed: int) -> tuple[str, dict[str, list[dict]]]:
    """Two files of records in event time with disorder within BOUND; the second much slower in event time."""
    rng = random.Random(seed)
    folder = tmp_path / "in"
    folder.mkdir()
    made = {}
    for name, step in (("a", 10), ("b", 3)):
        records, high = [], 0
        for i in range(600):
            high += step
            records.append({"src": name, "i": i, "ts": max(0, high - rng.randrange(BOUND + 1))})
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        made[name] = records
    return str(folder), made


def run(nodes: list[Node], *sinks: Node, timeout: float = 60) -> None:
    for n in nodes:
        n.start()
    try:
        for sink in sinks:
            assert sink.stopped.wait(timeout)
    finally:
        for n in nodes:
            n.stop(1)
    assert [n.state for n in nodes] == [NodeState.SHUTDOWN] * len(nodes), [n.error for n in nodes]


def readers(folder: str, start: int, **props) -> list[Node]:
    made = []
    for index in range(2):
        r = io.JsonLinesReader()
        r.path, r.timestamp_field, r.out_of_orderness_ms, r.records_per_window = folder, "ts", BOUND, 40
        r.batch_lines = 20
        for k, v in props.items():
            setattr(r, k, v)
        made.append(node(10 + index, r, "INPUT", start, index, 2))
    return made


def test_the_watermark_is_the_minimum_over_the_inputs_and_never_passes_a_source(tmp_path):
    folder, made = write_sources(tmp_path, seed=4)
    start = initial_window(int(time.time() * 1000))
    sources = readers(folder, start)
    rec = Recorder()
    sink = node(20, rec, "GENERIC", start)
    for s in sources:
        s.outputs["output"].add_sink(QueueSink(sink, sink.add_source("input")))
    run([sink, *sources], sink)

    assert sorted((r["src"], r["i"]) for r in rec.seen) == sorted((r["src"], r["i"]) for v in made.values() for r in v)
    values = [w for w, _ in rec.calls]
    assert values == sorted(values) and len(set(values)) == len(values), "watermarks only advance"
    assert values[-1] == MAX_WATERMARK
    for watermark, high in rec.calls[:-1]:
        # never past what either source had shown (minus its bound) when the watermark came
        assert set(high) == {"a", "b"} and watermark <= min(high.values()) - BOUND, (watermark, high)
    # the slow file holds the minimum back: before the end, no watermark passes b's last timestamp
    assert all(w <= max(r["ts"] for r in made["b"]) - BOUND for w in values[:-1])
    assert len(values) > 3  # it advanced window by window, not only at the end


class Trickle(InputOperator):
    """Emits `count` records one per window with ts = 100 * i, then keeps its stream open without
    records until `release` is set; declares IDLE after `idle_ms` without a record when asked to."""

    output = OutputPort()
    transient = ("_context", "release")

    def __init__(self, count: int, idle_ms: int | None) -> None:
        self.count, self.idle_ms, self.sent, self.last = count, idle_ms, 0, 0.0
        self.release = threading.Event()

    def setup(self, context: OperatorContext) -> None:
        self._context = context

    def emit_tuples(self) -> None:
        if self.sent < self.count:
            self.output.emit({"src": "t", "ts": 100 * self.sent})
            self.sent += 1
            self.last = time.monotonic()
        elif self.release.is_set():
            self._context.emit_watermark(MAX_WATERMARK)
            raise ShutdownException("released")

    def end_window(self) -> None:
        if self.sent and self.sent < self.count or self.idle_ms is None:
            self._context.emit_watermark(100 * (self.sent - 1))
        elif (time.monotonic() - self.last) * 1000 >= self.idle_ms:
            self._context.emit_watermark(IDLE)


class Steady(Trickle):
    def __init__(self) -> None:
        super().__init__(10 ** 9, None)
        self.rate = 0

    def emit_tuples(self) -> None:
        if self.release.is_set():
            self._context.emit_watermark(MAX_WATERMARK)
            raise ShutdownException("released")
        super().emit_tuples()


def idle_run(idle_ms: int | None) -> tuple[Recorder, int]:
    start = initial_window(int(time.time() * 1000))
    stalled, steady = Trickle(3, idle_ms), Steady()
    rec = Recorder()
    sink = node(20, rec, "GENERIC", start)
    a, b = node(10, stalled, "INPUT", start), node(11, steady, "INPUT", start)
    for s in (a, b):
        s.outputs["output"].add_sink(QueueSink(sink, sink.add_source("input")))
    for n in (sink, a, b):
        n.start()
    try:
        deadline = time.monotonic() + 30
        # wait until the steady source is far ahead of the stalled one in event time
        while steady.sent < 60 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        held = [w for w, _ in rec.calls]
        stalled.release.set()
        steady.release.set()
        assert sink.stopped.wait(30)
    finally:
        for n in (sink, a, b):
            n.stop(1)
    return rec, max(held) if held else -1


def test_an_idle_input_holds_the_watermark_back_until_its_idle_timeout_releases_it():
    rec, held = idle_run(idle_ms=None)
    assert held <= 100 * 2  # the stalled source's last record (ts 200) bounds everything
    assert rec.calls[-1][0] == MAX_WATERMARK

    rec, held = idle_run(idle_ms=100)
    # idle after 100 ms: the steady source alone sets the watermark, far past the stalled one's records
    assert held > 100 * 20, held
    assert rec.calls[-1][0] == MAX_WATERMARK


def test_watermarks_cross_a_buffer_server_to_every_partition(tmp_path):
    """reader -> buffer server -> two subscribers with partition masks: data split, watermarks to both."""
    folder, made = write_sources(tmp_path, seed=9)
    start = initial_window(int(time.time() * 1000))
    server = BufferServer(b"t")
    server.start()
    try:
        r = io.JsonLinesReader()
        r.path, r.timestamp_field, r.out_of_orderness_ms, r.records_per_window = folder, "ts", BOUND, 50
        src = node(1, r, "INPUT", start)
        src.outputs["output"].add_sink(PublisherSink(server.publisher("1.output", start + 1), "pickle", 1,
                                                     key=lambda t: t["i"]))
        recs = [Recorder(), Recorder()]
        sinks = [node(2 + k, recs[k], "GENERIC", start) for k in range(2)]
        for k, s in enumerate(sinks):
            s.remote_inputs.append(subscribe(s, s.add_source("input"), "127.0.0.1", server.port, b"t",
                                             "1.output", start + 1, "pickle", mask=1, keys=[k]))
        run([*sinks, src], *sinks)
    finally:
        server.stop()
    got = sorted((r["src"], r["i"]) for rec in recs for r in rec.seen)
    assert got == sorted((r["src"], r["i"]) for v in made.values() for r in v)
    assert all(partition_hash(r["i"]) & 1 == k for k in range(2) for r in recs[k].seen)
    for rec in recs:
        assert rec.calls[-1][0] == MAX_WATERMARK and len(rec.calls) > 3
        for watermark, high in rec.calls[:-1]:
            assert watermark <= max(max(high.values()), 0)


class Clock(InputOperator):
    """Emits one record a call with ts = 10 * i and a watermark at it, `count` of them, then ends."""

    output = OutputPort()
    transient = ("_context",)

    def __init__(self, count: int) -> None:
        self.count, self.sent = count, 0

    def setup(self, context: OperatorContext) -> None:
        self._context = context

    def emit_tuples(self) -> None:
        if self.sent >= self.count:
            self._context.emit_watermark(MAX_WATERMARK)
            raise ShutdownException("done")
        self.output.emit({"src": "c", "ts": 10 * self.sent})
        self._context.emit_watermark(10 * self.sent)
        self.sent += 1


def test_an_aligned_source_waits_at_its_ceiling_closing_windows_empty_until_it_rises():
    start = initial_window(int(time.time() * 1000))
    clock = Clock(500)
    ctx = OperatorContext(id=1, name="clock", streaming_window_size_millis=20,
                          attributes={"PROCESSING_MODE": "AT_LEAST_ONCE", "WATERMARK_ALIGNMENT_GROUP": "g"})
    source = Node(1, "clock", clock, ctx, "INPUT", start, 1000, None)
    assert source.watermark_ceiling == MIN_WATERMARK  # until the master's first word: its first rows only
    rec = Recorder()
    sink = node(2, rec, "GENERIC", start)
    source.outputs["output"].add_sink(QueueSink(sink, sink.add_source("input")))
    sink.start()
    source.start()
    try:
        deadline = time.monotonic() + 10
        while clock.sent < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert clock.sent == 1  # held after its first row
        source.watermark_ceiling = 995
        while clock.sent < 101 and time.monotonic() < deadline:
            time.sleep(0.01)
        windows = sink.current_window
        time.sleep(0.3)
        assert clock.sent == 101  # emitted up to ts 1000, the first past the ceiling, then waits
        assert sink.current_window > windows  # windows go on, empty, while it waits
        source.watermark_ceiling = None  # the master: unbounded now
        assert sink.stopped.wait(10)
    finally:
        source.stop(1)
        sink.stop(1)
    assert [r["ts"] for r in rec.seen] == [10 * i for i in range(500)]


class Stepper(Clock):
    """A Clock with its own event-time step per record and wall-time delay per call."""

    def __init__(self, count: int, step: int, delay: float = 0.0) -> None:
        super().__init__(count)
        self.step, self.delay = step, delay

    def emit_tuples(self) -> None:
        if self.sent >= self.count:
            self._context.emit_watermark(MAX_WATERMARK)
            raise ShutdownException("done")
        if self.delay:
            time.sleep(self.delay)
        self.output.emit({"src": self.step, "ts": self.step * self.sent})
        self._context.emit_watermark(self.step * self.sent)
        self.sent += 1


def test_aligned_sources_in_one_container_hold_each_other_at_every_call():
    """Two members of a group side by side, the master's ceiling unbounded (it leaves them to the
    container): the one covering event time fast keeps within the drift of the slow one at every
    moment, and runs on alone once the slow one has ended."""
    drift, fast_step = 300, 100
    start = initial_window(int(time.time() * 1000))
    slow_clock, fast_clock = Stepper(150, 10, delay=0.002), Stepper(400, fast_step)
    attrs = {"PROCESSING_MODE": "AT_LEAST_ONCE", "WATERMARK_ALIGNMENT_GROUP": "g", "WATERMARK_MAX_DRIFT_MILLIS": drift}
    slow, fast = (Node(i, f"s{i}", c, OperatorContext(id=i, name=f"s{i}", streaming_window_size_millis=20,
                                                      attributes=attrs), "INPUT", start, 1000, None)
                  for i, c in ((1, slow_clock), (2, fast_clock)))
    slow.align_peers, fast.align_peers = [fast], [slow]
    slow.watermark_ceiling = fast.watermark_ceiling = None   # the master: nothing remote bounds them
    rec = Recorder()
    sink = node(3, rec, "GENERIC", start)
    for s in (slow, fast):
        s.outputs["output"].add_sink(QueueSink(sink, sink.add_source("input")))
    ahead = []
    for x in (sink, slow, fast):
        x.start()
    try:
        while not slow.stopped.is_set():
            high = fast._high_watermark            # read first: the slow one's can only have risen since
            mark = slow.watermark
            if mark not in (MIN_WATERMARK, MAX_WATERMARK):
                ahead.append(high - mark)
            time.sleep(0.001)
        assert sink.stopped.wait(10)
    finally:
        for x in (slow, fast, sink):
            x.stop(1)
    assert len(ahead) > 50 and max(ahead) <= drift + fast_step and max(ahead) >= drift // 2
    assert fast_clock.sent == 400    # on alone after the slow one ended
    assert sorted(r["ts"] for r in rec.seen if r["src"] == fast_step) == [fast_step * i for i in range(400)]
    assert [r["ts"] for r in rec.seen if r["src"] == 10] == [10 * i for i in range(150)]
