"""The steps every part of the core shares: noting an event, launching a container, finishing.

Functions over the master's :class:`~stram.master.core.books.Books`, called by
name from the heartbeat, recovery, the end of the application and the clock:

- :func:`note` adds a line to the application's event log (and the master's log);
- :func:`launch` asks for a container's process (:class:`LaunchContainer`), placed by
  :mod:`~stram.master.core.placement`;
- :func:`finish` ends the application (once), :func:`maybe_finish` returns
  :class:`Finish` once it ended and no container is left running;
- :func:`count_failure` keeps an operator's last failure for info and progress.

And how the event log writes what it shows: :func:`window_hex`, :func:`last_line`.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from stram.master.core import placement
from stram.master.core.books import Books, LogEntry
from stram.master.core.events import Note, Start
from stram.master.core.instructions import Finish, Instruction, LaunchContainer
from stram.master.core.plan import ALIVE, ContainerState, PTContainer, PTOperator

__all__ = ["note", "launch", "finish", "maybe_finish", "count_failure", "containers_to_stop", "handle_start",
           "handle_note", "window_hex", "last_line"]

log = logging.getLogger("stram.master.core.state")  # the event log and the heartbeat speak for the state


def window_hex(window: int) -> str:
    """A window id as Apex prints it."""
    return f"{window & 0xFFFFFFFFFFFFFFFF:x}"


def last_line(text: str) -> str:
    """The last non-blank line of an error text (the exception line of a traceback)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def note(books: Books, now: int, kind: str, text: str) -> None:
    """Add a line to the event log (from outside: the Note event)."""
    books.events.append(LogEntry(now, kind, text))
    log.info("%s: %s", kind, text)


def launch(books: Books, container: PTContainer, now: int) -> LaunchContainer:
    """Ask for ``container``'s process: it is PENDING from ``now``, its previous process forgotten; placed
    by :func:`stram.master.core.placement.choose`. A ``relax: false`` rule that cannot hold fails the
    application, naming it (the container asked for is stopped with the others)."""
    where = placement.choose(books, container, now)
    for line in where.notes:
        note(books, now, "placement", line)
    if where.error:
        finish(books, "FAILED", f"cannot place {container.id}: {where.error}", now)
    container.state = ContainerState.PENDING
    container.launch_at = now
    container.pid, container.process_started = 0, 0.0  # the new process says who it is (ContainerStarted)
    return LaunchContainer(container.id, container.memory_mb or int(books.attr("CONTAINER_MEMORY_MB") or 1024),
                           container.vcores, where.hosts, where.racks, where.node_label, where.avoid, where.relax)


def finish(books: Books, state: str, diagnostics: str, now: int) -> None:
    """The application ends ``state`` (SUCCEEDED, FAILED or KILLED), saying why; only the first end counts."""
    if books.state != "RUNNING":
        return
    books.state = state
    books.diagnostics = diagnostics
    books.finished_millis = now
    note(books, now, "finish", f"application {state}: {diagnostics}")


def maybe_finish(books: Books, force: bool = False) -> list[Instruction]:
    """Once the application ended and no container is left running (``force``: regardless): Finish, once."""
    if books.state == "RUNNING" or books.finish_sent:
        return []
    alive = [c for c in books.plan.containers.values() if c.state in ALIVE]
    if alive and not force:
        return []
    books.finish_sent = True
    return [Finish(books.state, books.diagnostics)]


def containers_to_stop(books: Books) -> list[str]:
    """After the application ended: containers still running."""
    return [c.id for c in books.plan.containers.values() if c.state in ALIVE]


def count_failure(books: Books, op: PTOperator, error: str, window: int, now: int) -> dict[str, Any]:
    """Keep ``op``'s failure (its error line, at ``window``) as its label's last one; the label's record
    (its ``seen`` holds the recent (window, error) pairs, for telling a deterministic failure)."""
    record = books.failures.setdefault(op.label, {"id": op.id, "count": 0, "seen": collections.deque(maxlen=20)})
    record.update(id=op.id, error=error, window=window_hex(window), millis=now, count=record["count"] + 1)
    return record


def handle_start(books: Books, ev: Start) -> list[Instruction]:
    """Ask for every planned container."""
    note(books, ev.now, "plan", f"{len(books.plan.operators)} operators in {len(books.plan.containers)} containers")
    error, lines = placement.check(books, ev.now)
    for line in lines:
        note(books, ev.now, "placement", line)
    if error:  # a relax: false rule the cluster cannot hold: nothing is launched
        finish(books, "FAILED", f"cannot place the containers: {error}", ev.now)
        for container in books.plan.containers.values():
            container.state = ContainerState.RELEASED
        return maybe_finish(books)
    # the committed window's first computation (over the whole plan: 0.1-0.2 s at 20,000
    # operators) here, before any container can call, not in the first container's heartbeat
    return [*books.committed_window.update(books), *(launch(books, c, ev.now) for c in books.plan.containers.values())]


def handle_note(books: Books, ev: Note) -> list[Instruction]:
    """Something for the event log."""
    note(books, ev.now, ev.kind, ev.text)
    return []
