"""The master's decisions: one application's state, the events it takes and the instructions it returns.

:class:`MasterState` is pure bookkeeping in the style of a state machine
(dask's ``WorkerState.handle_stimulus``): every change is an event, a small
frozen dataclass (:class:`Heartbeat`, :class:`ContainerExited`, :class:`Tick`,
:class:`ScaleRequest` ...), and :meth:`MasterState.handle` returns what the
event implies as :class:`Instruction` objects (launch, kill, delete
checkpoints, finish, reply to the sender) that the thin I/O layer in
:mod:`stram.master.process.master` carries out. It opens no sockets and touches no files,
so tests drive it directly with drawn timelines. An event it has no handler
for raises :class:`UnknownEvent`; it is never ignored.

A :class:`MasterState` is the master's books (:class:`~stram.master.core.books.Books`:
every field, typed) and its event table, :attr:`MasterState.HANDLERS` (event type ->
handler). The handlers are functions over the books, each in the module of its part,
called by name: startup and the event log (:mod:`~stram.master.core.lifecycle`), the
heartbeat (:mod:`~stram.master.core.heartbeat`), failures and the clock
(:mod:`~stram.master.core.recovery`), stack traces (:mod:`~stram.master.core.diagnose`),
the end (:mod:`~stram.master.core.ending`), repartitioning
(:mod:`~stram.master.core.repartition`), init contexts (:mod:`~stram.master.core.deploy`).
Its queries (info, rows, stack traces, deploy messages) are :mod:`~stram.master.core.reports`',
:mod:`~stram.master.core.diagnose`'s and :mod:`~stram.master.core.deploy`'s; its journal
document is :mod:`~stram.master.core.statedoc`'s.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

from stram.master.core import deploy, diagnose, ending, heartbeat, lifecycle, recovery, repartition, reports
from stram.master.core import statedoc
from stram.master.core.books import Books
from stram.master.core.events import (AdoptContainers, ContainerExited, ContainersStopped, ContainerStarted, DiskFull,
                                      ErrorReport, Heartbeat, InitContextRequest, KillApp, KillContainerRequest,
                                      MasterEvent, Note, Resumed, ScaleRequest, ScaleStatesWritten, ShutdownRequest,
                                      StackTraceRequest, Start, Tick, UnknownContainer, UnknownEvent)
from stram.master.core.instructions import (AdoptContainer, DeleteCheckpoints, Finish, Instruction, KillContainer,
                                            LaunchContainer, Reply, SplitCheckpoints, UnknownInstruction)
from stram.master.core.pacing import HeartbeatPacer
from stram.master.core.plan import OperatorState, PTOperator, affected_operators
from stram.master.core.rules import recovery_checkpoints, restart_backoff_millis

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


class MasterState(Books):
    """All of the master's bookkeeping for one application (the fields of :class:`Books`, whose
    parameters it takes), and the one door into it (:meth:`handle`) through its event table."""

    #: Event type -> its handler (over the books): what :meth:`handle` knows.
    HANDLERS: ClassVar[dict[type[MasterEvent], Callable[[Books, Any], list[Instruction]]]] = {
        Start: lifecycle.handle_start,
        AdoptContainers: recovery.handle_adopt_containers,
        ContainerStarted: recovery.handle_container_started,
        InitContextRequest: deploy.handle_init_context_request,
        Heartbeat: heartbeat.handle_heartbeat,
        ErrorReport: recovery.handle_error_report,
        ContainerExited: recovery.handle_container_exited,
        Tick: recovery.handle_tick,
        KillContainerRequest: recovery.handle_kill_container_request,
        KillApp: ending.handle_kill_app,
        ShutdownRequest: ending.handle_shutdown_request,
        ContainersStopped: ending.handle_containers_stopped,
        ScaleRequest: repartition.handle_scale_request,
        ScaleStatesWritten: repartition.handle_scale_states_written,
        Note: lifecycle.handle_note,
        StackTraceRequest: diagnose.handle_stack_trace_request,
        DiskFull: recovery.handle_disk_full,
        Resumed: recovery.handle_resumed,
    }

    # ------------------------------------------------------------ the one door
    def handle(self, event: MasterEvent) -> list[Instruction]:
        """The one way to change the master's state: what ``event`` implies, as instructions.

        Dispatches by the event's type to its handler in :attr:`HANDLERS`. The heartbeat,
        init-context, scale and stack-trace events are answered with a :class:`Reply` among
        the instructions.

        Raises
        ------
        UnknownEvent
            No handler for this type of event (it is never ignored).
        UnknownContainer, stram.master.core.scaling.ScaleRefused
            From the handlers of the events that may be refused; nothing changed then.
        """
        handler = self.HANDLERS.get(type(event))
        if handler is None:
            raise UnknownEvent(f"MasterState has no handler for {type(event).__name__}: {event!r}")
        return handler(self, event)

    # Thin wrappers for tests and tools that drive the state directly (the master
    # goes through handle(), under its lock, with the journal written before acting).
    def start(self, now: int) -> list[Instruction]:
        """``handle(Start(now))``."""
        return self.handle(Start(now))

    def heartbeat(self, hb: Any, now: int) -> tuple[Any, list[Instruction]]:
        """``handle(Heartbeat(hb, now))`` (``hb``: a ``ContainerHeartbeat``), split into the response
        (a ``ContainerHeartbeatResponse``) and the other instructions."""
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

    # ------------------------------------------------------------ journal
    def snapshot(self, objects: bool = False) -> dict[str, Any]:
        """What the journal holds: enough for a new master attempt to carry on.

        A plain, JSON-ready document of :data:`stram.master.core.statedoc.VERSION`
        (:func:`~stram.master.core.statedoc.state_doc`); it shares nothing with this state. With
        ``objects``, its plan holds the operators and containers themselves
        (:func:`~stram.master.core.statedoc.plan_objects`): only to be encoded at once, under the
        master's lock.
        """
        return statedoc.state_doc(self, objects)

    @classmethod
    def restore(cls, spec: Any, snapshot: dict[str, Any], app_path: str, token: str, now: int,
                pacer: HeartbeatPacer | None = None) -> "MasterState":
        """A new master attempt's state, from the previous attempt's journal (:meth:`snapshot`).

        Containers are given a heartbeat timeout to reconnect; operators that
        were being deployed are deployed again (agents ignore a duplicate).

        Raises
        ------
        stram.master.core.statedoc.JournalVersionError
            The document is not a journal of the version this stram reads, or does not match it.
        """
        statedoc.check_version(snapshot)
        try:
            state = cls(spec, snapshot["app_id"], app_path, token, int(snapshot["start_window_millis"]), now,
                        plan=statedoc.plan_from_doc(snapshot["plan"]), pacer=pacer)
            statedoc.restore_books(state, snapshot)
        except (KeyError, TypeError, ValueError) as exc:
            raise statedoc.JournalVersionError(f"the journal does not match journal version {statedoc.VERSION} "
                                               f"({type(exc).__name__}: {exc})") from None
        plan = state.plan
        for container in plan.containers.values():
            container.last_heartbeat_millis = now
            container.launch_at = now
        for op in plan.operators.values():
            if op.state == OperatorState.DEPLOYING:
                op.state = OperatorState.PENDING_DEPLOY
                plan.containers[op.container].pending_deploy.add(op.id)
            op.window_advanced_millis = now if op.state == OperatorState.ACTIVE else 0
        plan.changes.forget()  # of resuming the plan: kept, each heartbeat scanned them (10 ms at 20k operators)
        lifecycle.note(state, now, "restore", f"master attempt {state.attempt} resumed from the journal: committed "
                                              f"window {lifecycle.window_hex(state.committed)}, "
                                              f"{len(plan.operators)} operators")
        return state

    # ------------------------------------------------------------ queries
    def heartbeat_interval_millis(self) -> int:
        """The heartbeat interval to ask containers for: the pacer's, else HEARTBEAT_INTERVAL_MILLIS."""
        return deploy.heartbeat_interval_millis(self)

    def asked_interval_millis(self, container_id: str, now: int, sent: int = 0) -> int:
        """The interval the answer at ``now`` to ``container_id``'s heartbeat sent at ``sent`` asks for."""
        return deploy.asked_interval_millis(self, container_id, now, sent)

    def init_context(self, container_id: str) -> Any:
        """A container's init context (a query: changes nothing; raises :class:`UnknownContainer`)."""
        return deploy.init_context(self, container_id)

    def deploy_info(self, op: PTOperator) -> Any:
        """The deploy request for one operator (its inputs' sources must be placed)."""
        return deploy.deploy_info(self, op)

    def stack_trace(self, container_id: str, seq: int) -> dict[str, Any] | None:
        """The container's stack trace that answers request ``seq``; None while it has not arrived
        (raises UnknownContainer, ContainerNotRunning: it will never answer)."""
        return diagnose.stack_trace(self, container_id, seq)

    def containers_to_stop(self) -> list[str]:
        """After the application ended: containers still running."""
        return lifecycle.containers_to_stop(self)

    def throughput(self, op_id: int) -> float:
        """Tuples a second of an operator over its last windows."""
        return reports.throughput(self, op_id)

    def validate_state(self) -> None:
        """Invariants; tests call this after every step."""
        reports.validate_state(self)

    def info(self, brief: bool = False) -> dict[str, Any]:
        """What ``get-app-info`` shows (``brief``: without the per-operator tables, for status.json)."""
        return reports.info(self, brief)

    def info_head(self, brief: bool = False) -> dict[str, Any]:
        """:meth:`info` with its per-operator tables empty (:meth:`operator_info` fills them)."""
        return reports.info_head(self, brief)

    def operator_info(self, ops: Iterable[Any]) -> dict[str, dict[str, Any]]:
        """The per-operator tables of :meth:`info` for ``ops``."""
        return reports.operator_info(self, ops)

    def operator_copies(self, ops: Iterable[Any] | None = None) -> list[tuple]:
        """What the operators page needs of ``ops`` (default: every operator), copied."""
        return reports.operator_copies(self, ops)

    def operator_rows(self) -> list[dict[str, Any]]:
        """The ``operators`` page (:meth:`operator_copies` turned into rows)."""
        return reports.operator_rows(reports.operator_copies(self))

    def container_rows(self) -> list[dict[str, Any]]:
        """The ``containers`` page."""
        return reports.container_rows(self)
