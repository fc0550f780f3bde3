"""The one door into a :class:`~stram.master.core.state.MasterState`: lock → handle → journal → carry out.

:meth:`Dispatcher.dispatch` takes one event; :meth:`Dispatcher.dispatch_many` takes
a batch (the heartbeats that arrived together on the umbilical's streams) under
one hold of the lock and with one journal write, each event still answered or
refused on its own.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Mapping, Sequence

from stram.master.core.events import MasterPaused
from stram.master.core.state import Instruction, MasterEvent, MasterState, Reply, SplitCheckpoints, UnknownInstruction

__all__ = ["Dispatcher"]

log = logging.getLogger("stram.master")


class Dispatcher:
    """The one door into a :class:`MasterState`: lock → handle → journal → carry out.

    Parameters
    ----------
    state, lock:
        The state and the lock every reader and writer of it holds.
    actions:
        Instruction type -> what carries it out. :class:`Reply` needs none (its value
        is returned to the caller); an instruction of any other type without an
        action is an error (:class:`UnknownInstruction`), never dropped.
    journal:
        Writes what a new master attempt needs (called under the lock, before anything
        the event decided leaves the master).
    prepare:
        Given every instruction about to be carried out (outside the lock, before the
        first of them): work they share that is better done at once (the credential
        files of the containers they launch). One that fails is logged; the
        instructions are carried out all the same.
    """

    def __init__(self, state: MasterState, lock: threading.RLock,
                 actions: Mapping[type[Instruction], Callable[[Any], None]],
                 journal: Callable[[], None] = lambda: None,
                 refusing: Callable[[], str] = lambda: "",
                 prepare: Callable[[list[Instruction]], None] = lambda _: None) -> None:
        self.state = state
        self.lock = lock
        self.actions = dict(actions)
        self.journal = journal
        self.prepare = prepare
        #: Why events are refused now ("" when they are not): the master's writes wait for space.
        self.refusing = refusing

    def dispatch(self, event: MasterEvent) -> Any:
        """Handle ``event``; the value of its :class:`Reply` (None without one).

        Under the lock: the state handles the event; a :class:`SplitCheckpoints` is
        carried out at once (the state waits for those files) and the event it names
        is handled next; every instruction is checked to have an action; the journal
        is written. Then, outside the lock, the instructions are carried out in order
        (one that fails is logged and the others still run).

        Raises
        ------
        MasterPaused
            The journal waits for space (in another thread); nothing changed.
        UnknownInstruction
            An instruction without an action (nothing was carried out).
        UnknownEvent, UnknownContainer, ScaleRefused, ...
            What the state raised for the event (nothing was carried out).
        """
        with self.lock:
            why = self.refusing()
            if why:
                raise MasterPaused(why)
            reply, work = self._handle(event)
            self.journal()
        self._prepare(work)
        self._carry_out(work)
        return reply

    def dispatch_many(self, events: Sequence[MasterEvent]) -> list[Any]:
        """Handle ``events`` in order under one hold of the lock, then write the journal once.

        Each event is handled as :meth:`dispatch` would; the list holds, per event, its
        reply's value or the exception it raised (then nothing it decided is carried
        out, and the others are not affected). Nothing decided leaves the master before
        the one journal write: the instructions are carried out after it, in order.

        Raises
        ------
        MasterPaused
            The journal waits for space (in another thread): none of them was handled.
        """
        results: list[Any] = []
        works: list[list[tuple[Callable[[Any], None], Instruction]]] = []
        with self.lock:
            why = self.refusing()
            if why:
                raise MasterPaused(why)
            for event in events:
                try:
                    reply, work = self._handle(event)
                except Exception as exc:  # noqa: BLE001 - this event's answer, not the batch's
                    results.append(exc)
                    continue
                results.append(reply)
                works.append(work)
            self.journal()
        self._prepare([step for work in works for step in work])
        for work in works:
            self._carry_out(work)
        return results

    def _handle(self, event: MasterEvent) -> tuple[Any, list[tuple[Callable[[Any], None], Instruction]]]:
        """(Caller holds the lock.) The value of ``event``'s reply, and the actions to carry out."""
        instructions: list[Instruction] = []
        queue: collections.deque[MasterEvent] = collections.deque([event])
        while queue:
            for ins in self.state.handle(queue.popleft()):
                if isinstance(ins, SplitCheckpoints):
                    self._action(ins)(ins)
                    queue.append(ins.then)
                else:
                    instructions.append(ins)
        replies = [ins.value for ins in instructions if isinstance(ins, Reply)]
        if len(replies) > 1:
            raise RuntimeError(f"{type(event).__name__} was answered {len(replies)} times; "
                               f"an event has one sender")
        work = [(self._action(ins), ins) for ins in instructions if not isinstance(ins, Reply)]
        return (replies[0] if replies else None), work

    def _prepare(self, work: list[tuple[Callable[[Any], None], Instruction]]) -> None:
        if len(work) < 2:  # nothing to share
            return
        try:
            self.prepare([ins for _, ins in work])
        except Exception:  # noqa: BLE001 - the instructions are carried out all the same
            log.exception("could not prepare %d instructions", len(work))

    @staticmethod
    def _carry_out(work: list[tuple[Callable[[Any], None], Instruction]]) -> None:
        for action, ins in work:
            try:
                action(ins)
            except Exception:  # noqa: BLE001 - one failed action must not stop the master
                log.exception("could not carry out %s", ins)

    def _action(self, ins: Instruction) -> Callable[[Any], None]:
        action = self.actions.get(type(ins))
        if action is None:
            raise UnknownInstruction(f"no action carries out {type(ins).__name__} ({ins!r}); "
                                     f"known: {', '.join(sorted(t.__name__ for t in self.actions))}")
        return action
