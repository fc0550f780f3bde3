"""Log files of the master and the container agents: one copy of each line, a size cap, repeats summarized.

:func:`configure` sets up a process's logging: lines go to one rotating file
(``logging.handlers.RotatingFileHandler``) in the log directory, capped at
``STRAM_LOG_MAX_BYTES`` bytes (default 10 MiB) with ``STRAM_LOG_BACKUPS``
older files (default 5), so a process never holds more than
``max_bytes × (backups + 1)`` of logs. Standard output and error are left to
what is not logging (an interpreter's crash traceback).

:class:`RateLimit` is a logging filter for hot paths (refused calls, unknown
containers, an unreachable master): more than ``burst`` records of one message
template from one logger within ``interval`` seconds are dropped, and the next
record of that template let through says how many were::

    refused call from ipv4:127.0.0.1:5312: wrong application token
    (… repeated 532 times in the last 10 s)

A handler that cannot write (a full disk) drops the line instead of printing
a traceback for each one (``logging.raiseExceptions`` is off).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import threading
import time
from typing import Any

__all__ = ["FORMAT", "DEFAULT_MAX_BYTES", "DEFAULT_BACKUPS", "RateLimit", "rate_limit", "configure",
           "limits"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Size of a log file before it is rotated (env ``STRAM_LOG_MAX_BYTES``).
DEFAULT_MAX_BYTES = 10 << 20
#: Rotated files kept (env ``STRAM_LOG_BACKUPS``).
DEFAULT_BACKUPS = 5


class RateLimit(logging.Filter):
    """Lets at most ``burst`` records of one template through per ``interval`` seconds.

    A template is (logger, level, unformatted message): "refused call from %s"
    is one template whatever the peer. Dropped records are counted; the first
    record of the template let through afterwards carries the count.

    Parameters
    ----------
    burst:
        Records of one template let through in one interval.
    interval:
        Seconds of one interval (a new one starts at the first record after it).
    clock:
        Monotonic seconds (tests pass their own).
    """

    def __init__(self, burst: int = 5, interval: float = 10.0, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.burst = max(1, burst)
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        #: template -> [interval start, records let through in it, records dropped since the last summary,
        #:              when dropping began]
        self._seen: dict[tuple[str, int, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.interval:
                dropped, since = (entry[2], entry[3]) if entry is not None else (0, now)
                self._seen[key] = [now, 1, 0, now]
                if len(self._seen) > 10000:  # templates are few; never let the table grow unbounded
                    self._seen = {key: self._seen[key]}
            else:
                entry[1] += 1
                if entry[1] <= self.burst:
                    dropped, since = 0, now
                else:
                    if entry[2] == 0:
                        entry[3] = now
                    entry[2] += 1
                    return False
        if dropped:
            record.msg = f"{record.getMessage()} (… repeated {dropped} times in the last " \
                         f"{max(1.0, now - since):.0f} s)"
            record.args = None
        return True


def rate_limit(logger: logging.Logger | str, burst: int = 5, interval: float = 10.0) -> RateLimit:
    """Put a :class:`RateLimit` on ``logger`` (records logged through it, not its children); the filter."""
    if isinstance(logger, str):
        logger = logging.getLogger(logger)
    for existing in logger.filters:
        if isinstance(existing, RateLimit):
            return existing
    limit = RateLimit(burst, interval)
    logger.addFilter(limit)
    return limit


def limits() -> tuple[int, int]:
    """(max bytes of one file, rotated files kept) from ``STRAM_LOG_MAX_BYTES`` and ``STRAM_LOG_BACKUPS``.

    A value that is not a whole number is ignored (the default is used): a bad
    setting never stops a master or a container.
    """
    def read(name: str, default: int, least: int) -> int:
        try:
            return max(least, int(os.environ.get(name, default)))
        except ValueError:
            return default
    return read("STRAM_LOG_MAX_BYTES", DEFAULT_MAX_BYTES, 1024), read("STRAM_LOG_BACKUPS", DEFAULT_BACKUPS, 0)


def configure(path: str | None, level: str | int = "INFO") -> logging.Handler:
    """Log to the rotating file ``path`` (None: standard error, for a process without a log dir).

    Replaces the root logger's handlers; returns the new handler.
    """
    logging.raiseExceptions = False  # a full disk drops log lines, it does not print a traceback per line
    if path is None:
        handler: logging.Handler = logging.StreamHandler()
    else:
        max_bytes, backups = limits()
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    try:
        root.setLevel(level if isinstance(level, int) else level.upper())
    except ValueError:
        root.setLevel(logging.INFO)
    return handler
