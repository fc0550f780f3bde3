"""Operators for end-to-end tests (imported by containers as ``tests.kits.e2e_ops``)."""

from __future__ import annotations

import json
import os
import time

from stram.common.watermarks import MAX_WATERMARK
from stram.connectors.kafka import KafkaInput
from stram.operator import FatalError, InputOperator, InputPort, Operator, OutputPort, ShutdownException
from stram.operators.io import JsonLinesOutput, LineReader


class Boom(Operator):
    """Passes tuples through; raises after ``after`` tuples (every incarnation)."""

    input = InputPort()
    output = OutputPort()
    after: int = 10
    fatal: bool = False
    transient = ("_seen",)

    def __init__(self) -> None:
        self._seen = 0

    def process_input(self, tuple) -> None:  # noqa: A002 - the API's name
        self._seen += 1
        if self._seen > self.after:
            if self.fatal:
                raise FatalError(f"boom after {self.after} tuples (fatal)")
            raise ValueError(f"boom after {self.after} tuples")
        self.output.emit(tuple)


class KeyedSource(InputOperator):
    """Partitioned source: partition p emits ``p<p>-<n % keys>`` for n < its limit.

    Partition ``stop_partition`` ends (ShutdownException) after ``stop_total``
    tuples; the others after ``total``, and, when ``release_file`` is set, only once
    that file exists (they idle until then). Its state is the count emitted, so a
    restart from a checkpoint continues exactly.
    """

    output = OutputPort()
    per_window: int = 20
    total: int = 2000
    stop_partition: int = -1
    stop_total: int = 300
    keys: int = 7
    release_file: str = ""
    transient = ("_part", "_left", "_limit")

    def __init__(self) -> None:
        self.emitted = 0
        self._part = 0
        self._left = 0
        self._limit = 0

    def setup(self, context) -> None:
        self._part = context.partition_index
        self._limit = self.stop_total if self._part == self.stop_partition else self.total

    def begin_window(self, window_id: int) -> None:
        self._left = self.per_window

    def emit_tuples(self) -> None:
        if self.emitted >= self._limit:
            if self.release_file and self._part != self.stop_partition and not os.path.exists(self.release_file):
                time.sleep(0.01)  # held: idle windows until the test releases it
                return
            raise ShutdownException(f"partition {self._part} done after {self.emitted} tuples")
        n = min(self._left, self._limit - self.emitted)
        for i in range(n):
            self.output.emit(f"p{self._part}-{(self.emitted + i) % self.keys}")
        self.emitted += n
        self._left -= n

    @staticmethod
    def truth(partitions: int, total: int, stop_partition: int, stop_total: int, keys: int) -> dict[str, int]:
        """The independent answer: how often each key is emitted."""
        out: dict[str, int] = {}
        for p in range(partitions):
            for n in range(stop_total if p == stop_partition else total):
                key = f"p{p}-{n % keys}"
                out[key] = out.get(key, 0) + 1
        return out


class SlowFinalOutput(JsonLinesOutput):
    """JsonLinesOutput whose finalization takes a while (as on a slow file system)."""

    delay: float = 4.0

    def committed(self, window_id: int) -> None:
        if self.pending and min(self.pending) <= window_id:
            time.sleep(self.delay)
        super().committed(window_id)


class LateFinalOutput(JsonLinesOutput):
    """JsonLinesOutput that makes committed windows final only in its teardown, ``delay`` s long
    (like an output whose sink is away at the end), or fails there (``fail``)."""

    delay: float = 0.0
    fail: bool = False
    transient = JsonLinesOutput.transient + ("_committed",)

    def __init__(self) -> None:
        super().__init__()
        self._committed = -1

    def committed(self, window_id: int) -> None:
        self._committed = max(self._committed, window_id)

    def teardown(self) -> None:
        deadline = time.monotonic() + self.delay
        while time.monotonic() < deadline:
            time.sleep(0.1)
        if self.fail:
            raise OSError("the sink refused the last windows")
        super().committed(self._committed)
        super().teardown()


class PickySplitter(Operator):
    """Splits lines into words like WordSplitter, but raises on the one line containing ``bad``."""

    input = InputPort()
    output = OutputPort()
    bad: str = "shipkeepers"

    def process_input(self, line: str) -> None:
        if self.bad in line:
            raise ValueError(f"cannot split line {line!r}")
        for word in line.lower().split():
            self.output.emit(word)


class SlowUntilSignal(LineReader):
    """LineReader at ``lines_per_window`` until the file ``signal`` exists, then at
    ``fast_lines_per_window`` (None: no cap).

    A test keeps its input flowing, slowly enough that it cannot end first, while it makes
    something happen mid-run (a lost container, a restarted NameNode, a scale), then touches
    ``signal`` and lets the rest through, instead of waiting out a slow read of all of it."""

    signal: str = ""
    fast_lines_per_window: int | None = 500
    transient = ("_file", "_left", "_fast")

    def __init__(self) -> None:
        super().__init__()
        self._fast = False

    def begin_window(self, window_id: int) -> None:
        super().begin_window(window_id)
        if not self._fast and self.signal:
            self._fast = os.path.exists(self.signal)  # a stat a window, until it is there
        if self._fast:
            self._left = self.fast_lines_per_window


class LinesThenIdle(SlowUntilSignal):
    """LineReader that stays alive at the end of its file (the application runs on, idle), so
    that counters can be read when they no longer move; with ``signal``, it reads faster once
    that file exists, as :class:`SlowUntilSignal` does."""

    transient = ("_file", "_left", "_done", "_fast")

    def __init__(self) -> None:
        super().__init__()
        self._done = False

    def emit_tuples(self) -> None:
        if self._done:
            time.sleep(0.01)
            return
        try:
            super().emit_tuples()
        except ShutdownException:
            self._done = True


class KafkaUntilSignal(KafkaInput):
    """KafkaInput at ``max_records_per_window`` until the file ``signal`` exists, then without a cap
    (as :class:`SlowUntilSignal` for files)."""

    signal: str = ""
    transient = KafkaInput.transient + ("_fast",)

    def __init__(self) -> None:
        super().__init__()
        self._fast = False

    def begin_window(self, window_id: int) -> None:
        super().begin_window(window_id)
        if not self._fast and self.signal:
            self._fast = os.path.exists(self.signal)
        if self._fast:
            self._left = None


class Sleeper(Operator):
    """Sleeps inside ``process_input`` (a stuck operator); touches ``marker`` when it starts to."""

    input = InputPort()
    output = OutputPort()
    seconds: float = 3600.0
    marker: str = ""

    def process_input(self, tuple) -> None:  # noqa: A002 - the API's name
        if self.marker:
            with open(self.marker, "a") as f:
                f.write("sleeping\n")
        time.sleep(self.seconds)  # the frame `stram stack` must show
        self.output.emit(tuple)


class ArrowRows(InputOperator):
    """Emits ``total`` rows ``(id, name)`` as ``pyarrow.RecordBatch`` tuples of ``rows`` rows:
    ``id`` counts up from 0, ``name`` is ``"n<id>"`` padded to ``width`` characters; with
    ``release_file``, nothing until that file exists."""

    output = OutputPort()
    total: int = 100_000
    rows: int = 1000
    width: int = 60
    release_file: str = ""

    def __init__(self) -> None:
        self.sent = 0

    def emit_tuples(self) -> None:
        import pyarrow as pa

        if self.sent >= self.total:
            raise ShutdownException("done")
        if self.release_file and not os.path.exists(self.release_file):
            time.sleep(0.01)
            return
        ids = range(self.sent, min(self.sent + self.rows, self.total))
        self.output.emit(pa.record_batch({"id": pa.array(ids, pa.int64()),
                                          "name": [f"n{i}".ljust(self.width, ".") for i in ids]}))
        self.sent += len(ids)


class ArrowDigest(Operator):
    """Sums what arrives in record batches (rows, ids, name lengths, names' CRC32s) and writes
    the sums as JSON to ``path`` at every window's end."""

    input = InputPort()
    path: str = ""

    def __init__(self) -> None:
        self.rows = self.ids = self.chars = self.crc = 0

    def process_input(self, batch) -> None:  # noqa: A002
        import zlib

        self.rows += batch.num_rows
        self.ids += sum(batch.column("id").to_pylist())
        names = batch.column("name").to_pylist()
        self.chars += sum(map(len, names))
        self.crc += sum(zlib.crc32(n.encode()) for n in names)

    def end_window(self) -> None:
        with open(self.path, "w") as f:
            f.write(json.dumps({"rows": self.rows, "ids": self.ids, "chars": self.chars, "crc": self.crc}))


class SlowArrowDigest(ArrowDigest):
    """:class:`ArrowDigest` that takes ``seconds`` over each batch: a downstream slower than its source."""

    seconds: float = 0.01

    def process_input(self, batch) -> None:  # noqa: A002
        time.sleep(self.seconds)
        super().process_input(batch)


class EventTimeSource(InputOperator):
    """Emits ``total`` dicts ``{"i": i, "ts": origin_ms + i * step_ms}``, ``per_window`` a window, and
    each window declares the watermark max ts - ``bound_ms`` (none before its first record). With
    ``release_file``, it holds after ``hold_after`` records until that file exists. At the end of
    its input it declares the end (MAX_WATERMARK) and stays alive, idle."""

    output = OutputPort()
    total: int = 60
    per_window: int = 3
    origin_ms: int = 0
    step_ms: int = 1000
    bound_ms: int = 0
    hold_after: int = 0
    release_file: str = ""
    transient = ("_context", "_left")

    def __init__(self) -> None:
        self.emitted = 0
        self._context = None
        self._left = 0

    def setup(self, context) -> None:
        self._context = context

    def begin_window(self, window_id: int) -> None:
        self._left = self.per_window

    def emit_tuples(self) -> None:
        limit = self.total
        if self.release_file and not os.path.exists(self.release_file):
            limit = min(limit, self.hold_after)
        n = min(self._left, limit - self.emitted)
        if n > 0:
            self.output.emit_batch([{"i": i, "ts": self.origin_ms + i * self.step_ms}
                                    for i in range(self.emitted, self.emitted + n)])
            self.emitted += n
            self._left -= n
        else:
            time.sleep(0.01)
        if self.emitted >= self.total:
            self._context.emit_watermark(MAX_WATERMARK)
        elif self.emitted:
            self._context.emit_watermark(self.origin_ms + (self.emitted - 1) * self.step_ms - self.bound_ms)


class PassThrough(Operator):
    """Emits every tuple it takes in, unchanged (a batch at a time)."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, tuple) -> None:  # noqa: A002 - the API's name
        self.output.emit(tuple)

    def process_input_batch(self, tuples) -> None:
        self.output.emit_batch(tuples)
