"""Parquet output: dict records into Parquet files, optionally in Hive-style partition directories.

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

import logging
import urllib.parse
from typing import Any, Optional

from stram.common import destinations, fs, space
from stram.operator import FatalError, InputPort, Operator, OperatorContext

__all__ = ["ParquetOutput", "to_table", "HIVE_NULL"]

log = logging.getLogger("stram.operators.parquet")

#: The directory value of a missing or null partition field (Hive's name for it).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")


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
