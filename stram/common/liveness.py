"""Whether a local process still runs, as the registry and the launcher must judge it.

A process that was SIGKILLed is not gone at once: under load it can spend
seconds in the kernel's exit path, still listed with status ``running`` but
with its memory already released, before it becomes a zombie. Judged by
``psutil.Process.status()`` alone, such a process looks alive, and a dead
supervisor would keep an application RUNNING in ``stram status``. Linux marks
a process that has begun to exit with ``PF_EXITING`` in ``/proc/PID/stat``;
:func:`ended` reads it.
"""

from __future__ import annotations

import psutil

__all__ = ["PF_EXITING", "ended", "stat_flags"]

#: The kernel's per-task flag set when the task enters its exit path (include/linux/sched.h).
PF_EXITING = 0x00000004


def stat_flags(pid: int) -> int | None:
    """The ``flags`` field of ``/proc/PID/stat``; None where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session tty_nr tpgid flags ..."; comm may hold spaces and ')'.
    fields = data[data.rindex(b")") + 2:].split()
    try:
        return int(fields[6])
    except (IndexError, ValueError):
        return None


def ended(proc: psutil.Process) -> bool:
    """True when ``proc`` has exited or is exiting: gone, a zombie, dead, or flagged
    ``PF_EXITING`` (killed, and still tearing down)."""
    try:
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) or not proc.is_running():
            return True
    except psutil.NoSuchProcess:
        return True
    flags = stat_flags(proc.pid)
    return flags is not None and bool(flags & PF_EXITING)
