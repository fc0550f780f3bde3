"""What :class:`~appmaster.state.MasterState` shows: info, operator and container rows, invariants.

A mixin of :class:`~appmaster.state.MasterState`: the admin API and the
status file read these, tests call :meth:`StateReports.validate_state` after
every step.
"""

from __future__ import annotations

import collections
import json
from typing import Any, NamedTuple

from appmaster.plan import ContainerState, OperatorState

__all__ = ["StateReports", "WindowSample", "window_hex", "last_line", "decode_metrics"]


class WindowSample(NamedTuple):
    """One window of one operator, as its heartbeat reported it (the master keeps the last few)."""

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
    #: The operator's metrics of the window (Apex's AutoMetric), JSON decoded.
    metrics: dict[str, Any]

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


def last_line(text: str) -> str:
    """The last non-blank line of an error text (the exception line of a traceback)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class StateReports:
    """The read side of :class:`~appmaster.state.MasterState`."""

    plan: Any
    committed: int

    def throughput(self, op_id: int) -> float:
        history = self.window_history.get(op_id)
        if not history or len(history) < 2:
            return 0.0
        span = (history[-1].end_millis - history[0].end_millis) / 1000
        tuples = sum(h.tuples_out or h.tuples_in for h in list(history)[1:])
        return tuples / span if span > 0 else 0.0

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

    def info(self) -> dict[str, Any]:
        """What ``get-app-info`` shows."""
        ops = self.plan.operators
        return {
            "id": self.app_id, "name": self.spec.name, "state": self.state, "diagnostics": self.diagnostics,
            "app_path": self.app_path, "started_millis": self.started_millis,
            "finished_millis": self.finished_millis,
            "committed_window": self.committed, "committed_window_hex": window_hex(self.committed),
            "containers": len([c for c in self.plan.containers.values() if c.state in ALIVE]),
            "operators": len(ops),
            "throughput": {op.label: round(self.throughput(op.id), 1) for op in ops.values()},
            "recovery_checkpoints": {op.label: op.recovery_checkpoint for op in ops.values()},
            "restarts": {op.label: op.restarts for op in ops.values() if op.restarts},
            "blocked": sorted(ops[o].label for o in self.blocked if o in ops),
            "paused": dict(getattr(self, "paused", {})),
            "shutdown_operators": {window_hex(w): [ops[o].label if o in ops else o for o in ids]
                                   for w, ids in sorted(self.shutdown_operators.items())},
            "removed": list(self.removed[-50:]),
            "receivers": {op.label: self.window_history[op.id][-1].metrics["receiver"] for op in ops.values()
                          if self.window_history.get(op.id) and "receiver" in self.window_history[op.id][-1].metrics},
            "errors": list(self.errors)[-20:],
            # each operator's last failure, newest last: what the progress line and get-app-info show
            "failures": {label: {k: v for k, v in f.items() if k != "seen"}
                         for label, f in sorted(self.failures.items(), key=lambda kv: kv[1]["millis"])},
            "events": [{"millis": e.millis, "kind": e.kind, "text": e.text} for e in list(self.events)[-50:]],
        }

    def operator_rows(self) -> list[dict[str, Any]]:
        rows = []
        for op in self.plan.operators.values():
            history = self.window_history.get(op.id) or []
            last = history[-1] if history else None
            rows.append({"id": op.id, "name": op.name, "label": op.label, "kind": op.kind,
                         "container": op.container, "state": op.state.value,
                         "current_window": op.current_window, "recovery_checkpoint": op.recovery_checkpoint,
                         "tuples_per_sec": round(self.throughput(op.id), 1),
                         "last_window_tuples": [last.tuples_in, last.tuples_out] if last else [0, 0],
                         "metrics": last.metrics if last else {},
                         "restarts": op.restarts, "last_error": last_line(op.last_error)})
        return rows

    def container_rows(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "state": c.state, "host": c.host, "process": c.process,
                 "buffer_server": f"{c.buffer_server[0]}:{c.buffer_server[1]}" if c.buffer_server else "",
                 "operators": sorted(self.plan.operators[o].label for o in c.operators if o in self.plan.operators),
                 "memory_mb_used": c.memory_used_mb,
                 "buffer_server_publishers": c.publishers,
                 "last_heartbeat_millis": c.last_heartbeat_millis}
                for c in self.plan.containers.values()]
