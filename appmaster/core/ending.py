"""How :class:`~stram.master.core.state.MasterState` ends an application: containers still ending operators.

Once the application ends, every container gets ``shutdown`` in its heartbeat
response (with the final committed window) and undeploys its operators. An
output's teardown makes its last committed windows final: KafkaOutput, for
one, publishes them once its broker answers again. Meanwhile the agent
heartbeats ``ending`` (the operators still ending), and the master waits for
it as long as it does, up to END_TIMEOUT_SECS
(:meth:`stram.master.process.master.AppMaster._wait_for_containers`), instead of stopping it
after a fixed grace.

A reader who sees SUCCEEDED must find the whole output, so a SUCCEEDED
application ends FAILED, saying why, when an operator's teardown fails after
the end (the agent reports it before it exits) or when a container had to be
stopped while it was still ending operators.
"""

from __future__ import annotations

from typing import Any

from stram import wire as proto
from stram.master.core.events import ContainersStopped
from stram.master.core.instructions import Instruction, Reply
from stram.master.core.plan import ContainerState, PTContainer
from stram.master.core.reports import ALIVE, last_line

__all__ = ["Ending"]


class Ending:
    """End-of-application handling of :class:`~stram.master.core.state.MasterState`."""

    plan: Any
    state: str
    diagnostics: str
    committed: int
    removed: list[dict[str, Any]]
    _finish_sent: bool

    def _ending_heartbeat(self, container: PTContainer, hb: proto.ContainerHeartbeat, now: int) -> list[Instruction]:
        """A heartbeat of a container that undeploys its operators: alive, still ending ``hb.ending``."""
        ending = list(hb.ending)
        if ending != container.ending:
            self._note(now, "ending", f"{container.id} still ends {', '.join(ending)}")
        container.ending = ending
        container.last_heartbeat_millis = now
        return [Reply(proto.ContainerHeartbeatResponse(shutdown=True, committed_window_id=self.committed))]

    def _fail_at_end(self, diagnostics: str, now: int) -> None:
        """A SUCCEEDED application whose end went wrong before its final state was sent: FAILED."""
        if self.state != "SUCCEEDED" or self._finish_sent:
            return
        self.state = "FAILED"
        self.diagnostics = diagnostics
        self.finished_millis = now
        self._note(now, "finish", f"application FAILED: {diagnostics}")

    def _error_after_end(self, container_id: str, operators: list[int], msg: str, now: int) -> None:
        """An operator's teardown (or last ``committed``) failed after the application ended."""
        labels = {r["id"]: r["label"] for r in self.removed}
        labels.update((op.id, op.label) for op in self.plan.operators.values())
        named = ", ".join(labels.get(o, str(o)) for o in operators) or "an operator"
        self._fail_at_end(f"the application ended, but {named} in {container_id} "
                          f"failed while ending, so its output may be incomplete: {last_line(msg)}", now)

    def _handle_containers_stopped(self, ev: ContainersStopped) -> list[Instruction]:
        """After the end: the launcher stopped what was left; Finish (once)."""
        still = [c for c in (self.plan.containers.get(cid) for cid in ev.stopped) if c is not None and c.ending]
        if still:
            self._fail_at_end(f"the application ended, but container {still[0].id} was stopped while still "
                              f"ending {', '.join(still[0].ending)} (END_TIMEOUT_SECS="
                              f"{self.attr('END_TIMEOUT_SECS')}): its last committed windows may not be final", ev.now)
        for container in self.plan.containers.values():
            if container.state in ALIVE:
                container.state = ContainerState.RELEASED
        return self._maybe_finish(force=True)

