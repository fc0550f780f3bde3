"""Operators for the benchmarks' applications (imported by containers as ``bench.bench_ops``): the
source and sinks of :mod:`bench.transfer.bench_transfer`, the reader and sink of
:mod:`bench.recovery.bench_recovery`, the probe of :mod:`bench.startup.bench_startup`."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from stram.operator import InputOperator, InputPort, Operator, OutputPort, ShutdownException
from stram.operators.io import LineReader


class BlastSource(InputOperator):
    """Emits ``count`` distinct-object ``size``-byte strings (or Arrow batches of them) as fast as it can."""

    output = OutputPort()
    count: int = 1_000_000
    size: int = 64
    batch: int = 4096
    #: Emit pyarrow.RecordBatch tuples of ``batch`` rows instead of strings.
    arrow: bool = False
    #: Emit each call's strings with one ``emit_batch`` (a batch operator) instead of ``emit`` on each.
    batched: bool = False
    #: Arrow: cycle through this many distinct batches made at setup instead of copying each into
    #: new memory (0): the transfer path alone, without the source's allocation of fresh pages.
    ring: int = 0
    transient = ("_payload", "_fresh", "_ring")

    def __init__(self) -> None:
        self.sent = 0
        self._payload: Any = None
        self._fresh: Any = None
        self._ring: Any = None

    def setup(self, context) -> None:
        # distinct string objects, so pickle cannot shrink a batch by memoizing repeats
        pool = [f"{i:08d}".ljust(self.size, "x")[:self.size] for i in range(self.batch)]
        if self.arrow:
            import pyarrow as pa
            self._payload = pa.RecordBatch.from_pydict({"v": pool})
            self._fresh = _fresh_copier(self._payload)
            if self.ring:
                ring = [self._fresh() for _ in range(self.ring)]
                self._fresh = lambda: ring[self.sent // self.batch % len(ring)]
        else:
            self._payload = pool

    def emit_tuples(self) -> None:
        if self.sent >= self.count:
            raise ShutdownException("done")
        emit = self.output.emit
        payload = self._payload
        if self.arrow:
            emit(self._fresh())
            self.sent += self.batch
            return
        n = min(self.batch, self.count - self.sent)
        if self.batched:
            self.output.emit_batch(payload if n == len(payload) else payload[:n])
        else:
            for i in range(n):
                emit(payload[i])
        self.sent += n


def _fresh_copier(batch: Any) -> Callable[[], Any]:
    """A function returning ``batch`` (one string column) with its characters in new memory each
    call (a few microseconds: bench/README.md), as a real source fills a new batch every time: a
    batch emitted again and again would be sent from the same cached bytes, faster than any
    real stream."""
    import pyarrow as pa

    column = batch.column(0)
    _, offsets, data = column.buffers()
    schema, n = batch.schema, len(column)

    def fresh() -> Any:
        copy = pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(bytes(data))])
        return pa.RecordBatch.from_arrays([copy], schema=schema)

    return fresh


class CountSink(Operator):
    """Counts what arrives (rows of record batches) and writes the result to ``result``."""

    input = InputPort()
    result: str = ""
    transient = ("_first", "_last", "_n")

    def __init__(self) -> None:
        self._n = 0
        self._first = 0.0
        self._last = 0.0

    def process_input(self, tuple: Any) -> None:  # noqa: A002
        if not self._n:
            self._first = time.perf_counter()
        self._n += 1

    def end_window(self) -> None:
        if self._n:
            self._last = time.perf_counter()
            with open(self.result, "w") as f:
                json.dump(self.figures(), f)

    def figures(self) -> dict[str, Any]:
        return {"tuples": self._n, "seconds": self._last - self._first, "last_wall": time.time()}


class FirstWindowSink(CountSink):
    """A CountSink that also records the wall-clock times of its first tuple and of the end of
    its first window with tuples (:mod:`bench.startup.bench_startup`: the first processed window)."""

    transient = CountSink.transient + ("_first_tuple", "_first_window")

    def __init__(self) -> None:
        super().__init__()
        self._first_tuple = 0.0
        self._first_window = 0.0

    def process_input(self, tuple: Any) -> None:  # noqa: A002
        if not self._n:
            self._first_tuple = time.time()
        super().process_input(tuple)

    def end_window(self) -> None:
        if self._n and not self._first_window:
            self._first_window = time.time()
        super().end_window()

    def figures(self) -> dict[str, Any]:
        return dict(super().figures(), first_tuple=self._first_tuple, first_window=self._first_window)


class BatchCountSink(CountSink):
    """Counts what arrives a batch at a time (a batch operator)."""

    def process_batch(self, tuples: list) -> None:
        if not self._n:
            self._first = time.perf_counter()
        self._n += len(tuples)


class RowCountSink(CountSink):
    """Counts the rows of arriving ``pyarrow.RecordBatch`` tuples."""

    def process_input(self, batch: Any) -> None:
        if not self._n:
            self._first = time.perf_counter()
        self._n += batch.num_rows


class TimedLineReader(LineReader):
    """A LineReader that records the wall-clock time of its first read in ``started_file``."""

    started_file: str = ""

    def emit_tuples(self) -> None:
        if self.started_file and not getattr(self, "_stamped", False):
            self._stamped = True
            with open(self.started_file, "w") as f:
                f.write(repr(time.time()))
        super().emit_tuples()
