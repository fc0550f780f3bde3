"""What changed in the physical plan since a reader last looked: dirty tracking for the hot path.

The master answers every heartbeat by updating a few operators of one
container; the committed window (:mod:`stram.master.core.committed`) and the journal
(:mod:`stram.master.journal.log`) must follow in time proportional to that, not to
the plan. :class:`Tracked` (the base of :class:`~stram.master.core.plan.PTOperator`
and :class:`~stram.master.core.plan.PTContainer`) reports every attribute assignment
to the :class:`Tracker` objects; code that changes a mutable field in place
(a set of a container's operators) calls :func:`touch`. Assigning an
operator's ``container`` or ``inputs`` changes the plan's structure
(:func:`structure`): readers that cache the plan's shape start over.

A tracker's marks are shared by every plan in the process; a reader takes the
marks of its own plan (:meth:`Tracker.take`). A tracker holding too many marks
(plans nobody reads any more) forgets them all and says so (its ``epoch``):
its readers then look at the whole plan once.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable, Iterator

__all__ = ["Tracked", "Tracker", "touch", "untracked", "structure", "forget", "set_volatile", "JOURNAL",
           "COMMITTED", "VOLATILE"]

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

_structure = [0]
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
    """

    def __init__(self, fields: Iterable[str] | None = None, ignore: Iterable[str] = ()) -> None:
        self.fields = frozenset(fields) if fields is not None else None
        self.ignore = frozenset(ignore)
        #: Only objects of these types are marked (set by :mod:`stram.master.core.plan`; None: any).
        self.types: tuple[type, ...] | None = None
        self.marks: dict[int, Any] = {}
        #: Changes when the marks were forgotten (a reader that saw another epoch reads everything).
        self.epoch = 0

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


#: Every change of an operator or a container but its :data:`VOLATILE` figures (the journal writes them).
JOURNAL = Tracker(ignore=VOLATILE)
#: Changes that move recovery checkpoints (the committed window recomputes them).
COMMITTED = Tracker({"checkpoints", "state", "shutdown_window"})
_TRACKERS = (JOURNAL, COMMITTED)
#: Per attribute name (None: in place), the trackers an assignment of it marks.
_ACCEPTING: dict[str | None, tuple[Tracker, ...]] = {}


def touch(obj: Any, name: str | None = None) -> None:
    """Mark ``obj`` changed (``name``: the attribute; None: something changed in place)."""
    if _building and threading.get_ident() in _building:
        return
    if name in STRUCTURAL:
        _structure[0] += 1
    trackers = _ACCEPTING.get(name)
    if trackers is None:
        trackers = _ACCEPTING[name] = tuple(
            t for t in _TRACKERS if name is None or ((t.fields is None or name in t.fields) and name not in t.ignore))
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


def forget() -> None:
    """Drop every tracker's marks: their readers read the whole plan once (a new epoch)."""
    for tracker in _TRACKERS:
        tracker.marks.clear()
        tracker.epoch += 1


def structure() -> int:
    """A number that changes whenever an operator's container or inputs are assigned."""
    return _structure[0]


class Tracked:
    """Reports every attribute assignment to the trackers (a dataclass base)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        touch(self, name)
