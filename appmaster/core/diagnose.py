"""Stack traces on demand (Apex's STACKTRACE) and the blocked-operator diagnostic.

A mixin of :class:`~stram.master.core.state.MasterState`. The flow, as in Apex:
``stram stack APP CONTAINER`` → the admin API → a :class:`StackTraceRequest`
event (numbered); every heartbeat response to that container carries
``stack_trace_required`` until the agent's answer arrives; the agent sends
every thread's stack (``ContainerHeartbeat.stack_trace``, JSON, see
:mod:`stram.common.stacks`) in its next heartbeat, at once. The answer fulfils
every request the container had been sent; the admin API waits for it.

An operator that finishes no window for TIMEOUT_WINDOW_COUNT windows is
*blocked*: the master asks its container for a stack, waits for it at most
:data:`BLOCKED_STACK_HEARTBEATS` heartbeat intervals, then restarts the
container with the operator's stack in its last error (and so in the
event log and in the application's diagnostics, should it fail).
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Any

from stram import wire as proto
from stram.common.stacks import format_thread
from stram.master.core.events import ContainerNotRunning, StackTraceRequest, UnknownContainer
from stram.master.core.instructions import Instruction, Reply
from stram.master.core.plan import ContainerState, OperatorState, PTContainer, PTOperator
from stram.master.core.reports import last_line, window_hex

__all__ = ["Diagnose", "BLOCKED_STACK_HEARTBEATS", "blocked_text"]

#: Heartbeat intervals the master waits for a blocked operator's stack before restarting it.
BLOCKED_STACK_HEARTBEATS = 3


@dataclass
class BlockedWait:
    """A blocked operator whose container was asked for its stack."""

    container: str
    #: The stack request's number (see :meth:`Diagnose.stack_trace`).
    seq: int
    #: Restart without the stack after this time (wall-clock millis).
    deadline: int
    #: How long it had finished no window when it was declared blocked, ms.
    stalled: int


def blocked_text(op: PTOperator, stalled: int, trace: dict[str, Any] | None, waited: int) -> str:
    """An operator's blocked diagnostic, shaped like a traceback: a headline, the operator's
    thread's stack, and ``OperatorBlocked: ...`` as the last line."""
    lines = [f"operator {op.label} ({op.id}) blocked: no window finished for {stalled} ms"]
    if trace is None:
        end = f"its container sent no stack within {waited} ms"
    else:
        threads = [t for t in trace.get("threads", []) if t.get("operator") == op.id]
        if not threads:  # inline on an upstream's thread, or gone: every operator thread of the container
            threads = [t for t in trace.get("threads", []) if t.get("operator") is not None]
        lines += [format_thread(t) for t in threads] or ["(no operator thread in the container's stack)"]
        end = "stack above"
    lines.append(f"OperatorBlocked: no window finished for {stalled} ms ({end})")
    return "\n".join(lines)


class Diagnose:
    """Stack traces and blocked operators for :class:`~stram.master.core.state.MasterState`."""

    plan: Any
    failures: dict[str, dict[str, Any]]
    blocked: set[int]

    def _init_diagnose(self) -> None:
        #: container id -> its newest stack trace: {"container", "seq", "millis", "threads"}
        self.stack_traces: dict[str, dict[str, Any]] = {}
        #: Number of the last stack request (any container).
        self._stack_seq = 0
        #: container id -> newest request number it was asked for / sent in a response
        self._stack_wanted: dict[str, int] = {}
        self._stack_sent: dict[str, int] = {}
        #: blocked operator id -> its stack request
        self._blocked_waits: dict[int, BlockedWait] = {}

    # ------------------------------------------------------------ stack traces
    def _handle_stack_trace_request(self, ev: StackTraceRequest) -> list[Instruction]:
        container = self.plan.containers.get(ev.container_id)
        if container is None:
            raise UnknownContainer(ev.container_id)
        if container.state != ContainerState.RUNNING:
            raise ContainerNotRunning(f"container {ev.container_id} is {container.state}, not RUNNING")
        return [Reply(self._request_stack(container.id))]

    def _request_stack(self, container_id: str) -> int:
        self._stack_seq += 1
        self._stack_wanted[container_id] = self._stack_seq
        return self._stack_seq

    def _ask_stack_trace(self, container: PTContainer, response: proto.ContainerHeartbeatResponse) -> None:
        """Set ``stack_trace_required`` while a request for this container is unanswered."""
        wanted = self._stack_wanted.get(container.id, 0)
        if wanted > self.stack_traces.get(container.id, {}).get("seq", 0):
            response.stack_trace_required = True
            self._stack_sent[container.id] = wanted

    def _take_stack_trace(self, container: PTContainer, hb: proto.ContainerHeartbeat, now: int) -> None:
        """Keep a stack trace a heartbeat carries: it answers every request sent to that container."""
        if not hb.stack_trace:
            return
        try:
            threads = list(json.loads(hb.stack_trace)["threads"])
        except (ValueError, KeyError, TypeError) as exc:  # bad input never crashes the master
            threads = [{"name": f"(unreadable stack trace: {type(exc).__name__}: {exc})", "ident": 0,
                        "daemon": None, "operator": None, "frames": []}]
        self.stack_traces[container.id] = {"container": container.id, "millis": now, "threads": threads,
                                           "seq": self._stack_sent.get(container.id, 0)}

    def stack_trace(self, container_id: str, seq: int) -> dict[str, Any] | None:
        """The container's stack trace that answers request ``seq``; None while it has not arrived.

        Raises
        ------
        UnknownContainer, ContainerNotRunning
            The container is not known, or stopped running (it will never answer).
        """
        trace = self.stack_traces.get(container_id)
        if trace is not None and trace["seq"] >= seq:
            return {k: v for k, v in trace.items() if k != "seq"}
        container = self.plan.containers.get(container_id)
        if container is None:
            raise UnknownContainer(container_id)
        if container.state != ContainerState.RUNNING:
            raise ContainerNotRunning(f"container {container_id} stopped running ({container.state}) "
                                      f"before it answered")
        return None

    # ------------------------------------------------------------ blocked operators
    def _operator_blocked(self, op: PTOperator, now: int, stalled: int) -> None:
        """``op`` finished no window for too long: ask for its stack; the restart follows
        (:meth:`_resolve_blocked`)."""
        wait = BLOCKED_STACK_HEARTBEATS * int(self.attr("HEARTBEAT_INTERVAL_MILLIS"))  # type: ignore[attr-defined]
        self._blocked_waits[op.id] = BlockedWait(op.container or "", self._request_stack(op.container or ""),
                                                 now + wait, stalled)
        self._note(now, "blocked", f"operator {op.label} ({op.id}) has not finished a window for "  # type: ignore[attr-defined]
                                   f"{stalled} ms; asking for its stack, then restarting its container")

    def _resolve_blocked(self, now: int) -> list[Instruction]:
        """Restart the containers of blocked operators whose stack arrived or was waited for long
        enough; forget those that finished a window or were redeployed meanwhile."""
        instructions: list[Instruction] = []
        if getattr(self, "paused", None):  # writes wait for space: windows stop everywhere, none is blocked
            self.blocked.difference_update(self._blocked_waits)
            self._blocked_waits.clear()
        for op_id, wait in list(self._blocked_waits.items()):
            op = self.plan.operators.get(op_id)
            if op is None or op_id not in self.blocked or op.state != OperatorState.ACTIVE \
                    or op.container != wait.container:
                del self._blocked_waits[op_id]  # it moved on, or was redeployed meanwhile
                continue
            trace = self.stack_traces.get(wait.container)
            arrived = trace is not None and trace["seq"] >= wait.seq
            if not arrived and now < wait.deadline:
                continue
            del self._blocked_waits[op_id]
            waited = now - (wait.deadline - BLOCKED_STACK_HEARTBEATS * int(self.attr("HEARTBEAT_INTERVAL_MILLIS")))  # type: ignore[attr-defined]
            op.last_error = blocked_text(op, wait.stalled, trace if arrived else None, waited)
            record = self.failures.setdefault(op.label, {"id": op.id, "count": 0,
                                                         "seen": collections.deque(maxlen=20)})
            record.update(id=op.id, error=last_line(op.last_error), window=window_hex(op.current_window),
                          millis=now, count=record["count"] + 1)
            self._note(now, "blocked", op.last_error)  # type: ignore[attr-defined]
            instructions += self._recover([op.container], now, f"operator {op.label} blocked",  # type: ignore[attr-defined]
                                          kill=True)
        return instructions
