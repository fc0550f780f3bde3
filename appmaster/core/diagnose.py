"""Stack traces on demand (Apex's STACKTRACE) and the blocked-operator diagnostic.

Functions over the master's :class:`~stram.master.core.books.Books` (its
``stack_*`` and ``blocked*`` fields). The flow, as in Apex:
``stram stack APP CONTAINER`` → the admin API → a :class:`StackTraceRequest`
event (numbered); every heartbeat response to that container carries
``stack_trace_required`` until the agent's answer arrives; the agent sends
every thread's stack (``ContainerHeartbeat.stack_trace``, JSON, see
:mod:`stram.common.stacks`) in its next heartbeat, at once. The answer fulfils
every request the container had been sent; the admin API waits for it.

An operator that finishes no window for TIMEOUT_WINDOW_COUNT windows is
*blocked*: the master asks its container for a stack (:func:`find_blocked`), waits
for it at most :data:`BLOCKED_STACK_HEARTBEATS` heartbeat intervals, then
(:func:`blocked_to_restart`) the operator's stack becomes its last error (and so
is in the event log and in the application's diagnostics, should it fail), and
the clock (:func:`stram.master.core.recovery.handle_tick`) restarts its container.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from stram.common.stacks import format_thread
from stram.master.core.books import BlockedWait, Books
from stram.master.core.events import ContainerNotRunning, StackTraceRequest, UnknownContainer
from stram.master.core.instructions import Instruction, Reply
from stram.master.core.lifecycle import count_failure, last_line, note
from stram.master.core.plan import ContainerState, OperatorState, PTContainer, PTOperator

__all__ = ["BLOCKED_STACK_HEARTBEATS", "BLOCKED_SCAN_MILLIS", "blocked_text", "handle_stack_trace_request",
           "request_stack", "stack_trace_required", "take_stack_trace", "stack_trace", "find_blocked",
           "blocked_to_restart"]

#: Heartbeat intervals the master waits for a blocked operator's stack before restarting it.
BLOCKED_STACK_HEARTBEATS = 3
#: Longest time between two scans of every operator for blocked ones (:func:`find_blocked`).
BLOCKED_SCAN_MILLIS = 1000


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


# ------------------------------------------------------------ stack traces
def handle_stack_trace_request(books: Books, ev: StackTraceRequest) -> list[Instruction]:
    """Ask a running container for its stack; replied with the request's number."""
    container = books.plan.containers.get(ev.container_id)
    if container is None:
        raise UnknownContainer(ev.container_id)
    if container.state != ContainerState.RUNNING:
        raise ContainerNotRunning(f"container {ev.container_id} is {container.state}, not RUNNING")
    return [Reply(request_stack(books, container.id))]


def request_stack(books: Books, container_id: str) -> int:
    """Number a new stack request to ``container_id``; its heartbeat responses ask for it from now on."""
    books.stack_seq += 1
    books.stack_wanted[container_id] = books.stack_seq
    return books.stack_seq


def stack_trace_required(books: Books, container: PTContainer) -> bool:
    """Whether a request for this container's stack is unanswered (its response asks for it, now sent)."""
    wanted = books.stack_wanted.get(container.id, 0)
    if wanted > books.stack_traces.get(container.id, {}).get("seq", 0):
        books.stack_sent[container.id] = wanted
        return True
    return False


def take_stack_trace(books: Books, container: PTContainer, text: str, now: int) -> None:
    """Keep a stack trace a heartbeat carries (``text``, its JSON; "" none): it answers every
    request sent to that container."""
    if not text:
        return
    try:
        threads = list(json.loads(text)["threads"])
    except (ValueError, KeyError, TypeError) as exc:  # bad input never crashes the master
        threads = [{"name": f"(unreadable stack trace: {type(exc).__name__}: {exc})", "ident": 0,
                    "daemon": None, "operator": None, "frames": []}]
    books.stack_traces[container.id] = {"container": container.id, "millis": now, "threads": threads,
                                        "seq": books.stack_sent.get(container.id, 0)}


def stack_trace(books: Books, container_id: str, seq: int) -> dict[str, Any] | None:
    """The container's stack trace that answers request ``seq``; None while it has not arrived.

    Raises
    ------
    UnknownContainer, ContainerNotRunning
        The container is not known, or stopped running (it will never answer).
    """
    trace = books.stack_traces.get(container_id)
    if trace is not None and trace["seq"] >= seq:
        return {k: v for k, v in trace.items() if k != "seq"}
    container = books.plan.containers.get(container_id)
    if container is None:
        raise UnknownContainer(container_id)
    if container.state != ContainerState.RUNNING:
        raise ContainerNotRunning(f"container {container_id} stopped running ({container.state}) "
                                  f"before it answered")
    return None


# ------------------------------------------------------------ blocked operators
def find_blocked(books: Books, now: int) -> None:
    """Mark the operators that finished no window for TIMEOUT_WINDOW_COUNT windows (each is
    asked for its stack).

    Every operator is looked at, so not at every tick: at most every :data:`BLOCKED_SCAN_MILLIS`,
    and at least four times within the shortest timeout seen in the last scan (a tick comes every
    0.2 s; at 20,000 operators a scan takes 8-13 ms of the master's interpreter).
    """
    last = books.blocked_scanned
    if last is not None and 0 <= now - last < books.blocked_every:
        return
    books.blocked_scanned = now
    window_ms = int(books.attr("STREAMING_WINDOW_SIZE_MILLIS"))
    default, active, blocked = books.attr("TIMEOUT_WINDOW_COUNT"), OperatorState.ACTIVE, books.blocked
    shortest = 4 * BLOCKED_SCAN_MILLIS
    for op in list(books.plan.operators.values()):  # cheap tests first
        if op.state != active or not op.window_advanced_millis or op.id in blocked:
            continue
        limit = int(op.attributes.get("TIMEOUT_WINDOW_COUNT") or default) * window_ms
        if limit < shortest:
            shortest = limit
        if now - op.window_advanced_millis > limit:
            blocked.add(op.id)
            operator_blocked(books, op, now, now - op.window_advanced_millis)  # asks for its stack
    books.blocked_every = shortest // 4


def operator_blocked(books: Books, op: PTOperator, now: int, stalled: int) -> None:
    """``op`` finished no window for too long: ask for its stack; the restart follows
    (:func:`blocked_to_restart`)."""
    wait = BLOCKED_STACK_HEARTBEATS * int(books.attr("HEARTBEAT_INTERVAL_MILLIS"))
    books.blocked_waits[op.id] = BlockedWait(op.container or "", request_stack(books, op.container or ""),
                                             now + wait, stalled)
    note(books, now, "blocked", f"operator {op.label} ({op.id}) has not finished a window for "
                                f"{stalled} ms; asking for its stack, then restarting its container")


def blocked_to_restart(books: Books, now: int) -> Iterator[PTOperator]:
    """The blocked operators whose stack arrived or was waited for long enough, one at a time, each
    with its stack as its last error (counted as its failure, in the event log): the caller restarts
    its container before asking for the next (which that restart may have redeployed: then it is
    forgotten, as are those that finished a window meanwhile)."""
    waits = books.blocked_waits
    if books.paused:  # writes wait for space: windows stop everywhere, none is blocked
        books.blocked.difference_update(waits)
        waits.clear()
    for op_id, wait in list(waits.items()):
        if op_id not in waits:
            continue  # the restart of an earlier one's container redeployed it (and forgot its wait)
        op = books.plan.operators.get(op_id)
        if op is None or op_id not in books.blocked or op.state != OperatorState.ACTIVE \
                or op.container != wait.container:
            del waits[op_id]  # it moved on, or was redeployed meanwhile
            continue
        trace = books.stack_traces.get(wait.container)
        arrived = trace is not None and trace["seq"] >= wait.seq
        if not arrived and now < wait.deadline:
            continue
        del waits[op_id]
        waited = now - (wait.deadline - BLOCKED_STACK_HEARTBEATS * int(books.attr("HEARTBEAT_INTERVAL_MILLIS")))
        op.last_error = blocked_text(op, wait.stalled, trace if arrived else None, waited)
        count_failure(books, op, last_line(op.last_error), op.current_window, now)
        note(books, now, "blocked", op.last_error)
        yield op
