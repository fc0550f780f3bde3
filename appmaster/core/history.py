"""What operators reported of their windows: each one's last windows and its counters.

The heartbeat's hot loop records every operator's windows here
(:meth:`WindowHistory.record`); the reports (:mod:`stram.master.core.reports`), the
admin surface and the stats listener read them.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

__all__ = ["WindowSample", "WindowHistory", "OperatorTotals", "decode_metrics", "port_totals",
           "WINDOW_ID", "TUPLES_IN", "TUPLES_OUT", "END_MILLIS", "CPU_NANOS", "METRICS"]


#: Fields of a window sample, by position (a :class:`WindowHistory` gives its windows as plain
#: tuples of them, None for no metrics).
WINDOW_ID, TUPLES_IN, TUPLES_OUT, END_MILLIS, CPU_NANOS, METRICS = range(6)


class WindowSample(NamedTuple):
    """One window of one operator, as its heartbeat reported it (the master keeps the last few,
    as plain tuples with these fields in this order: index them with :data:`WINDOW_ID`, ...)."""

    #: The window id.
    window_id: int
    #: Tuples the operator took in during the window, over all input ports.
    tuples_in: int
    #: Tuples it emitted, over all output ports.
    tuples_out: int
    #: When the window ended (the newest port timestamp), wall-clock milliseconds.
    end_millis: int
    #: CPU time the operator's thread used in the window, nanoseconds.
    cpu_nanos: int
    #: The operator's metrics of the window (Apex's AutoMetric), JSON decoded; None: none.
    metrics: dict[str, Any] | None


#: The numbers of a window in a :class:`WindowHistory`: all but its metrics.
_NUMBERS = 5
_INT64 = (-(1 << 63), (1 << 63) - 1)


class WindowHistory:
    """One operator's last ``maxlen`` windows as its heartbeats reported them, oldest first.

    ``append`` takes a :class:`WindowSample`'s fields; indexing and iterating give them back as
    plain tuples. The numbers are kept in one :class:`array.array`, which the cyclic garbage
    collector does not track, and metrics in a list made at the first window that has any.

    Kept as tuples (one per window), the windows of 20,000 operators were 400,000 objects the
    collector tracked: a new tuple reuses one from the interpreter's free list, which CPython does
    not count towards its next young collection, so they piled up in the young generation
    between collections. ``bench/bench_heartbeats.py`` at 2,000 x 10 over 300 s: 9 young
    collections in the steady state, the longest 417 ms (554,000 objects, 470,000 of them these
    tuples), every heartbeat waiting for it.
    """

    __slots__ = ("maxlen", "_numbers", "_metrics", "watermark")

    def __init__(self, maxlen: int = 20) -> None:
        self.maxlen = maxlen
        self._numbers = array("q")  # per window: its id, tuples in, tuples out, end millis, CPU nanos
        self._metrics: list[dict[str, Any] | None] | None = None  # per window, once one had any
        #: The operator's event-time watermark after its newest reported window (epoch millis or a
        #: special value of :mod:`stram.common.watermarks`); None: it has no event time.
        self.watermark: int | None = None

    def append(self, sample: tuple) -> None:
        """Add the newest window (a :class:`WindowSample`'s fields; the oldest goes past ``maxlen``)."""
        window, tuples_in, tuples_out, end, cpu, metrics = sample
        numbers = self._numbers
        size = len(numbers)
        try:
            numbers.extend((window, tuples_in, tuples_out, end, cpu))
        except OverflowError:  # an agent's figure beyond 64 bits: kept at the bound
            del numbers[size:]
            low, high = _INT64
            numbers.extend(min(max(v, low), high) for v in (window, tuples_in, tuples_out, end, cpu))
        full = size == self.maxlen * _NUMBERS
        if full:
            del numbers[:_NUMBERS]
        kept = self._metrics
        if metrics is not None or kept is not None:
            if kept is None:
                kept = self._metrics = [None] * (size // _NUMBERS)
            kept.append(metrics)
            if full:
                del kept[0]

    def record(self, window_stats: Any, now: int, totals: OperatorTotals) -> None:
        """Add the windows of one operator's heartbeat (its ``OperatorStats`` messages, oldest first)
        and count them in ``totals``: :meth:`append` and :meth:`OperatorTotals.add` of each, in one
        call per operator and heartbeat (the hot loop of the master's heartbeat). The newest window's
        watermark becomes :attr:`watermark` (only the newest is read: the older ones are past)."""
        numbers = self._numbers
        size = len(numbers)
        counted = totals.counted_window
        tuples_in_sum = tuples_out_sum = cpu_sum = windows = 0
        new: list[int] = []
        metrics: list[dict[str, Any] | None] | None = None
        ws = None
        for ws in window_stats:
            end = ws.end_window_millis
            if end:  # the agent's totals over the ports
                tuples_in, tuples_out = ws.tuples_in, ws.tuples_out
            else:  # an agent that sends only the ports
                tuples_in, tuples_out, end = port_totals(ws)
                end = end or now
            window, cpu = ws.window_id, ws.cpu_time_used
            new += (window, tuples_in, tuples_out, end, cpu)
            if ws.metrics:
                if metrics is None:
                    metrics = [None] * (len(new) // _NUMBERS - 1)
                metrics.append(decode_metrics(ws.metrics))
            elif metrics is not None:
                metrics.append(None)
            if window > counted:  # once per incarnation (a retried heartbeat repeats windows)
                counted = window
                tuples_in_sum += tuples_in
                tuples_out_sum += tuples_out
                cpu_sum += cpu
                windows += 1
        if ws is not None:
            self.watermark = ws.watermark if ws.has_watermark else None
        if windows:
            totals.counted_window = counted
            totals.tuples_in += tuples_in_sum
            totals.tuples_out += tuples_out_sum
            totals.cpu_nanos += cpu_sum
            totals.windows += windows
        try:
            numbers.extend(new)
        except OverflowError:  # an agent's figure beyond 64 bits: kept at the bound
            del numbers[size:]
            low, high = _INT64
            numbers.extend([min(max(v, low), high) for v in new])
        count = len(numbers) // _NUMBERS
        kept = self._metrics
        if metrics is not None or kept is not None:
            if kept is None:
                kept = self._metrics = [None] * (size // _NUMBERS)
            kept += metrics if metrics is not None else [None] * (len(new) // _NUMBERS)
        if count > self.maxlen:
            del numbers[:(count - self.maxlen) * _NUMBERS]
            if kept is not None:
                del kept[:count - self.maxlen]

    def __len__(self) -> int:
        return len(self._numbers) // _NUMBERS

    def __getitem__(self, index: int) -> tuple:
        count = len(self._numbers) // _NUMBERS
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("window history index out of range")
        at, numbers = index * _NUMBERS, self._numbers
        return (numbers[at], numbers[at + 1], numbers[at + 2], numbers[at + 3], numbers[at + 4],
                None if self._metrics is None else self._metrics[index])

    def __iter__(self) -> Iterator[tuple]:
        return iter([self[i] for i in range(len(self))])

    def __repr__(self) -> str:
        return f"WindowHistory({list(self)!r}, maxlen={self.maxlen})"

    def copy(self) -> WindowHistory:
        """The windows as of now (one copy of the array)."""
        other = WindowHistory(self.maxlen)
        other._numbers = array("q", self._numbers)
        other._metrics = None if self._metrics is None else list(self._metrics)
        other.watermark = self.watermark
        return other

    def rate(self, inputs_only: bool = False) -> float:
        """Tuples a second: each window after the first counts its tuples out (or in, for an
        operator that emitted none; only in: ``inputs_only``), over the time from the first
        window's end to the last's; 0.0 with fewer than two windows or no time between them."""
        numbers = self._numbers
        if len(numbers) < 2 * _NUMBERS:
            return 0.0
        span = (numbers[-_NUMBERS + END_MILLIS] - numbers[END_MILLIS]) / 1000
        if span <= 0:
            return 0.0
        if not inputs_only:
            # whole columns where they can be (the operators page reads this for every operator)
            outs = numbers[_NUMBERS + TUPLES_OUT::_NUMBERS]
            if 0 not in outs:
                return sum(outs) / span
            if any(outs):
                ins = numbers[_NUMBERS + TUPLES_IN::_NUMBERS]
                return sum([o or i for o, i in zip(outs, ins)]) / span
        return sum(numbers[_NUMBERS + TUPLES_IN::_NUMBERS]) / span

    def summary(self) -> tuple[float, int, int, dict[str, Any] | None] | None:
        """What the operators page shows of the windows: :meth:`rate`, the newest window's tuples in
        and out and its metrics; None without a window (one call, no copy of the windows)."""
        numbers = self._numbers
        if not numbers:
            return None
        return (self.rate(), numbers[-_NUMBERS + TUPLES_IN], numbers[-_NUMBERS + TUPLES_OUT],
                None if self._metrics is None else self._metrics[-1])


@dataclass(slots=True)
class OperatorTotals:
    """What one physical operator did in this master attempt, over all its incarnations.

    Counters in Prometheus's sense: they never go backward. A redeployed operator
    starts its own counts afresh, but the master adds up per-window reports, so a
    restart only adds: the windows it replays after its checkpoint count again
    (they were processed again), a window reported twice by one incarnation
    (a retried heartbeat) counts once.
    """

    #: Tuples taken in on all input ports.
    tuples_in: int = 0
    #: Tuples emitted on all output ports.
    tuples_out: int = 0
    #: Windows finished.
    windows: int = 0
    #: CPU time of the operator's thread, nanoseconds.
    cpu_nanos: int = 0
    #: The newest window counted for the running incarnation.
    counted_window: int = -1

    def add(self, sample: tuple) -> None:
        """Count a reported window (a :class:`WindowSample`'s fields; once per incarnation)."""
        if sample[WINDOW_ID] <= self.counted_window:
            return
        self.counted_window = sample[WINDOW_ID]
        self.tuples_in += sample[TUPLES_IN]
        self.tuples_out += sample[TUPLES_OUT]
        self.windows += 1
        self.cpu_nanos += sample[CPU_NANOS]

    def redeployed(self, checkpoint: int) -> None:
        """A new incarnation resumes after ``checkpoint``: the windows after it count again."""
        self.counted_window = checkpoint


def decode_metrics(metrics: Any) -> dict[str, Any]:
    """An operator's reported metrics, JSON values decoded (text that is not JSON stays text)."""
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def port_totals(ws: Any) -> tuple[int, int, int]:
    """(tuples in, tuples out, newest end-of-window time) of an OperatorStats message's ports,
    for an agent that does not send the totals itself."""
    tuples_in = tuples_out = end = 0
    for p in ws.input_ports:
        tuples_in += p.tuple_count
        if p.end_window_timestamp > end:
            end = p.end_window_timestamp
    for p in ws.output_ports:
        tuples_out += p.tuple_count
        if p.end_window_timestamp > end:
            end = p.end_window_timestamp
    return tuples_in, tuples_out, end
