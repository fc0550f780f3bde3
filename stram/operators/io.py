"""File input and output operators (local paths or ``pyarrow.fs`` URIs)."""

from __future__ import annotations

import bisect
import json
import logging
import os
import time
from typing import Any, Optional

import orjson

from stram.common import destinations, fs, space
from stram.common.arrowtypes import is_arrow
from stram.common.watermarks import IDLE, MAX_WATERMARK
from stram.operator import (FatalError, InputOperator, InputPort, Operator, OperatorContext, OutputPort,
                            ShutdownException)
from stram.operators import arrowjson

log = logging.getLogger("stram.operators.io")

#: JsonLinesOutput holds at most about this many bytes of a window's lines before writing them out.
PART_BYTES = 8 << 20


class LineReader(InputOperator):
    """Emits each line of a file (without its newline), then ends the stream.

    Its state is its byte offset, so a restart from a checkpoint replays
    exactly the lines after it.
    """

    output = OutputPort()
    path: str = ""
    #: Cap on lines per window (None: no cap).
    lines_per_window: Optional[int] = None
    #: Lines read per ``emit_tuples`` call.
    batch_lines: int = 1024
    transient = ("_file", "_left")

    def __init__(self) -> None:
        #: Byte offset of the next line to read.
        self.offset = 0
        self._file = None
        self._left: Optional[int] = None

    def setup(self, context: OperatorContext) -> None:
        if not self.path:
            raise FatalError("LineReader needs the property 'path'")
        # a restart cannot make a missing file appear: the application fails at once, saying why
        kind = fs.file_type(self.path)
        if kind == "missing":
            raise FatalError(f"LineReader: the input file {self.path} does not exist")
        if kind == "directory":
            raise FatalError(f"LineReader: the input path {self.path} is a directory, not a file")
        self._file = LineChunks(self.path, self.offset)

    def begin_window(self, window_id: int) -> None:
        self._left = self.lines_per_window

    def emit_tuples(self) -> None:
        n = self.batch_lines
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return
        lines, self.offset = self._file.read_lines(n)
        if self._left is not None:
            self._left -= len(lines)
        self.output.emit_batch(lines)
        if len(lines) < n:
            raise ShutdownException("end of file")

    def teardown(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class JsonLinesReader(InputOperator):
    """Emits each line of a JSON-lines file, or of a directory's files in name order, as a dict.

    Restarts exactly like :class:`LineReader`: its state is the file it is in and the byte offset.
    With ``timestamp_field`` (event time, epoch milliseconds) it is a watermark's origin: at the
    end of every window it declares the largest timestamp seen minus ``out_of_orderness_ms``, and
    at the end of its input the maximum, so every event-time window downstream fires. Partition
    ``i`` of ``n`` reads a directory's files ``i``, ``i + n``, ... A line that is not a JSON object
    (or lacks a numeric timestamp) is logged, counted in the ``malformed`` metric and skipped.
    """

    output = OutputPort()
    path: str = ""
    #: Cap on records per window (None: no cap).
    records_per_window: Optional[int] = None
    #: Field holding a record's event time in epoch milliseconds (None: no event time).
    timestamp_field: Optional[str] = None
    #: How far out of order records may arrive: the watermark trails the largest timestamp by this.
    out_of_orderness_ms: int = 0
    #: No record for this long (wall time) and the watermark says IDLE, so that it holds back no
    #: downstream minimum (None: never idle).
    idle_timeout_ms: Optional[int] = None
    #: Lines read per ``emit_tuples`` call.
    batch_lines: int = 1024
    transient = ("_file", "_left", "_files", "_context", "_last_record", "_malformed")

    def __init__(self) -> None:
        #: Index (in this partition's file list) of the file being read, and the offset in it.
        self.file_index = 0
        self.offset = 0
        #: Largest event time seen.
        self.max_timestamp: Optional[int] = None
        self._file: Optional[LineChunks] = None
        self._files: list[str] = []
        self._left: Optional[int] = None
        self._context: Optional[OperatorContext] = None
        self._last_record = 0.0
        self._malformed = 0

    def setup(self, context: OperatorContext) -> None:
        if not self.path:
            raise FatalError("JsonLinesReader needs the property 'path'")
        if self.out_of_orderness_ms < 0:
            raise FatalError(f"JsonLinesReader {context.name}: out_of_orderness_ms must be at least 0, "
                             f"not {self.out_of_orderness_ms}")
        kind = fs.file_type(self.path)
        if kind == "missing":
            raise FatalError(f"JsonLinesReader: the input path {self.path} does not exist")
        if kind == "directory":
            names = sorted(i.base_name for i in fs.list_dir(self.path)
                           if i.type == fs.FileType.File and not i.base_name.startswith((".", "_")))
            files = [fs.join(self.path, n) for n in names]
            self._files = files[context.partition_index::max(context.partition_count, 1)]
        else:
            self._files = [self.path] if context.partition_index == 0 else []
        self._context = context
        self._last_record = time.monotonic()

    def begin_window(self, window_id: int) -> None:
        self._left = self.records_per_window

    def emit_tuples(self) -> None:
        n = self.batch_lines
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return
        if self.file_index >= len(self._files):
            self._end()
        if self._file is None:
            self._file = LineChunks(self._files[self.file_index], self.offset)
        lines, self.offset = self._file.read_lines(n)
        records = self._parse(lines)
        if self._left is not None:
            self._left -= len(lines)
        if records:
            self._last_record = time.monotonic()
            self.output.emit_batch(records)
        if len(lines) < n:  # this file is done: the next one, from its start
            self._file.close()
            self._file = None
            self.file_index += 1
            self.offset = 0

    def _parse(self, lines: list[str]) -> list[dict]:
        records = []
        field = self.timestamp_field
        high = self.max_timestamp
        for line in lines:
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                self._bad("not a JSON object", line)
                continue
            if field is not None:
                ts = record.get(field)
                if type(ts) is not int:
                    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                        self._bad(f"no numeric {field!r}", line)
                        continue
                    ts = int(ts)
                if high is None or ts > high:
                    high = ts
            records.append(record)
        self.max_timestamp = high
        return records

    def _bad(self, why: str, line: str) -> None:
        self._malformed += 1
        if self._malformed <= 10 or self._malformed & (self._malformed - 1) == 0:  # 1..10, then powers of two
            log.warning("JsonLinesReader %s: skipped a line (%s; %d so far): %.200s", self.path, why,
                        self._malformed, line)

    def end_window(self) -> None:
        context = self._context
        if context is None:
            return
        if self._malformed:
            context.set_metric("malformed", self._malformed)
        if self.timestamp_field is None or self.file_index >= len(self._files):
            return  # no event time, or the input ended (its watermark is the maximum)
        idle = self.idle_timeout_ms
        if idle is not None and (time.monotonic() - self._last_record) * 1000 >= idle:
            context.emit_watermark(IDLE)
        elif self.max_timestamp is not None:
            context.emit_watermark(self.max_timestamp - self.out_of_orderness_ms)

    def _end(self) -> None:
        """End of input: the watermark goes to the end of time, then the stream ends."""
        if self._context is not None and self.timestamp_field is not None:
            self._context.emit_watermark(MAX_WATERMARK)
        raise ShutdownException("end of input")

    def teardown(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class LineChunks:
    """Complete lines of a file (local, or a ``pyarrow.fs`` URI), from a byte offset, read in large chunks.

    ``read(n)`` returns up to ``n`` lines as one ``bytes`` run (lines joined by ``\\n``, without the
    last newline), their count and the file offset after them; fewer than ``n`` only at the end of
    the file, and a count of 0 means the end. A last line without a newline counts as a line (it
    comes alone, after the complete ones). ``read_lines(n)`` gives the lines decoded (UTF-8, bad
    bytes replaced, a trailing ``\\r`` dropped). The buffer keeps a position instead of slicing the
    rest off after every read, and a read never scans a byte twice, so a call costs time in the
    bytes it returns, not in the buffer size.
    """

    CHUNK = 1 << 20

    def __init__(self, uri: str, offset: int) -> None:
        self._f = fs.open_input(uri)
        if offset:
            self._f.seek(offset)
        #: File offset of the next unread line.
        self.offset = offset
        self._buf = b""
        self._pos = 0
        self._eof = False

    def _fill(self) -> bool:
        """Append the next chunk to the unread part of the buffer (which then starts at 0); False at
        the end of the file."""
        if self._eof:
            return False
        chunk = self._f.read(self.CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + chunk if self._pos < len(self._buf) else chunk
        self._pos = 0
        return True

    def read(self, n: int) -> tuple[bytes, int, int]:
        end, count = self._pos, 0
        while True:
            find = self._buf.find
            while count < n:
                cut = find(b"\n", end)
                if cut < 0:
                    break
                end = cut + 1
                count += 1
            if count == n:
                break
            pos = self._pos
            if not self._fill():
                break
            end -= pos      # the unread bytes moved to the buffer's start
        buf, pos = self._buf, self._pos
        if count:
            self._pos = end
            self.offset += end - pos
            return buf[pos:end - 1], count, self.offset
        if pos < len(buf):  # the last line, without a newline
            self._buf, self._pos = b"", 0
            self.offset += len(buf) - pos
            return buf[pos:], 1, self.offset
        return b"", 0, self.offset

    def read_lines(self, n: int) -> tuple[list[str], int]:
        """Up to ``n`` lines, decoded, without newlines (fewer only at the end), and the offset after them."""
        lines: list[str] = []
        while len(lines) < n:
            run, count, _ = self.read(n - len(lines))
            if not count:
                break
            lines += decode_lines(run)
        return lines, self.offset

    def close(self) -> None:
        self._f.close()


def decode_lines(run: bytes) -> list[str]:
    """The lines of a run of lines joined by ``\\n`` (as :meth:`LineChunks.read` gives them): decoded as
    UTF-8 (bad bytes replaced), a trailing ``\\r`` dropped.

    The run is decoded at once: a newline byte is never part of a multi-byte UTF-8 sequence, so this
    decodes each line exactly as decoding it alone would.
    """
    text = run.decode("utf-8", "replace")
    lines = text.split("\n")
    if "\r" in text:
        lines = [line.rstrip("\r") for line in lines]
    return lines


#: What orjson cannot write (an integer past 64 bits) goes through the standard encoder, as before.
_std_json = json.JSONEncoder(separators=(",", ":"), default=str).encode
#: datetimes and dataclasses as ``str()`` gives them (the standard encoder's ``default=str``), not orjson's own forms.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _to_json(obj: Any) -> bytes:
    """One JSON line of a tuple (no newline), compact, UTF-8.

    orjson, at half the standard encoder's time per row (the encoder was 12% of the one-container
    word count's profile samples); non-ASCII text is written as UTF-8 rather than ``\\u`` escapes, and a
    NaN or infinite float as ``null`` (the standard encoder wrote ``NaN``, which is not JSON).
    An Arrow batch or table raises :class:`_ArrowRows`: it is many lines (:mod:`.arrowjson`).
    """
    try:
        return orjson.dumps(obj, default=_default, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, a cycle, a default() that fails
        if is_arrow(obj):
            raise _ArrowRows() from None
        return _std_json(obj).encode()


class _ArrowRows(Exception):
    """A tuple was an Arrow batch or table: one line per row, not one line."""


def _default(obj: Any) -> Any:
    if is_arrow(obj):
        raise TypeError("an Arrow batch is many lines")
    return str(obj)


def drop_torn_line(uri: str) -> int:
    """Cut a JSON-lines file back to its last complete line; the bytes dropped.

    An append that was cut short (the process killed mid-write, or the disk
    full) leaves part of a line at the end; the next append would glue a new
    line onto it. The window that line belonged to never ended, so it is
    written again by the replay (AT_LEAST_ONCE) or, at most once, not at all.
    """
    filesystem, path = fs.filesystem(uri)
    info = filesystem.get_file_info(path)
    if info.type != fs.FileType.File or not info.size:
        return 0
    with filesystem.open_input_file(path) as f:
        f.seek(info.size - 1)
        if f.read(1) == b"\n":
            return 0
    data = fs.read_bytes(uri)
    keep = data[:data.rfind(b"\n") + 1]
    if isinstance(filesystem, fs.LocalFileSystem):
        os.truncate(path, len(keep))
    else:  # HDFS and others: pyarrow has no truncate; replace the file (rare: only after a torn append)
        fs.write_atomic(uri, keep)
    return len(data) - len(keep)


class JsonLinesOutput(Operator):
    """Writes each tuple as one JSON line into ``*.jsonl`` files under ``path``.

    In EXACTLY_ONCE mode each window goes to a temporary file (not ending in
    ``.jsonl``) that becomes final, idempotently, once the window is
    committed; a replayed window rewrites its temporary file, so output is
    never duplicated and never dropped. In the other modes lines are appended
    to one file per partition and flushed at every window's end.

    A window's lines are held in memory up to :data:`PART_BYTES`: a bigger window is written as
    it goes, in parts of that many bytes (the line that reaches the bound ends a part, so a replayed
    window splits alike); in EXACTLY_ONCE mode part ``k > 0`` of window ``w`` is the file
    ``<w>_<k>.jsonl`` beside ``<w>.jsonl`` (the names sort in the window's order).
    """

    input = InputPort()
    path: str = ""
    transient = ("_out", "_local", "_lines", "_size", "_part", "_window", "_exactly_once", "_dir", "_name")

    def __init__(self) -> None:
        #: Windows whose temporary files await finalization (EXACTLY_ONCE).
        self.pending: list[int] = []
        self._out = None
        #: The local file appended to (AT_LEAST_ONCE / AT_MOST_ONCE on a local file system).
        self._local = ""
        self._lines: list[bytes] = []
        self._size = 0      # bytes of _lines (newlines left out)
        self._part = 0      # parts of the window written so far
        self._window = 0
        self._exactly_once = False
        self._dir = ""
        self._name = ""

    def setup(self, context: OperatorContext) -> None:
        if not self.path:
            raise ValueError("JsonLinesOutput needs the property 'path'")
        self._exactly_once = context.attributes.get("PROCESSING_MODE") == "EXACTLY_ONCE"
        self._name = f"{context.name}-{context.id}"
        self._dir = fs.join(self.path, self._name) if self._exactly_once else self.path
        try:
            # a local destination someone else controls (or a link planted in it) is refused
            destinations.check_output_dir(self.path)
            fs.makedirs(self._dir)
            destinations.check_output_dir(self._dir)
            if not self._exactly_once:
                # At least / at most once: one file per partition, appended to
                # across restarts (a replay may repeat lines in AT_LEAST_ONCE).
                uri = fs.join(self.path, f"part-{self._name}.jsonl")
                filesystem, path = fs.filesystem(uri)
                if isinstance(filesystem, fs.LocalFileSystem):
                    os.close(destinations.open_own_append(path))  # never through a link, never another's file
                    self._local = path  # each window appended whole or not at all (see end_window)
                drop_torn_line(uri)
                if not self._local:
                    self._out = filesystem.open_append_stream(path)
        except destinations.UnsafeDestination as exc:
            raise FatalError(f"JsonLinesOutput {self._name}: {exc}") from None

    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._lines = []
        self._size = self._part = 0

    def process_input(self, tuple: Any) -> None:
        self.process_batch([tuple])

    def process_batch(self, tuples: list) -> None:
        try:
            lines = list(map(_to_json, tuples))
        except _ArrowRows:
            for item in tuples:
                if is_arrow(item):
                    for batch in (item.to_batches() if hasattr(item, "to_batches") else (item,)):
                        self._add_rows(batch)
                else:
                    self._add_lines([_to_json(item)])
            return
        self._add_lines(lines)

    def _add_rows(self, batch: Any) -> None:
        """An Arrow batch's rows, a line each, encoded column by column (:func:`.arrowjson.json_lines`);
        a part ends with the row whose line reaches the bound, as :meth:`_add_lines` ends one."""
        lines = arrowjson.json_lines(batch, _to_json)
        count = len(lines)
        if not count:
            return
        _, offset_buffer, data_buffer = lines.buffers()
        offsets = memoryview(offset_buffer).cast("i")[lines.offset:lines.offset + count + 1]  # a string array's int32s
        first, end = offsets[0], offsets[count]
        data = memoryview(data_buffer)
        if self._size + (end - first - count) < PART_BYTES:  # bytes without the newlines, as _size counts
            self._lines.append(data[first:end - 1])
            self._size += end - first - count
            return
        ends = offsets[1:].tolist()
        content = [e - first - i for i, e in enumerate(ends, 1)]  # rows 0..i's bytes, newlines left out
        start = 0
        while start < count:
            before = content[start - 1] if start else 0
            row = bisect.bisect_left(content, PART_BYTES - self._size + before, lo=start)
            stop = min(row + 1, count)
            self._lines.append(data[(ends[start - 1] if start else first):ends[stop - 1] - 1])
            self._size += content[stop - 1] - before
            if row < count:
                self._write_part()
            start = stop

    def _add_lines(self, lines: list[bytes]) -> None:
        size = sum(map(len, lines))
        if self._size + size < PART_BYTES:
            self._lines.extend(lines)
            self._size += size
            return
        for line in lines:  # a part ends with the line that reaches the bound
            self._lines.append(line)
            self._size += len(line)
            if self._size >= PART_BYTES:
                self._write_part()

    def end_window(self) -> None:
        if self._lines:
            self._write_part()
        if self._part and self._exactly_once:
            self.pending.append(self._window)

    def _write_part(self) -> None:
        """The lines held, written out (a part of the window), then dropped."""
        self._lines.append(b"")  # the last line's newline
        data = b"\n".join(self._lines)
        self._lines = []
        self._size = 0
        part = self._part
        self._part += 1
        if self._exactly_once:
            # a full disk pauses the window until space returns (or DiskFull after the time limit)
            space.retry(f"writing window {self._window:x} of {self._name} under {self._dir}",
                        fs.write_atomic, self._tmp(self._window, part), data)
        elif self._local:
            # a part's lines go in whole or not at all: an append cut short (a full disk) is
            # cut back before the error goes up, so no torn line is left for the next append
            with open(destinations.open_own_append(self._local), "ab", buffering=0) as f:
                before = os.fstat(f.fileno()).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[f.write(view):]
                except OSError:
                    os.ftruncate(f.fileno(), before)
                    raise
        else:
            self._out.write(data)
            self._out.flush()

    def committed(self, window_id: int) -> None:
        if not self._exactly_once:
            return
        keep = []
        for w in self.pending:
            if w > window_id:
                keep.append(w)
                continue
            part = 0
            while True:  # parts 0, 1, ... until one that is neither temporary nor final
                final, tmp = self._final(w, part), self._tmp(w, part)
                if not fs.exists(tmp):
                    if not fs.exists(final):
                        break
                elif fs.exists(final):
                    # a window replayed after a restart: its final file already holds the whole
                    # part, so it stays as it is (never deleted, so a reader never misses it)
                    fs.delete(tmp)
                else:  # a rename needs no new blocks, but an HDFS quota on names may still refuse it
                    space.retry(f"finalizing window {w:x} of {self._name} under {self._dir}", fs.move, tmp, final)
                part += 1
        self.pending = keep

    @classmethod
    def split_state(cls, states, count, owner):  # noqa: ANN001, ANN206
        """Refuse: each partition owns uncommitted window files only it finalizes."""
        raise ValueError("JsonLinesOutput cannot be repartitioned while running: each partition "
                         "finalizes its own uncommitted window files")

    def _tmp(self, window_id: int, part: int = 0) -> str:
        return fs.join(self._dir, f"{window_id:020d}{f'_{part:06d}' if part else ''}.tmp")

    def _final(self, window_id: int, part: int = 0) -> str:
        return fs.join(self._dir, f"{window_id:020d}{f'_{part:06d}' if part else ''}.jsonl")

    def teardown(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
