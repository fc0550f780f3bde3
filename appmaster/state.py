"""The master's decisions: heartbeats, deploys, the committed window, recovery, removal.

:class:`MasterState` is pure bookkeeping in the style of a state machine
(dask's ``WorkerState.handle_stimulus``): every change is an event, a small
frozen dataclass (:class:`Heartbeat`, :class:`ContainerExited`, :class:`Tick`,
:class:`ScaleRequest` ...), and :meth:`MasterState.handle` returns what the
event implies as :class:`Instruction` objects (launch, kill, delete
checkpoints, finish, reply to the sender) that the thin I/O layer in
:mod:`appmaster.master` carries out. It opens no sockets and touches no files,
so tests drive it directly with drawn timelines. An event it has no handler
for raises :class:`UnknownEvent`; it is never ignored.
"""

from __future__ import annotations

import collections
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

import proto
from appmaster import journal, scaling
from appmaster.plan import (ContainerState, OperatorState, PhysicalPlan, PTContainer, PTOperator,
                            affected_operators)
from appmaster.scaling import ScaleRefused, ScaleResult

__all__ = [
    # instructions
    "Instruction", "LaunchContainer", "AdoptContainer", "KillContainer", "DeleteCheckpoints",
    "SplitCheckpoints", "Finish", "Reply", "UnknownInstruction",
    # events
    "MasterEvent", "Start", "AdoptContainers", "InitContextRequest", "Heartbeat", "ErrorReport",
    "ContainerExited", "Tick", "KillContainerRequest", "KillApp", "ShutdownRequest",
    "ContainersStopped", "ScaleRequest", "ScaleStatesWritten", "Note", "UnknownEvent",
    # the state
    "MasterState", "UnknownContainer", "recovery_checkpoints", "restart_backoff_millis",
    "affected_operators",
]

log = logging.getLogger("appmaster.state")

_LOCALITY = {"THREAD_LOCAL": proto.THREAD_LOCAL, "CONTAINER_LOCAL": proto.CONTAINER_LOCAL}
_OP_TYPE = proto.OperatorDeployInfo.OperatorType
#: Containers with a process the master asked for and may still have to stop.
_ALIVE = (ContainerState.PENDING, ContainerState.RUNNING)
#: Containers that will never run operators again.
_GONE = (ContainerState.LOST, ContainerState.RELEASED)


# ---------------------------------------------------------------- instructions

@dataclass(frozen=True)
class Instruction:
    """Something the I/O layer must do."""


@dataclass(frozen=True)
class LaunchContainer(Instruction):
    """Ask the launcher for a container process."""

    container_id: str
    memory_mb: int
    vcores: int
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdoptContainer(Instruction):
    """Take over a container process the previous master attempt started."""

    container_id: str
    pid: int


@dataclass(frozen=True)
class KillContainer(Instruction):
    container_id: str
    reason: str = ""


@dataclass(frozen=True)
class DeleteCheckpoints(Instruction):
    operator_id: int
    windows: tuple[int, ...]


@dataclass(frozen=True)
class SplitCheckpoints(Instruction):
    """Read the checkpoints ``change.reads`` names, split them with
    :func:`appmaster.scaling.split_states` and write the new partitions' checkpoints;
    then the state goes on with ``then``.

    The state waits for these files (a new plan must not be installed, or journaled,
    before its checkpoints exist): the dispatcher carries this out at once, under its
    lock, and hands ``then`` back to :meth:`MasterState.handle`. A failure refuses
    the change (:class:`appmaster.scaling.ScaleRefused`); nothing has changed then.
    """

    change: Any  #: an :class:`appmaster.scaling.ScaleChange`
    then: "MasterEvent"


@dataclass(frozen=True)
class Finish(Instruction):
    state: str  #: SUCCEEDED, FAILED or KILLED
    diagnostics: str = ""


@dataclass(frozen=True)
class Reply(Instruction):
    """The answer to the event's sender: a heartbeat response, an init context, a scale result.

    Carried out after the journal is written, like every other instruction.
    """

    value: Any


class UnknownInstruction(TypeError):
    """An instruction the I/O layer has no action for (it is never silently dropped)."""


# ---------------------------------------------------------------- events

@dataclass(frozen=True)
class MasterEvent:
    """Something that happened to the application; :meth:`MasterState.handle` decides what follows.

    ``now`` fields are wall-clock milliseconds, passed in so tests choose the clock.
    """


@dataclass(frozen=True)
class Start(MasterEvent):
    """The first master attempt starts: ask for every planned container."""

    now: int


@dataclass(frozen=True)
class AdoptContainers(MasterEvent):
    """A later master attempt starts: take over the containers the previous attempt started."""

    now: int
    #: The launcher can take over a running process by its pid (else only pending ones are relaunched).
    launcher_adopts: bool


@dataclass(frozen=True)
class InitContextRequest(MasterEvent):
    """A container agent asks for its init context (replied; raises :class:`UnknownContainer`)."""

    container_id: str


@dataclass(frozen=True)
class Heartbeat(MasterEvent):
    """A container heartbeat (replied with the heartbeat response)."""

    heartbeat: proto.ContainerHeartbeat
    now: int
    #: Where the call came from, for log lines.
    peer: str = ""


@dataclass(frozen=True)
class ErrorReport(MasterEvent):
    """A container reports an operator error (recovery follows the FAILED state it heartbeats)."""

    container_id: str
    operators: tuple[int, ...]
    msg: str
    now: int


@dataclass(frozen=True)
class ContainerExited(MasterEvent):
    """The launcher saw a container process end."""

    container_id: str
    exit_code: int | None
    now: int


@dataclass(frozen=True)
class Tick(MasterEvent):
    """The clock: restart backoffs, heartbeat and start timeouts, blocked operators."""

    now: int


@dataclass(frozen=True)
class KillContainerRequest(MasterEvent):
    """Administrative kill of one container (raises :class:`UnknownContainer`)."""

    container_id: str
    now: int


@dataclass(frozen=True)
class KillApp(MasterEvent):
    """Kill the application: every container stopped, state KILLED."""

    now: int


@dataclass(frozen=True)
class ShutdownRequest(MasterEvent):
    """Graceful end: the input operators end their streams."""

    now: int


@dataclass(frozen=True)
class ContainersStopped(MasterEvent):
    """After the end, the launcher stopped every container still running."""

    now: int


@dataclass(frozen=True)
class ScaleRequest(MasterEvent):
    """Give logical operator ``name`` ``count`` partitions (raises
    :class:`appmaster.scaling.ScaleRefused`; replied with a :class:`ScaleResult`)."""

    name: str
    count: int
    now: int
    #: Who asked: "request" (the admin API) or "stats listener".
    source: str = "request"


@dataclass(frozen=True)
class ScaleStatesWritten(MasterEvent):
    """The checkpoints a :class:`SplitCheckpoints` asked for are written: install the change."""

    change: Any  #: an :class:`appmaster.scaling.ScaleChange`
    now: int
    source: str = "request"


@dataclass(frozen=True)
class Note(MasterEvent):
    """Something for the event log (what the master refused, a stats listener's complaint)."""

    now: int
    kind: str
    text: str


class UnknownEvent(TypeError):
    """An event :meth:`MasterState.handle` has no handler for (it is never silently dropped)."""


# ---------------------------------------------------------------- pure rules

def recovery_checkpoints(plan: PhysicalPlan, initial: int) -> dict[int, int]:
    """Each operator's recovery checkpoint (DESIGN: "Checkpoints and the committed window").

    Walking downstream-first, an operator's recovery checkpoint is its newest
    checkpoint not after the minimum recovery checkpoint of its downstream
    operators; operators joined by streams that stay inside one container
    share one common checkpoint. Operators with no usable checkpoint get
    ``initial`` (start from scratch).
    """
    ops = plan.operators
    groups: dict[int, frozenset[int]] = {}
    for op_id in ops:
        if op_id not in groups:
            group = frozenset(plan.inline_group(op_id))
            for member in group:
                groups[member] = group
    downstream = {op_id: plan.downstream(op_id) for op_id in ops}

    def ended(m: int) -> int | None:
        """The window a shut-down operator ended at (its state no longer changes after it)."""
        op = ops[m]
        return op.shutdown_window if op.state == OperatorState.SHUTDOWN else None

    def acceptable(c: int, m: int) -> bool:
        w = ended(m)
        return c in ops[m].checkpoints or (w is not None and c >= w and w in ops[m].checkpoints)

    group_value: dict[frozenset[int], int] = {}
    for group in set(groups.values()):
        candidates = {c for m in group for c in ops[m].checkpoints}
        group_value[group] = max((c for c in candidates if all(acceptable(c, m) for m in group)),
                                 default=initial)

    def member_value(m: int) -> int:
        value = group_value[groups[m]]
        w = ended(m)
        return min(value, w) if w is not None and value != initial else value

    changed = True
    while changed:
        changed = False
        for group in set(groups.values()):
            limit = min((member_value(d) for m in group for d in downstream[m] if d not in group),
                        default=None)
            candidates = {c for m in group for c in ops[m].checkpoints}
            value = max((c for c in candidates if (limit is None or c <= limit)
                         and all(acceptable(c, m) for m in group)), default=initial)
            value = min(value, group_value[group])
            if value != group_value[group]:
                group_value[group] = value
                changed = True
    return {op_id: member_value(op_id) for op_id in ops}


def restart_backoff_millis(restarts: int) -> int:
    """Delay before relaunching after the n-th restart: none for the first, then doubling to 30 s."""
    if restarts <= 1:
        return 0
    return min(250 * 2 ** (restarts - 2), 30_000)


# ---------------------------------------------------------------- state

@dataclass
class LogEntry:
    """One line of the application's event log (``info()["events"]``)."""

    millis: int
    kind: str
    text: str


class UnknownContainer(Exception):
    """A container id the plan does not know (or has released)."""


class MasterState:
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
                 start_window_millis: int, now: int) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_path = app_path
        self.token = token
        self.start_window_millis = start_window_millis - start_window_millis % 1000
        #: Window before the first one: "no checkpoint yet".
        self.initial_window = ((self.start_window_millis // 1000) << 32) - 1
        self.attributes = {name: spec.attribute(name) for name in _DAG_ATTRIBUTES}
        self.plan = PhysicalPlan.from_spec(spec, self.initial_window,
                                           self.attributes.get("CONTAINERS_MAX_COUNT"))
        #: The newest window no failure can make the application process again; never goes backward.
        self.committed = self.initial_window
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
        #: op id -> recent (window, tuples in, tuples out, end millis)
        self.window_history: dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=20))
        self.blocked: set[int] = set()
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
                tuple((c.id, c.state) for c in self.plan.containers.values()),
                tuple((w, tuple(ids)) for w, ids in sorted(self.shutdown_operators.items())))

    def snapshot(self) -> dict[str, Any]:
        """What the journal holds: enough for a new master attempt to carry on.

        A plain, JSON-ready document of :data:`appmaster.journal.VERSION` (see
        :mod:`appmaster.journal`); it shares nothing with this state.
        """
        return {"version": journal.VERSION, "app_id": self.app_id, "attempt": self.attempt,
                "start_window_millis": self.start_window_millis, "committed": self.committed,
                "plan": journal.plan_to_doc(self.plan),
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
        appmaster.journal.JournalVersionError
            The document is not a journal of the version this stram reads, or does not match it.
        """
        journal.check_version(snapshot)
        try:
            state = cls(spec, snapshot["app_id"], app_path, token, int(snapshot["start_window_millis"]), now)
            state.attempt = int(snapshot["attempt"]) + 1
            state.plan = journal.plan_from_doc(snapshot["plan"])
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
        state._note(now, "restore", f"master attempt {state.attempt} resumed from the journal: committed "
                                    f"window {_w(state.committed)}, {len(state.plan.operators)} operators")
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
        UnknownContainer, appmaster.scaling.ScaleRefused
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
        return self.attributes.get(name)

    def _note(self, now: int, kind: str, text: str) -> None:
        """Add a line to the event log (from outside: the Note event)."""
        self.events.append(LogEntry(now, kind, text))
        log.info("%s: %s", kind, text)

    # ------------------------------------------------------------ startup
    def _handle_start(self, ev: Start) -> list[Instruction]:
        """Ask for every planned container."""
        self._note(ev.now, "plan", f"{len(self.plan.operators)} operators in "
                                   f"{len(self.plan.containers)} containers")
        return [self._launch(c, ev.now) for c in self.plan.containers.values()]

    def _handle_adopt_containers(self, ev: AdoptContainers) -> list[Instruction]:
        """A new attempt: take over the containers the previous master started (by the pid
        in their process name), relaunch the pending ones the launcher cannot take over."""
        instructions: list[Instruction] = []
        for container in self.plan.containers.values():
            if container.state not in _ALIVE:
                continue
            pid = container.process.split("@", 1)[0]
            if ev.launcher_adopts and pid.isdigit():
                instructions.append(AdoptContainer(container.id, int(pid)))
            elif container.state == ContainerState.PENDING:
                instructions.append(self._launch(container, ev.now))
        return instructions

    def _launch(self, container: PTContainer, now: int) -> LaunchContainer:
        hosts = tuple(sorted({str(self.plan.operators[o].attributes.get("LOCALITY_HOST"))
                              for o in container.operators
                              if self.plan.operators[o].attributes.get("LOCALITY_HOST")}))
        container.state = ContainerState.PENDING
        container.launch_at = now
        return LaunchContainer(container.id, container.memory_mb or int(self.attr("CONTAINER_MEMORY_MB") or 1024),
                               container.vcores, hosts)

    def _handle_init_context_request(self, ev: InitContextRequest) -> list[Instruction]:
        return [Reply(self.init_context(ev.container_id))]

    def init_context(self, container_id: str) -> proto.StreamingContainerContext:
        """A container's init context (a query: changes nothing).

        Raises
        ------
        UnknownContainer
            The plan does not know the container, or it was lost or released.
        """
        container = self.plan.containers.get(container_id)
        if container is None or container.state in _GONE:
            raise UnknownContainer(container_id)
        ctx = proto.StreamingContainerContext(
            container_id=container_id, start_window_millis=self.start_window_millis,
            heartbeat_interval_millis=int(self.attr("HEARTBEAT_INTERVAL_MILLIS")),
            streaming_window_size_millis=int(self.attr("STREAMING_WINDOW_SIZE_MILLIS")),
            checkpoint_window_count=int(self.attr("CHECKPOINT_WINDOW_COUNT")),
            deploy_buffer_server=True, app_id=self.app_id, app_name=self.spec.name,
            app_path=self.app_path, buffer_server_token=self.token.encode())
        for name, value in self.attributes.items():
            ctx.attributes[name] = json.dumps(value)
        return ctx

    # ------------------------------------------------------------ heartbeat
    def _handle_heartbeat(self, ev: Heartbeat) -> list[Instruction]:
        """Process one container heartbeat; the response (a :class:`Reply`) and what it implies."""
        hb, now = ev.heartbeat, ev.now
        self.heartbeats += 1
        response = proto.ContainerHeartbeatResponse(
            heartbeat_interval_millis=int(self.attr("HEARTBEAT_INTERVAL_MILLIS")))
        container = self.plan.containers.get(hb.container_id)
        if container is None or container.state in _GONE:
            if container is None:
                log.warning("heartbeat from unknown container %r (%s): told to shut down",
                            hb.container_id, ev.peer)
            response.shutdown = True
            return [Reply(response)]
        instructions: list[Instruction] = []
        if container.state != ContainerState.RUNNING:
            self._note(now, "container", f"{container.id} running ({hb.jvm_name})")
        container.state = ContainerState.RUNNING
        container.last_heartbeat_millis = now
        container.process = hb.jvm_name
        if hb.buffer_server_port:
            container.buffer_server = (hb.buffer_server_host, hb.buffer_server_port)
            container.host = hb.buffer_server_host
        container.memory_used_mb = hb.memory_mb_used
        container.publishers = {p.publisher: {"memory_bytes": p.memory_bytes, "spilled_bytes": p.spilled_bytes,
                                              "windows": p.windows, "first_window": p.first_window,
                                              "last_window": p.last_window}
                                for p in hb.publishers}
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
        for saved in ohb.saved_checkpoints:
            if saved not in op.checkpoints and saved > op.recovery_checkpoint:
                op.checkpoints.append(saved)
        op.checkpoints.sort()
        if ohb.current_window_id > op.current_window:
            op.current_window = ohb.current_window_id
            op.window_advanced_millis = now
            self.blocked.discard(op.id)
        history = self.window_history[op.id]
        for ws in ohb.window_stats:
            history.append((ws.window_id, sum(p.tuple_count for p in ws.input_ports),
                            sum(p.tuple_count for p in ws.output_ports),
                            max((p.end_window_timestamp for p in list(ws.output_ports) + list(ws.input_ports)), default=now),
                            ws.cpu_time_used, _decode_metrics(ws.metrics)))
        if ohb.state == proto.OperatorHeartbeat.ACTIVE:
            if op.state in (OperatorState.DEPLOYING, OperatorState.PENDING_DEPLOY):
                op.window_advanced_millis = now
            op.state = OperatorState.ACTIVE
        elif ohb.state == proto.OperatorHeartbeat.SHUTDOWN and op.state != OperatorState.SHUTDOWN:
            op.state = OperatorState.SHUTDOWN
            op.shutdown_window = ohb.current_window_id
            self.shutdown_operators.setdefault(op.shutdown_window, []).append(op.id)
            self._note(now, "shutdown", f"operator {op.label} ({op.id}) shut down at window "
                                        f"{_w(op.shutdown_window)}; parked in shutdownOperators")
        elif ohb.state == proto.OperatorHeartbeat.FAILED and op.state != OperatorState.FAILED:
            op.state = OperatorState.FAILED
            op.last_error = ohb.error or op.last_error
            self._note(now, "failed", f"operator {op.label} ({op.id}) failed: {_last_line(op.last_error)}")
            if ohb.fatal:
                self._finish("FAILED", f"operator {op.label} ({op.id}) failed fatally: "
                                       f"{_last_line(op.last_error)}", now)
                return self._maybe_finish()
            return self._recover([container.id], now, f"operator {op.label} failed", kill=True)
        return []

    def _fill_response(self, container: PTContainer, response: proto.ContainerHeartbeatResponse) -> None:
        response.committed_window_id = self.committed
        if self.state != "RUNNING" or container.state == ContainerState.RELEASED:
            response.shutdown = True
            return
        response.undeploy_request.extend(sorted(self._undeploy.pop(container.id, ())))
        response.reset_publishers.extend(sorted(self._resets.pop(container.id, ())))
        response.node_requests.extend(self._node_requests.pop(container.id, []))
        for op_id in container.operators:
            op = self.plan.operators.get(op_id)
            if op is not None and op.kind == "INPUT" and op.inputs:  # reads its inputs itself
                for src in op.source_ids:
                    if src in self.plan.operators:
                        response.upstream_windows[src] = self.plan.operators[src].current_window
        if container.pending_deploy and self._deployable(container):
            for op_id in sorted(container.pending_deploy):
                op = self.plan.operators[op_id]
                response.deploy_request.append(self.deploy_info(op))
                op.state = OperatorState.DEPLOYING
            container.pending_deploy.clear()
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

    def deploy_info(self, op: PTOperator) -> proto.OperatorDeployInfo:
        """The deploy request for one operator (its inputs' sources must be placed)."""
        plan = self.plan
        op_type = {"INPUT": _OP_TYPE.Value("INPUT"), "GENERIC": _OP_TYPE.Value("GENERIC"),
                   "UNIFIER": _OP_TYPE.Value("UNIFIER"), "OIO": _OP_TYPE.Value("OIO")}[op.kind]
        info = proto.OperatorDeployInfo(id=op.id, type=op_type, name=op.name, class_name=op.class_name,
                                        partition_index=op.partition_index,
                                        partition_count=op.partition_count)
        info.checkpoint.window_id = op.recovery_checkpoint
        for k, v in op.properties.items():
            info.properties[k] = json.dumps(v)
        for k, v in op.attributes.items():
            info.context_attributes[k] = json.dumps(v)
        if op.resume_window > op.recovery_checkpoint + 1:
            info.context_attributes["RESUME_FROM_WINDOW"] = json.dumps(op.resume_window)
        token = self.token.encode()
        for inp in op.inputs:
            src = plan.operators[inp.source_id]
            d = info.inputs.add(port_name=inp.port, declared_stream_id=inp.stream,
                                source_node_id=inp.source_id, source_port_name=inp.source_port)
            d.stream_codecs[0] = inp.codec
            if src.container == op.container:
                d.locality = _LOCALITY["THREAD_LOCAL" if inp.locality == "THREAD_LOCAL" and op.kind == "OIO"
                                       else "CONTAINER_LOCAL"]
            else:
                host, port = plan.containers[src.container].buffer_server or ("", 0)
                d.buffer_server_host, d.buffer_server_port, d.buffer_server_token = host, port, token
                d.partition_mask = inp.partition_mask
                d.partition_keys.extend(inp.partition_keys)
        for port, stream in op.outputs.items():
            subscribers = [(d, i) for d in plan.downstream(op.id)
                           for i in plan.operators[d].inputs if i.source_id == op.id and i.source_port == port]
            remote = any(plan.operators[d].container != op.container for d, _ in subscribers)
            tag_mask = plan.output_mask(op.id, port)
            op.publisher_masks[port] = tag_mask  # what the running publisher tags with (scaling reads it)
            out = info.outputs.add(port_name=port, declared_stream_id=stream, remote=remote,
                                   partition_mask=tag_mask)
            if remote:
                host, bport = plan.containers[op.container].buffer_server or ("", 0)
                out.buffer_server_host, out.buffer_server_port, out.buffer_server_token = host, bport, token
            out.stream_codecs[0] = subscribers[0][1].codec if subscribers else "pickle"
        return info

    # ------------------------------------------------------------ committed window
    def _update_committed(self, now: int) -> list[Instruction]:
        if not self.plan.operators:
            return []
        rec = recovery_checkpoints(self.plan, self.initial_window)
        instructions: list[Instruction] = []
        for op_id, window in rec.items():
            op = self.plan.operators[op_id]
            if window > op.recovery_checkpoint:
                op.recovery_checkpoint = window
            old = tuple(c for c in op.checkpoints if c < op.recovery_checkpoint)
            if old:
                op.checkpoints = [c for c in op.checkpoints if c >= op.recovery_checkpoint]
                instructions.append(DeleteCheckpoints(op_id, old))
        committed = min(op.recovery_checkpoint for op in self.plan.operators.values())
        if committed > self.committed:
            self.committed = committed
        return instructions

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
        self._remove_operator(op, now, reason=f"shut down at window {_w(op.shutdown_window or 0)}")
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
            if container.state in _ALIVE:
                self._undeploy[container.id].add(op.id)
        self.removed.append({"id": op.id, "label": op.label, "window": op.shutdown_window,
                             "committed": self.committed, "reason": reason, "millis": now})
        self._note(now, "remove", f"removed operator {op.label} ({op.id}): {reason}; "
                                  f"committed window {_w(self.committed)}")

    # ------------------------------------------------------------ failures
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
        window_ms = int(self.attr("STREAMING_WINDOW_SIZE_MILLIS"))
        for op in list(self.plan.operators.values()):
            limit = int(op.attributes.get("TIMEOUT_WINDOW_COUNT") or self.attr("TIMEOUT_WINDOW_COUNT")) * window_ms
            if op.state == OperatorState.ACTIVE and op.window_advanced_millis \
                    and now - op.window_advanced_millis > limit and op.id not in self.blocked:
                self.blocked.add(op.id)
                self._note(now, "blocked", f"operator {op.label} ({op.id}) has not finished a window "
                                           f"for {now - op.window_advanced_millis} ms; restarting its container")
                instructions += self._recover([op.container], now, f"operator {op.label} blocked", kill=True)
        return instructions

    def _handle_kill_container_request(self, ev: KillContainerRequest) -> list[Instruction]:
        """Administrative kill: the container is lost and recovered."""
        if ev.container_id not in self.plan.containers:
            raise UnknownContainer(ev.container_id)
        return [KillContainer(ev.container_id, "killed by request")]

    def _recover(self, container_ids: list[str | None], now: int, reason: str,
                 kill: bool = False) -> list[Instruction]:
        """Redeploy what lost containers held, and what depends on it, from recovery checkpoints."""
        instructions: list[Instruction] = []
        lost_ops: set[int] = set()
        for cid in container_ids:
            container = self.plan.containers.get(cid or "")
            if container is None or container.state in _GONE:
                continue
            container.state = ContainerState.LOST
            if kill:
                instructions.append(KillContainer(container.id, reason))
            lost_ops |= container.operators
            self._note(now, "lost", f"{container.id}: {reason}")
        if not lost_ops or self.state != "RUNNING":
            return instructions + self._maybe_finish()
        limit = self.attr("RECOVERY_ATTEMPTS")
        for op_id in sorted(lost_ops):
            op = self.plan.operators[op_id]
            op.restarts += 1
            op_limit = op.attributes.get("RECOVERY_ATTEMPTS", limit)
            if op_limit is not None and op.restarts > int(op_limit):
                self._finish("FAILED", f"operator {op.label} ({op.id}) failed {op.restarts} times "
                                       f"(RECOVERY_ATTEMPTS={op_limit}); last error: "
                                       f"{op.last_error or reason}", now)
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
            self.plan.containers[old_id].operators.clear()
            self.plan.containers[old_id].pending_deploy.clear()
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
            f"{self.plan.operators[o].label}@{_w(self.plan.operators[o].recovery_checkpoint)}" for o in sorted(affected)))
        return instructions

    def _redeploy_in_place(self, op: PTOperator) -> None:
        """Undeploy ``op`` in its surviving container now, reset its publishers, deploy it again."""
        container = self.plan.containers[op.container or ""]
        self._undeploy[container.id].add(op.id)
        self._resets[container.id].update(f"{op.id}.{port}" for port in op.outputs)
        container.pending_deploy.add(op.id)

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
        op.window_advanced_millis = 0
        if op.shutdown_window is not None:
            for ids in self.shutdown_operators.values():
                if op.id in ids:
                    ids.remove(op.id)
            op.shutdown_window = None

    def _handle_error_report(self, ev: ErrorReport) -> list[Instruction]:
        container_id, operators, msg, now = ev.container_id, ev.operators, ev.msg, ev.now
        self.errors.append({"millis": now, "container": container_id, "operators": list(operators), "msg": msg})
        self._note(now, "error", f"{container_id} {list(operators)}: {_last_line(msg)}")
        for op_id in operators:
            op = self.plan.operators.get(op_id)
            if op is not None:
                op.last_error = msg
        return []  # recovery follows the FAILED state in the next heartbeat

    # ------------------------------------------------------------ repartitioning
    def _handle_scale_request(self, ev: ScaleRequest) -> list[Instruction]:
        """Check the request (:func:`appmaster.scaling.plan_scale`, pure: it reads this state and
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
            if container is not None and container.state in _ALIVE:
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
                if c.state in _ALIVE] + self._maybe_finish(force=True)

    def _handle_containers_stopped(self, ev: ContainersStopped) -> list[Instruction]:
        """After the end: the launcher stopped what was left; Finish (once)."""
        for container in self.plan.containers.values():
            if container.state in _ALIVE:
                container.state = ContainerState.RELEASED
        return self._maybe_finish(force=True)

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
        alive = [c for c in self.plan.containers.values() if c.state in _ALIVE]
        if alive and not force:
            return []
        self._finish_sent = True
        return [Finish(self.state, self.diagnostics)]

    def containers_to_stop(self) -> list[str]:
        """After the application ended: containers still running."""
        return [c.id for c in self.plan.containers.values() if c.state in _ALIVE]

    # ------------------------------------------------------------ reporting
    def throughput(self, op_id: int) -> float:
        history = self.window_history.get(op_id)
        if not history or len(history) < 2:
            return 0.0
        span = (history[-1][3] - history[0][3]) / 1000
        tuples = sum(h[2] if h[2] else h[1] for h in list(history)[1:])
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
            "committed_window": self.committed, "committed_window_hex": _w(self.committed),
            "containers": len([c for c in self.plan.containers.values() if c.state in _ALIVE]),
            "operators": len(ops),
            "throughput": {op.label: round(self.throughput(op.id), 1) for op in ops.values()},
            "recovery_checkpoints": {op.label: op.recovery_checkpoint for op in ops.values()},
            "restarts": {op.label: op.restarts for op in ops.values() if op.restarts},
            "blocked": sorted(ops[o].label for o in self.blocked if o in ops),
            "shutdown_operators": {_w(w): [ops[o].label if o in ops else o for o in ids]
                                   for w, ids in sorted(self.shutdown_operators.items())},
            "removed": list(self.removed[-50:]),
            "receivers": {op.label: self.window_history[op.id][-1][5]["receiver"] for op in ops.values()
                          if self.window_history.get(op.id) and "receiver" in self.window_history[op.id][-1][5]},
            "errors": list(self.errors)[-20:],
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
                         "last_window_tuples": [last[1], last[2]] if last else [0, 0],
                         "metrics": last[5] if last else {},
                         "restarts": op.restarts, "last_error": _last_line(op.last_error)})
        return rows

    def container_rows(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "state": c.state, "host": c.host, "process": c.process,
                 "buffer_server": f"{c.buffer_server[0]}:{c.buffer_server[1]}" if c.buffer_server else "",
                 "operators": sorted(self.plan.operators[o].label for o in c.operators if o in self.plan.operators),
                 "memory_mb_used": c.memory_used_mb,
                 "buffer_server_publishers": c.publishers,
                 "last_heartbeat_millis": c.last_heartbeat_millis}
                for c in self.plan.containers.values()]


#: Event type -> its handler: what :meth:`MasterState.handle` knows.
_HANDLERS: dict[type[MasterEvent], Callable[[MasterState, Any], list[Instruction]]] = {
    Start: MasterState._handle_start,
    AdoptContainers: MasterState._handle_adopt_containers,
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
}

_DAG_ATTRIBUTES = (
    "STREAMING_WINDOW_SIZE_MILLIS", "HEARTBEAT_INTERVAL_MILLIS", "HEARTBEAT_TIMEOUT_MILLIS",
    "CHECKPOINT_WINDOW_COUNT", "TIMEOUT_WINDOW_COUNT", "PROCESSING_MODE", "RECOVERY_ATTEMPTS",
    "BUFFER_MEMORY_MB", "BUFFER_SPOOLING", "CONTAINERS_MAX_COUNT", "CONTAINER_MEMORY_MB",
    "BLOCK_INTERVAL_MILLIS", "RECEIVER_WAL", "RECEIVER_MAX_RESTARTS", "DEBUG",
)


def _w(window: int) -> str:
    """A window id as Apex prints it."""
    return f"{window & 0xFFFFFFFFFFFFFFFF:x}"


def _decode_metrics(metrics: Any) -> dict[str, Any]:
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
