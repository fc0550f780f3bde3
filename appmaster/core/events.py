"""What happens to an application, as :class:`~stram.master.core.state.MasterState` hears it: the master's events.

Each event is a small frozen dataclass; the gRPC servicer, the admin API,
the launcher's poll and the master's timer turn what they see into events,
and :meth:`MasterState.handle` decides what follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MasterEvent", "Start", "AdoptContainers", "ContainerStarted", "InitContextRequest", "Heartbeat", "ErrorReport",
           "ContainerExited", "Tick", "KillContainerRequest", "KillApp", "ShutdownRequest", "DiskFull", "Resumed",
           "ContainersStopped", "ScaleRequest", "ScaleStatesWritten", "Note", "StackTraceRequest", "UnknownEvent",
           "UnknownContainer", "ContainerNotRunning", "MasterPaused"]


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
class ContainerStarted(MasterEvent):
    """The launcher started a container's process: which one it is, for a later attempt to
    take it over (and to never take over, or signal, another process that reuses its pid)."""

    container_id: str
    pid: int
    #: The process's start time (``psutil.Process.create_time()``, seconds since the epoch).
    started: float
    now: int


@dataclass(frozen=True)
class InitContextRequest(MasterEvent):
    """A container agent asks for its init context (replied; raises :class:`UnknownContainer`)."""

    container_id: str


@dataclass(frozen=True)
class Heartbeat(MasterEvent):
    """A container heartbeat (replied with the heartbeat response, a ``ContainerHeartbeatResponse``).

    ``heartbeat`` is the ``ContainerHeartbeat`` message as it arrived (:mod:`stram.wire`): the
    handler reads it in place (:mod:`stram.master.core.convert`)."""

    heartbeat: Any
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
    """The launcher saw a container process end: on ``node`` (None: not known), and, when it could
    never be placed as asked (a request not to be relaxed), ``unplaceable`` says why."""

    container_id: str
    exit_code: int | None
    now: int
    node: str | None = None
    unplaceable: str = ""


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
    #: The containers that were still running (and had to be stopped).
    stopped: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScaleRequest(MasterEvent):
    """Give logical operator ``name`` ``count`` partitions (raises
    :class:`stram.master.core.scaling.ScaleRefused`; replied with a :class:`ScaleResult`)."""

    name: str
    count: int
    now: int
    #: Who asked: "request" (the admin API) or "stats listener".
    source: str = "request"


@dataclass(frozen=True)
class ScaleStatesWritten(MasterEvent):
    """The checkpoints a :class:`SplitCheckpoints` asked for are written: install the change."""

    change: Any  #: an :class:`stram.master.core.scaling.ScaleChange`
    now: int
    source: str = "request"


@dataclass(frozen=True)
class Note(MasterEvent):
    """Something for the event log (what the master refused, a stats listener's complaint)."""

    now: int
    kind: str
    text: str


@dataclass(frozen=True)
class StackTraceRequest(MasterEvent):
    """Ask a running container for every thread's stack (Apex's STACKTRACE): replied with the
    request's number; the trace arrives with a later heartbeat (raises :class:`UnknownContainer`,
    :class:`ContainerNotRunning`)."""

    container_id: str
    now: int


@dataclass(frozen=True)
class DiskFull(MasterEvent):
    """A write the application needs waited for space longer than DISK_FULL_TIMEOUT_SECS: it fails."""

    now: int
    diagnostics: str


@dataclass(frozen=True)
class Resumed(MasterEvent):
    """The master's own writes waited for space (heartbeats were refused meanwhile) and go on:
    the clocks of heartbeat timeouts and blocked operators start again, as after a restore."""

    now: int
    text: str


class UnknownEvent(TypeError):
    """An event :meth:`MasterState.handle` has no handler for (it is never silently dropped)."""


class MasterPaused(Exception):
    """The master refuses events while its own writes wait for space; the message starts with
    ``paused:`` and says what waits (an agent retries; the gRPC status is UNAVAILABLE)."""


class UnknownContainer(Exception):
    """A container id the plan does not know (or has released)."""


class ContainerNotRunning(Exception):
    """A container the plan knows, but whose agent is not heartbeating (pending, lost or released)."""
