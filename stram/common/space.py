"""A full disk: a write that fails for want of space waits for space, for a while, and says so.

A write under ``APP_PATH`` or an output directory that fails with ENOSPC or
EDQUOT (HDFS: a space quota) is not a bug in the application: space may come
back (a file is deleted, a quota raised). So the writer pauses and retries with
backoff, and the pause is visible: :class:`Pauses` holds what waits and since
when (a container reports :meth:`Pauses.describe` in its heartbeat; the master
shows it in ``status.json``, ``get-app-info`` and the progress line). Only after
``DISK_FULL_TIMEOUT_SECS`` does the writer give up with :class:`DiskFull`, a
:class:`~stram.operator.FatalError`: the application ends FAILED and its
diagnostics say what could not be written, where, and for how long.

:func:`retry` is the one loop, for the container's writes (checkpoints, the
built-in outputs; operators may call it for their own files); the master waits
for its journal the same way with its own :class:`Pauses` (``stram.master.process.master``).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from typing import Any, Callable, TypeVar

from stram.common.errors import FatalError

__all__ = ["DEFAULT_TIMEOUT", "DiskFull", "Pauses", "PAUSES", "is_no_space", "retry", "no_space_text"]

log = logging.getLogger("stram.common.space")

T = TypeVar("T")

#: Seconds a write waits for space before the application fails (attribute DISK_FULL_TIMEOUT_SECS).
DEFAULT_TIMEOUT = 300.0
#: Longest sleep between two tries.
MAX_DELAY = 2.0
#: Seconds between two log lines about the same pause.
LOG_EVERY = 30.0

_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_WORDS = ("no space left on device", "disk quota exceeded", "quota exceeded", "dsquotaexceededexception",
          "errno 28]", "errno 122]")


class DiskFull(FatalError):
    """Space did not come back within the time limit: restarting cannot help, the application fails."""


def no_space_text(text: str) -> bool:
    """True when an error message says a disk or a quota is full."""
    low = text.lower()
    return any(word in low for word in _WORDS)


def is_no_space(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what caused it) is a write refused for want of space.

    ``OSError.errno`` ENOSPC or EDQUOT; ``pyarrow.fs`` reports a local full disk
    as ``OSError("... [errno 28] No space left on device")`` and HDFS a quota as
    a ``DSQuotaExceededException`` in the message, so the message counts too.
    """
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, DiskFull):
            return False  # the time limit passed: not something to wait for any longer
        if isinstance(exc, OSError) and (exc.errno in _ERRNOS or no_space_text(str(exc))):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class Pauses:
    """What waits for space now, and since when (thread-safe).

    Parameters
    ----------
    timeout:
        Seconds one write may wait before it gives up (:class:`DiskFull`).
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        #: what -> [since (monotonic), the error, writers waiting, last log line (monotonic)]
        self._waiting: dict[str, list[Any]] = {}

    def begin(self, what: str, exc: BaseException) -> float:
        """A writer of ``what`` waits (again); when this pause of ``what`` began."""
        now = time.monotonic()
        with self._lock:
            entry = self._waiting.get(what)
            if entry is None:
                entry = self._waiting[what] = [now, exc, 0, now]
                log.warning("paused: no space left %s (%s); retrying for up to %.0f s", what, exc, self.timeout)
            entry[1] = exc
            entry[2] += 1
            return entry[0]

    def still(self, what: str) -> None:
        """Log, at most every :data:`LOG_EVERY` seconds, that ``what`` still waits."""
        now = time.monotonic()
        with self._lock:
            entry = self._waiting.get(what)
            if entry is None or now - entry[3] < LOG_EVERY:
                return
            entry[3] = now
            since = now - entry[0]
        log.warning("still paused after %.0f s: no space left %s; retrying for up to %.0f s more",
                    since, what, max(0.0, self.timeout - since))

    def end(self, what: str, resumed: bool = True) -> None:
        """A writer of ``what`` stopped waiting (``resumed``: its write succeeded)."""
        with self._lock:
            entry = self._waiting.get(what)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] > 0:
                return
            del self._waiting[what]
            since = time.monotonic() - entry[0]
        if resumed:
            log.info("resumed after %.1f s: space came back %s", since, what)

    def active(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def describe(self) -> str:
        """``paused: no space left on device writing …; retrying (12 s of 300 s)``, or "" when nothing waits."""
        now = time.monotonic()
        with self._lock:
            items = sorted(self._waiting.items(), key=lambda kv: kv[1][0])
        if not items:
            return ""
        what, (since, exc, _, _) = items[0]
        more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
        return (f"paused: no space left on device {what}{more}; retrying ({now - since:.0f} s of "
                f"{self.timeout:.0f} s, then the application fails): {exc}")

    def overdue(self) -> str | None:
        """The first pause older than the time limit, described; None while every pause is within it."""
        now = time.monotonic()
        with self._lock:
            for what, (since, exc, _, _) in self._waiting.items():
                if now - since >= self.timeout:
                    return (f"no space left on device {what} for {now - since:.0f} s "
                            f"(DISK_FULL_TIMEOUT_SECS={self.timeout:g}): {exc}")
        return None


#: This process's pauses (a container agent reports them in its heartbeat).
PAUSES = Pauses()


def retry(what: str, fn: Callable[..., T], *args: Any, pauses: Pauses | None = None,
          stop: Callable[[], bool] = lambda: False) -> T:
    """``fn(*args)``, tried again with backoff while it fails for want of space.

    Parameters
    ----------
    what:
        What is written, for people: ``"writing checkpoint 5/6a3f (/apps/x/checkpoints)"``.
    pauses:
        Where the pause is shown (default :data:`PAUSES`, this process's).
    stop:
        True when the caller no longer needs the write (its operator is stopping):
        the last error is raised.

    Raises
    ------
    DiskFull
        Still no space after ``pauses.timeout`` seconds (the message says what, where,
        how long and the error).
    OSError
        Any other failure, at once.
    """
    pauses = pauses if pauses is not None else PAUSES
    delay = 0.05
    waiting = False
    try:
        while True:
            try:
                result = fn(*args)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                if not waiting:
                    waiting = True
                    since = pauses.begin(what, exc)
                if stop():
                    raise
                if time.monotonic() - since >= pauses.timeout:
                    raise DiskFull(f"no space left on device {what} for {time.monotonic() - since:.0f} s "
                                   f"(DISK_FULL_TIMEOUT_SECS={pauses.timeout:g}): {exc}") from exc
                pauses.still(what)
                time.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
                continue
            if waiting:
                waiting = False
                pauses.end(what, resumed=True)
            return result
    finally:
        if waiting:
            pauses.end(what, resumed=False)
