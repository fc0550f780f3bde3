"""How :class:`~stram.master.core.state.MasterState` handles failures: lost containers, timeouts, errors, redeploys.

A mixin of :class:`~stram.master.core.state.MasterState` (it works on the state's
plan and bookkeeping): a container that exited, stopped heartbeating or was
killed, or an operator that failed, has its operators, everything downstream
and their container-local upstream redeployed from their recovery
checkpoints, with exponential backoff (:func:`stram.master.core.rules.restart_backoff_millis`)
and the RECOVERY_ATTEMPTS limit. An operator that fails again at the same
window with the same error fails the application (a deterministic failure:
restarting cannot help) unless RETRY_DETERMINISTIC_FAILURES is set; one that
raised FatalError fails it at once. The diagnostics name the operator that
raised, its exception and traceback.
"""

from __future__ import annotations

import collections
from typing import Any

from stram import wire as proto
from stram.common.space import no_space_text
from stram.master.core.changes import touch
from stram.master.core.events import (AdoptContainers, ContainerExited, ContainerStarted, DiskFull, ErrorReport,
                                      KillContainerRequest, Resumed, Tick, UnknownContainer)
from stram.master.core.instructions import AdoptContainer, Instruction, KillContainer
from stram.master.core.plan import ContainerState, OperatorState, PTContainer, PTOperator, affected_operators
from stram.master.core.reports import ALIVE, last_line, window_hex
from stram.master.core.rules import restart_backoff_millis

__all__ = ["Recovery"]

#: Containers that will never run operators again.
GONE = (ContainerState.LOST, ContainerState.RELEASED)
#: Longest time between two scans of every operator for blocked ones (:meth:`Recovery._find_blocked`).
BLOCKED_SCAN_MILLIS = 1000
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


class Recovery:
    """Failure handling of :class:`~stram.master.core.state.MasterState` (its ``_handle_*`` for failures)."""

    plan: Any
    state: str
    failures: dict[str, dict[str, Any]]
    #: container id -> what its writes wait for (no space left), from its heartbeats
    paused: dict[str, str]
    #: When every operator was last scanned for blocked ones, and the least time until the next scan.
    _blocked_scanned: int | None = None
    _blocked_every = 0

    def _operator_failed(self, container: PTContainer, op: PTOperator, ohb: proto.OperatorHeartbeat,
                         now: int) -> list[Instruction]:
        """An operator reported FAILED: fail the application (fatal or deterministic), else restart it."""
        op.state = OperatorState.FAILED
        op.last_error = ohb.error or op.last_error
        error, window = last_line(op.last_error), ohb.current_window_id
        record = self.failures.setdefault(op.label, {"id": op.id, "count": 0, "seen": collections.deque(maxlen=20)})
        record.update(id=op.id, error=error, window=window_hex(window), millis=now, count=record["count"] + 1)
        self._note(now, "failed", f"operator {op.label} ({op.id}) failed after window {window_hex(window)}: "
                                  f"{error}")
        if ohb.fatal:
            self._finish("FAILED", failure_diagnostics(op, "failed fatally"), now)
            return self._maybe_finish()
        again = (window, error) in record["seen"]
        record["seen"].append((window, error))
        if no_space_text(op.last_error or ""):  # a full disk is transient: space may come back
            return self._no_space_failure(container, op, record, error, now)
        if again and not op.attributes.get("RETRY_DETERMINISTIC_FAILURES",
                                           self.attr("RETRY_DETERMINISTIC_FAILURES")):
            self._finish("FAILED", failure_diagnostics(
                op, f"failed again after window {window_hex(window)} with the same error, a deterministic "
                    f"failure (set RETRY_DETERMINISTIC_FAILURES: true to keep retrying)"), now)
            return self._maybe_finish()
        return self._recover([container.id], now, f"operator {op.label} failed: {error}", kill=True,
                             failed=op.id)

    def _no_space_failure(self, container: PTContainer, op: PTOperator, record: dict[str, Any], error: str,
                          now: int) -> list[Instruction]:
        """An operator failed for want of space (its own write, not one of stram's, which wait in
        place): never a deterministic failure; restarted until DISK_FULL_TIMEOUT_SECS of such
        failures in a row, then the application fails."""
        limit = int(self.attr("DISK_FULL_TIMEOUT_SECS")) * 1000
        if now - record.get("no_space_last", 0) > limit:
            record["no_space_since"] = now  # a new spell (the last one ended long ago)
        record["no_space_last"] = now
        if now - record["no_space_since"] >= limit:
            self._finish("FAILED", failure_diagnostics(
                op, f"failed for want of space for {(now - record['no_space_since']) // 1000} s "
                    f"(DISK_FULL_TIMEOUT_SECS={limit // 1000})"), now)
            return self._maybe_finish()
        return self._recover([container.id], now, f"operator {op.label} failed: {error} (waiting for space)",
                             kill=True, failed=op.id)

    def _handle_disk_full(self, ev: DiskFull) -> list[Instruction]:
        """The master's own write waited for space too long: the application fails, saying what."""
        self._finish("FAILED", ev.diagnostics, ev.now)
        return [KillContainer(c.id, "application failed: no space left on device") for c in
                self.plan.containers.values() if c.state in ALIVE] + self._maybe_finish(force=True)

    def _handle_resumed(self, ev: Resumed) -> list[Instruction]:
        """The master's writes waited for space and go on: heartbeats were refused meanwhile, so the
        clocks of heartbeat, start and window timeouts start again (as after a restore)."""
        for container in self.plan.containers.values():
            if container.state == ContainerState.RUNNING:
                container.last_heartbeat_millis = ev.now
            elif container.state == ContainerState.PENDING and container.launch_at:
                container.launch_at = ev.now
        self._hold_window_clocks(ev.now)
        self._note(ev.now, "resumed", ev.text)
        return []

    def _container_paused(self, container: PTContainer, paused: str, now: int) -> None:
        """A heartbeat said whether the container's writes wait for space."""
        if paused and self.paused.get(container.id) != paused.split(";")[0]:
            self._note(now, "paused", f"{container.id} {paused}")
        if paused:
            self.paused[container.id] = paused.split(";")[0]  # what waits, without the clock
        else:
            self.paused.pop(container.id, None)

    def _hold_window_clocks(self, now: int) -> None:
        """While writes wait for space, windows stop everywhere (backpressure): no operator is blocked."""
        for op in self.plan.operators.values():
            if op.state == OperatorState.ACTIVE and op.window_advanced_millis:
                op.window_advanced_millis = now

    def _handle_adopt_containers(self, ev: AdoptContainers) -> list[Instruction]:
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
        for container in self.plan.containers.values():
            if container.state not in (ContainerState.PENDING, ContainerState.RUNNING):
                continue
            if ev.launcher_adopts and (container.pid or container.state == ContainerState.RUNNING):
                # a RUNNING container without a recorded start time cannot be proven: lost
                instructions.append(AdoptContainer(container.id, container.pid, container.process_started))
            elif container.state == ContainerState.PENDING:
                instructions.append(self._launch(container, ev.now))  # type: ignore[attr-defined]
            else:
                gone.append(container.id)
        if gone:
            instructions += self._recover(gone, ev.now, "the previous master attempt's containers "
                                          "ended with it (this launcher takes over no process)")
        return instructions

    def _handle_container_started(self, ev: ContainerStarted) -> list[Instruction]:
        """The launcher started a container's process: remember who it is (journaled)."""
        container = self.plan.containers.get(ev.container_id)
        if container is not None and container.state not in GONE:
            container.pid, container.process_started = ev.pid, ev.started
        return []

    def _handle_container_exited(self, ev: ContainerExited) -> list[Instruction]:
        """The launcher saw a container process end."""
        container_id, exit_code, now = ev.container_id, ev.exit_code, ev.now
        container = self.plan.containers.get(container_id)
        if container is None:
            return []
        if container.state == ContainerState.RELEASED or self.state != "RUNNING":
            container.state = ContainerState.RELEASED
            return self._maybe_finish()
        if container.state == ContainerState.LOST:
            return []
        return self._recover([container_id], now, f"container {container_id} exited with code {exit_code}")

    def _handle_tick(self, ev: Tick) -> list[Instruction]:
        """Clock events: heartbeat timeouts and blocked operators."""
        now = ev.now
        if self.state != "RUNNING":
            return self._maybe_finish()
        for cid in [c for c in self.paused if self.plan.containers.get(c) is None
                    or self.plan.containers[c].state not in ALIVE]:
            del self.paused[cid]
        if self.paused:
            self._hold_window_clocks(now)
        instructions: list[Instruction] = []
        for container in self.plan.containers.values():
            if container.state == ContainerState.WAITING and now >= container.launch_at:
                instructions.append(self._launch(container, now))
        timeout = int(self.attr("HEARTBEAT_TIMEOUT_MILLIS"))
        for container in list(self.plan.containers.values()):
            if container.state == ContainerState.PENDING and container.launch_at and \
                    now - container.launch_at > max(2 * timeout, 60_000):
                instructions += self._recover([container.id], now,
                                              f"{container.id} did not start within {max(2 * timeout, 60_000)} ms",
                                              kill=True)
            if container.state == ContainerState.RUNNING and now - container.last_heartbeat_millis > timeout:
                instructions += self._recover([container.id], now,
                                              f"no heartbeat from {container.id} for {timeout} ms", kill=True)
        self._find_blocked(now)
        return instructions + self._resolve_blocked(now)  # restarts it, its stack in its last error

    def _find_blocked(self, now: int) -> None:
        """Mark the operators that finished no window for TIMEOUT_WINDOW_COUNT windows (each is
        asked for its stack).

        Every operator is looked at, so not at every tick: at most every :data:`BLOCKED_SCAN_MILLIS`,
        and at least four times within the shortest timeout seen in the last scan (a tick comes every
        0.2 s; at 20,000 operators a scan takes 8-13 ms of the master's interpreter).
        """
        last = self._blocked_scanned
        if last is not None and 0 <= now - last < self._blocked_every:
            return
        self._blocked_scanned = now
        window_ms = int(self.attr("STREAMING_WINDOW_SIZE_MILLIS"))
        default, active, blocked = self.attr("TIMEOUT_WINDOW_COUNT"), OperatorState.ACTIVE, self.blocked
        shortest = 4 * BLOCKED_SCAN_MILLIS
        for op in list(self.plan.operators.values()):  # cheap tests first
            if op.state != active or not op.window_advanced_millis or op.id in blocked:
                continue
            limit = int(op.attributes.get("TIMEOUT_WINDOW_COUNT") or default) * window_ms
            if limit < shortest:
                shortest = limit
            if now - op.window_advanced_millis > limit:
                blocked.add(op.id)
                self._operator_blocked(op, now, now - op.window_advanced_millis)  # asks for its stack
        self._blocked_every = shortest // 4

    def _handle_kill_container_request(self, ev: KillContainerRequest) -> list[Instruction]:
        """Administrative kill: the container is lost and recovered."""
        if ev.container_id not in self.plan.containers:
            raise UnknownContainer(ev.container_id)
        return [KillContainer(ev.container_id, "killed by request")]

    def _recover(self, container_ids: list[str | None], now: int, reason: str,
                 kill: bool = False, failed: int | None = None) -> list[Instruction]:
        """Redeploy what lost containers held, and what depends on it, from recovery checkpoints.

        ``failed``: the operator that raised (only its failures count toward RECOVERY_ATTEMPTS;
        without it, every operator of the lost containers counts a failure)."""
        instructions: list[Instruction] = []
        lost_ops: set[int] = set()
        for cid in container_ids:
            container = self.plan.containers.get(cid or "")
            if container is None or container.state in GONE:
                continue
            container.state = ContainerState.LOST
            if kill:
                instructions.append(KillContainer(container.id, reason))
            lost_ops |= container.operators
            self._note(now, "lost", f"{container.id}: {reason}")
        if not lost_ops or self.state != "RUNNING":
            return instructions + self._maybe_finish()
        self.recoveries += 1
        limit = self.attr("RECOVERY_ATTEMPTS")
        for op_id in sorted(lost_ops) if failed is None else [failed]:
            op = self.plan.operators[op_id]
            op.restarts += 1
            op_limit = op.attributes.get("RECOVERY_ATTEMPTS", limit)
            if op_limit is not None and op.restarts > int(op_limit):
                self._finish("FAILED", failure_diagnostics(
                    op, f"failed {op.restarts} times (RECOVERY_ATTEMPTS={op_limit}); last error", reason), now)
                return instructions + self._maybe_finish()
        affected = affected_operators(self.plan, lost_ops)
        replacements: dict[str, str] = {}
        for op_id in sorted(affected):
            op = self.plan.operators[op_id]
            old = self.plan.containers[op.container]
            if old.state == ContainerState.LOST:
                new_id = replacements.get(old.id)
                if new_id is None:
                    new_id = self.plan.new_container_id()
                    self.plan.containers[new_id] = PTContainer(id=new_id)
                    replacements[old.id] = new_id
                self.plan.assign(op_id, new_id)
            else:
                self._redeploy_in_place(op)
            self._reset_for_redeploy(op, affected)
        for window in [w for w, ids in self.shutdown_operators.items() if not ids]:
            self.shutdown_operators.pop(window)
        for old_id, new_id in replacements.items():
            self.plan.containers[old_id].operators = set()
            self.plan.containers[old_id].pending_deploy = set()
            new = self.plan.containers[new_id]
            restarts = max((self.plan.operators[o].restarts for o in new.operators), default=1)
            delay = restart_backoff_millis(restarts)
            if delay:
                new.state, new.launch_at = ContainerState.WAITING, now + delay
                self._note(now, "recover", f"{old_id} replaced by {new_id} in {delay} ms (restart {restarts})")
            else:
                instructions.append(self._launch(new, now))
                self._note(now, "recover", f"{old_id} replaced by {new_id}")
        self._note(now, "recover", "redeploying " + ", ".join(
            f"{self.plan.operators[o].label}@{window_hex(self.plan.operators[o].recovery_checkpoint)}" for o in sorted(affected)))
        return instructions

    def _redeploy_in_place(self, op: PTOperator) -> None:
        """Undeploy ``op`` in its surviving container now, reset its publishers, deploy it again."""
        container = self.plan.containers[op.container or ""]
        self._undeploy[container.id].add(op.id)
        self._resets[container.id].update(f"{op.id}.{port}" for port in op.outputs)
        container.pending_deploy.add(op.id)
        touch(container)

    def _reset_for_redeploy(self, op: PTOperator, affected: set[int]) -> None:
        """An operator about to be deployed again resumes from its recovery checkpoint."""
        op.state = OperatorState.PENDING_DEPLOY
        if op.attributes.get("PROCESSING_MODE", self.attr("PROCESSING_MODE")) == "AT_MOST_ONCE":
            # skip what was missed: resume after the newest window any upstream finished
            latest = [self.plan.operators[u].current_window for u in self.plan.upstream(op.id)
                      if u not in affected]
            op.resume_window = max(latest, default=0) + 1 if latest else 0
        op.checkpoints = [c for c in op.checkpoints if c <= op.recovery_checkpoint]
        op.current_window = op.recovery_checkpoint
        self.totals[op.id].redeployed(op.recovery_checkpoint)  # the replayed windows count again
        op.window_advanced_millis = 0
        if op.shutdown_window is not None:
            for ids in self.shutdown_operators.values():
                if op.id in ids:
                    ids.remove(op.id)
            op.shutdown_window = None

    def _handle_error_report(self, ev: ErrorReport) -> list[Instruction]:
        container_id, operators, msg, now = ev.container_id, ev.operators, ev.msg, ev.now
        self.errors.append({"millis": now, "container": container_id, "operators": list(operators), "msg": msg})
        self._note(now, "error", f"{container_id} {list(operators)}: {last_line(msg)}")
        for op_id in operators:
            op = self.plan.operators.get(op_id)
            if op is not None:
                op.last_error = msg
        if self.state != "RUNNING":
            self._error_after_end(container_id, list(operators), msg, now)
        return []  # recovery follows the FAILED state in the next heartbeat
