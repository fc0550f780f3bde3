"""A container's heartbeat: what its operators report, and the response that tells it what to do.

Functions over the master's :class:`~stram.master.core.books.Books`; the hot path
of the master (2,000 containers of 10 operators send 2,000 heartbeats a second).
:func:`handle_heartbeat` reads the ``ContainerHeartbeat`` where it arrives (field by
field, not copied): the container's health and publishers, each operator's window,
checkpoints, window statistics and state (:func:`process_operator`: a failed one
goes to :func:`stram.master.core.recovery.operator_failed`, an ended one is parked
for :mod:`~stram.master.core.removal`). Then the committed window moves, parked
operators that may leave the plan leave it, and :func:`response` decides the
answer: undeploys, publisher resets, requests to operators, deploys of operators
whose upstream buffer servers are known (:func:`deployable`), made into a
``ContainerHeartbeatResponse`` by :mod:`stram.master.core.convert`.
"""

from __future__ import annotations

import logging
from typing import Any

from stram.master.core import alignment, convert
from stram.master.core.books import Books
from stram.master.core.changes import set_volatile
from stram.master.core.deploy import asked_interval_millis, deploy_info
from stram.master.core.diagnose import stack_trace_required, take_stack_trace
from stram.master.core.ending import ending_heartbeat
from stram.master.core.events import Heartbeat
from stram.master.core.instructions import Instruction, Reply
from stram.master.core.lifecycle import finish, maybe_finish, note, window_hex
from stram.master.core.plan import GONE, ContainerState, OperatorState, PTContainer
from stram.master.core.recovery import container_paused, operator_failed, operators_missing
from stram.master.core.removal import process_shutdown_operators

__all__ = ["handle_heartbeat", "process_operator", "response", "deployable"]

log = logging.getLogger("stram.master.core.state")  # the event log and the heartbeat speak for the state

ACTIVE, SHUTDOWN, FAILED = convert.REPORTED_ACTIVE, convert.REPORTED_SHUTDOWN, convert.REPORTED_FAILED
#: A container whose deploy waits for an upstream container to start asks again this soon: at an
#: application's start its containers come up within a fraction of a second of each other.
DEPLOY_POLL_MILLIS = 50


def handle_heartbeat(books: Books, ev: Heartbeat) -> list[Instruction]:
    """Process one container heartbeat; the response (a :class:`Reply`) and what it implies."""
    hb, now = ev.heartbeat, ev.now
    books.heartbeats += 1
    interval = asked_interval_millis(books, hb.container_id, now, hb.sent_millis)
    container = books.plan.containers.get(hb.container_id)
    # a process that is not the one launched as this container (one an earlier master attempt
    # started but never recorded) must not speak for it: what it omits would leave the plan
    impostor = bool(container and container.pid and hb.jvm_name and hb.jvm_name.split("@")[0] != str(container.pid))
    if hb.ending and container is not None and not impostor:
        return ending_heartbeat(books, container, list(hb.ending), now)
    if container is None or container.state in GONE or impostor:
        if container is None or impostor:
            log.warning("heartbeat from %s container %r (%s, %s): told to shut down",
                        "another process than the" if impostor else "unknown", hb.container_id,
                        hb.jvm_name, ev.peer)
        return [Reply(convert.heartbeat_response(interval, 0, shutdown=True))]
    instructions: list[Instruction] = []
    # fields are assigned only when they change: each assignment is tracked (stram.master.core.changes)
    if container.state != ContainerState.RUNNING:
        note(books, now, "container", f"{container.id} running ({hb.jvm_name})")
        container.state = ContainerState.RUNNING
    set_volatile(container, "last_heartbeat_millis", now)
    if container.process != hb.jvm_name:
        container.process = hb.jvm_name
    if hb.buffer_server_port and container.buffer_server != (hb.buffer_server_host, hb.buffer_server_port):
        container.buffer_server = (hb.buffer_server_host, hb.buffer_server_port)
        container.host = hb.buffer_server_host
    if container.memory_used_mb != hb.memory_mb_used:
        container.memory_used_mb = hb.memory_mb_used
    container_paused(books, container, hb.paused, now)
    if hb.publishers or container.publishers:
        container.publishers = {p.publisher: {"memory_bytes": p.memory_bytes, "spilled_bytes": p.spilled_bytes,
                                              "windows": p.windows, "first_window": p.first_window,
                                              "last_window": p.last_window,
                                              "throttled_millis": p.throttled_millis}
                                for p in hb.publishers}
    take_stack_trace(books, container, hb.stack_trace, now)
    reported = set()
    unplanned: list[int] | None = None
    for ohb in hb.container_stats.operators:
        reported.add(ohb.node_id)
        done = process_operator(books, container, ohb, now)
        if done is None:  # not planned there: undeployed
            if unplanned is None:
                unplanned = []
            unplanned.append(ohb.node_id)
        elif done:
            instructions += done
    # processOperatorDeployStatus: a deployed, ACTIVE operator the heartbeat omits has not shut
    # down (that is reported): its container lost it, a failure recovered from checkpoints
    operators = books.plan.operators
    missing = [op for op_id in sorted(container.operators)
               if (op := operators.get(op_id)) is not None and op.state == OperatorState.ACTIVE and op_id not in reported]
    if missing:
        instructions += operators_missing(books, container, missing, now)
    instructions += books.committed_window.update(books)
    process_shutdown_operators(books, now)
    if books.state == "RUNNING" and not books.plan.operators:
        finish(books, "SUCCEEDED", "all operators finished", now)
    answer = response(books, container, interval, unplanned, now)
    instructions += maybe_finish(books)
    return [Reply(answer), *instructions]


def process_operator(books: Books, container: PTContainer, ohb: Any, now: int) -> list[Instruction] | None:
    """One operator's report (an ``OperatorHeartbeat``): what it implies; None for an operator the
    plan does not place in ``container`` (the response undeploys it)."""
    op = books.plan.operators.get(ohb.node_id)
    if op is None or op.container != container.id:
        note(books, now, "undeploy", f"operator {ohb.node_id} reported by {container.id} is not planned there")
        return None
    if op.state == OperatorState.PENDING_DEPLOY:
        return []  # a report of the incarnation being replaced (its undeploy is on the way)
    if op.state == OperatorState.SHUTDOWN and ohb.state == ACTIVE:
        return []  # late report from before the shutdown
    saved = ohb.saved_checkpoints
    if saved:
        have, floor = op.checkpoints, op.recovery_checkpoint
        fresh = [c for c in saved if c > floor and c not in have]
        if fresh:  # assigned, not changed in place: the committed window and the journal see it
            op.checkpoints = have + fresh if len(fresh) == 1 and (not have or fresh[0] > have[-1]) \
                else sorted({*have, *fresh})
    if ohb.current_window_id > op.current_window:
        set_volatile(op, "current_window", ohb.current_window_id)
        set_volatile(op, "window_advanced_millis", now)
        books.blocked.discard(op.id)
    window_stats = ohb.window_stats
    if window_stats:
        books.window_history[op.id].record(window_stats, now, books.totals[op.id])
    state = ohb.state
    if state == ACTIVE:
        if op.state in (OperatorState.DEPLOYING, OperatorState.PENDING_DEPLOY):
            op.window_advanced_millis = now
        if op.state != OperatorState.ACTIVE:
            op.state = OperatorState.ACTIVE
    elif state == SHUTDOWN and op.state != OperatorState.SHUTDOWN:
        op.state = OperatorState.SHUTDOWN
        op.shutdown_window = ohb.current_window_id
        books.shutdown_operators.setdefault(op.shutdown_window, []).append(op.id)
        note(books, now, "shutdown", f"operator {op.label} ({op.id}) shut down at window "
                                     f"{window_hex(op.shutdown_window)}; parked in shutdownOperators")
    elif state == FAILED and op.state != OperatorState.FAILED:
        return operator_failed(books, container, op, ohb.error, ohb.current_window_id, ohb.fatal, now)
    return []


def response(books: Books, container: PTContainer, interval: int, undeploy: list[int] | None,
             now: int | None = None) -> Any:
    """The ``ContainerHeartbeatResponse`` to ``container``: asking for the next heartbeat in ``interval``
    ms, undeploying ``undeploy`` (operators it reported that are not planned there) and what waits
    for it; shut down once the application ended or it has nothing left to run."""
    if books.state != "RUNNING" or container.state == ContainerState.RELEASED:
        return convert.heartbeat_response(interval, books.committed, shutdown=True, undeploy=undeploy or ())
    cid = container.id
    stack = stack_trace_required(books, container)
    waiting = books.undeploy.pop(cid, None)
    if waiting:
        undeploy = [*(undeploy or ()), *sorted(waiting)]
    resets = books.resets.pop(cid, None)
    requests = books.node_requests.pop(cid, None)
    upstream_windows: dict[int, int] | None = None
    ended_upstreams: dict[int, int] | None = None
    operators = books.plan.operators
    for op_id in container.operators:
        op = operators.get(op_id)
        if op is not None and op.kind == "INPUT" and op.inputs:  # reads its inputs itself
            if upstream_windows is None:
                upstream_windows = {}
            for src in op.source_ids:
                if src in operators:
                    upstream_windows[src] = operators[src].current_window
    if upstream_windows is not None:
        ended_upstreams = {}
        for entry in books.removed:
            if entry["window"] is not None:  # removed after it shut down: its stream ended there
                ended_upstreams[entry["id"]] = entry["window"]
    deploys: list[Any] | None = None
    if container.pending_deploy:  # its operators' first report ends the deploy: not paced
        interval = int(books.attr("HEARTBEAT_INTERVAL_MILLIS"))
        if not deployable(books, container):  # an upstream container starts: ask again soon
            interval = min(interval, DEPLOY_POLL_MILLIS)
        else:
            deploys = []
            for op_id in sorted(container.pending_deploy):
                op = operators[op_id]
                deploys.append(deploy_info(books, op))
                op.state = OperatorState.DEPLOYING
            container.pending_deploy = set()
    shutdown = False
    if not container.operators and container.state == ContainerState.RUNNING and books.plan.operators:
        container.state = ContainerState.RELEASED
        shutdown = True
    return convert.heartbeat_response(interval, books.committed, shutdown=shutdown, stack_trace_required=stack,
                                      undeploy=undeploy or (), resets=sorted(resets) if resets else (),
                                      node_requests=requests or (), upstream_windows=upstream_windows,
                                      ended_upstreams=ended_upstreams, deploys=deploys or (),
                                      watermark_ceilings=alignment.ceilings(books, container.operators, now, interval))


def deployable(books: Books, container: PTContainer) -> bool:
    """All remote upstream buffer servers known (their containers are running), and none of them still
    holds windows of an upstream incarnation being replaced (its undeploy and publisher reset not yet
    sent: a subscriber would read windows the new incarnation drops).

    Not "the upstream operators deployed": a subscriber may come first (the buffer server keeps it
    until its publisher publishes), and waiting for them would hang containers that feed each other
    (a partitioned stream between partitions packed together by CONTAINERS_MAX_COUNT, or two locality
    groups joined both ways): each would wait for the other's deploy.
    """
    operators, containers = books.plan.operators, books.plan.containers
    undeploy, resets = books.undeploy, books.resets
    for op_id in container.pending_deploy:
        for inp in operators[op_id].inputs:
            src = operators.get(inp.source_id)
            if src is None or src.container == container.id:
                continue  # in this container: running, or deployed in this answer after its resets
            upstream = containers.get(src.container or "")
            if upstream is None or upstream.state != ContainerState.RUNNING or not upstream.buffer_server:
                return False
            if (upstream.id in undeploy and src.id in undeploy[upstream.id]) or (
                    upstream.id in resets and f"{src.id}.{inp.source_port}" in resets[upstream.id]):
                return False
    return True
