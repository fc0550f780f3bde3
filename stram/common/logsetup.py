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

:func:`exit_fast` ends a master's or a container's process without the
interpreter's module teardown once everything that teardown would have done
for others (exit handlers, open files) is done.
"""

from __future__ import annotations

import _io
import atexit
import gc
import io
import itertools
import logging
import logging.handlers
import os
import sys
import threading
import time
from typing import Any, NoReturn

__all__ = ["FORMAT", "DEFAULT_MAX_BYTES", "DEFAULT_BACKUPS", "RateLimit", "rate_limit", "configure",
           "limits", "exit_fast", "flush_open_files", "freeze_startup"]

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


#: Seconds :func:`exit_fast` waits for threads that a normal exit would wait for before it gives
#: up the fast path. At a master's or a container's end none is left in practice (measured: at
#: most a worker of the master's umbilical pool, shut down without waiting, ends within a few ms).
THREAD_GRACE = 0.05


def exit_fast(code: Any = 0, flush_files: bool = False) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's finalization.

    Module teardown with grpc (and pyarrow, where loaded) costs about 0.1 s of each process's exit
    (master and container), and the end of an application (``stram launch`` returning) waits
    on both. What that finalization does that matters to others is done here first:

    1. Threads. A normal exit waits for every non-daemon thread and every thread-pool worker
       (:mod:`concurrent.futures` joins those at exit, daemon or not). If one is alive after
       :data:`THREAD_GRACE` seconds, this falls back to ``sys.exit(code)``, the normal exit,
       and logs why at DEBUG. Measured at a local wordcount's end (specs/wordcount.yaml, 11
       ends): the container has no thread but its main one; the master has grpc's poller
       (daemon) and, in 3 ends of 11, a worker of its umbilical pool (shut down with
       wait=False), which ended within 0.2-8 ms of the join.
    2. Exit handlers: every :mod:`atexit` handler runs (last registered first, as at a normal
       exit) — the YARN launcher's (the staging directory with the keytab deleted, the final
       state reported to YARN through Skein), ``weakref.finalize(atexit=True)`` (temporary
       directories), :mod:`multiprocessing`'s, :func:`logging.shutdown`. Skipping these is why
       a plain ``os._exit`` after ``logging.shutdown()`` was reverted (94454b8).
    3. With ``flush_files`` (the container, which runs users' operators): every file object
       still open for writing is flushed (:func:`flush_open_files`), as its finalizer would
       have; then standard output and error (always).
    4. ``os._exit`` with the code ``sys.exit(code)`` would give: None is 0; a code that is not
       an int (a message) takes the normal exit, which prints it and exits 1.

    What is not done: ``__del__`` methods of objects still alive at the end (an unclosed
    ``zipfile.ZipFile`` or ``pyarrow.parquet.ParquetWriter`` is not finished, where module
    teardown usually would have finished it).
    """
    if code is None:
        code = 0
    if isinstance(code, bool) or not isinstance(code, int) or not -(1 << 31) <= code < (1 << 31):
        sys.exit(code)  # a message (printed, exit status 1) or a number os._exit cannot take
    waiting = _threads_an_exit_waits_for(THREAD_GRACE)
    if waiting:
        logging.getLogger("stram.agent.exit").debug(
            "normal interpreter exit: threads still running: %s", ", ".join(t.name for t in waiting))
        sys.exit(code)
    atexit._run_exitfuncs()
    if flush_files:
        flush_open_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - closed, or its reader is gone
            pass
    os._exit(code)


def _threads_an_exit_waits_for(grace: float) -> list[threading.Thread]:
    """Threads a normal exit would join that are still alive after waiting up to ``grace`` s."""
    main = threading.main_thread()
    pools = sys.modules.get("concurrent.futures.thread")
    workers = set(getattr(pools, "_threads_queues", {}).keys()) if pools is not None else set()

    def alive() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t is not main and t is not threading.current_thread() and t.is_alive()
                and (not t.daemon or t in workers)]

    deadline = time.monotonic() + grace
    waiting = alive()
    for thread in waiting:
        thread.join(max(0.0, deadline - time.monotonic()))
    return alive() if waiting else waiting


class _MadeAfterStartup:
    """Made right after :func:`freeze_startup`'s freeze: if :func:`gc.get_objects` no longer
    finds it, something froze the objects made since (a user's :func:`gc.freeze`)."""


_after_startup: _MadeAfterStartup | None = None


def freeze_startup() -> None:
    """Move every object the process holds now to the garbage collector's permanent generation
    (:func:`gc.freeze`), so that :func:`flush_open_files` at its end scans only objects made
    afterwards. For a container right before its agent starts: its modules (grpc, psutil, the
    agent's), about 40,000 objects, none of them a file a user's operator opened.

    Measured at a local wordcount's end (specs/wordcount.yaml): the scan takes 0.7-5 ms over
    the 3,500 objects made after this, 25-40 ms over all 42,000. Frozen objects are still
    freed by reference counting; the collector's full passes no longer traverse them.
    """
    global _after_startup
    gc.freeze()
    _after_startup = _MadeAfterStartup()


def flush_open_files() -> int:
    """Flush every file object still open for writing, as the interpreter's finalization would
    have when it freed them; the number flushed (or closed).

    Buffered files (``open(…, "w")``/``"wb"``/``"r+b"``, ``os.fdopen``, ``tempfile``) are
    flushed. File objects written in Python on top of :class:`io.IOBase` (``gzip.GzipFile``,
    ``bz2``, ``lzma``) are closed, as their finalizer does: a flush would not write a gzip
    member's trailer. Outside in: text wrappers first, then those, then binary buffers.
    Errors are ignored object by object (a full disk, a closed pipe).

    The objects are found among the objects the garbage collector tracks, by type, in C loops
    (``map``/``itertools.compress``; a Python ``isinstance`` loop took twice as long). Objects
    frozen by :func:`freeze_startup` are skipped (made before any operator ran); if anything
    else froze objects (a user's :func:`gc.freeze`), all are unfrozen and scanned. Measured at
    a local wordcount's end: 0.7-5 ms after :func:`freeze_startup`, 25-40 ms over all 42,000
    objects without it (grpc, psutil and the agent's modules loaded).
    """
    def scan() -> tuple[list[Any], list[type]]:
        objects = gc.get_objects()
        return objects, list(map(type, objects))

    objects, types = scan()
    kinds = set(types)
    if (_after_startup is None or _MadeAfterStartup not in kinds) and gc.get_freeze_count():  # (it
        # walks the frozen objects: 1 ms)
        gc.unfreeze()  # frozen by someone else: files may be among them
        objects, types = scan()
        kinds = set(types)
    concrete = (io.FileIO, io.BytesIO, io.StringIO, io.BufferedReader, io.BufferedWriter,
                io.BufferedRandom, io.BufferedRWPair, io.TextIOWrapper)
    text, buffered, written_in_python = set(), set(), set()
    for kind in kinds:
        if issubclass(kind, io.TextIOWrapper):
            text.add(kind)
        elif issubclass(kind, (io.BufferedWriter, io.BufferedRandom)):
            buffered.add(kind)
        elif issubclass(kind, _io._IOBase) and not issubclass(kind, concrete):  # io.IOBase's C base:
            # no ABC machinery (its first issubclass calls for 300 types cost 17 ms)
            written_in_python.add(kind)
    found = list(itertools.compress(objects, map((text | buffered | written_in_python).__contains__, types)))
    del objects, types
    done = 0
    # outside in: text over a gzip file over a buffered file (gzip.open(…, "wt"))
    for these, finish in ((text, "flush"), (written_in_python, "close"), (buffered, "flush")):
        for stream in found:
            if type(stream) not in these:
                continue
            try:
                if stream.closed or not stream.writable():
                    continue
                getattr(stream, finish)()
                done += 1
            except Exception:  # noqa: BLE001 - a full disk, a closed pipe: the next one all the same
                pass
    return done
