"""How the master handles failures: lost containers, timeouts, errors, redeploys.

Functions over the master's :class:`~stram.master.core.books.Books` (and the
handlers of the events about failures and the clock): a container that exited,
stopped heartbeating or was killed, or an operator that failed, has its
operators, everything downstream and their container-local upstream redeployed
from their recovery checkpoints (:func:`recover`), with exponential backoff
(:func:`stram.master.core.rules.restart_backoff_millis`) and the RECOVERY_ATTEMPTS
limit. An operator that fails again at the same window with the same error fails
the application (a deterministic failure: restarting cannot help) unless
RETRY_DETERMINISTIC_FAILURES is set; one that raised FatalError fails it at once.
The diagnostics name the operator that raised, its exception and traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from stram.common.space import no_space_text
from stram.master.core.books import Books
from stram.master.core.changes import touch
from stram.master.core.deploy import heartbeat_interval_millis
from stram.master.core.diagnose import blocked_to_restart, find_blocked
from stram.master.core.ending import error_after_end
from stram.master.core.events import (AdoptContainers, ContainerExited, ContainerStarted, DiskFull, ErrorReport,
                                      KillContainerRequest, Resumed, Tick, UnknownContainer)
from stram.master.core.instructions import AdoptContainer, Instruction, KillContainer
from stram.master.core.lifecycle import count_failure, finish, last_line, launch, maybe_finish, note, window_hex
from stram.master.core.nodes import container_ended, watch_nodes
from stram.master.core.plan import (ALIVE, GONE, ContainerState, OperatorState, PTContainer, PTOperator,
                                    affected_operators)
from stram.master.core.rules import restart_backoff_millis

log = logging.getLogger("stram.master.core.state")

__all__ = ["TRACEBACK_LINES", "failure_diagnostics", "recover", "redeploy_in_place", "reset_for_redeploy",
           "operator_failed", "container_paused", "hold_window_clocks", "handle_disk_full", "handle_resumed",
           "handle_adopt_containers", "handle_container_started", "handle_container_exited", "handle_tick",
           "handle_kill_container_request", "handle_error_report", "operators_missing", "watch_committed",
           "stall_limit_millis"]

#: Lines of an operator's traceback kept in the application's diagnostics.
TRACEBACK_LINES = 40


def failure_diagnostics(op: PTOperator, what: str, fallback: str = "") -> str:
    """``operator <label> (<id>) <what>: <exception line>``, then the traceback (its last lines)."""
    error = (op.last_error or fallback).strip()
    text = f"operator {op.label} ({op.id}) {what}: {last_line(error) or 'no error reported'}"
    lines = error.splitlines()
    if len(lines) > 1:
        text += "\n" + "\n".join(lines[-TRACEBACK_LINES:])
    return text


# ------------------------------------------------------------ failed operators
def operator_failed(books: Books, container: PTContainer, op: PTOperator, reported_error: str, window: int,
                    fatal: bool, now: int) -> list[Instruction]:
    """An operator reported FAILED after ``window`` (with ``reported_error``, its traceback; ``fatal``:
    it raised FatalError): fail the application (fatal or deterministic), else restart it."""
    op.state = OperatorState.FAILED
    op.last_error = reported_error or op.last_error
    error = last_line(op.last_error)
    record = count_failure(books, op, error, window, now)
    note(books, now, "failed", f"operator {op.label} ({op.id}) failed after window {window_hex(window)}: {error}")
    if fatal:
        finish(books, "FAILED", failure_diagnostics(op, "failed fatally"), now)
        return maybe_finish(books)
    again = (window, error) in record["seen"]
    record["seen"].append((window, error))
    if no_space_text(op.last_error or ""):  # a full disk is transient: space may come back
        return no_space_failure(books, container, op, record, error, now)
    if again and not op.attributes.get("RETRY_DETERMINISTIC_FAILURES", books.attr("RETRY_DETERMINISTIC_FAILURES")):
        finish(books, "FAILED", failure_diagnostics(
            op, f"failed again after window {window_hex(window)} with the same error, a deterministic "
                f"failure (set RETRY_DETERMINISTIC_FAILURES: true to keep retrying)"), now)
        return maybe_finish(books)
    return recover(books, [container.id], now, f"operator {op.label} failed: {error}", kill=True, failed=op.id)


def no_space_failure(books: Books, container: PTContainer, op: PTOperator, record: dict[str, Any], error: str,
                     now: int) -> list[Instruction]:
    """An operator failed for want of space (its own write, not one of stram's, which wait in
    place): never a deterministic failure; restarted until DISK_FULL_TIMEOUT_SECS of such
    failures in a row, then the application fails."""
    limit = int(books.attr("DISK_FULL_TIMEOUT_SECS")) * 1000
    if now - record.get("no_space_last", 0) > limit:
        record["no_space_since"] = now  # a new spell (the last one ended long ago)
    record["no_space_last"] = now
    if now - record["no_space_since"] >= limit:
        finish(books, "FAILED", failure_diagnostics(
            op, f"failed for want of space for {(now - record['no_space_since']) // 1000} s "
                f"(DISK_FULL_TIMEOUT_SECS={limit // 1000})"), now)
        return maybe_finish(books)
    return recover(books, [container.id], now, f"operator {op.label} failed: {error} (waiting for space)",
                   kill=True, failed=op.id)


def handle_error_report(books: Books, ev: ErrorReport) -> list[Instruction]:
    """An operator's error, from its container (recovery follows the FAILED state in the next heartbeat)."""
    container_id, operators, msg, now = ev.container_id, ev.operators, ev.msg, ev.now
    books.errors.append({"millis": now, "container": container_id, "operators": list(operators), "msg": msg})
    note(books, now, "error", f"{container_id} {list(operators)}: {last_line(msg)}")
    for op_id in operators:
        op = books.plan.operators.get(op_id)
        if op is not None:
            op.last_error = msg
    if books.state != "RUNNING":
        error_after_end(books, container_id, list(operators), msg, now)
    return []


# ------------------------------------------------------------ space
def handle_disk_full(books: Books, ev: DiskFull) -> list[Instruction]:
    """The master's own write waited for space too long: the application fails, saying what."""
    finish(books, "FAILED", ev.diagnostics, ev.now)
    return [KillContainer(c.id, "application failed: no space left on device") for c in
            books.plan.containers.values() if c.state in ALIVE] + maybe_finish(books, force=True)


def handle_resumed(books: Books, ev: Resumed) -> list[Instruction]:
    """The master's writes waited for space and go on: heartbeats were refused meanwhile, so the
    clocks of heartbeat, start and window timeouts start again (as after a restore)."""
    for container in books.plan.containers.values():
        if container.state == ContainerState.RUNNING:
            container.last_heartbeat_millis = ev.now
        elif container.state == ContainerState.PENDING and container.launch_at:
            container.launch_at = ev.now
    hold_window_clocks(books, ev.now)
    note(books, ev.now, "resumed", ev.text)
    return []


def container_paused(books: Books, container: PTContainer, paused: str, now: int) -> None:
    """A heartbeat said whether the container's writes wait for space."""
    if paused and books.paused.get(container.id) != paused.split(";")[0]:
        note(books, now, "paused", f"{container.id} {paused}")
    if paused:
        books.paused[container.id] = paused.split(";")[0]  # what waits, without the clock
    else:
        books.paused.pop(container.id, None)


def hold_window_clocks(books: Books, now: int) -> None:
    """While writes wait for space, windows stop everywhere (backpressure): no operator is blocked."""
    for op in books.plan.operators.values():
        if op.state == OperatorState.ACTIVE and op.window_advanced_millis:
            op.window_advanced_millis = now


# ------------------------------------------------------------ containers
def handle_adopt_containers(books: Books, ev: AdoptContainers) -> list[Instruction]:
    """A new attempt: take over the containers the previous master started.

    A container is taken over only as the process its launcher recorded
    (:class:`ContainerStarted`: pid and start time); the launcher checks that the
    live process is still that one and carries the container's id, else it
    reports the container lost (it never signals that pid). Pending containers
    the launcher cannot take over are launched again.

    A launcher that takes over no process (YARN through Skein, which does not keep an
    attempt's containers: YARN stops them with it) has none of the previous attempt's
    containers left: they are lost now, all in one recovery, rather than one by one as
    their heartbeats time out (30 s by default).
    """
    instructions: list[Instruction] = []
    gone: list[str | None] = []
    for container in books.plan.containers.values():
        if container.state not in (ContainerState.PENDING, ContainerState.RUNNING):
            continue
        if ev.launcher_adopts and (container.pid or container.state == ContainerState.RUNNING):
            # a RUNNING container without a recorded start time cannot be proven: lost
            instructions.append(AdoptContainer(container.id, container.pid, container.process_started))
        elif container.state == ContainerState.PENDING:
            instructions.append(launch(books, container, ev.now))
        else:
            gone.append(container.id)
    if gone:
        instructions += recover(books, gone, ev.now, "the previous master attempt's containers "
                                "ended with it (this launcher takes over no process)")
    return instructions


def handle_container_started(books: Books, ev: ContainerStarted) -> list[Instruction]:
    """The launcher started a container's process: remember who it is (journaled)."""
    container = books.plan.containers.get(ev.container_id)
    if container is not None and container.state not in GONE:
        container.pid, container.process_started = ev.pid, ev.started
    return []


def handle_container_exited(books: Books, ev: ContainerExited) -> list[Instruction]:
    """The launcher saw a container process end."""
    container_id, exit_code, now = ev.container_id, ev.exit_code, ev.now
    container = books.plan.containers.get(container_id)
    if container is None:
        return []
    # given up on for silence, it failed on its node; released, or lost for another reason (an
    # operator's error, a kill asked for), the master stopped it
    stopped = container.state == ContainerState.RELEASED or books.state != "RUNNING" or container.kill_requested \
        or (container.state == ContainerState.LOST and not container.unresponsive)
    container_ended(books, container, ev.node, exit_code, now, stopped_by_master=stopped)
    if container.state == ContainerState.RELEASED or books.state != "RUNNING":
        container.state = ContainerState.RELEASED
        return maybe_finish(books)
    if container.state == ContainerState.LOST:
        return []
    if ev.unplaceable:
        labels = ", ".join(sorted(books.plan.operators[o].label for o in container.operators
                                  if o in books.plan.operators))
        finish(books, "FAILED", f"{ev.unplaceable}; operators {labels or '(none)'} cannot run as placed", now)
    where = f" on {ev.node}" if ev.node else ""
    return recover(books, [container_id], now, f"container {container_id} exited with code {exit_code}{where}")


def handle_kill_container_request(books: Books, ev: KillContainerRequest) -> list[Instruction]:
    """Administrative kill: the container is lost and recovered."""
    if ev.container_id not in books.plan.containers:
        raise UnknownContainer(ev.container_id)
    books.plan.containers[ev.container_id].kill_requested = True
    return [KillContainer(ev.container_id, "killed by request")]


def handle_tick(books: Books, ev: Tick) -> list[Instruction]:
    """Clock events: restart backoffs, start and heartbeat timeouts, blocked operators."""
    now = ev.now
    if books.state != "RUNNING":
        return maybe_finish(books)
    plan = books.plan
    for cid in [c for c in books.paused if plan.containers.get(c) is None
                or plan.containers[c].state not in ALIVE]:
        del books.paused[cid]
    if books.paused:
        hold_window_clocks(books, now)
    instructions: list[Instruction] = []
    for container in plan.containers.values():
        if container.state == ContainerState.WAITING and now >= container.launch_at:
            instructions.append(launch(books, container, now))
    timeout = int(books.attr("HEARTBEAT_TIMEOUT_MILLIS"))
    for container in list(plan.containers.values()):
        if container.state == ContainerState.PENDING and container.launch_at and \
                now - container.launch_at > max(2 * timeout, 60_000):
            container.unresponsive = True
            instructions += recover(books, [container.id], now,
                                    f"{container.id} did not start within {max(2 * timeout, 60_000)} ms", kill=True)
        if container.state == ContainerState.RUNNING and now - container.last_heartbeat_millis > timeout:
            container.unresponsive = True
            instructions += recover(books, [container.id], now,
                                    f"no heartbeat from {container.id} for {timeout} ms", kill=True)
    watch_nodes(books, now)
    find_blocked(books, now)
    for op in blocked_to_restart(books, now):  # restarts it, its stack in its last error
        instructions += recover(books, [op.container], now, f"operator {op.label} blocked", kill=True, failed=op.id)
    watch_committed(books, now)
    return instructions


def watch_committed(books: Books, now: int) -> None:
    """The watchdog: a RUNNING application whose committed window stays frozen is never left
    without a word. After :func:`stall_limit_millis` without a move (writes waiting for space
    aside), ``books.stalled`` names the operator that holds the committed window back (the
    one with the oldest recovery checkpoint), its window and state; it is logged once and
    shown by ``info`` (get-app-info, the console) until the window moves again."""
    window, since = books.committed_seen
    if books.committed != window or books.paused:
        books.committed_seen = (books.committed, now)
        if books.stalled:
            note(books, now, "stall", f"the committed window moves again ({window_hex(books.committed)})")
            books.stalled = ""
        return
    stalled = now - since
    if books.stalled or stalled < stall_limit_millis(books):
        return
    if not books.plan.operators:
        return
    # the one whose own newest checkpoint is oldest (recovery checkpoints also wait for downstreams)
    op = min(books.plan.operators.values(), key=lambda o: (max(o.checkpoints, default=-1), o.current_window, o.id))
    newest = window_hex(max(op.checkpoints)) if op.checkpoints else "none since it was deployed"
    books.stalled = (f"the committed window {window_hex(books.committed)} has not moved for {stalled // 1000} s: "
                     f"operator {op.label} ({op.id}) on {op.container or 'no container'} holds it back "
                     f"({op.state.value}, at window {window_hex(op.current_window)}, newest checkpoint {newest})")
    log.warning("%s: %s", books.app_id, books.stalled)
    note(books, now, "stall", books.stalled)


def stall_limit_millis(books: Books) -> int:
    """How long the committed window may stay put before the watchdog speaks: three checkpoint
    periods, and at least half a minute."""
    window_ms = int(books.attr("STREAMING_WINDOW_SIZE_MILLIS"))
    return max(30_000, 3 * int(books.attr("CHECKPOINT_WINDOW_COUNT")) * window_ms)


def operators_missing(books: Books, container: PTContainer, ops: list[PTOperator], now: int) -> list[Instruction]:
    """ACTIVE operators that ``container``'s heartbeat omits: the container no longer runs them,
    yet none reported shutting down (only a reported SHUTDOWN removes an operator, see
    :mod:`~.removal`). Each is a failure of the operator, counted toward RECOVERY_ATTEMPTS and
    logged; the container is recovered from checkpoints as for a failed operator."""
    for op in ops:
        op.state = OperatorState.FAILED
        op.last_error = (f"operator {op.label} ({op.id}) went missing from {container.id}'s heartbeat after "
                         f"window {window_hex(op.current_window)} without reporting SHUTDOWN")
        count_failure(books, op, op.last_error, op.current_window, now)
        log.warning("%s: %s", books.app_id, op.last_error)
        note(books, now, "missing", op.last_error)
    labels = ", ".join(op.label for op in ops)
    return recover(books, [container.id], now, f"operator {labels} missing from its heartbeat", kill=True,
                   failed=[op.id for op in ops])


# ------------------------------------------------------------ redeploying
def recover(books: Books, container_ids: list[str | None], now: int, reason: str,
            kill: bool = False, failed: int | list[int] | None = None) -> list[Instruction]:
    """Redeploy what lost containers held, and what depends on it, from recovery checkpoints.

    ``failed``: the operator (or operators) that failed (only their failures count toward
    RECOVERY_ATTEMPTS; without it, every operator of the lost containers counts a failure)."""
    instructions: list[Instruction] = []
    lost_ops: set[int] = set()
    plan = books.plan
    for cid in container_ids:
        container = plan.containers.get(cid or "")
        if container is None or container.state in GONE:
            continue
        if container.state == ContainerState.RUNNING and container.last_heartbeat_millis and \
                now - container.last_heartbeat_millis > 3 * heartbeat_interval_millis(books):
            # silent for three heartbeat intervals as well, whatever the reason given (an operator
            # found blocked on a node that died, before the heartbeat timeout): its end counts
            # against its node
            container.unresponsive = True
        container.state = ContainerState.LOST
        if kill:
            instructions.append(KillContainer(container.id, reason))
        lost_ops |= container.operators
        note(books, now, "lost", f"{container.id}: {reason}")
    if not lost_ops or books.state != "RUNNING":
        return instructions + maybe_finish(books)
    books.recoveries += 1
    limit = books.attr("RECOVERY_ATTEMPTS")
    for op_id in sorted(lost_ops) if failed is None else [failed] if isinstance(failed, int) else sorted(failed):
        op = plan.operators[op_id]
        op.restarts += 1
        op_limit = op.attributes.get("RECOVERY_ATTEMPTS", limit)
        if op_limit is not None and op.restarts > int(op_limit):
            finish(books, "FAILED", failure_diagnostics(
                op, f"failed {op.restarts} times (RECOVERY_ATTEMPTS={op_limit}); last error", reason), now)
            return instructions + maybe_finish(books)
    affected = affected_operators(plan, lost_ops)
    replacements: dict[str, str] = {}
    for op_id in sorted(affected):
        op = plan.operators[op_id]
        old = plan.containers[op.container]
        if old.state == ContainerState.LOST:
            new_id = replacements.get(old.id)
            if new_id is None:
                new_id = plan.new_container_id()
                plan.put_container(PTContainer(id=new_id))
                replacements[old.id] = new_id
            plan.assign(op_id, new_id)
        else:
            redeploy_in_place(books, op)
        reset_for_redeploy(books, op, affected)
    for window in [w for w, ids in books.shutdown_operators.items() if not ids]:
        books.shutdown_operators.pop(window)
    for old_id, new_id in replacements.items():
        plan.containers[old_id].operators = set()
        plan.containers[old_id].pending_deploy = set()
        new = plan.containers[new_id]
        restarts = max((plan.operators[o].restarts for o in new.operators), default=1)
        delay = restart_backoff_millis(restarts)
        if delay:
            new.state, new.launch_at = ContainerState.WAITING, now + delay
            note(books, now, "recover", f"{old_id} replaced by {new_id} in {delay} ms (restart {restarts})")
        else:
            instructions.append(launch(books, new, now))
            note(books, now, "recover", f"{old_id} replaced by {new_id}")
    note(books, now, "recover", "redeploying " + ", ".join(
        f"{plan.operators[o].label}@{window_hex(plan.operators[o].recovery_checkpoint)}" for o in sorted(affected)))
    return instructions


def redeploy_in_place(books: Books, op: PTOperator) -> None:
    """Undeploy ``op`` in its surviving container now, reset its publishers, deploy it again."""
    container = books.plan.containers[op.container or ""]
    books.undeploy[container.id].add(op.id)
    books.resets[container.id].update(f"{op.id}.{port}" for port in op.outputs)
    container.pending_deploy.add(op.id)
    touch(container)


def reset_for_redeploy(books: Books, op: PTOperator, affected: set[int]) -> None:
    """An operator about to be deployed again resumes from its recovery checkpoint."""
    op.state = OperatorState.PENDING_DEPLOY
    if op.attributes.get("PROCESSING_MODE", books.attr("PROCESSING_MODE")) == "AT_MOST_ONCE":
        # skip what was missed: resume after the newest window any upstream finished
        latest = [books.plan.operators[u].current_window for u in books.plan.upstream(op.id) if u not in affected]
        op.resume_window = max(latest, default=0) + 1 if latest else 0
    op.checkpoints = [c for c in op.checkpoints if c <= op.recovery_checkpoint]
    op.current_window = op.recovery_checkpoint
    books.totals[op.id].redeployed(op.recovery_checkpoint)  # the replayed windows count again
    op.window_advanced_millis = 0
    books.blocked.discard(op.id)  # a new incarnation: a hang of it is found anew
    books.blocked_waits.pop(op.id, None)
    if op.shutdown_window is not None:
        for ids in books.shutdown_operators.values():
            if op.id in ids:
                ids.remove(op.id)
        op.shutdown_window = None
