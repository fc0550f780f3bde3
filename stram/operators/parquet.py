"""Parquet input and output: a Parquet file as records (or Arrow batches), and dict records into Parquet
files, optionally in Hive-style partition directories.

:class:`ParquetInput` reads one file (local or a ``pyarrow.fs`` URI) a batch of rows at a time and emits
them as dicts (``RecordBatch.to_pylist``), or as ``pyarrow.RecordBatch`` objects on its Arrow port; its
state is a row offset, so a restart resumes exactly after the last row it emitted.

:class:`ParquetOutput` buffers records and writes them a *range* of windows at
a time, so files are not tiny: at every checkpoint (and sooner when
``rows_per_file`` rows or ``windows_per_file`` windows are buffered). The buffer
is empty whenever a checkpoint is taken, so it is never part of the state.

Exactly once (``PROCESSING_MODE: EXACTLY_ONCE``) follows JsonLinesOutput's
scheme: a range's files are written under temporary names (starting with ``.``,
which Parquet readers skip) and renamed to their final names once the range's
last window is committed. A range replayed after a restart holds the same
records, so it rewrites the same temporary files; a final file is never written
twice and never deleted.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import time
import urllib.parse
from typing import Any, Optional

from stram.common import destinations, fs, space
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import (FatalError, InputOperator, InputPort, Operator, OperatorContext, OutputPort,
                            ShutdownException)

__all__ = ["ParquetInput", "ParquetOutput", "to_table", "HIVE_NULL"]

log = logging.getLogger("stram.operators.parquet")

#: The directory value of a missing or null partition field (Hive's name for it).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")
#: A paced ParquetInput emits at most this many windows' worth of its rate in one streaming window
#: (one on schedule, one more to catch up after a slow window).
PACE_WINDOWS = 2
#: Bytes ParquetInput reads of a column chunk at a time.
READ_BUFFER = 1 << 20
#: Partitions take turns on whole row groups when every row group has at most this many rows (and there
#: are at least as many groups as partitions): each then decodes only its own groups, where taking turns
#: on stripes of ``batch_rows`` has every partition decode the whole file. Groups this small keep the
#: partitions close in event time.
GROUP_STRIPE_ROWS = 1 << 17


def to_table(records: list[dict], drop: Optional[str] = None) -> Any:
    """A ``pyarrow.Table`` of dict records: the union of their fields (in order of first
    appearance; a record without a field has null there), types inferred by pyarrow. A column
    whose values pyarrow cannot put in one type (an int here, a string there) is written as
    strings, and a warning says so."""
    import pyarrow as pa
    names: dict[str, None] = {}
    for rec in records:
        for name in rec:
            if name not in names:
                names[name] = None
    names.pop(drop, None)
    columns = {}
    for name in names:
        values = [rec.get(name) for rec in records]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            log.warning("ParquetOutput: field %r has values of several types (%s); written as strings", name, exc)
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    if not columns:
        return pa.table({"_empty": pa.nulls(len(records))})  # records with no fields still count
    return pa.table(columns)


def _parquet_bytes(table: Any, compression: str) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression)
    return sink.getvalue().to_pybytes()


def partition_dir(field: str, value: Any) -> str:
    """The Hive-style directory of a partition value (``field=value``, the value percent-encoded
    as pyarrow's hive partitioning decodes it)."""
    text = HIVE_NULL if value is None else urllib.parse.quote(str(value), safe="")
    return f"{field}={text}"


class ParquetInput(InputOperator):
    """Emits the rows of a Parquet file (``path``: local or a URI such as ``hdfs://``), then ends.

    Rows go out ``batch_rows`` at a time, as dicts on ``output`` or, with ``arrow: true``, as
    ``pyarrow.RecordBatch`` objects on ``batches`` (an Arrow stream). ``columns`` limits what is read.
    With ``timestamp_field`` (an integer column, epoch milliseconds) it is a watermark's origin: at
    the end of every window it declares the largest timestamp seen minus ``out_of_orderness_ms``, at
    the end of the file the maximum. Partition ``i`` of ``n`` reads the file's stripes ``i``, ``i + n``,
    ... (so partitions advance through event time together): its row groups when they are small
    (:data:`GROUP_STRIPE_ROWS`), each decoded by its partition alone, else stripes of ``batch_rows`` rows.
    A row whose timestamp is null is logged, counted in the ``malformed`` metric and skipped.

    With ``rate`` it replays the file at that many rows per second of wall time (each of ``n``
    partitions paces ``rate / n``): the ``k``-th row a partition emits goes out no earlier than
    ``k * n / rate`` seconds after its first, by a token bucket filled from the wall clock; a window
    may emit at most :data:`PACE_WINDOWS` windows' worth (``rate / n * window size``), so a source
    that fell behind catches up at a bounded pace. With ``start_report`` (a local directory) each
    partition writes ``<operator>.<partition>.json`` there when it emits its first row: the wall time
    its schedule counts from (``started``, epoch seconds), its rate and path. A restarted partition
    paces from its first row after the restart; the note keeps the first start.
    """

    output = OutputPort()
    batches = OutputPort(codec="arrow")
    path: str = ""
    #: Columns to read, in this order (None: all).
    columns: Optional[list] = None
    #: Integer column holding a row's event time in epoch milliseconds (None: no event time).
    timestamp_field: Optional[str] = None
    #: How far out of order rows may be: the watermark trails the largest timestamp by this.
    out_of_orderness_ms: int = 0
    #: Cap on rows per streaming window (None: no cap).
    records_per_window: Optional[int] = None
    #: Rows per emitted batch, and the stripe partitions take turns on (keep it when restarting).
    batch_rows: int = 4096
    #: Emit pyarrow.RecordBatch objects on ``batches`` instead of dicts on ``output``.
    arrow: bool = False
    #: Rows per second of wall time, shared by the partitions (None: as fast as possible).
    rate: Optional[float] = None
    #: A local directory where each partition notes when its paced replay started (None: nowhere).
    start_report: Optional[str] = None
    transient = ("_file", "_batches", "_current", "_left", "_context", "_where", "_part", "_parts", "_starts",
                 "_group_stripes",
                 "_ts", "_done", "_pace", "_window_rows")

    def __init__(self) -> None:
        #: Index (in the file) of the next row to emit or skip: every row of this partition before it went out.
        self.offset = 0
        #: Largest event time emitted.
        self.max_timestamp: Optional[int] = None
        #: Rows dropped for a null timestamp.
        self.malformed = 0
        self._file: Any = None
        self._batches: Any = None
        self._current: Any = None   # (first row index, RecordBatch) being emitted
        self._left: Optional[int] = None
        self._context: Optional[OperatorContext] = None
        self._where = "ParquetInput"
        self._part, self._parts = 0, 1
        self._starts: list[int] = []
        self._group_stripes = False   # partitions take turns on row groups, not on stripes of batch_rows
        self._ts = -1
        self._done = False
        self._pace: Optional[tuple[float, int]] = None   # (wall time the schedule counts from, rows emitted since)
        self._window_rows = 0   # rows the bucket still lets out in this window

    def setup(self, context: OperatorContext) -> None:
        import pyarrow.parquet as pq
        self._where = where = f"ParquetInput {context.name}"
        self._context = context
        self._part, self._parts = context.partition_index, max(context.partition_count, 1)
        if not self.path:
            raise FatalError(f"{where} needs the property 'path' (a Parquet file)")
        for prop in ("batch_rows", "records_per_window"):
            value = getattr(self, prop)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise FatalError(f"{where}: property {prop!r} must be an integer >= 1, got {value!r}")
        if isinstance(self.out_of_orderness_ms, bool) or not isinstance(self.out_of_orderness_ms, int) \
                or self.out_of_orderness_ms < 0:
            raise FatalError(f"{where}: property 'out_of_orderness_ms' must be an integer >= 0, "
                             f"got {self.out_of_orderness_ms!r}")
        rate = self.rate
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0
                                 or math.isinf(rate)):
            raise FatalError(f"{where}: property 'rate' must be a number of rows per second > 0, got {rate!r}")
        kind = fs.file_type(self.path)
        if kind != "file":
            raise FatalError(f"{where}: property 'path': {self.path} is "
                             f"{'missing' if kind == 'missing' else 'a ' + kind + ', not a file'}")
        filesystem, path = fs.resolve(self.path)
        try:
            # read a column chunk a buffer at a time, not whole: a file of one row group is otherwise all in memory
            self._file = pq.ParquetFile(filesystem.open_input_file(path), pre_buffer=False, buffer_size=READ_BUFFER)
        except Exception as exc:  # noqa: BLE001 - not Parquet: the file will not change on a restart
            raise FatalError(f"{where}: {self.path} is not a readable Parquet file: {type(exc).__name__}: {exc}") \
                from None
        self._check_columns(self._file.schema_arrow)
        meta = self._file.metadata
        self._starts = [0]
        for i in range(meta.num_row_groups):
            self._starts.append(self._starts[-1] + meta.row_group(i).num_rows)
        self._group_stripes = (self._parts > 1 and meta.num_row_groups >= self._parts
                               and all(meta.row_group(i).num_rows <= GROUP_STRIPE_ROWS
                                       for i in range(meta.num_row_groups)))

    def _check_columns(self, schema: Any) -> None:
        import pyarrow as pa
        names = schema.names
        columns = self.columns
        if columns is not None:
            if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
                raise FatalError(f"{self._where}: property 'columns' must be a non-empty list of column names, "
                                 f"got {columns!r}")
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise FatalError(f"{self._where}: property 'columns': {self.path} has no column "
                                 f"{', '.join(map(repr, unknown))} (its columns: {', '.join(names)})")
            names = columns
        field = self.timestamp_field
        self._ts = -1
        if field is not None:
            if field not in names:
                raise FatalError(f"{self._where}: property 'timestamp_field': {field!r} is not among the columns "
                                 f"read ({', '.join(names)})")
            if not pa.types.is_integer(schema.field(field).type):
                raise FatalError(f"{self._where}: property 'timestamp_field': column {field!r} is "
                                 f"{schema.field(field).type}, not an integer of epoch milliseconds")
            self._ts = names.index(field)

    def begin_window(self, window_id: int) -> None:
        self._left = self.records_per_window
        if self.rate is not None:
            self._window_rows = self.window_allowance()

    def window_allowance(self) -> int:
        """The most rows one partition emits in a streaming window when paced: :data:`PACE_WINDOWS`
        windows' worth of its share of ``rate``."""
        size = self._context.streaming_window_size_millis if self._context is not None else 500
        return math.ceil(self.rate / self._parts * size / 1000 * PACE_WINDOWS)

    def _due(self) -> int:
        """Rows the pace lets out now: those scheduled by the wall clock, within the window's allowance."""
        now = time.time()
        if self._pace is None:
            self._pace = (now, 0)
            self._report_start(now)
        started, emitted = self._pace
        scheduled = math.floor((now - started) * self.rate / self._parts) + 1
        return max(0, min(scheduled - emitted, self._window_rows))

    def _report_start(self, now: float) -> None:
        if not self.start_report or self._context is None:
            return
        path = os.path.join(self.start_report, f"{self._context.name}.{self._part}.json")
        if os.path.exists(path):    # a restart: the first start stands
            return
        os.makedirs(self.start_report, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump({"operator": self._context.name, "partition": self._part, "partitions": self._parts,
                       "path": self.path, "rate": self.rate, "started": now}, f)
        os.replace(path + ".tmp", path)

    def emit_tuples(self) -> None:
        n = self.batch_rows
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return
        if self.rate is not None:
            n = min(n, self._due())
            if n <= 0:
                return
        chunk = self._next(n)
        if chunk is None:
            self._end()
        if self._left is not None:
            self._left -= chunk.num_rows
        if self.rate is not None:
            self._window_rows -= chunk.num_rows
            self._pace = (self._pace[0], self._pace[1] + chunk.num_rows)
        if self._ts >= 0:
            chunk = self._stamp(chunk)
        if chunk.num_rows:
            if self.arrow:
                self.batches.emit(chunk)
            else:
                self.output.emit_batch(chunk.to_pylist())

    def _next(self, n: int) -> Any:
        """Up to ``n`` of this partition's rows from ``offset`` on (a RecordBatch, ``offset`` moved past
        them); None at the end of the file."""
        stripe, part, parts = self.batch_rows, self._part, self._parts
        while True:
            current = self._current
            if current is None:
                current = self._current = self._read()
                if current is None:
                    return None
            first, batch = current
            end = first + batch.num_rows
            pos = max(self.offset, first)
            if pos >= end:
                self._current = None
                continue
            if self._group_stripes:
                starts = self._starts
                k = bisect.bisect_right(starts, pos) - 1
                if k % parts != part:  # another partition's row group: on to this partition's next one
                    self.offset = starts[min(k + (part - k) % parts, len(starts) - 1)]
                    continue
                stop = min(end, starts[k + 1], pos + n)
            else:
                k = pos // stripe
                if k % parts != part:  # another partition's stripe: on to this partition's next one
                    self.offset = (k + (part - k) % parts) * stripe
                    continue
                stop = min(end, (k + 1) * stripe, pos + n)
            self.offset = stop
            return batch.slice(pos - first, stop - pos)

    def _read(self) -> Any:
        """The next (first row index, RecordBatch) of the file, from the row group holding ``offset`` on."""
        if self._batches is None:
            starts = self._starts
            group = 0
            while group + 1 < len(starts) - 1 and starts[group + 1] <= self.offset:
                group += 1
            if group >= len(starts) - 1:
                return None
            self._batches = self._batches_from(group)
        return next(self._batches, None)

    def _batches_from(self, group: int) -> Any:
        """(first row index, RecordBatch) of the row groups from ``group`` on: only this partition's with
        row-group stripes, else all of them (in batches a stripe per partition long)."""
        starts, columns = self._starts, self.columns
        if self._group_stripes:
            for g in range(group, len(starts) - 1):
                if g % self._parts == self._part:
                    first = starts[g]
                    for batch in self._file.iter_batches(batch_size=self.batch_rows, row_groups=[g], columns=columns,
                                                          use_threads=False):
                        yield first, batch
                        first += batch.num_rows
            return
        first = starts[group]
        for batch in self._file.iter_batches(batch_size=self.batch_rows * self._parts,
                                             row_groups=range(group, len(starts) - 1), columns=columns,
                                             use_threads=False):
            yield first, batch
            first += batch.num_rows

    def _stamp(self, chunk: Any) -> Any:
        """The chunk without rows whose timestamp is null; the largest timestamp noted."""
        import pyarrow.compute as pc
        column = chunk.column(self._ts)
        if column.null_count:
            bad = column.null_count
            self.malformed += bad
            if self.malformed == bad:
                log.warning("%s: skipped %d row(s) with a null %r (further ones are counted in the metric "
                            "'malformed')", self._where, bad, self.timestamp_field)
            chunk = chunk.filter(pc.is_valid(column))
            column = chunk.column(self._ts)
        if chunk.num_rows:
            high = pc.max(column).as_py()
            if self.max_timestamp is None or high > self.max_timestamp:
                self.max_timestamp = high
        return chunk

    def end_window(self) -> None:
        context = self._context
        if context is None:
            return
        if self.malformed:
            context.set_metric("malformed", self.malformed)
        if self._ts >= 0 and self.max_timestamp is not None and not self._done:
            context.emit_watermark(self.max_timestamp - self.out_of_orderness_ms)

    def _end(self) -> None:
        """End of the file: the watermark goes to the end of time, then the stream ends."""
        self._done = True
        if self._context is not None and self._ts >= 0:
            self._context.emit_watermark(MAX_WATERMARK)
        raise ShutdownException("end of input")

    def teardown(self) -> None:
        self._batches = None
        self._current = None
        if self._file is not None:
            self._file.close()
            self._file = None


class ParquetOutput(Operator):
    """Writes dict records into Parquet files under ``path`` (local or a URI such as ``hdfs://``).

    One file set per window range: a file per partition value (``partition_by``:
    Hive-style directories ``field=value/``, the field left out of the files as
    Hive does) holding at most ``rows_per_file`` rows. A range ends at every
    checkpoint window, once ``rows_per_file`` rows are buffered, or after
    ``windows_per_file`` windows. Files are named
    ``part-<operator>-<id>-<last window>-<n>.parquet``.
    """

    input = InputPort()
    path: str = ""
    partition_by: Optional[str] = None
    rows_per_file: int = 1_000_000
    windows_per_file: Optional[int] = None
    compression: str = "zstd"
    transient = ("_rows", "_windows", "_window", "_exactly_once", "_name")

    def __init__(self) -> None:
        #: Ranges whose temporary files await their commit (EXACTLY_ONCE): [last window, [(tmp, final)]].
        self.pending: list[tuple[int, list[tuple[str, str]]]] = []
        self._rows: list[dict] = []
        self._windows = 0
        self._window = -1
        self._exactly_once = False
        self._name = ""

    def setup(self, context: OperatorContext) -> None:
        self._name = f"{context.name}-{context.id}"
        where = f"ParquetOutput {context.name}"
        if not self.path:
            raise FatalError(f"{where} needs the property 'path' (a directory for its files)")
        if self.compression not in COMPRESSIONS:
            raise FatalError(f"{where}: property 'compression' must be one of {', '.join(COMPRESSIONS)}, "
                             f"got {self.compression!r}")
        if self.rows_per_file < 1:
            raise FatalError(f"{where}: property 'rows_per_file' must be >= 1, got {self.rows_per_file!r}")
        if self.windows_per_file is not None and self.windows_per_file < 1:
            raise FatalError(f"{where}: property 'windows_per_file' must be None or >= 1, "
                             f"got {self.windows_per_file!r}")
        self._exactly_once = context.attributes.get("PROCESSING_MODE") == "EXACTLY_ONCE"
        try:
            # a local destination someone else controls (or a link planted in it) is refused
            destinations.check_output_dir(self.path)
            fs.makedirs(self.path)
            destinations.check_output_dir(self.path)
        except destinations.UnsafeDestination as exc:
            raise FatalError(f"ParquetOutput {self._name}: {exc}") from None
        if self._exactly_once:
            self._drop_stale()

    def _drop_stale(self) -> None:
        """Delete this partition's temporary files that its state does not list: written after the
        checkpoint it resumes from, by a run that died; the replay writes what they held anew."""
        keep = {tmp for _, files in self.pending for tmp, _ in files}
        prefix = f".part-{self._name}-"
        base = fs.filesystem(self.path)[1].rstrip("/") + "/"
        for info in fs.list_dir(self.path, recursive=True):
            if info.type == fs.FileType.File and info.base_name.startswith(prefix) and info.path.startswith(base):
                uri = fs.join(self.path, info.path[len(base):])
                if uri not in keep:
                    fs.delete(uri)

    def begin_window(self, window_id: int) -> None:
        self._window = window_id

    def process_input(self, tuple: Any) -> None:
        self._rows.append(self._check(tuple))

    def process_batch(self, tuples: list) -> None:
        if all(type(t) is dict for t in tuples):
            self._rows.extend(tuples)
        else:
            self._rows.extend(map(self._check, tuples))

    def _check(self, record: Any) -> dict:
        if not isinstance(record, dict):
            raise FatalError(f"ParquetOutput {self._name} takes dict records, got a {type(record).__name__}: "
                             f"{record!r:.200}")
        return record

    def end_window(self) -> None:
        self._windows += 1
        if len(self._rows) >= self.rows_per_file or \
                (self.windows_per_file is not None and self._windows >= self.windows_per_file):
            self._flush()

    def get_state(self) -> dict[str, Any]:
        """The state at a checkpoint: the buffered range is written first (its files pending in
        EXACTLY_ONCE), so the buffer never needs saving and a replay starts a fresh range."""
        self._flush()
        return super().get_state()

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        self._windows = 0
        if not rows:
            return
        window = self._window
        files = []
        for subdir, group in self._groups(rows):
            for n, start in enumerate(range(0, len(group), self.rows_per_file)):
                data = _parquet_bytes(to_table(group[start:start + self.rows_per_file], self.partition_by),
                                      self.compression)
                name = f"part-{self._name}-{window:020d}-{n:04d}.parquet"
                final = fs.join(self.path, subdir, name) if subdir else fs.join(self.path, name)
                target = fs.join(self.path, subdir, "." + name) if subdir else fs.join(self.path, "." + name)
                if not self._exactly_once:
                    target = final
                # a full disk pauses the window until space returns (or DiskFull after the time limit)
                space.retry(f"writing {target} of {self._name}", fs.write_atomic, target, data)
                files.append((target, final))
        if self._exactly_once:
            self.pending.append((window, files))

    def _groups(self, rows: list[dict]) -> list[tuple[str, list[dict]]]:
        """(directory under ``path``, rows) per partition value, in order of first appearance."""
        field = self.partition_by
        if field is None:
            return [("", rows)]
        groups: dict[str, list[dict]] = {}
        for rec in rows:
            key = partition_dir(field, rec.get(field))
            group = groups.get(key)
            if group is None:
                groups[key] = group = []
            group.append(rec)
        return list(groups.items())

    def committed(self, window_id: int) -> None:
        if not self._exactly_once:
            return
        keep = []
        for window, files in self.pending:
            if window > window_id:
                keep.append((window, files))
                continue
            for tmp, final in files:
                if not fs.exists(tmp):
                    continue  # renamed before a restart from a checkpoint that still listed it
                if fs.exists(final):
                    fs.delete(tmp)  # the final file holds the range already: never replaced
                else:
                    space.retry(f"finalizing {final} of {self._name}", fs.move, tmp, final)
        self.pending = keep

    @classmethod
    def split_state(cls, states, count, owner):  # noqa: ANN001, ANN206
        """Refuse: each partition owns uncommitted files only it finalizes."""
        raise ValueError("ParquetOutput cannot be repartitioned while running: each partition "
                         "finalizes its own uncommitted files")
