"""A deterministic data generator: keyed, timestamped records for tests and benchmarks.

Record ``n`` is a pure function of ``(seed, n)`` (:func:`record`), so a restart
from a checkpoint (whose state is the next sequence number) emits exactly the
records the lost run would have, and a test can compute the expected output on
its own.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from stram.common.watermarks import MAX_WATERMARK
from stram.operator import FatalError, InputOperator, OperatorContext, OutputPort, ShutdownException

__all__ = ["DataGenerator", "record", "mix"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def mix(seed: int, n: int) -> int:
    """64 well-mixed bits for record ``n`` of ``seed`` (SplitMix64's finalizer)."""
    z = ((seed * 1_000_003 + n) * _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def record(n: int, seed: int = 0, keys: int = 100, start_ms: int = 0, interval_ms: int = 10,
           disorder_ms: int = 0) -> dict[str, Any]:
    """Record ``n``: ``key`` from the low bits, ``value`` in [0, 1000) from bits 32 and up,
    ``ts`` moved back by up to ``disorder_ms`` from the top bits."""
    h = mix(seed, n)
    ts = start_ms + n * interval_ms
    if disorder_ms:
        ts -= (h >> 44) % (disorder_ms + 1)
    return {"key": f"k{h % keys}", "value": (h >> 32) % 1000, "ts": ts, "seq": n}


class DataGenerator(InputOperator):
    """Emits records ``{"key", "value", "ts", "seq"}`` (see :func:`record`), in batches.

    ``count`` records in all (None: endless), at most ``rate`` per second of
    wall time (None: as fast as possible). With ``partitions: N`` partition i
    emits the sequence numbers n = i (mod N) below ``count``. The watermark is
    the highest ``ts`` emitted minus ``disorder_ms`` (no later record is below
    it); at the end it is MAX_WATERMARK and the stream ends.
    """

    output = OutputPort()
    count: Optional[int] = None
    rate: Optional[float] = None
    seed: int = 0
    keys: int = 100
    start_ms: int = 0
    interval_ms: int = 10
    disorder_ms: int = 0
    records_per_window: Optional[int] = None
    batch: int = 1024
    transient = ("_context", "_left", "_stride", "_names", "_clock", "_since")

    def __init__(self) -> None:
        #: Sequence number of the next record this partition emits.
        self.next_seq: Optional[int] = None
        #: Highest event time emitted (None: none yet).
        self.max_ts: Optional[int] = None
        self._context: Optional[OperatorContext] = None
        self._left: Optional[int] = None
        self._stride = 1
        self._names: list[str] = []
        #: Rate limit: when this run started emitting and how many records it emitted since.
        self._clock = 0.0
        self._since = 0

    def setup(self, context: OperatorContext) -> None:
        where = f"DataGenerator {context.name}"
        checks = [("count", self.count is None or self.count >= 0, "None or >= 0"),
                  ("rate", self.rate is None or self.rate > 0, "None or > 0"),
                  ("keys", self.keys >= 1, ">= 1"),
                  ("interval_ms", self.interval_ms >= 0, ">= 0 (event time never goes back)"),
                  ("disorder_ms", self.disorder_ms >= 0, ">= 0"),
                  ("records_per_window", self.records_per_window is None or self.records_per_window >= 1,
                   "None or >= 1"),
                  ("batch", self.batch >= 1, ">= 1")]
        for name, ok, rule in checks:
            if not ok:
                raise FatalError(f"{where}: property {name!r} must be {rule}, got {getattr(self, name)!r}")
        self._context = context
        self._stride = max(1, context.partition_count)
        if self.next_seq is None:
            self.next_seq = context.partition_index
        self._names = [f"k{i}" for i in range(self.keys)] if self.keys <= 1 << 16 else []
        self._clock = time.monotonic()
        self._since = 0

    def begin_window(self, window_id: int) -> None:
        self._left = self.records_per_window

    def emit_tuples(self) -> None:
        n = self.batch
        if self._left is not None:
            n = min(n, self._left)
        if self.rate is not None:
            n = min(n, int((time.monotonic() - self._clock) * self.rate) - self._since)
        first, stride = self.next_seq, self._stride
        if self.count is not None:
            if first >= self.count:
                self._end()
            n = min(n, -(-(self.count - first) // stride))  # this partition's records left
        if n <= 0:
            return
        out = self._make(first, n)
        self.next_seq = first + n * stride
        self._since += n
        if self._left is not None:
            self._left -= n
        self.output.emit_batch(out)
        if self.count is not None and self.next_seq >= self.count:
            self._end()

    def _make(self, first: int, n: int) -> list[dict[str, Any]]:
        """Records first, first + stride, ... (n of them), as :func:`record` makes them, faster."""
        seed_part, stride, keys, names = self.seed * 1_000_003, self._stride, self.keys, self._names
        start, interval, disorder = self.start_ms, self.interval_ms, self.disorder_ms
        span = disorder + 1
        out = []
        append = out.append
        top = self.max_ts
        for seq in range(first, first + n * stride, stride):
            z = ((seed_part + seq) * _GOLDEN) & _M64
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
            h = z ^ (z >> 31)
            ts = start + seq * interval
            if disorder:
                ts -= (h >> 44) % span
            if top is None or ts > top:
                top = ts
            k = h % keys
            append({"key": names[k] if names else f"k{k}", "value": (h >> 32) % 1000, "ts": ts, "seq": seq})
        self.max_ts = top
        return out

    def end_window(self) -> None:
        if self.count is not None and self.next_seq >= self.count:
            return  # MAX_WATERMARK went out
        if self.max_ts is not None:
            self._context.emit_watermark(self.max_ts - self.disorder_ms)

    def _end(self) -> None:
        """All ``count`` records are out: the end of input (a lower watermark later is ignored)."""
        self._context.emit_watermark(MAX_WATERMARK)
        raise ShutdownException("DataGenerator: count reached")
