"""The master's decisions: heartbeats, deploys, the committed window, recovery, removal.

:class:`MasterState` is pure bookkeeping in the style of a state machine
(dask's ``WorkerState.handle_stimulus``): every change is an event, a small
frozen dataclass (:class:`Heartbeat`, :class:`ContainerExited`, :class:`Tick`,
:class:`ScaleRequest` ...), and :meth:`MasterState.handle` returns what the
event implies as :class:`Instruction` objects (launch, kill, delete
checkpoints, finish, reply to the sender) that the thin I/O layer in
:mod:`stram.master.process.master` carries out. It opens no sockets and touches no files,
so tests drive it directly with drawn timelines. An event it has no handler
for raises :class:`UnknownEvent`; it is never ignored.

Its parts: the events (:mod:`stram.master.core.events`) and instructions
(:mod:`stram.master.core.instructions`), the pure rules (:mod:`stram.master.core.rules`),
and the mixins for messages to agents (:mod:`stram.master.core.deploy`), failure
handling (:mod:`stram.master.core.recovery`) and reports (:mod:`stram.master.core.reports`).
This module holds the state itself, heartbeats, the committed window, safe
removal, repartitioning and the end of the application.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from typing import Any, Callable

from stram import wire as proto
from stram.common.attributes import default as attribute_default
from stram.common.windows import initial_window
from stram.master.core import scaling
from stram.master.core.changes import forget as forget_marks
from stram.master.core.changes import set_volatile, touch
from stram.master.core.committed import CommittedWindow
from stram.master.core.deploy import DAG_ATTRIBUTES, DeployMessages
from stram.master.core.diagnose import Diagnose
from stram.master.core.ending import Ending
from stram.master.core.events import (AdoptContainers, ContainerExited, ContainersStopped, ContainerStarted, DiskFull,
                                      ErrorReport, Heartbeat, InitContextRequest, KillApp, KillContainerRequest,
                                      MasterEvent, Note, Resumed, ScaleRequest, ScaleStatesWritten, ShutdownRequest,
                                      StackTraceRequest, Start, Tick, UnknownContainer, UnknownEvent)
from stram.master.core.instructions import (AdoptContainer, DeleteCheckpoints, Finish, Instruction, KillContainer,
                                            LaunchContainer, Reply, SplitCheckpoints, UnknownInstruction)
from stram.master.core.plan import (ContainerState, OperatorState, PhysicalPlan, PTContainer, PTOperator,
                                    affected_operators)
from stram.master.core.recovery import GONE, Recovery
from stram.master.core.reports import ALIVE, OperatorTotals, StateReports, WindowHistory, window_hex
from stram.master.core.rules import recovery_checkpoints, restart_backoff_millis
from stram.master.core.scaling import ScaleRefused, ScaleResult
from stram.master.journal import document as journal

# the events and instructions are re-exported: they are MasterState's vocabulary
__all__ = [
    "Instruction", "LaunchContainer", "AdoptContainer", "KillContainer", "DeleteCheckpoints",
    "SplitCheckpoints", "Finish", "Reply", "UnknownInstruction",
    "MasterEvent", "Start", "AdoptContainers", "ContainerStarted", "InitContextRequest", "Heartbeat", "ErrorReport",
    "ContainerExited", "Tick", "KillContainerRequest", "KillApp", "ShutdownRequest",
    "ContainersStopped", "ScaleRequest", "ScaleStatesWritten", "Note", "StackTraceRequest", "UnknownEvent",
    "MasterState", "UnknownContainer", "recovery_checkpoints", "restart_backoff_millis",
    "affected_operators",
]

log = logging.getLogger("stram.master.core.state")


@dataclass
class LogEntry:
    """One line of the application's event log (``info()["events"]``)."""

    millis: int
    kind: str
    text: str


class MasterState(DeployMessages, Recovery, Diagnose, StateReports, Ending):
    """All of the master's bookkeeping for one application.

    Parameters
    ----------
    spec:
        The validated application spec.
    app_id, app_path, token:
        Identity of the application, its directory URI and its secret.
    start_window_millis:
        Start of window index 0; whole seconds, so window ids line up.
    """

    def __init__(self, spec: Any, app_id: str, app_path: str, token: str,
                 start_window_millis: int, now: int, plan: PhysicalPlan | None = None) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_path = app_path
        self.token = token
        self.start_window_millis = start_window_millis - start_window_millis % 1000
        #: Window before the first one: "no checkpoint yet".
        self.initial_window = initial_window(self.start_window_millis)
        self.attributes = {name: spec.attribute(name) for name in DAG_ATTRIBUTES}
        self.plan = plan if plan is not None else PhysicalPlan.from_spec(  # restore brings its own plan
            spec, self.initial_window, self.attributes.get("CONTAINERS_MAX_COUNT"))
        #: The newest window no failure can make the application process again; never goes backward.
        self.committed = self.initial_window
        self.committed_window = CommittedWindow()
        #: window id -> operators that shut down in that window, awaiting safe removal.
        self.shutdown_operators: dict[int, list[int]] = {}
        self.state = "RUNNING"
        self.diagnostics = ""
        self.started_millis = now
        self.finished_millis = 0
        self.events: collections.deque[LogEntry] = collections.deque(maxlen=500)
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=100)
        self.removed: list[dict[str, Any]] = []
        #: per container: operator ids to undeploy, publishers to reset, in the next response
        self._undeploy: dict[str, set[int]] = collections.defaultdict(set)
        self._resets: dict[str, set[str]] = collections.defaultdict(set)
        self._node_requests: dict[str, list[proto.StramToNodeRequest]] = collections.defaultdict(list)
        #: operator id -> its last windows, oldest first
        self.window_history: dict[int, WindowHistory] = collections.defaultdict(WindowHistory)
        self.blocked: set[int] = set()
        #: operator id -> what it did in this master attempt (counters: never go backward)
        self.totals: dict[int, OperatorTotals] = collections.defaultdict(OperatorTotals)
        #: Containers lost or restarted and their operators redeployed, in this master attempt.
        self.recoveries = 0
        self._init_diagnose()
        #: label -> the operator's last failure (error line, window, count), for info and progress
        self.failures: dict[str, dict[str, Any]] = {}
        self.paused: dict[str, str] = {}
        self.shutdown_requested = False
        self.heartbeats = 0
        #: Master attempt (a restarted master resumes from the journal with attempt + 1).
        self.attempt = 1
        #: Finish was returned (it is returned once).
        self._finish_sent = False

    # ------------------------------------------------------------ journal
    def journal_key(self) -> tuple:
        """Changes when anything a restarted master must know has changed."""
        return (self.state, self.committed, self.shutdown_requested,
                tuple((op.id, op.recovery_checkpoint, op.state.value, op.container, op.restarts)
                      for op in self.plan.operators.values()),
                tuple((c.id, c.state, c.pid, c.process_started) for c in self.plan.containers.values()),
                tuple((w, tuple(ids)) for w, ids in sorted(self.shutdown_operators.items())))

    def snapshot(self, objects: bool = False) -> dict[str, Any]:
        """What the journal holds: enough for a new master attempt to carry on.

        A plain, JSON-ready document of :data:`stram.master.journal.document.VERSION` (see
        :mod:`stram.master.journal.document`); it shares nothing with this state. With ``objects``,
        its plan holds the operators and containers themselves (:func:`~stram.master.journal.document.plan_objects`):
        only to be encoded at once, under the master's lock.
        """
        return {"version": journal.VERSION, "app_id": self.app_id, "attempt": self.attempt,
                "start_window_millis": self.start_window_millis, "committed": self.committed,
                "plan": journal.plan_objects(self.plan) if objects else journal.plan_to_doc(self.plan),
                "shutdown_operators": [[w, list(ids)] for w, ids in sorted(self.shutdown_operators.items())],
                "state": self.state, "diagnostics": self.diagnostics,
                "started_millis": self.started_millis, "removed": [dict(r) for r in self.removed],
                "errors": [{**e, "operators": list(e["operators"])} for e in self.errors],
                "shutdown_requested": self.shutdown_requested}

    @classmethod
    def restore(cls, spec: Any, snapshot: dict[str, Any], app_path: str, token: str,
                now: int) -> "MasterState":
        """A new master attempt's state, from the previous attempt's journal (:meth:`snapshot`).

        Containers are given a heartbeat timeout to reconnect; operators that
        were being deployed are deployed again (agents ignore a duplicate).

        Raises
        ------
        stram.master.journal.document.JournalVersionError
            The document is not a journal of the version this stram reads, or does not match it.
        """
        journal.check_version(snapshot)
        try:
            state = cls(spec, snapshot["app_id"], app_path, token, int(snapshot["start_window_millis"]), now,
                        plan=journal.plan_from_doc(snapshot["plan"]))
            state.attempt = int(snapshot["attempt"]) + 1
            state.committed = int(snapshot["committed"])
            state.shutdown_operators = {int(w): [int(i) for i in ids]
                                        for w, ids in snapshot["shutdown_operators"]}
            state.state = str(snapshot["state"])
            state.diagnostics = str(snapshot["diagnostics"])
            state.started_millis = int(snapshot["started_millis"])
            state.removed = [dict(r) for r in snapshot["removed"]]
            state.errors.extend(dict(e) for e in snapshot["errors"])
            state.shutdown_requested = bool(snapshot["shutdown_requested"])
        except (KeyError, TypeError, ValueError) as exc:
            raise journal.JournalVersionError(f"the journal does not match journal version {journal.VERSION} "
                                              f"({type(exc).__name__}: {exc})") from None
        for container in state.plan.containers.values():
            container.last_heartbeat_millis = now
            container.launch_at = now
        for op in state.plan.operators.values():
            if op.state == OperatorState.DEPLOYING:
                op.state = OperatorState.PENDING_DEPLOY
                state.plan.containers[op.container].pending_deploy.add(op.id)
            op.window_advanced_millis = now if op.state == OperatorState.ACTIVE else 0
        forget_marks()  # of building the plan: kept, each heartbeat scanned them (10 ms at 20k operators)
        state._note(now, "restore", f"master attempt {state.attempt} resumed from the journal: committed "
                                    f"window {window_hex(state.committed)}, {len(state.plan.operators)} operators")
        return state

    # ------------------------------------------------------------ the one door
    def handle(self, event: MasterEvent) -> list[Instruction]:
        """The one way to change the master's state: what ``event`` implies, as instructions.

        Dispatches by the event's type to ``_handle_<kind>``. The heartbeat, init-context
        and scale events are answered with a :class:`Reply` among the instructions.

        Raises
        ------
        UnknownEvent
            No handler for this type of event (it is never ignored).
        UnknownContainer, stram.master.core.scaling.ScaleRefused
            From the handlers of the events that may be refused; nothing changed then.
        """
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise UnknownEvent(f"MasterState has no handler for {type(event).__name__}: {event!r}")
        return handler(self, event)

    # Thin wrappers for tests and tools that drive the state directly (the master
    # goes through handle(), under its lock, with the journal written before acting).
    def start(self, now: int) -> list[Instruction]:
        """``handle(Start(now))``."""
        return self.handle(Start(now))

    def heartbeat(self, hb: proto.ContainerHeartbeat, now: int
                  ) -> tuple[proto.ContainerHeartbeatResponse, list[Instruction]]:
        """``handle(Heartbeat(hb, now))``, split into the response and the other instructions."""
        instructions = self.handle(Heartbeat(hb, now))
        (response,) = [i.value for i in instructions if isinstance(i, Reply)]
        return response, [i for i in instructions if not isinstance(i, Reply)]

    def container_exited(self, container_id: str, exit_code: int | None, now: int) -> list[Instruction]:
        """``handle(ContainerExited(container_id, exit_code, now))``."""
        return self.handle(ContainerExited(container_id, exit_code, now))

    def tick(self, now: int) -> list[Instruction]:
        """``handle(Tick(now))``."""
        return self.handle(Tick(now))

    def kill(self, now: int) -> list[Instruction]:
        """``handle(KillApp(now))``."""
        return self.handle(KillApp(now))

    # ------------------------------------------------------------ helpers
    def attr(self, name: str) -> Any:
        """A DAG attribute; its default for one an older master's journal does not hold."""
        return self.attributes[name] if name in self.attributes else attribute_default(name)

    def _note(self, now: int, kind: str, text: str) -> None:
        """Add a line to the event log (from outside: the Note event)."""
        self.events.append(LogEntry(now, kind, text))
        log.info("%s: %s", kind, text)

    # ------------------------------------------------------------ startup
    def _handle_start(self, ev: Start) -> list[Instruction]:
        """Ask for every planned container."""
        self._note(ev.now, "plan", f"{len(self.plan.operators)} operators in "
                                   f"{len(self.plan.containers)} containers")
        # the committed window's first computation (over the whole plan: 0.1-0.2 s at 20,000
        # operators) here, before any container can call, not in the first container's heartbeat
        return [*self._update_committed(ev.now), *(self._launch(c, ev.now) for c in self.plan.containers.values())]

    def _launch(self, container: PTContainer, now: int) -> LaunchContainer:
        hosts = tuple(sorted({str(self.plan.operators[o].attributes.get("LOCALITY_HOST"))
                              for o in container.operators
                              if self.plan.operators[o].attributes.get("LOCALITY_HOST")}))
        container.state = ContainerState.PENDING
        container.launch_at = now
        container.pid, container.process_started = 0, 0.0  # the new process says who it is (ContainerStarted)
        return LaunchContainer(container.id, container.memory_mb or int(self.attr("CONTAINER_MEMORY_MB") or 1024),
                               container.vcores, hosts)

    def _handle_init_context_request(self, ev: InitContextRequest) -> list[Instruction]:
        return [Reply(self.init_context(ev.container_id))]

    # ------------------------------------------------------------ heartbeat
    def _handle_heartbeat(self, ev: Heartbeat) -> list[Instruction]:
        """Process one container heartbeat; the response (a :class:`Reply`) and what it implies."""
        hb, now = ev.heartbeat, ev.now
        self.heartbeats += 1
        response = proto.ContainerHeartbeatResponse(
            heartbeat_interval_millis=self.asked_interval_millis(hb.container_id, now, hb.sent_millis))
        container = self.plan.containers.get(hb.container_id)
        # a process that is not the one launched as this container (one an earlier master attempt
        # started but never recorded) must not speak for it: what it omits would leave the plan
        impostor = bool(container and container.pid and hb.jvm_name and hb.jvm_name.split("@")[0] != str(container.pid))
        if hb.ending and container is not None and not impostor:
            return self._ending_heartbeat(container, hb, now)
        if container is None or container.state in GONE or impostor:
            if container is None or impostor:
                log.warning("heartbeat from %s container %r (%s, %s): told to shut down",
                            "another process than the" if impostor else "unknown", hb.container_id,
                            hb.jvm_name, ev.peer)
            response.shutdown = True
            return [Reply(response)]
        instructions: list[Instruction] = []
        # fields are assigned only when they change: each assignment is tracked (stram.master.core.changes)
        if container.state != ContainerState.RUNNING:
            self._note(now, "container", f"{container.id} running ({hb.jvm_name})")
            container.state = ContainerState.RUNNING
        set_volatile(container, "last_heartbeat_millis", now)
        if container.process != hb.jvm_name:
            container.process = hb.jvm_name
        if hb.buffer_server_port and container.buffer_server != (hb.buffer_server_host, hb.buffer_server_port):
            container.buffer_server = (hb.buffer_server_host, hb.buffer_server_port)
            container.host = hb.buffer_server_host
        if container.memory_used_mb != hb.memory_mb_used:
            container.memory_used_mb = hb.memory_mb_used
        self._container_paused(container, hb.paused, now)
        if hb.publishers or container.publishers:
            container.publishers = {p.publisher: {"memory_bytes": p.memory_bytes, "spilled_bytes": p.spilled_bytes,
                                                  "windows": p.windows, "first_window": p.first_window,
                                                  "last_window": p.last_window,
                                                  "throttled_millis": p.throttled_millis}
                                    for p in hb.publishers}
        self._take_stack_trace(container, hb, now)
        reported = set()
        for ohb in hb.container_stats.operators:
            reported.add(ohb.node_id)
            instructions += self._process_operator(container, ohb, response, now)
        # processOperatorDeployStatus: deployed operators the heartbeat omits leave the plan
        for op_id in sorted(container.operators):
            op = self.plan.operators.get(op_id)
            if op is not None and op.state == OperatorState.ACTIVE and op_id not in reported:
                self._note(now, "remove", f"operator {op.label} ({op_id}) missing from "
                                          f"{container.id}'s heartbeat")
                self._remove_operator(op, now, reason="missing from heartbeat")
        instructions += self._update_committed(now)
        self._process_shutdown_operators(now)
        if self.state == "RUNNING" and not self.plan.operators:
            self._finish("SUCCEEDED", "all operators finished", now)
        self._fill_response(container, response)
        instructions += self._maybe_finish()
        return [Reply(response), *instructions]

    def _process_operator(self, container: PTContainer, ohb: proto.OperatorHeartbeat,
                          response: proto.ContainerHeartbeatResponse, now: int) -> list[Instruction]:
        op = self.plan.operators.get(ohb.node_id)
        if op is None or op.container != container.id:
            # an operator the plan does not place here: undeploy it
            response.undeploy_request.append(ohb.node_id)
            self._note(now, "undeploy", f"operator {ohb.node_id} reported by {container.id} "
                                        f"is not planned there")
            return []
        if op.state == OperatorState.PENDING_DEPLOY:
            return []  # a report of the incarnation being replaced (its undeploy is on the way)
        if op.state == OperatorState.SHUTDOWN and ohb.state == proto.OperatorHeartbeat.ACTIVE:
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
            self.blocked.discard(op.id)
        window_stats = ohb.window_stats
        if window_stats:
            self.window_history[op.id].record(window_stats, now, self.totals[op.id])
        if ohb.state == proto.OperatorHeartbeat.ACTIVE:
            if op.state in (OperatorState.DEPLOYING, OperatorState.PENDING_DEPLOY):
                op.window_advanced_millis = now
            if op.state != OperatorState.ACTIVE:
                op.state = OperatorState.ACTIVE
        elif ohb.state == proto.OperatorHeartbeat.SHUTDOWN and op.state != OperatorState.SHUTDOWN:
            op.state = OperatorState.SHUTDOWN
            op.shutdown_window = ohb.current_window_id
            self.shutdown_operators.setdefault(op.shutdown_window, []).append(op.id)
            self._note(now, "shutdown", f"operator {op.label} ({op.id}) shut down at window "
                                        f"{window_hex(op.shutdown_window)}; parked in shutdownOperators")
        elif ohb.state == proto.OperatorHeartbeat.FAILED and op.state != OperatorState.FAILED:
            return self._operator_failed(container, op, ohb, now)
        return []

    def _fill_response(self, container: PTContainer, response: proto.ContainerHeartbeatResponse) -> None:
        response.committed_window_id = self.committed
        if self.state != "RUNNING" or container.state == ContainerState.RELEASED:
            response.shutdown = True
            return
        self._ask_stack_trace(container, response)
        response.undeploy_request.extend(sorted(self._undeploy.pop(container.id, ())))
        response.reset_publishers.extend(sorted(self._resets.pop(container.id, ())))
        response.node_requests.extend(self._node_requests.pop(container.id, []))
        reads_itself = False
        for op_id in container.operators:
            op = self.plan.operators.get(op_id)
            if op is not None and op.kind == "INPUT" and op.inputs:  # reads its inputs itself
                reads_itself = True
                for src in op.source_ids:
                    if src in self.plan.operators:
                        response.upstream_windows[src] = self.plan.operators[src].current_window
        if reads_itself:
            for entry in self.removed:
                if entry["window"] is not None:  # removed after it shut down: its stream ended there
                    response.ended_upstreams[entry["id"]] = entry["window"]
        if container.pending_deploy:  # its operators' first report ends the deploy: not paced
            response.heartbeat_interval_millis = int(self.attr("HEARTBEAT_INTERVAL_MILLIS"))
        if container.pending_deploy and self._deployable(container):
            for op_id in sorted(container.pending_deploy):
                op = self.plan.operators[op_id]
                response.deploy_request.append(self.deploy_info(op))
                op.state = OperatorState.DEPLOYING
            container.pending_deploy = set()
        if not container.operators and container.state == ContainerState.RUNNING and self.plan.operators:
            container.state = ContainerState.RELEASED
            response.shutdown = True

    def _deployable(self, container: PTContainer) -> bool:
        """All remote upstream buffer servers known (their containers are running)."""
        for op_id in container.pending_deploy:
            for inp in self.plan.operators[op_id].inputs:
                src = self.plan.operators.get(inp.source_id)
                if src is None or src.container == container.id:
                    continue
                upstream = self.plan.containers.get(src.container or "")
                if upstream is None or upstream.state != ContainerState.RUNNING or not upstream.buffer_server \
                        or src.id in upstream.pending_deploy:
                    return False
        return True

    # ------------------------------------------------------------ committed window
    def _update_committed(self, now: int) -> list[Instruction]:
        """Recovery checkpoints and the committed window (:mod:`stram.master.core.committed`: from what
        changed, equal to :func:`~stram.master.core.rules.recovery_checkpoints` over the whole plan)."""
        return self.committed_window.update(self)

    # ------------------------------------------------------------ safe removal
    def _process_shutdown_operators(self, now: int) -> None:
        """Remove parked operators once their window is committed and downstream caught up."""
        for window in sorted(self.shutdown_operators):
            if window > self.committed:
                break
            for op_id in list(self.shutdown_operators.get(window, ())):
                if op_id not in self.shutdown_operators.get(window, ()):
                    continue  # removed already, as a downstream left without inputs
                op = self.plan.operators.get(op_id)
                if op is None:
                    self.shutdown_operators[window].remove(op_id)
                elif all(self.plan.operators[d].current_window >= window
                         for d in self.plan.downstream(op_id)):
                    self._remove_terminated_partition(op, now)
            if not self.shutdown_operators.get(window):
                self.shutdown_operators.pop(window, None)

    def _remove_terminated_partition(self, op: PTOperator, now: int) -> None:
        """Remove a shut-down partition, then downstream operators left without inputs."""
        downstream = self.plan.downstream(op.id)
        self._remove_operator(op, now, reason=f"shut down at window {window_hex(op.shutdown_window or 0)}")
        for d_id in downstream:
            d = self.plan.operators.get(d_id)
            if d is None or d.inputs:
                continue
            if d.kind == "UNIFIER" or (d.state == OperatorState.SHUTDOWN
                                       and (d.shutdown_window or 0) <= self.committed):
                self._remove_terminated_partition(d, now)

    def _remove_operator(self, op: PTOperator, now: int, reason: str) -> None:
        """removePTOperator: inputs at downstream, itself from its container group."""
        plan = self.plan
        for d_id in plan.downstream(op.id):
            d = plan.operators[d_id]
            d.inputs = [i for i in d.inputs if i.source_id != op.id]
        plan.operators.pop(op.id, None)
        for window, ids in list(self.shutdown_operators.items()):
            if op.id in ids:
                ids.remove(op.id)
            if not ids:
                self.shutdown_operators.pop(window, None)
        container = plan.containers.get(op.container or "")
        if container is not None:
            container.operators.discard(op.id)
            container.pending_deploy.discard(op.id)
            touch(container)
            if container.state in ALIVE:
                self._undeploy[container.id].add(op.id)
        self.removed.append({"id": op.id, "label": op.label, "window": op.shutdown_window,
                             "committed": self.committed, "reason": reason, "millis": now})
        self._note(now, "remove", f"removed operator {op.label} ({op.id}): {reason}; "
                                  f"committed window {window_hex(self.committed)}")

    # ------------------------------------------------------------ repartitioning
    def _handle_scale_request(self, ev: ScaleRequest) -> list[Instruction]:
        """Check the request (:func:`stram.master.core.scaling.plan_scale`, pure: it reads this state and
        builds the new plan on a copy); the new partitions' checkpoints are written next."""
        change = scaling.plan_scale(self, ev.name, ev.count)
        if change.plan is None:
            return [Reply(ScaleResult(change.name, change.old_count, change.count, changed=False))]
        return [SplitCheckpoints(change, then=ScaleStatesWritten(change, ev.now, ev.source))]

    def _handle_scale_states_written(self, ev: ScaleStatesWritten) -> list[Instruction]:
        """Install a change whose checkpoints are written; reply with what was done.

        Old operators get undeploy requests (their emptied containers are released in
        their next heartbeat), the affected operators are redeployed in place, and the
        instructions launch the new containers and delete the old partitions' checkpoints.
        """
        change, now = ev.change, ev.now
        if self.journal_key() != change.base_key:
            raise ScaleRefused(f"the application changed while repartitioning {change.name} was prepared; "
                               f"try again", transient=True)
        old_plan, self.plan = self.plan, change.plan
        deletions: list[Instruction] = []
        for rid in change.old_ids + change.old_unifiers:
            op = old_plan.operators[rid]
            container = self.plan.containers.get(op.container or "")
            if container is not None and container.state in ALIVE:
                self._undeploy[container.id].add(rid)
            self.removed.append({"id": rid, "label": op.label, "window": change.window,
                                 "committed": self.committed, "millis": now,
                                 "reason": f"repartitioned {change.name} ({change.verb})"})
            self.window_history.pop(rid, None)
            self.blocked.discard(rid)
            if op.checkpoints:
                deletions.append(DeleteCheckpoints(rid, tuple(op.checkpoints)))
        fresh = set(change.new_ids) | set(change.new_unifiers)
        for op_id in sorted(change.redeploy):
            op = self.plan.operators[op_id]
            self._redeploy_in_place(op)
            self._reset_for_redeploy(op, change.redeploy | fresh)
        launches = [self._launch(self.plan.containers[cid], now) for cid in change.launch]
        result = scaling.scale_result(change, old_plan, self.plan)
        for text in scaling.scale_messages(change, result, ev.source):
            self._note(now, "scale", text)
        return [*launches, *deletions, Reply(result)]

    # ------------------------------------------------------------ ending
    def _handle_shutdown_request(self, ev: ShutdownRequest) -> list[Instruction]:
        """Graceful end: ask every input operator to end its stream."""
        now = ev.now
        self.shutdown_requested = True
        for op in self.plan.operators.values():
            if op.kind == "INPUT" and not op.inputs and op.container:  # sources, not readers of streams
                self._node_requests[op.container].append(proto.StramToNodeRequest(
                    operator_id=op.id, request_type=proto.StramToNodeRequest.SHUTDOWN_OPERATOR))
        self._note(now, "shutdown", "shutdown requested: ending the input operators' streams")
        return []

    def _handle_kill_app(self, ev: KillApp) -> list[Instruction]:
        self._finish("KILLED", "killed by request", ev.now)
        return [KillContainer(c.id, "application killed") for c in self.plan.containers.values()
                if c.state in ALIVE] + self._maybe_finish(force=True)

    def _handle_note(self, ev: Note) -> list[Instruction]:
        self._note(ev.now, ev.kind, ev.text)
        return []

    def _finish(self, state: str, diagnostics: str, now: int) -> None:
        if self.state != "RUNNING":
            return
        self.state = state
        self.diagnostics = diagnostics
        self.finished_millis = now
        self._note(now, "finish", f"application {state}: {diagnostics}")

    def _maybe_finish(self, force: bool = False) -> list[Instruction]:
        """Once the application ended and no container is left running: Finish."""
        if self.state == "RUNNING" or self._finish_sent:
            return []
        alive = [c for c in self.plan.containers.values() if c.state in ALIVE]
        if alive and not force:
            return []
        self._finish_sent = True
        return [Finish(self.state, self.diagnostics)]

    def containers_to_stop(self) -> list[str]:
        """After the application ended: containers still running."""
        return [c.id for c in self.plan.containers.values() if c.state in ALIVE]

#: Event type -> its handler: what :meth:`MasterState.handle` knows.
_HANDLERS: dict[type[MasterEvent], Callable[[MasterState, Any], list[Instruction]]] = {
    Start: MasterState._handle_start,
    AdoptContainers: MasterState._handle_adopt_containers,
    ContainerStarted: MasterState._handle_container_started,
    InitContextRequest: MasterState._handle_init_context_request,
    Heartbeat: MasterState._handle_heartbeat,
    ErrorReport: MasterState._handle_error_report,
    ContainerExited: MasterState._handle_container_exited,
    Tick: MasterState._handle_tick,
    KillContainerRequest: MasterState._handle_kill_container_request,
    KillApp: MasterState._handle_kill_app,
    ShutdownRequest: MasterState._handle_shutdown_request,
    ContainersStopped: MasterState._handle_containers_stopped,
    ScaleRequest: MasterState._handle_scale_request,
    ScaleStatesWritten: MasterState._handle_scale_states_written,
    Note: MasterState._handle_note,
    StackTraceRequest: MasterState._handle_stack_trace_request,
    DiskFull: MasterState._handle_disk_full,
    Resumed: MasterState._handle_resumed,
}

