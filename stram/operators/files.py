"""Watching a directory for new files: an input operator that reads each file that appears once.

Apex's AbstractFileInputOperator in stram's terms: :class:`DirectoryInput`
lists a directory (local, or a URI through :mod:`stram.common.fs`) every
``scan_interval_ms``, reads the new files in name order, and checkpoints which
files it finished plus its byte offset in the current one, so a restart from a
checkpoint never reads a file twice and never skips one.
"""

from __future__ import annotations

import collections
import fnmatch
import logging
import time
from typing import Any, Optional

import orjson

from stram.common import fs
from stram.common.partition import partition_hash
from stram.common.watermarks import IDLE, MAX_WATERMARK
from stram.operator import FatalError, InputOperator, OperatorContext, OutputPort, ShutdownException
from stram.operators.io import LineChunks, decode_lines

__all__ = ["DirectoryInput", "owns_file"]

log = logging.getLogger("stram.operators.files")

#: Malformed lines logged one by one; past it, only the 16th, 32nd, 64th, ... (as JsonLinesReader does).
LOG_MALFORMED = 10
FORMATS = ("lines", "jsonl")


def owns_file(name: str, index: int, count: int) -> bool:
    """True when partition ``index`` of ``count`` reads the file ``name``."""
    return count <= 1 or partition_hash(name) % count == index


class DirectoryInput(InputOperator):
    """Emits the lines (``format: lines``) or JSON objects (``format: jsonl``) of every file that
    appears in the directory ``path``, each file once, in name order.

    Files whose name starts with ``.`` or ``_`` are skipped (write under such a
    name, then rename), and so are names ``pattern`` (fnmatch) does not match.
    Partition i of N reads the files whose name hashes to i (mod N). A JSON line
    that is no object (or lacks a numeric ``timestamp_field``) is logged with its
    file and line number, counted (metric ``malformed``) and skipped. With ``timestamp_field`` the watermark is the
    highest event time seen minus ``out_of_orderness_ms``. ``end_when_idle_ms``
    ends the stream once no new file came for that long (default: never).
    """

    output = OutputPort()
    path: str = ""
    pattern: str = "*"
    format: str = "lines"
    scan_interval_ms: int = 1000
    records_per_window: Optional[int] = None
    timestamp_field: Optional[str] = None
    out_of_orderness_ms: int = 0
    #: No record for this long: the watermark is IDLE (downstream stops waiting for this input).
    idle_timeout_ms: Optional[int] = None
    end_when_idle_ms: Optional[int] = None
    #: Lines read per ``emit_tuples`` call.
    batch_lines: int = 1024
    transient = ("_context", "_reader", "_queue", "_next_scan", "_last_file", "_last_record", "_left",
                 "_logged", "_ended")

    def __init__(self) -> None:
        #: Names of the files read to their end (only those still in the directory are kept).
        self.finished: set[str] = set()
        #: The file being read, the byte offset and the line number (1-based, of the last line read) in it.
        self.current: Optional[str] = None
        self.offset = 0
        self.line = 0
        #: Files partly read by other partitions before a repartition: name -> (offset, line).
        self.resume: dict[str, tuple[int, int]] = {}
        #: Highest event time seen (None: none yet) and malformed lines skipped, in all.
        self.max_ts: Optional[int] = None
        self.malformed = 0
        self._context: Optional[OperatorContext] = None
        self._reader: Optional[LineChunks] = None
        self._queue: collections.deque[str] = collections.deque()
        self._next_scan = 0.0
        self._last_file = 0.0
        self._last_record = 0.0
        self._left: Optional[int] = None
        self._logged = 0
        self._ended = False

    # -- lifecycle ---------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        where = f"DirectoryInput {context.name}"
        if not self.path:
            raise FatalError(f"{where} needs the property 'path' (a directory to watch)")
        checks = [("format", self.format in FORMATS, f"one of {', '.join(FORMATS)}"),
                  ("scan_interval_ms", self.scan_interval_ms >= 0, ">= 0"),
                  ("records_per_window", self.records_per_window is None or self.records_per_window >= 1,
                   "None or >= 1"),
                  ("out_of_orderness_ms", self.out_of_orderness_ms >= 0, ">= 0"),
                  ("batch_lines", self.batch_lines >= 1, ">= 1"),
                  ("timestamp_field", self.timestamp_field is None or self.format == "jsonl",
                   "unset with format 'lines' (lines have no fields)")]
        for name, ok, rule in checks:
            if not ok:
                raise FatalError(f"{where}: property {name!r} must be {rule}, got {getattr(self, name)!r}")
        kind = fs.file_type(self.path)
        if kind == "file":
            raise FatalError(f"{where}: path {self.path} is a file, not a directory to watch")
        self._context = context
        if kind == "missing":
            self._warn(f"{where}: the directory {self.path} does not exist (yet); watching for it")
        now = time.monotonic()
        self._next_scan = 0.0
        self._last_file = self._last_record = now

    def begin_window(self, window_id: int) -> None:
        self._left = self.records_per_window

    def emit_tuples(self) -> None:
        if self._left is not None and self._left <= 0:
            return
        if self.current is None and not self._next_file():
            return
        if self._reader is None:
            self._open()
            if self._reader is None:
                return
        n = self.batch_lines if self._left is None else min(self.batch_lines, self._left)
        run, count, offset = self._reader.read(n)
        if not count:
            self._finish_file()
            return
        first = self.line + 1
        self.line += count
        self.offset = offset
        now = time.monotonic()
        self._last_file = now
        if self.format == "lines":
            out: list[Any] = decode_lines(run)
        else:
            out = self._parse(run.split(b"\n"), first)
        if out:
            self._last_record = now
            if self._left is not None:
                self._left -= len(out)
            self.output.emit_batch(out)

    def end_window(self) -> None:
        context = self._context
        if self.malformed:
            context.set_metric("malformed", self.malformed)
        if self.timestamp_field is None or self._ended:
            return  # no event time, or MAX_WATERMARK went out
        if self.idle_timeout_ms is not None and \
                (time.monotonic() - self._last_record) * 1000 >= self.idle_timeout_ms:
            context.emit_watermark(IDLE)
        elif self.max_ts is not None:
            context.emit_watermark(self.max_ts - self.out_of_orderness_ms)

    def teardown(self) -> None:
        self._close()

    # -- files -------------------------------------------------------------------
    def _next_file(self) -> bool:
        """Make the next file to read current; False when there is none (yet)."""
        if not self._queue:
            now = time.monotonic()
            if now < self._next_scan:
                return False
            self._next_scan = now + self.scan_interval_ms / 1000
            self._queue = collections.deque(self._scan())
            if not self._queue:
                if self.end_when_idle_ms is not None and (now - self._last_file) * 1000 >= self.end_when_idle_ms:
                    self._context.emit_watermark(MAX_WATERMARK)
                    self._ended = True
                    raise ShutdownException(f"DirectoryInput: no new file in {self.path} for "
                                            f"{self.end_when_idle_ms} ms")
                return False
        name = self._queue.popleft()
        self.current = name
        self.offset, self.line = self.resume.pop(name, (0, 0))
        self._last_file = time.monotonic()
        return True

    def _scan(self) -> list[str]:
        """The new files this partition reads, partly read ones first, then by name; forgets the
        finished files that left the directory."""
        index, count = self._context.partition_index, self._context.partition_count
        present = set()
        for info in fs.list_dir(self.path):
            name = info.base_name
            if info.type != fs.FileType.File or name.startswith((".", "_")):
                continue
            if fnmatch.fnmatchcase(name, self.pattern) and owns_file(name, index, count):
                present.add(name)
        if present:  # an empty listing keeps the set (a directory emptied, or briefly away)
            self.finished &= present
        new = present - self.finished
        new.discard(self.current)
        started = sorted(n for n in new if n in self.resume)
        return started + sorted(n for n in new if n not in self.resume)

    def _open(self) -> None:
        uri = fs.join(self.path, self.current)
        try:
            self._reader = LineChunks(uri, self.offset)
        except FileNotFoundError:
            self._warn(f"DirectoryInput {self._context.name}: {uri} disappeared before it was read "
                       f"to its end (at byte {self.offset}); skipped")
            self.current, self.offset, self.line = None, 0, 0

    def _finish_file(self) -> None:
        self._close()
        self.finished.add(self.current)
        self.current, self.offset, self.line = None, 0, 0

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- records -----------------------------------------------------------------
    def _parse(self, raws: list[bytes], first: int) -> list[dict]:
        """The JSON objects of ``raws`` (lines ``first``, ``first + 1``, ... of the current file);
        blank lines are skipped, malformed ones logged and counted."""
        out = []
        append = out.append
        loads = orjson.loads
        field = self.timestamp_field
        top = self.max_ts
        for number, raw in enumerate(raws, first):
            try:
                rec = loads(raw)
            except orjson.JSONDecodeError as exc:
                if raw.strip():
                    self._malformed(number, f"not JSON ({exc})")
                continue
            if type(rec) is not dict:
                self._malformed(number, f"a JSON {type(rec).__name__}, not an object")
                continue
            if field is not None:
                ts = rec.get(field)
                if type(ts) is not int:
                    if type(ts) is not float:
                        self._malformed(number, f"no number in the timestamp field {field!r}")
                        continue
                    ts = int(ts)
                if top is None or ts > top:
                    top = ts
            append(rec)
        self.max_ts = top
        return out

    def _malformed(self, number: int, why: str) -> None:
        """Count a skipped line; log it with its file and number (the first few, then fewer and fewer)."""
        self.malformed += 1
        self._logged += 1
        n = self._logged
        if n <= LOG_MALFORMED or n & (n - 1) == 0:
            self._warn(f"DirectoryInput {self._context.name}: {fs.join(self.path, self.current)} line "
                       f"{number}: {why}; skipped ({n} malformed lines so far)")

    def _warn(self, msg: str) -> None:
        log.warning("%s", msg)
        self._context.log(msg)

    # -- repartitioning ----------------------------------------------------------
    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int, owner: Any) -> list[dict[str, Any]]:
        """Deal the finished and the partly read files out to the new partitions by the hash of
        their names (the same rule ``_scan`` follows)."""
        finished: set[str] = set()
        partial: dict[str, tuple[int, int]] = {}
        highs = []
        malformed = 0
        for state in states:
            finished |= state.get("finished", set())
            partial.update(state.get("resume", {}))
            if state.get("current") is not None:
                partial[state["current"]] = (state.get("offset", 0), state.get("line", 0))
            if state.get("max_ts") is not None:
                highs.append(state["max_ts"])
            malformed += state.get("malformed", 0)
        out = []
        for index in range(count):
            out.append({"finished": {n for n in finished if owns_file(n, index, count)},
                        "current": None, "offset": 0, "line": 0,
                        "resume": {n: v for n, v in partial.items() if owns_file(n, index, count)},
                        # the lowest: no partition declares more than the old ones all had
                        "max_ts": min(highs) if highs else None,
                        "malformed": malformed if index == 0 else 0})
        return out
