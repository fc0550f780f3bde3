"""What :class:`~stram.master.core.state.MasterState` shows: info, operator and container rows, invariants.

A mixin of :class:`~stram.master.core.state.MasterState`: the admin API and the
status file read these, tests call :meth:`StateReports.validate_state` after
every step.
"""

from __future__ import annotations

import collections
import json
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from stram.master.core.plan import ContainerState, OperatorState

__all__ = ["StateReports", "WindowSample", "WindowHistory", "in_chunks", "COPY_CHUNK", "OperatorTotals", "window_hex",
           "last_line", "decode_metrics", "port_totals",
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

    __slots__ = ("maxlen", "_numbers", "_metrics")

    def __init__(self, maxlen: int = 20) -> None:
        self.maxlen = maxlen
        self._numbers = array("q")  # per window: its id, tuples in, tuples out, end millis, CPU nanos
        self._metrics: list[dict[str, Any] | None] | None = None  # per window, once one had any

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
        call per operator and heartbeat (the hot loop of the master's heartbeat)."""
        numbers = self._numbers
        size = len(numbers)
        counted = totals.counted_window
        tuples_in_sum = tuples_out_sum = cpu_sum = windows = 0
        new: list[int] = []
        metrics: list[dict[str, Any] | None] | None = None
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


#: Operators a reader copies per hold of the master's lock (the operators page, get-app-info).
COPY_CHUNK = 500
#: How long a chunked reader of the state lets a waiting writer take the master's lock.
YIELD_SECONDS = 0.001


def in_chunks(lock: Any, ops: list[Any], copy: Callable[[list[Any]], Any]) -> Iterator[Any]:
    """``copy`` of :data:`COPY_CHUNK` operators at a time, each under ``lock`` (the master's):
    at 20,000 operators one hold for all took 0.1-0.2 s, every heartbeat waiting. Each chunk is
    as of one moment, the whole not (the ``snapshot`` page is, in one hold).

    Between two chunks the reader sleeps :data:`YIELD_SECONDS`: Python's locks are not fair, and
    a reader that took the lock again at once kept a heartbeat batch waiting for it through the
    whole page (answers took 0.2 s on average and 1.4 s at p99 at 2,000 containers while the
    operators page of 20,000 operators was read every 5 s; ``bench/bench_heartbeats.py``)."""
    for i in range(0, len(ops), COPY_CHUNK):
        if i:
            time.sleep(YIELD_SECONDS)
        with lock:
            yield copy(ops[i:i + COPY_CHUNK])


#: Containers with a process the master asked for and may still have to stop.
ALIVE = (ContainerState.PENDING, ContainerState.RUNNING)


def window_hex(window: int) -> str:
    """A window id as Apex prints it."""
    return f"{window & 0xFFFFFFFFFFFFFFFF:x}"


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


def last_line(text: str) -> str:
    """The last non-blank line of an error text (the exception line of a traceback)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class StateReports:
    """The read side of :class:`~stram.master.core.state.MasterState`."""

    plan: Any
    committed: int

    def throughput(self, op_id: int) -> float:
        history = self.window_history.get(op_id)
        return history.rate() if history else 0.0

    def validate_state(self) -> None:
        """Invariants; tests call this after every step."""
        ops = self.plan.operators
        for op in ops.values():
            assert self.committed <= op.recovery_checkpoint or op.state == OperatorState.PENDING_DEPLOY \
                or op.recovery_checkpoint == self.initial_window, (op.id, self.committed, op.recovery_checkpoint)
            holders = [c.id for c in self.plan.containers.values() if op.id in c.operators]
            assert holders == [op.container], (op.id, holders, op.container)
        # partitioned streams: a publisher tags enough hash bits for each remote subscriber's
        # mask, and no masked hash value goes to two partitions of one subscriber
        owners: dict[tuple, list] = collections.defaultdict(list)
        for op in ops.values():
            for i in op.inputs:
                src = ops.get(i.source_id)
                if src is None:
                    continue
                tags = src.publisher_masks.get(i.source_port)
                if tags is not None and src.container != op.container and src.state in (
                        OperatorState.ACTIVE, OperatorState.DEPLOYING):
                    assert not i.partition_mask & ~tags, (src.id, i.source_port, tags, op.id, i.partition_mask)
                consumer = op.id if op.kind == "UNIFIER" else op.name
                owners[(i.source_id, i.source_port, consumer, i.port)].append(i)
        for key, inputs in owners.items():
            if len(inputs) > 1:
                width = max(i.partition_mask for i in inputs)
                taken = collections.Counter(v for i in inputs for v in range(width + 1)
                                            if (v & i.partition_mask) in i.partition_keys or not i.partition_mask)
                assert all(n == 1 for n in taken.values()), f"partition keys overlap on {key}: {taken}"
        for window, ids in self.shutdown_operators.items():
            for op_id in ids:
                assert op_id in ops and ops[op_id].state == OperatorState.SHUTDOWN, (window, op_id)
                downstream_ready = all(ops[d].current_window >= window for d in self.plan.downstream(op_id))
                assert not (window <= self.committed and downstream_ready), \
                    f"operator {op_id} parked past its removal (window {window}, committed {self.committed})"

    def info(self, brief: bool = False) -> dict[str, Any]:
        """What ``get-app-info`` shows (``brief``: without the per-operator tables, for status.json)."""
        info = self.info_head(brief)
        if not brief:
            for key, table in self.operator_info(self.plan.operators.values()).items():
                info[key].update(table)
        return info

    def operator_info(self, ops: Iterable[Any]) -> dict[str, dict[str, Any]]:
        """The per-operator tables of :meth:`info` for ``ops`` (a caller holding the master's lock
        for a few hundred at a time lets heartbeats in between)."""
        history = self.window_history
        return {"throughput": {op.label: round(self.throughput(op.id), 1) for op in ops},
                "recovery_checkpoints": {op.label: op.recovery_checkpoint for op in ops},
                "restarts": {op.label: op.restarts for op in ops if op.restarts},
                "receivers": {op.label: history[op.id][-1][METRICS]["receiver"] for op in ops
                              if history.get(op.id) and "receiver" in (history[op.id][-1][METRICS] or ())}}

    def info_head(self, brief: bool = False) -> dict[str, Any]:
        """:meth:`info` with its per-operator tables empty (:meth:`operator_info` fills them)."""
        ops = self.plan.operators
        if brief:
            return {"id": self.app_id, "name": self.spec.name, "state": self.state, "diagnostics": self.diagnostics,
                    "started_millis": self.started_millis, "finished_millis": self.finished_millis,
                    "committed_window": self.committed,
                    "containers": sum(1 for c in self.plan.containers.values() if c.state in ALIVE),
                    "operators": len(ops), "paused": dict(getattr(self, "paused", {})),
                    "heartbeat_interval_millis": self.heartbeat_interval_millis(),  # type: ignore[attr-defined]
                    "failures": {label: {k: v for k, v in f.items() if k != "seen"}
                                 for label, f in sorted(self.failures.items(), key=lambda kv: kv[1]["millis"])}}
        return {
            "id": self.app_id, "name": self.spec.name, "state": self.state, "diagnostics": self.diagnostics,
            "app_path": self.app_path, "started_millis": self.started_millis,
            "finished_millis": self.finished_millis,
            "committed_window": self.committed, "committed_window_hex": window_hex(self.committed),
            "containers": len([c for c in self.plan.containers.values() if c.state in ALIVE]),
            "operators": len(ops),
            "heartbeat_interval_millis": self.heartbeat_interval_millis(),  # type: ignore[attr-defined]
            "throughput": {}, "recovery_checkpoints": {}, "restarts": {},
            "recoveries": self.recoveries, "attempt": self.attempt,
            "blocked": sorted(ops[o].label for o in self.blocked if o in ops),
            "paused": dict(getattr(self, "paused", {})),
            "shutdown_operators": {window_hex(w): [ops[o].label if o in ops else o for o in ids]
                                   for w, ids in sorted(self.shutdown_operators.items())},
            "removed": list(self.removed[-50:]),
            "receivers": {},
            "errors": list(self.errors)[-20:],
            # each operator's last failure, newest last: what the progress line and get-app-info show
            "failures": {label: {k: v for k, v in f.items() if k != "seen"}
                         for label, f in sorted(self.failures.items(), key=lambda kv: kv[1]["millis"])},
            "events": [{"millis": e.millis, "kind": e.kind, "text": e.text} for e in list(self.events)[-50:]],
        }

    def operator_rows(self) -> list[dict[str, Any]]:
        """The ``operators`` page (:meth:`operator_copies` turned into rows)."""
        return operator_rows(self.operator_copies())

    def operator_copies(self, ops: Iterable[Any] | None = None) -> list[tuple]:
        """What the operators page needs of ``ops`` (default: every operator), copied (quick: the
        caller holds the master's lock; :func:`operator_rows` builds the page from it without).
        Of the windows only what the page shows (:meth:`WindowHistory.summary`): a copy of each
        operator's windows was half the time the page held the lock."""
        empty = (0, 0, 0, 0)
        blocked, history, totals = self.blocked, self.window_history, self.totals
        rows = []
        for op in (self.plan.operators.values() if ops is None else ops):
            h, t = history.get(op.id), totals.get(op.id)
            rows.append((op, op.state.value, op.current_window, op.recovery_checkpoint, op.container, op.restarts,
                         op.last_error, bool(op.inputs), op.id in blocked, h.summary() if h is not None else None,
                         (t.tuples_in, t.tuples_out, t.windows, t.cpu_nanos) if t is not None else empty))
        return rows

    def container_rows(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "state": c.state, "host": c.host, "process": c.process,
                 "buffer_server": f"{c.buffer_server[0]}:{c.buffer_server[1]}" if c.buffer_server else "",
                 "operators": sorted(self.plan.operators[o].label for o in c.operators if o in self.plan.operators),
                 "memory_mb_used": c.memory_used_mb,
                 "buffer_server_publishers": c.publishers,
                 "last_heartbeat_millis": c.last_heartbeat_millis}
                for c in self.plan.containers.values()]


def operator_rows(copies: list[tuple]) -> list[dict[str, Any]]:
    """The rows of the operators page, from :meth:`StateReports.operator_copies`."""
    rows = []
    append = rows.append
    for op, state, current, recovery, container, restarts, error, has_inputs, blocked, windows, totals in copies:
        tuples_in, tuples_out, count, cpu_nanos = totals
        throughput, last_in, last_out, metrics = windows if windows is not None else (0.0, 0, 0, None)
        kind = op.kind
        append({"id": op.id, "name": op.name, "label": op.label, "kind": kind,
                "partition": None if kind == "UNIFIER" else op.partition_index,
                "blocked": blocked,
                "container": container, "state": state,
                "current_window": current, "recovery_checkpoint": recovery,
                "tuples_per_sec": round(throughput, 1),
                "last_window_tuples": [last_in, last_out],
                # counters (never go backward; see OperatorTotals): what /metrics exports
                "tuples_in_total": tuples_in, "tuples_out_total": tuples_out,
                "tuples_processed_total": tuples_in if has_inputs else tuples_out,
                "windows_total": count, "cpu_seconds_total": cpu_nanos / 1e9,
                "metrics": metrics or {},
                "restarts": restarts, "last_error": last_line(error) if error else ""})
    return rows
