"""Batch-at-a-time operators: every built-in exact in its per-tuple and its batch form, in process.

The engine part wires real :class:`~stram.agent.engine.node.Node` objects the way the
agent does (THREAD_LOCAL: a DirectSink on the upstream's thread;
CONTAINER_LOCAL: a QueueSink to the downstream's own thread) and checks both
the output and the per-window tuple counts against answers computed apart.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from collections import Counter

import pytest

from stram.agent.engine.batch import batch_handler, has_batch_handler
from stram.agent.engine.node import Node, NodeState
from stram.agent.engine.streams import DirectSink, QueueSink
from stram.common.windows import initial_window
from stram.operator import (InputOperator, InputPort, Operator, OperatorContext, OutputPort, PassThroughUnifier,
                            ShutdownException)
from stram.operators import io
from stram.operators.aggregate import KeyCounter
from stram.operators.text import WordSplitter

W = 7 << 32
ALNUM = set("abcdefghijklmnopqrstuvwxyz0123456789")


def words_of(line: str) -> list[str]:
    """The words of a line by a character scan (not the operator's regular expression)."""
    words, cur = [], []
    for ch in line.lower() + " ":
        if ch in ALNUM:
            cur.append(ch)
        elif cur:
            words.append("".join(cur))
            cur = []
    return words


def sample_lines(n: int = 400, seed: int = 18) -> list[str]:
    rng = random.Random(seed)
    vocab = ["Call", "me", "Ishmael.", "WHALE's", "x42", "", "naïve", "—", "Über", "ΟΔΟΣ", "7th", "a-b", "\t"]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randrange(0, 12))) for _ in range(n)]


class TupleOnly:
    """Hides an operator class's batch handlers: the engine falls back to its per-tuple handler."""

    process_batch = None
    process_input_batch = None


class TupleSplitter(TupleOnly, WordSplitter):
    pass


class TupleCounter(TupleOnly, KeyCounter):
    pass


class TupleJson(TupleOnly, io.JsonLinesOutput):
    pass


class TupleUnifier(TupleOnly, PassThroughUnifier):
    pass


def feed(op: Operator, batches: list[list], batch_form: bool) -> list:
    """Hand the batches to ``op`` through the engine's handler (batch form) or tuple by tuple."""
    out: list = []
    port = getattr(op, "output", None)
    if port is not None:
        port.emit = out.append
        if batch_form:
            port.emit_batch = out.extend
    handler = batch_handler(op, "input") if batch_form else op.process_input
    for batch in batches:
        if batch_form:
            handler(batch)
        else:
            for t in batch:
                handler(t)
    return out


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


@pytest.mark.parametrize("batch_form", [False, True])
def test_word_splitter_is_exact_in_both_forms(batch_form):
    lines = sample_lines()
    assert has_batch_handler(WordSplitter(), "input") and not has_batch_handler(TupleSplitter(), "input")
    got = feed(WordSplitter(), chunks(lines, 37), batch_form)
    assert got == [w for line in lines for w in words_of(line)]


@pytest.mark.parametrize("batch_form", [False, True])
def test_key_counter_is_exact_in_both_forms(batch_form):
    rng = random.Random(5)
    windows = [[rng.choice("abcdefg") + str(rng.randrange(3)) for _ in range(rng.randrange(0, 300))]
               for _ in range(6)]
    op = KeyCounter()
    rows = []
    for i, keys in enumerate(windows):
        op.begin_window(W + i)
        emitted = feed(op, chunks(keys, 50), batch_form)
        op.end_window()
        rows.append(emitted)
    running: dict = {}
    for keys, got in zip(windows, rows):
        want = {}
        for k in sorted(set(keys)):  # a count by hand, per window and running
            n = sum(1 for x in keys if x == k)
            running[k] = running.get(k, 0) + n
            want[k] = {"key": k, "count": n, "total": running[k]}
        assert sorted(got, key=lambda r: r["key"]) == [want[k] for k in sorted(want)]
    assert op.totals == running


@pytest.mark.parametrize("batch_form", [False, True])
def test_json_lines_output_is_exact_in_both_forms(tmp_path, batch_form):
    rows = [{"key": "w" + str(i), "count": i, "total": i * 2, "é": [1.5, None, True]} for i in range(500)]
    rows.append({"odd": {1, 2}.__class__.__name__, "t": (1, "x")})
    # what orjson writes its own way or not at all: as the standard encoder with default=str does
    rows.append({"big": 2 ** 70, 7: "int key", "when": datetime.datetime(2026, 11, 27, 4, 5, 6), "set": {3}})
    op = io.JsonLinesOutput()
    op.path = str(tmp_path / "out")
    op.setup(OperatorContext(id=2, name="out", attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"}))
    op.begin_window(W)
    feed(op, chunks(rows, 64), batch_form)
    op.end_window()
    op.teardown()
    text = (tmp_path / "out" / "part-out-2.jsonl").read_text()
    # compact, UTF-8 (not \u escapes), one line per tuple, the last one ending in a newline too
    assert text == "".join(json.dumps(r, separators=(",", ":"), default=str, ensure_ascii=False) + "\n"
                           for r in rows)
    assert [json.loads(line) for line in text.splitlines()][:500] == rows[:500]


@pytest.mark.parametrize("batch_form", [False, True])
def test_pass_through_unifier_is_exact_in_both_forms(batch_form):
    items = list(range(1000)) + ["x", None, ("a", 1)]
    assert feed(PassThroughUnifier(), chunks(items, 99), batch_form) == items


@pytest.mark.parametrize("batch_form", [False, True])
def test_line_reader_is_exact_in_both_forms(tmp_path, batch_form):
    lines = sample_lines(300)
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")
    op = io.LineReader()
    op.path, op.batch_lines = str(path), 64
    got: list = []
    op.output.emit = got.append  # the per-tuple form: the default emit_batch emits one by one
    if batch_form:
        op.output.emit_batch = got.extend
    op.setup(OperatorContext(id=1, name="reader"))
    op.begin_window(W)
    with pytest.raises(Exception, match="end of file"):
        for _ in range(100):
            op.emit_tuples()
    op.teardown()
    assert got == lines


# ---------------------------------------------------------------- through the engine

class Collect(Operator):
    """Keeps every tuple it gets (a sink for the engine tests)."""

    input = InputPort()

    def __init__(self) -> None:
        self.seen: list = []

    def process_input(self, t) -> None:  # noqa: ANN001
        self.seen.append(t)


def node(op_id: int, op: Operator, kind: str, start: int, **kw) -> Node:
    ctx = OperatorContext(id=op_id, name=type(op).__name__, streaming_window_size_millis=20,
                          attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"})
    return Node(op_id, ctx.name, op, ctx, kind, start, 1000, None, **kw)


@pytest.mark.parametrize("batch_form", [False, True], ids=["per-tuple", "batch"])
@pytest.mark.parametrize("lines_locality", ["THREAD_LOCAL", "CONTAINER_LOCAL"])
def test_engine_counts_every_stream_kind_per_batch(tmp_path, batch_form, lines_locality):
    """reader ─lines─▶ split ═THREAD_LOCAL═▶ count ─CONTAINER_LOCAL─▶ collect: counts, window by window."""
    lines = sample_lines(3000, seed=3)
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n")
    reader = io.LineReader()
    reader.path, reader.batch_lines = str(path), 100
    reader.lines_per_window = 700  # several windows
    split, count = (WordSplitter(), KeyCounter()) if batch_form else (TupleSplitter(), TupleCounter())
    sink = Collect()
    start = initial_window(int(time.time() * 1000))
    n_reader, n_split = node(1, reader, "INPUT", start), node(2, split, "GENERIC", start)
    n_count, n_sink = node(3, count, "OIO", start), node(4, sink, "GENERIC", start)
    n_split.inline = lines_locality == "THREAD_LOCAL"
    n_count.inline = True
    wire = DirectSink if lines_locality == "THREAD_LOCAL" else QueueSink
    n_reader.outputs["output"].add_sink(wire(n_split, n_split.add_source("input")))
    n_split.outputs["output"].add_sink(DirectSink(n_count, n_count.add_source("input")))
    n_count.outputs["output"].add_sink(QueueSink(n_sink, n_sink.add_source("input")))
    nodes = [n_sink, n_count, n_split, n_reader]
    for n in nodes:  # downstream first, like the agent
        n.start()
    try:
        assert n_sink.stopped.wait(60) and n_reader.stopped.wait(5)
        if not n_split.inline:
            assert n_split.stopped.wait(5)
    finally:
        for n in nodes:
            n.stop(1)
    assert [n.state for n in nodes] == [NodeState.SHUTDOWN] * 4, [n.error for n in nodes]

    words = [w for line in lines for w in words_of(line)]
    truth = Counter(words)
    got: Counter = Counter()
    for row in sink.seen:
        got[row["key"]] += row["count"]
    assert got == truth and count.totals == dict(truth)

    def total(n: Node, which: str, port: str) -> int:
        return sum(getattr(s, which)[port] for s in n.stats)
    # every stream kind counts its tuples: the THREAD_LOCAL downstreams' inputs too
    assert total(n_reader, "output_counts", "output") == total(n_split, "input_counts", "input") == len(lines)
    assert total(n_split, "output_counts", "output") == total(n_count, "input_counts", "input") == len(words)
    assert total(n_count, "output_counts", "output") == total(n_sink, "input_counts", "input") == len(sink.seen)
    assert len(n_count.stats) >= 4  # the counts spread over windows, not all in the last one
    windows = [s.window_id for s in n_count.stats if s.input_counts["input"]]
    assert len(windows) >= 4


class Recorder:
    """Stands in for a buffer-server publisher: keeps each (tag, payload)."""

    def __init__(self) -> None:
        self.frames: list = []

    def payload(self, tag: int, data: bytes) -> None:
        self.frames.append((tag, data))


def test_a_publisher_tags_every_tuple_with_its_key_partition(monkeypatch):
    """The str-tag cache must give the tag of partition_hash (never conflating 1, 1.0, True, "1")."""
    from stram.agent.engine import streams
    from stram.agent.engine.codec import get_codec
    from stram.common.partition import default_key, partition_hash
    monkeypatch.setattr(streams, "TAG_CACHE_SIZE", 8)  # the cache starts over many times
    rng = random.Random(11)
    pool = ["whale", "sea", "1", "", "naïve", 1, 1.0, True, 2, 2.0, None, ("k", 2), {"key": "sea", "n": 1}, "ship"]
    pool += [f"w{i}" for i in range(40)]
    sink = streams.PublisherSink(Recorder(), "pickle", mask=3)
    sent = []
    for _ in range(30):
        batch = [rng.choice(pool) for _ in range(rng.randrange(1, 200))]
        sent.append(batch)
        sink.data(batch)
    codec = get_codec("pickle")
    got: dict[int, list] = {}
    for tag, data in sink.publisher.frames:
        got.setdefault(tag, []).extend(codec.decode(data))
    want: dict[int, list] = {}
    for batch in sent:
        for t in batch:
            want.setdefault(partition_hash(default_key(t)) & 3, []).append(t)
    assert got == want  # each tuple under its key's tag, in order


@pytest.mark.parametrize("codec_name", ["arrow", "pickle"])
def test_a_publisher_splits_arrow_batches_by_the_key_field_like_their_rows(codec_name):
    """Record batches on a stream keyed by a field go out split column-wise; every row under the tag its
    dict would have had (ints, strings, nulls, other types), the rows of a tag in their order."""
    import pyarrow as pa

    from stram.agent.engine import streams
    from stram.agent.engine.codec import get_codec
    from stram.common.partition import key_field, partition_hash
    rng = random.Random(5)
    columns = {"int": lambda: rng.choice([rng.randrange(-10**12, 10**12), None, 7]),
               "str": lambda: rng.choice([f"s{rng.randrange(50)}", "", "naïve", None]),
               "float": lambda: rng.choice([rng.random(), 2.0, None])}
    for kind, draw in columns.items():
        sink = streams.PublisherSink(Recorder(), codec_name, mask=3, field=key_field("field:k"))
        sent = []
        for i in range(20):
            rows = [{"k": draw(), "i": i * 1000 + j} for j in range(rng.randrange(1, 300))]
            sent += rows
            sink.data([pa.RecordBatch.from_pylist(rows, schema=pa.schema(
                [("k", {"int": pa.int64(), "str": pa.string(), "float": pa.float64()}[kind]), ("i", pa.int64())]))])
        codec = get_codec(codec_name)
        got: dict[int, list] = {}
        for tag, data in sink.publisher.frames:
            for b in codec.decode(data if isinstance(data, bytes) else b"".join(map(bytes, data))):
                got.setdefault(tag, []).extend(b.to_pylist())
        want: dict[int, list] = {}
        for r in sent:
            want.setdefault(partition_hash(r["k"]) & 3, []).append(r)
        assert got == want, kind
        assert len(got) > 1


def test_a_publisher_cuts_big_batches_into_frames_near_the_target_size():
    from stram.agent.engine.codec import get_codec
    from stram.agent.engine.streams import FRAME_PROBE_TUPLES, FRAME_TARGET_BYTES, PublisherSink
    sink = PublisherSink(Recorder(), "pickle", mask=0)
    codec = get_codec("pickle")
    big = [f"{i:08d}".ljust(4096, "x") for i in range(2000)]  # 8 MB in one emit_batch
    small = [f"w{i}" for i in range(500)]
    sink.data(big)
    sink.data(small)  # (cut too, while the estimate is still the big tuples')
    sink.data(small)
    sink.data(big[:3])
    frames = [codec.decode(data) for _, data in sink.publisher.frames]
    assert [t for f in frames for t in f] == big + small + small + big[:3]  # every tuple once, in order
    sizes = [len(data) for _, data in sink.publisher.frames]
    assert len(frames[0]) == FRAME_PROBE_TUPLES  # the first batch's probe
    assert all(size <= FRAME_TARGET_BYTES * 1.01 for size in sizes), sizes
    assert len(frames) >= 8 + 1
    assert frames[-2:] == [small, big[:3]]  # small batches stay whole


def test_a_long_batch_reaches_a_queue_in_pieces_of_the_batch_size():
    from stram.agent.engine.messages import DATA
    from stram.agent.engine.streams import BATCH_SIZE
    start = initial_window(int(time.time() * 1000))
    downstream = node(9, Collect(), "GENERIC", start)
    sink = QueueSink(downstream, downstream.add_source("input"))
    items = list(range(BATCH_SIZE * 3 + 17))
    sink.data(items)
    pieces = []
    while not downstream.queue.empty():
        src, kind, value = downstream.queue.get_nowait()
        assert kind == DATA
        pieces.append(value)
    assert [len(p) for p in pieces] == [BATCH_SIZE] * 3 + [17]
    assert [t for p in pieces for t in p] == items


def test_a_subclass_overriding_only_the_tuple_handler_is_served_per_tuple():
    class Shout(WordSplitter):
        def process_input(self, line: str) -> None:
            self.output.emit(line.upper())

    class ShoutBatch(Shout):
        def process_batch(self, lines: list) -> None:
            self.output.emit_batch([line.upper() + "!" for line in lines])

    assert not has_batch_handler(Shout(), "input") and has_batch_handler(ShoutBatch(), "input")
    assert feed(Shout(), [["a b", "c"]], batch_form=True) == ["A B", "C"]
    assert feed(ShoutBatch(), [["a b", "c"]], batch_form=True) == ["A B!", "C!"]


class Gate(Operator):
    """Takes tuples only once ``gate`` is set (a downstream that cannot keep up)."""

    input = InputPort()

    def __init__(self) -> None:
        import threading
        self.gate = threading.Event()
        self.seen = 0

    def process_input(self, t) -> None:  # noqa: ANN001
        self.gate.wait(30)
        self.seen += 1


def test_a_container_local_stream_holds_a_bounded_number_of_tuples(tmp_path):
    """A reader faster than its CONTAINER_LOCAL downstream waits for it: at most the queue's
    capacity in tuples is in flight (memory), plus a batch in each operator's hands, not the
    whole input; then all arrive."""
    from stram.agent.engine.streams import BATCH_SIZE
    capacity = 4 * BATCH_SIZE
    n = 40 * BATCH_SIZE
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{i}\n" for i in range(n)))
    reader, gate = io.LineReader(), Gate()
    reader.path = str(path)
    start = initial_window(int(time.time() * 1000))
    n_reader, n_gate = node(1, reader, "INPUT", start), node(2, gate, "GENERIC", start, queue_capacity=capacity)
    n_reader.outputs["output"].add_sink(QueueSink(n_gate, n_gate.add_source("input")))
    nodes = [n_gate, n_reader]
    for x in nodes:
        x.start()
    try:
        deadline = time.monotonic() + 10
        last = -1
        while time.monotonic() < deadline and (reader.offset == 0 or reader.offset != last):
            last = reader.offset  # until the reader has started and is held
            time.sleep(0.5)
        in_flight = path.read_bytes()[:reader.offset].count(b"\n")
        assert 0 < in_flight <= capacity + 3 * BATCH_SIZE < n
        assert n_gate.queue.weight() <= capacity + BATCH_SIZE
        gate.gate.set()
        assert n_gate.stopped.wait(60) and n_reader.stopped.wait(5)
    finally:
        gate.gate.set()
        for x in nodes:
            x.stop(1)
    assert gate.seen == n


class Emitter(InputOperator):
    """Emits its items one per call on a port of the default codec, then shuts down."""

    output = OutputPort()

    def __init__(self, items: list) -> None:
        self.items = list(items)

    def emit_tuples(self) -> None:
        if not self.items:
            raise ShutdownException("done")
        self.output.emit(self.items.pop(0))


class Calls(Operator):
    """Passes what it gets on and notes the length of every batch handed to it."""

    input = InputPort()
    output = OutputPort()

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def process_batch(self, items: list) -> None:
        self.lengths.append(len(items))
        self.output.emit_batch(items)


@pytest.mark.parametrize("arrow", [True, False], ids=["record-batches", "records"])
def test_a_port_emitting_record_batches_flushes_a_few_at_a_time_whatever_its_codec(arrow):
    """emitter ═THREAD_LOCAL═▶ first ═THREAD_LOCAL═▶ second, in windows of a second: a port of the
    pickle codec that emits Arrow record batches hands them on at most ARROW_BATCH_SIZE at a time (a
    step on batches must not hold a thousand, each pinning its row group, until the window ends),
    while one emitting records keeps batches of up to BATCH_SIZE."""
    import pyarrow as pa

    from stram.agent.engine.streams import ARROW_BATCH_SIZE
    n = 600
    items = [pa.record_batch({"x": [i, -i]}) if arrow else {"x": i} for i in range(n)]
    first, second = Calls(), Calls()
    start = initial_window(int(time.time() * 1000))

    def slow_node(op_id: int, op: Operator, kind: str) -> Node:
        ctx = OperatorContext(id=op_id, name=f"op{op_id}", streaming_window_size_millis=1000,
                              attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"})
        return Node(op_id, ctx.name, op, ctx, kind, start, 1000, None)
    nodes = [slow_node(1, Emitter(items), "INPUT"), slow_node(2, first, "OIO"), slow_node(3, second, "OIO")]
    for up, down in zip(nodes, nodes[1:]):
        down.inline = True
        up.outputs["output"].add_sink(DirectSink(down, down.add_source("input")))
    for x in reversed(nodes):
        x.start()
    try:
        assert nodes[0].stopped.wait(60)
    finally:
        for x in nodes:
            x.stop(1)
    assert sum(second.lengths) == sum(first.lengths) == n
    if arrow:
        assert max(first.lengths + second.lengths) <= ARROW_BATCH_SIZE
    else:
        assert max(first.lengths) > ARROW_BATCH_SIZE and max(second.lengths) > ARROW_BATCH_SIZE
