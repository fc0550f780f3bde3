"""What the master shows of an application: info, operator and container rows, invariants.

Functions over the master's :class:`~stram.master.core.books.Books`: the admin API and
the status file read these (through :class:`~stram.master.core.state.MasterState`'s
queries, under the master's lock: :func:`in_chunks` holds it a few hundred operators at
a time), tests call :func:`validate_state` after every step. The operators' windows
they show are :mod:`stram.master.core.history`'s (re-exported here).
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Iterable, Iterator

from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK
from stram.master.core.books import Books
from stram.master.core.deploy import heartbeat_interval_millis
from stram.master.core.history import (CPU_NANOS, END_MILLIS, METRICS, TUPLES_IN, TUPLES_OUT, WINDOW_ID, OperatorTotals,
                                       WindowHistory, WindowSample, decode_metrics, port_totals)
from stram.master.core.lifecycle import last_line, window_hex
from stram.master.core.nodes import blacklisted_nodes
from stram.master.core.plan import ALIVE, OperatorState

__all__ = ["throughput", "validate_state", "info", "operator_info", "info_head", "operator_copies", "container_rows",
           "operator_rows", "watermark_view", "in_chunks", "COPY_CHUNK", "window_hex", "last_line",
           "WindowSample", "WindowHistory", "OperatorTotals", "decode_metrics", "port_totals",
           "WINDOW_ID", "TUPLES_IN", "TUPLES_OUT", "END_MILLIS", "CPU_NANOS", "METRICS"]


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


def throughput(books: Books, op_id: int) -> float:
    """Tuples a second of an operator over its last windows (:meth:`WindowHistory.rate`)."""
    history = books.window_history.get(op_id)
    return history.rate() if history else 0.0


def validate_state(books: Books) -> None:
    """Invariants; tests call this after every step."""
    ops = books.plan.operators
    for op in ops.values():
        assert books.committed <= op.recovery_checkpoint or op.state == OperatorState.PENDING_DEPLOY \
            or op.recovery_checkpoint == books.initial_window, (op.id, books.committed, op.recovery_checkpoint)
        holders = [c.id for c in books.plan.containers.values() if op.id in c.operators]
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
            if tags is not None and not books.plan.is_inline(op, i) and src.state in (
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
    for window, ids in books.shutdown_operators.items():
        for op_id in ids:
            assert op_id in ops and ops[op_id].state == OperatorState.SHUTDOWN, (window, op_id)
            downstream_ready = all(ops[d].current_window >= window for d in books.plan.downstream(op_id))
            assert not (window <= books.committed and downstream_ready), \
                f"operator {op_id} parked past its removal (window {window}, committed {books.committed})"


def info(books: Books, brief: bool = False) -> dict[str, Any]:
    """What ``get-app-info`` shows (``brief``: without the per-operator tables, for status.json)."""
    head = info_head(books, brief)
    if not brief:
        for key, table in operator_info(books, books.plan.operators.values()).items():
            head[key].update(table)
    return head


def operator_info(books: Books, ops: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """The per-operator tables of :func:`info` for ``ops`` (a caller holding the master's lock
    for a few hundred at a time lets heartbeats in between)."""
    history = books.window_history
    return {"throughput": {op.label: round(throughput(books, op.id), 1) for op in ops},
            "recovery_checkpoints": {op.label: op.recovery_checkpoint for op in ops},
            "restarts": {op.label: op.restarts for op in ops if op.restarts},
            "receivers": {op.label: history[op.id][-1][METRICS]["receiver"] for op in ops
                          if history.get(op.id) and "receiver" in (history[op.id][-1][METRICS] or ())}}


def _failures(books: Books) -> dict[str, dict[str, Any]]:
    """Each operator's last failure, newest last (what the progress line and get-app-info show)."""
    return {label: {k: v for k, v in f.items() if k != "seen"}
            for label, f in sorted(books.failures.items(), key=lambda kv: kv[1]["millis"])}


def info_head(books: Books, brief: bool = False) -> dict[str, Any]:
    """:func:`info` with its per-operator tables empty (:func:`operator_info` fills them)."""
    ops = books.plan.operators
    if brief:
        return {"id": books.app_id, "name": books.spec.name, "state": books.state, "diagnostics": books.diagnostics,
                "started_millis": books.started_millis, "finished_millis": books.finished_millis,
                "committed_window": books.committed,
                "containers": sum(1 for c in books.plan.containers.values() if c.state in ALIVE),
                "operators": len(ops), "paused": dict(books.paused), "stalled": books.stalled,
                "heartbeat_interval_millis": heartbeat_interval_millis(books),
                "failures": _failures(books)}
    return {
        "id": books.app_id, "name": books.spec.name, "state": books.state, "diagnostics": books.diagnostics,
        "app_path": books.app_path, "started_millis": books.started_millis,
        "finished_millis": books.finished_millis,
        "committed_window": books.committed, "committed_window_hex": window_hex(books.committed),
        "containers": len([c for c in books.plan.containers.values() if c.state in ALIVE]),
        "operators": len(ops),
        "heartbeat_interval_millis": heartbeat_interval_millis(books),
        "throughput": {}, "recovery_checkpoints": {}, "restarts": {},
        "recoveries": books.recoveries, "attempt": books.attempt,
        "blocked": sorted(ops[o].label for o in books.blocked if o in ops),
        "stalled": books.stalled,
        "paused": dict(books.paused),
        "shutdown_operators": {window_hex(w): [ops[o].label if o in ops else o for o in ids]
                               for w, ids in sorted(books.shutdown_operators.items())},
        "removed": list(books.removed[-50:]),
        "receivers": {},
        "errors": list(books.errors)[-20:],
        "failures": _failures(books),
        "blacklistedNodes": blacklisted_nodes(books),
        "events": [{"millis": e.millis, "kind": e.kind, "text": e.text} for e in list(books.events)[-50:]],
    }


#: :func:`watermark_view` of an operator without event time.
NO_WATERMARK = (None, None)


def watermark_view(watermark: int | None, now: int) -> tuple[int | str | None, int | None]:
    """An operator's watermark as the operators page shows it, and its lag behind ``now`` (wall-clock
    millis): (epoch millis, now minus it); ("idle", None) or ("end", None) for an idle input and
    the end of input; (None, None) for no watermark (no event time, or none seen yet)."""
    if watermark is None or watermark == MIN_WATERMARK:
        return NO_WATERMARK
    if watermark == IDLE:
        return "idle", None
    if watermark == MAX_WATERMARK:
        return "end", None
    return watermark, now - watermark


def operator_copies(books: Books, ops: Iterable[Any] | None = None) -> list[tuple]:
    """What the operators page needs of ``ops`` (default: every operator), copied (quick: the
    caller holds the master's lock; :func:`operator_rows` builds the page from it without).
    Of the windows only what the page shows (:meth:`WindowHistory.summary`): a copy of each
    operator's windows was half the time the page held the lock. The watermark's lag is as of
    this call."""
    empty = (0, 0, 0, 0)
    blocked, history, totals = books.blocked, books.window_history, books.totals
    now = int(time.time() * 1000)
    rows = []
    for op in (books.plan.operators.values() if ops is None else ops):
        h, t = history.get(op.id), totals.get(op.id)
        rows.append((op, op.state.value, op.current_window, op.recovery_checkpoint, op.container, op.restarts,
                     op.last_error, bool(op.inputs), op.id in blocked, h.summary() if h is not None else None,
                     (t.tuples_in, t.tuples_out, t.windows, t.cpu_nanos) if t is not None else empty,
                     NO_WATERMARK if h is None or h.watermark is None else watermark_view(h.watermark, now)))
    return rows


def container_rows(books: Books) -> list[dict[str, Any]]:
    """The ``containers`` page: one row per container of the plan."""
    operators = books.plan.operators
    return [{"id": c.id, "state": c.state, "host": c.host, "process": c.process,
             "buffer_server": f"{c.buffer_server[0]}:{c.buffer_server[1]}" if c.buffer_server else "",
             "operators": sorted(operators[o].label for o in c.operators if o in operators),
             "memory_mb_used": c.memory_used_mb,
             "buffer_server_publishers": c.publishers,
             "last_heartbeat_millis": c.last_heartbeat_millis}
            for c in books.plan.containers.values()]


def operator_rows(copies: list[tuple]) -> list[dict[str, Any]]:
    """The rows of the operators page, from :func:`operator_copies`."""
    rows = []
    append = rows.append
    for (op, state, current, recovery, container, restarts, error, has_inputs, blocked, windows, totals,
         (watermark, lag)) in copies:
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
                "watermark": watermark, "watermark_lag_millis": lag,
                "restarts": restarts, "last_error": last_line(error) if error else ""})
    return rows
