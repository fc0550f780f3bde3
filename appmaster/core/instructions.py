"""What :class:`~stram.master.core.state.MasterState` asks the I/O layer to do: the master's instructions.

The dispatcher in :mod:`stram.master.process.master` carries each out; one it has no
action for raises :class:`UnknownInstruction` before anything is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stram.master.core.events import MasterEvent

__all__ = ["Instruction", "LaunchContainer", "AdoptContainer", "KillContainer", "DeleteCheckpoints",
           "SplitCheckpoints", "Finish", "Reply", "UnknownInstruction"]


@dataclass(frozen=True)
class Instruction:
    """Something the I/O layer must do."""


@dataclass(frozen=True)
class LaunchContainer(Instruction):
    """Ask the launcher for a container process, placed as :mod:`stram.master.core.placement` chose."""

    container_id: str
    memory_mb: int
    vcores: int
    #: Wanted hosts, the first preferred (() : any).
    hosts: tuple[str, ...] = ()
    #: Wanted racks (() : any).
    racks: tuple[str, ...] = ()
    #: The YARN node label the container must run on (None: any node).
    node_label: str | None = None
    #: Hosts not to use: blacklisted ones, and those anti-affinity rules exclude.
    avoid: tuple[str, ...] = ()
    #: May YARN place it elsewhere when the wanted hosts/racks cannot take it (after PLACEMENT_TIMEOUT_MILLIS).
    relax: bool = True


@dataclass(frozen=True)
class AdoptContainer(Instruction):
    """Take over a container process the previous master attempt started, if the live
    process ``pid`` is proven to be it (start time ``started`` and its container id)."""

    container_id: str
    pid: int
    started: float = 0.0


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
    :func:`stram.master.core.scaling.split_states` and write the new partitions' checkpoints;
    then the state goes on with ``then``.

    The state waits for these files (a new plan must not be installed, or journaled,
    before its checkpoints exist): the dispatcher carries this out at once, under its
    lock, and hands ``then`` back to :meth:`MasterState.handle`. A failure refuses
    the change (:class:`stram.master.core.scaling.ScaleRefused`); nothing has changed then.
    """

    change: Any  #: an :class:`stram.master.core.scaling.ScaleChange`
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
