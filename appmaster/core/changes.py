"""What changed in a physical plan since a reader last looked: dirty tracking for the hot path.

The master answers every heartbeat by updating a few operators of one
container; the committed window (:mod:`stram.master.core.committed`) and the journal
(:mod:`stram.master.journal.log`) must follow in time proportional to that, not to
the plan. Each :class:`~stram.master.core.plan.PhysicalPlan` owns its :class:`PlanChanges`
(its ``changes``, made with it): a :class:`Tracker` for the journal, one for the
committed window, and a count of its shape's changes. :class:`Tracked` (the base
of :class:`~stram.master.core.plan.PTOperator` and :class:`~stram.master.core.plan.PTContainer`)
reports every attribute assignment to the trackers of the plan that holds it
(:func:`attach`: the plan does it when it takes the object in); code that changes a
mutable field in place (a set of a container's operators) calls :func:`touch`.
Assigning an operator's ``container`` or ``inputs`` changes the plan's structure
(:attr:`PlanChanges.structure`): readers that cache the plan's shape start over.

A reader takes the marks of the objects its plan still holds (:meth:`Tracker.take`).
A tracker holding too many marks forgets them all and says so (its ``epoch``): its
readers then look at the whole plan once. A copy of a plan (``copy.deepcopy``) is a
new plan: its trackers start empty, and its readers read it whole.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable, Iterator

__all__ = ["Tracked", "Tracker", "PlanChanges", "attach", "touch", "untracked", "set_volatile", "VOLATILE",
           "COMMITTED_FIELDS"]

#: Marks a tracker keeps before it forgets them all (its readers then read the whole plan).
MAX_MARKS = 200_000
#: Fields whose assignment changes the plan's shape (inline groups, downstream operators).
STRUCTURAL = frozenset({"container", "inputs"})
#: Progress and health figures every heartbeat moves. A new master attempt does not need them
#: current: it resets the clocks (last heartbeat, window advanced) when it resumes, takes the
#: figures again from the first heartbeats, and reads a stale current window as a lower bound
#: (safe removal waits, an AT_MOST_ONCE resume starts no later). Assigning them does not mark an
#: object for the journal; it writes them with the object's next other change (a checkpoint, at
#: the latest every CHECKPOINT_WINDOW_COUNT windows) and in every snapshot. At 2,000 containers
#: x 10 operators they made every heartbeat journal all its operators and its container.
VOLATILE = frozenset({"current_window", "window_advanced_millis", "last_heartbeat_millis", "memory_used_mb",
                      "publishers"})
#: The fields whose changes move recovery checkpoints (the committed window's tracker follows them).
COMMITTED_FIELDS = frozenset({"checkpoints", "state", "shutdown_window"})

#: The threads building a new plan now (:func:`untracked`): their assignments mark nothing.
_building: set[int] = set()

#: Assigns a :data:`VOLATILE` field on the heartbeat path without :meth:`Tracked.__setattr__`'s call
#: (such an assignment marks nothing): ``set_volatile(op, "current_window", w)``.
set_volatile = object.__setattr__


class Tracker:
    """Objects changed since their reader last took them.

    Parameters
    ----------
    fields:
        Only assignments of these attributes mark an object (None: any).
    ignore:
        Assignments of these attributes never mark an object.
    types:
        Only objects of these types are marked (None: any).
    """

    def __init__(self, fields: Iterable[str] | None = None, ignore: Iterable[str] = (),
                 types: tuple[type, ...] | None = None) -> None:
        self.fields = frozenset(fields) if fields is not None else None
        self.ignore = frozenset(ignore)
        self.types = types
        self.marks: dict[int, Any] = {}
        #: Changes when the marks were forgotten (a reader that saw another epoch reads everything).
        self.epoch = 0

    def accepts(self, name: str | None) -> bool:
        """Whether assigning attribute ``name`` (None: a change in place) marks an object."""
        return name is None or ((self.fields is None or name in self.fields) and name not in self.ignore)

    def mark(self, obj: Any) -> None:
        marks = self.marks
        marks[id(obj)] = obj
        if len(marks) > MAX_MARKS:
            marks.clear()
            self.epoch += 1

    def take(self, owns: Any) -> list[Any]:
        """The marked objects ``owns(obj)`` accepts; their marks are removed (others' stay)."""
        mine = [obj for obj in self.marks.values() if owns(obj)]
        for obj in mine:
            del self.marks[id(obj)]
        return mine

    def forget(self) -> None:
        """Drop every mark: the readers read the whole plan once (a new epoch)."""
        self.marks.clear()
        self.epoch += 1


class PlanChanges:
    """The change trackers of one physical plan, and how often its shape changed.

    Parameters
    ----------
    committed_types:
        The objects the committed window's tracker follows (the plan's operators; None: any).
    """

    __slots__ = ("journal", "committed", "structure", "_accepting")

    def __init__(self, committed_types: tuple[type, ...] | None = None) -> None:
        #: Every change of an operator or a container but its :data:`VOLATILE` figures (the journal writes them).
        self.journal = Tracker(ignore=VOLATILE)
        #: Changes that move recovery checkpoints (the committed window recomputes them).
        self.committed = Tracker(COMMITTED_FIELDS, types=committed_types)
        #: A number that changes whenever an operator's container or inputs are assigned.
        self.structure = 0
        #: Per attribute name (None: in place), the trackers an assignment of it marks.
        self._accepting: dict[str | None, tuple[Tracker, ...]] = {}

    def forget(self) -> None:
        """Drop every tracker's marks: their readers read the whole plan once (a new epoch)."""
        self.journal.forget()
        self.committed.forget()

    def __deepcopy__(self, memo: dict[int, Any]) -> "PlanChanges":
        """A copied plan is another plan: its changes start afresh (its readers read it whole)."""
        return PlanChanges(self.committed.types)


def attach(obj: Any, changes: PlanChanges) -> None:
    """Report ``obj``'s changes to ``changes`` from now on (a plan taking in an operator or a container)."""
    object.__setattr__(obj, "_changes", changes)


def touch(obj: Any, name: str | None = None) -> None:
    """Mark ``obj`` changed (``name``: the attribute; None: something changed in place).

    An object no plan holds, or one a thread is building (:func:`untracked`), marks nothing."""
    if _building and threading.get_ident() in _building:
        return
    changes = getattr(obj, "_changes", None)
    if changes is None:
        return
    if name in STRUCTURAL:
        changes.structure += 1
    accepting = changes._accepting
    trackers = accepting.get(name)
    if trackers is None:
        trackers = accepting[name] = tuple(t for t in (changes.journal, changes.committed) if t.accepts(name))
    for tracker in trackers:
        if tracker.types is None or isinstance(obj, tracker.types):
            tracker.mark(obj)


@contextlib.contextmanager
def untracked() -> Iterator[None]:
    """Assignments in this thread mark nothing meanwhile: for building a new plan.

    Its readers read a plan they have not seen (another object) whole, so marks would
    only cost: 580,000 of them for the 20,000 operators of a plan took 60% of its planning.
    Other threads (another master in the same process) go on being tracked.
    """
    me = threading.get_ident()
    if me in _building:  # already building (a plan built inside another's building)
        yield
        return
    _building.add(me)
    try:
        yield
    finally:
        _building.discard(me)


class Tracked:
    """Reports every attribute assignment to the trackers of its plan (a dataclass base)."""

    #: The :class:`PlanChanges` of the plan holding the object (set by :func:`attach`; unset: none).
    __slots__ = ("_changes",)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        touch(self, name)
