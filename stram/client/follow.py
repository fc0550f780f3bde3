"""Following a running application until it ends: the one progress loop of ``stram launch``.

A local run and a YARN run differ in how they learn the state (the master's
process and ``status.json``, or YARN's application report), how they shut
down and kill, and what a progress line says; each is a :class:`Run`. The loop
in :func:`follow` is shared: progress lines (in place on a terminal, every few
seconds otherwise), a graceful shutdown after ``--duration``, Ctrl-C (or
SIGTERM) kills the application, and one final line ``<appId> <STATE>[: why]``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, Protocol

from stram.common.errors import StramError

__all__ = ["Run", "follow", "pause_note", "stall_note"]


def pause_note(info: dict[str, Any]) -> str:
    """What waits for space, for a progress line: ``" | paused: no space left on device writing …"``."""
    paused = info.get("paused") or {}
    if not paused:
        return ""
    who, what = next(iter(paused.items()))
    return f" | {what}" + ("" if who == "master" else f" (in {who})")


def stall_note(info: dict[str, Any]) -> str:
    """The watchdog's word on a frozen committed window, for a progress line (" | stalled: ...")."""
    return f" | stalled: {info['stalled']}" if info.get("stalled") else ""


class Run(Protocol):
    """What :func:`follow` needs of an application it follows."""

    #: The application id, shown in messages.
    app_id: str

    def poll(self) -> str | None:
        """The final state once the application ended, else None (may restart a dead master)."""

    def progress(self, elapsed: float) -> str:
        """One progress line ("" when there is nothing to say)."""

    def can_shut_down(self) -> bool:
        """True once a graceful shutdown request can be delivered."""

    def shutdown(self) -> None:
        """Ask for a graceful shutdown (raises :class:`StramError` when it could not be asked)."""

    def kill(self) -> None:
        """End the application at once (Ctrl-C)."""

    def outcome(self) -> tuple[str, str]:
        """(final state, diagnostics) after :meth:`poll` reported the end."""

    # Optional: ``wait_end(seconds)`` waits up to ``seconds`` but returns as soon as the
    # application ended (else :func:`follow` sleeps between two looks).


def follow(run: Run, duration: float | None = None, *, interval: float = 0.5,
           quiet_seconds: float = 5.0) -> int:
    """Show ``run``'s progress until it ends.

    Parameters
    ----------
    run:
        The application being followed.
    duration:
        After this many seconds ask for a graceful shutdown (``--duration``).
    interval:
        Seconds between two looks at the application.
    quiet_seconds:
        Off a terminal, the least time between two progress lines.

    Returns
    -------
    int
        0 if the application SUCCEEDED, 130 after Ctrl-C (it is killed), else 1.
    """
    interrupted: list[bool] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda *_: interrupted.append(True))
    tty = sys.stderr.isatty()
    started = time.monotonic()
    shutdown_sent = False
    last_line = ""
    last_print = -quiet_seconds * 2
    try:
        while run.poll() is None:
            if interrupted:
                print(f"\ninterrupted: killing {run.app_id}", file=sys.stderr)
                run.kill()
                return 130
            elapsed = time.monotonic() - started
            if duration is not None and elapsed >= duration and not shutdown_sent and run.can_shut_down():
                shutdown_sent = True
                print(f"\n--duration {duration:g}s reached: shutting {run.app_id} down", file=sys.stderr)
                try:
                    run.shutdown()
                except StramError as exc:
                    print(f"warning: graceful shutdown failed ({exc}); killing the application",
                          file=sys.stderr)
                    run.kill()
            due = tty or elapsed - last_print >= quiet_seconds
            line = run.progress(elapsed) if due else ""
            if line and line != last_line:
                last_print = elapsed
                print(("\r" + line.ljust(100)) if tty else line, end="" if tty else "\n",
                      file=sys.stderr, flush=True)
                last_line = line
            # a run that can tell its end returns at once (stram launch exits right after its app)
            getattr(run, "wait_end", time.sleep)(interval)
    except KeyboardInterrupt:
        print(f"\ninterrupted: killing {run.app_id}", file=sys.stderr)
        run.kill()
        return 130
    finally:
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    state, diagnostics = run.outcome()
    print(("\n" if tty else "") + f"{run.app_id} {state}" + (f": {diagnostics}" if diagnostics else ""),
          file=sys.stderr)
    return 0 if state == "SUCCEEDED" else 1
