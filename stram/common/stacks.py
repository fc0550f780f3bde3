"""Every thread's Python stack in this process, as plain data: Apex's STACKTRACE answer.

The agent sends :func:`thread_stacks` (JSON-encoded, in
``ContainerHeartbeat.stack_trace``) after a heartbeat response asked for it
(``stack_trace_required``); ``stram stack APP CONTAINER`` and the master's
blocked-operator diagnostic show it with :func:`format_thread`.
"""

from __future__ import annotations

import linecache
import sys
import threading
from typing import Any, Mapping

__all__ = ["thread_stacks", "format_thread", "MAX_FRAMES"]

#: Innermost frames kept per thread (a deep recursion is cut at its outer end).
MAX_FRAMES = 100


def thread_stacks(operators: Mapping[int, int] | None = None) -> dict[str, Any]:
    """``{"threads": [...]}``: every live thread of this process with its stack.

    Parameters
    ----------
    operators:
        Thread ident -> operator id, for the threads that run operators.

    Each thread is ``{"name", "ident", "daemon", "operator", "frames"}``; frames are
    ``{"file", "line", "function", "code"}``, outermost first (the order of a
    Python traceback), at most :data:`MAX_FRAMES` of the innermost.
    """
    operators = operators or {}
    by_ident = {t.ident: t for t in threading.enumerate()}
    threads = []
    for ident, frame in sys._current_frames().items():
        frames = []
        f = frame
        while f is not None and len(frames) < MAX_FRAMES:
            code = f.f_code
            frames.append({"file": code.co_filename, "line": f.f_lineno, "function": code.co_name,
                           "code": linecache.getline(code.co_filename, f.f_lineno).strip()})
            f = f.f_back
        frames.reverse()
        thread = by_ident.get(ident)
        threads.append({"name": thread.name if thread is not None else f"thread-{ident}", "ident": ident,
                        "daemon": bool(thread.daemon) if thread is not None else None,
                        "operator": operators.get(ident), "frames": frames})
    threads.sort(key=lambda t: (t["operator"] is None, t["name"]))
    return {"threads": threads}


def format_thread(thread: Mapping[str, Any], indent: str = "  ") -> str:
    """One thread as a Python traceback prints a stack (``File "...", line N, in f``)."""
    op = thread.get("operator")
    head = f'Thread "{thread.get("name")}" ({thread.get("ident")})' + (f", operator {op}" if op is not None else "")
    lines = [head + ", most recent call last:"]
    for fr in thread.get("frames") or ():
        lines.append(f'{indent}File "{fr.get("file")}", line {fr.get("line")}, in {fr.get("function")}')
        if fr.get("code"):
            lines.append(f"{indent}  {fr['code']}")
    return "\n".join(lines)
