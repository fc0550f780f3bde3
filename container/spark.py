"""Spark integration: the ``stram`` streaming data source and the SparkPipeline operator.

A :class:`SparkPipeline` hosts a PySpark Structured Streaming query inside a
container. Its input streams appear to Spark through the Python streaming data
source registered as format ``stram`` (:class:`StramDataSource`): offsets are
window ids, ``latestOffset`` is the newest window every upstream partition has
finished, ``partitions(start, end)`` gives one Spark input partition per
upstream physical partition, and ``read`` subscribes to that partition's
buffer server for windows ``(start, end]``.

The operator and the reader talk through a *channel*: a directory of small
JSON files (:class:`Channel`). In PySpark 4 the reader's driver-side methods
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) run in Python
worker processes started by the JVM, not in the process that owns the
SparkSession, so they cannot reach the operator's objects:

* ``state.json`` (operator -> reader): the buffer-server address, token,
  publisher, mask, keys and codec of every upstream partition of every input
  port, the last window each upstream operator finished (``upstream_windows``
  from the master), the upstream partitions whose stream ended, and the
  initial window. The operator rewrites it (atomically) when it changes.
* ``commit-<port>.json`` (reader -> operator): the end window Spark passed to
  ``commit(end)``.

The operator polls the commit files and Spark's own commit log (Spark calls a
source's ``commit`` only when it plans the *next* batch, so the last batch of a
stream is known committed from ``<checkpointLocation>/commits`` alone) and
declares the newest committed window its checkpoint
(``context.report_checkpoint``). That puts Spark's offset commits into the
master's committed-window rule: buffer servers keep every window Spark has
not committed, and a restarted query replays exactly what it had not.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Union

from container import fs
from container.operator import (FatalError, InputOperator, InputPort, OperatorContext,
                                ShutdownException)

try:  # the operator module must import without pyspark (spec validation, the master)
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    _PYSPARK_ERROR = ""
except ImportError as _exc:  # pragma: no cover - exercised only without pyspark
    _PYSPARK_ERROR = f"pyspark is not installed ({_exc}); install it with: pip install 'stram[spark]'"

    class DataSource:  # type: ignore[no-redef]
        def __init__(self, options: dict) -> None:
            self.options = options

    class DataSourceStreamReader:  # type: ignore[no-redef]
        pass

    class InputPartition:  # type: ignore[no-redef]
        def __init__(self, value: Any) -> None:
            self.value = value

__all__ = [
    "SparkPipeline", "PipelineContext", "StramDataSource", "StramStreamReader", "StramPartition",
    "Channel", "StramSchemaError", "StramReadError", "read_partition", "probe_end_of_stream",
    "committed_offsets", "read_file_sink", "get_session", "SOURCE_NAME",
]

log = logging.getLogger("container.spark")

#: Format name of the streaming data source.
SOURCE_NAME = "stram"
#: Markers in exception messages: they survive the trip through Spark's error wrapping.
SCHEMA_MARKER = "[STRAM_SCHEMA_MISMATCH]"
READ_MARKER = "[STRAM_READ_ERROR]"
#: Seconds a committed window may wait for upstream probes before it is reported anyway.
_HOLD_LIMIT = 15.0
#: Subscribing from this window delivers only a stream's END_STREAM (if it has one).
_PROBE_WINDOW = 1 << 62


class StramSchemaError(ValueError):
    """Tuples of a stream do not fit the schema declared for it (not worth retrying)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{SCHEMA_MARKER} {message}")


class StramReadError(RuntimeError):
    """Reading a window range from a buffer server failed (server gone, timeout, reset)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{READ_MARKER} {message}")


# ---------------------------------------------------------------- the channel

class Channel:
    """The files through which a SparkPipeline and its ``stram`` readers talk.

    Parameters
    ----------
    directory : str
        A local directory of the SparkPipeline's container (its work dir).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, "state.json")

    def commit_path(self, port: str) -> str:
        return os.path.join(self.directory, f"commit-{port}.json")

    def _write(self, path: str, data: dict[str, Any]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def write_state(self, state: dict[str, Any]) -> None:
        """Publish the operator's view (operator side)."""
        self._write(self.state_path, state)

    def read_state(self) -> dict[str, Any]:
        """The operator's view (reader side).

        Raises
        ------
        RuntimeError
            When the operator has not written it (the channel option is wrong).
        """
        state = self._read(self.state_path)
        if state is None:
            raise RuntimeError(f"stram source: no channel state at {self.state_path}; the 'channel' option "
                               f"must name the directory of a running SparkPipeline operator")
        return state

    def write_commit(self, port: str, window: int) -> None:
        """Record Spark's ``commit(end)`` for a port (reader side)."""
        self._write(self.commit_path(port), {"port": port, "window": int(window), "millis": _now_ms()})

    def read_commit(self, port: str) -> int | None:
        """The last window Spark committed for a port through ``commit`` (operator side)."""
        data = self._read(self.commit_path(port))
        return None if data is None else int(data["window"])


def _now_ms() -> int:
    return int(time.time() * 1000)


def latest_window(state: dict[str, Any], port: str) -> int | None:
    """Newest window every upstream partition of ``port`` has finished (None: unknown yet).

    Partitions whose stream ended count with their last window only when every
    partition of the port ended; until then the running ones decide.
    """
    parts = state["ports"].get(port) or []
    windows = state.get("windows", {})
    ended = state.get("ended", {})
    running: list[int] = []
    finished: list[int] = []
    for part in parts:
        src = str(part["source"])
        if src in ended:
            finished.append(int(ended[src]))
        elif src in windows:
            running.append(int(windows[src]))
        else:
            return None
    if running:
        return min(running)
    return max(finished) if finished else None


# ---------------------------------------------------------------- the data source

class StramPartition(InputPartition):
    """One Spark input partition: windows ``(start, end]`` of one upstream publisher."""

    def __init__(self, port: str, publisher: str, host: str, port_number: int, token: str, mask: int,
                 keys: list[int], codec: str, start: int, end: int, operator: str,
                 read_timeout: float, connect_timeout: float) -> None:
        self.port = port
        self.publisher = publisher
        self.host = host
        self.port_number = port_number
        self.token = token  # hex
        self.mask = mask
        self.keys = keys
        self.codec = codec
        self.start = start
        self.end = end
        self.operator = operator
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        super().__init__((publisher, start, end))

    def __repr__(self) -> str:
        return (f"StramPartition({self.publisher}@{self.host}:{self.port_number}, "
                f"windows ({self.start:x}, {self.end:x}])")


class StramStreamReader(DataSourceStreamReader):
    """Stream reader of the ``stram`` source (see the module docstring).

    Options: ``channel`` (the SparkPipeline's channel directory, required),
    ``port`` (the input port, default ``input``).
    """

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        if "channel" not in options:
            raise ValueError("the stram source needs the option 'channel' (SparkPipeline sets it)")
        self.channel = Channel(options["channel"])
        self.port = options.get("port", "input")
        self.schema = schema

    def _offset(self, window: int) -> dict[str, Any]:
        return {"port": self.port, "window": int(window)}

    def initialOffset(self) -> dict:
        """The window the hosting operator resumes after (its checkpoint)."""
        return self._offset(self.channel.read_state()["initial"])

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """Newest window every upstream partition finished; never before ``start``."""
        state = self.channel.read_state()
        latest = latest_window(state, self.port)
        floor = int(start["window"]) if start else int(state["initial"])
        return self._offset(floor if latest is None else max(floor, latest))

    def partitions(self, start: dict, end: dict) -> list:
        """One partition per upstream partition of the port, for windows ``(start, end]``."""
        lo, hi = int(start["window"]), int(end["window"])
        if hi <= lo:
            return []
        state = self.channel.read_state()
        return [StramPartition(self.port, p["publisher"], p["host"], int(p["port_number"]), p["token"],
                               int(p["mask"]), list(p["keys"]), p["codec"], lo, hi, state["operator"],
                               float(state.get("read_timeout", 60.0)), float(state.get("connect_timeout", 10.0)))
                for p in state["ports"].get(self.port, [])]

    def read(self, partition: StramPartition) -> Iterator[Any]:
        """Arrow record batches of the partition's tuples (see :func:`read_partition`)."""
        return read_partition(partition, self.schema)

    def commit(self, end: dict) -> None:
        """Spark will never ask for windows up to ``end`` again: tell the operator."""
        self.channel.write_commit(self.port, int(end["window"]))

    def stop(self) -> None:
        pass


class StramDataSource(DataSource):
    """The ``stram`` streaming data source (``spark.readStream.format("stram")``).

    It needs a schema (``.schema(ddl)``); SparkPipeline sets it from the
    operator's ``schema`` property, along with the ``channel`` and ``port``
    options.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        raise ValueError("the stram source needs a schema: set the SparkPipeline property 'schema' "
                         "(Spark DDL per input port)")

    def streamReader(self, schema: Any) -> StramStreamReader:
        return StramStreamReader(self.options, schema)


# ---------------------------------------------------------------- reading

def _rows_to_batch(tuples: list, arrow_schema: Any, names: list[str], where: str) -> Any:
    """One ``pyarrow.RecordBatch`` of ``tuples`` in exactly ``arrow_schema``."""
    import pyarrow as pa

    first = tuples[0]
    try:
        if isinstance(first, dict):
            missing = [n for n in names if n not in first]
            if missing:
                raise StramSchemaError(f"{where}: tuple {_short(first)} has no field(s) {missing} of the "
                                       f"declared schema ({', '.join(names)})")
            try:  # column by column: about twice as fast as from_pylist
                columns = [[t[n] for t in tuples] for n in names]
            except KeyError as exc:
                raise StramSchemaError(f"{where}: a tuple has no field {exc} of the declared schema "
                                       f"({', '.join(names)})") from None
            return pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema)], schema=arrow_schema)
        if isinstance(first, (tuple, list)):
            if len(first) != len(names):
                raise StramSchemaError(f"{where}: tuple {_short(first)} has {len(first)} fields, the declared "
                                       f"schema {len(names)} ({', '.join(names)})")
            columns = list(zip(*tuples))
            return pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema)], schema=arrow_schema)
        if isinstance(first, (pa.RecordBatch, pa.Table)):
            return [_cast_batch(b, arrow_schema, names, where) for t in tuples
                    for b in (t.to_batches() if isinstance(t, pa.Table) else [t])]
        if len(names) == 1:
            return pa.RecordBatch.from_arrays([pa.array(tuples, type=arrow_schema[0].type)], schema=arrow_schema)
        raise StramSchemaError(f"{where}: tuple {_short(first)} of type {type(first).__name__} does not fit the "
                               f"declared schema ({', '.join(names)}); emit dicts (by field name), tuples "
                               f"(by position) or Arrow record batches")
    except StramSchemaError:
        raise
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise StramSchemaError(f"{where}: tuples do not match the declared schema {_schema_text(arrow_schema)}: "
                               f"{type(exc).__name__}: {exc} (first tuple: {_short(first)})") from None


def _cast_batch(batch: Any, arrow_schema: Any, names: list[str], where: str) -> Any:
    import pyarrow as pa

    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise StramSchemaError(f"{where}: record batch with columns {batch.schema.names} lacks {missing} of the "
                               f"declared schema ({', '.join(names)})")
    if batch.schema.equals(arrow_schema):
        return batch
    try:
        columns = [batch.column(n).cast(f.type) for n, f in zip(names, arrow_schema)]
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise StramSchemaError(f"{where}: record batch schema {_schema_text(batch.schema)} does not cast to the "
                               f"declared schema {_schema_text(arrow_schema)}: {exc}") from None


def _schema_text(schema: Any) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


#: Rows gathered before a record batch is built.
_BATCH_ROWS = 8192


def read_partition(partition: StramPartition, schema: Any) -> Iterator[Any]:
    """Read windows ``(start, end]`` of one publisher as Arrow record batches.

    Subscribes (without reconnecting) from ``start + 1`` and stops after
    ``END_WINDOW end`` or at ``END_STREAM``. Dict tuples map to the schema by
    field name, tuples by position; Arrow record batches (the ``arrow`` codec)
    pass through, cast to the schema.

    Parameters
    ----------
    partition : StramPartition
    schema : pyspark.sql.types.StructType
        The stream's declared schema.

    Yields
    ------
    pyarrow.RecordBatch

    Raises
    ------
    StramReadError
        The buffer server is gone or refused, or nothing arrived for
        ``read_timeout`` seconds: the Spark task fails and is retried.
    StramSchemaError
        The tuples do not fit the schema.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from container.bufferserver.client import Subscriber
    from container.bufferserver.protocol import BufferServerError, MessageType
    from container.codec import get_codec

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    names = list(arrow_schema.names)
    p = partition
    where = (f"SparkPipeline {p.operator}, input port '{p.port}', stream from {p.publisher}")
    span = f"windows ({p.start:x}, {p.end:x}] of {p.publisher} at {p.host}:{p.port_number}"
    codec = get_codec(p.codec)
    sub = Subscriber(p.host, p.port_number, bytes.fromhex(p.token), p.publisher, p.start + 1,
                     mask=p.mask, keys=p.keys, reconnect=False, connect_timeout=p.connect_timeout,
                     subscriber_id=f"spark:{p.operator}:{os.getpid()}")
    PAYLOAD, END_WINDOW, BEGIN_WINDOW, END_STREAM = (MessageType.PAYLOAD, MessageType.END_WINDOW,
                                                     MessageType.BEGIN_WINDOW, MessageType.END_STREAM)
    rows: list = []
    last_data = time.monotonic()
    done = False

    def flush() -> Iterator[Any]:
        batch = _rows_to_batch(rows, arrow_schema, names, where)
        rows.clear()
        if isinstance(batch, list):
            yield from (b for b in batch if b.num_rows)
        elif batch.num_rows:
            yield batch

    try:
        while not done:
            try:
                messages = sub.poll(1.0)
            except (BufferServerError, OSError) as exc:
                raise StramReadError(f"{where}: reading {span} failed: {exc}") from None
            if messages is None:
                break
            now = time.monotonic()
            if not messages:
                if now - last_data > p.read_timeout:
                    raise StramReadError(f"{where}: nothing received for {p.read_timeout:g}s while reading {span}")
                continue
            last_data = now
            for kind, value in messages:
                if kind == PAYLOAD:
                    tuples = codec.decode(value[1])
                    if tuples:
                        if rows and type(tuples[0]) is not type(rows[0]):
                            yield from flush()
                        rows.extend(tuples)
                        if len(rows) >= _BATCH_ROWS:
                            yield from flush()
                elif kind == END_WINDOW:
                    if value >= p.end:
                        done = True
                        break
                elif kind == BEGIN_WINDOW:
                    if value > p.end:  # the publisher skipped past the range
                        done = True
                        break
                elif kind == END_STREAM:
                    done = True
                    break
        if rows:
            yield from flush()
    finally:
        sub.close()  # also closes the connection


def probe_end_of_stream(host: str, port_number: int, token: bytes, publisher: str, after_window: int,
                        wait: float = 0.6, connect_timeout: float = 2.0) -> tuple[bool | None, int]:
    """Whether a publisher's stream ended after ``after_window``, or goes on.

    Subscribes from ``after_window + 1`` with a partition filter no payload
    passes (control tuples only) and reads until END_STREAM, a window after
    ``after_window``, or ``wait`` seconds.

    Parameters
    ----------
    host, port_number, token, publisher
        The upstream buffer server and stream.
    after_window : int
        A window the publisher has finished (the master's view of it).
    wait, connect_timeout : float
        Seconds to read, and to connect.

    Returns
    -------
    (ended, window)
        ``(True, after_window)`` once END_STREAM arrived right after it (so
        ``after_window`` was the last window); ``(False, w)`` with
        ``w > after_window`` when window ``w`` exists (the stream goes on);
        ``(False, after_window)`` when neither came within ``wait``; ``(None,
        after_window)`` when the buffer server could not be asked.
    """
    from container.bufferserver.client import Subscriber
    from container.bufferserver.protocol import BufferServerError, MessageType

    sub = Subscriber(host, port_number, token, publisher, after_window + 1, mask=0xFFFFFFFF, keys=(),
                     reconnect=False, connect_timeout=connect_timeout, subscriber_id=f"spark-probe:{os.getpid()}")
    deadline = time.monotonic() + wait
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, after_window
            messages = sub.poll(left)
            if messages is None:
                return True, after_window
            for kind, value in messages:
                if kind == MessageType.END_STREAM:
                    return True, after_window
                if kind == MessageType.BEGIN_WINDOW and value > after_window:
                    return False, value
    except (BufferServerError, OSError):
        return None, after_window
    finally:
        sub.close()  # also closes the connection


# ---------------------------------------------------------------- Spark's checkpoint

class _CommitLog:
    """Reads the committed end windows out of a query's checkpoint (``commits/``, ``offsets/``)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.batch = -1
        self.windows: dict[str, int] = {}
        self._lock = threading.Lock()

    def _uri(self, *parts: str) -> str:
        return fs.join(self.location, *parts)

    def poll(self) -> dict[str, int]:
        """Port -> end window of the newest committed batch (empty before the first)."""
        with self._lock:
            return dict(self._poll())

    def _poll(self) -> dict[str, int]:
        newest = self.batch
        if newest < 0:
            try:
                names = [info.base_name for info in fs.list_dir(self._uri("commits"))]
            except OSError:
                names = []
            ids = [int(n) for n in names if n.isdigit()]
            newest = max(ids, default=-1)
        else:
            while fs.exists(self._uri("commits", str(newest + 1))):
                newest += 1
        if newest > self.batch:
            windows = committed_offsets(self._uri("offsets", str(newest)))
            if windows is not None:
                self.batch = newest
                self.windows = windows
        return self.windows


def committed_offsets(offset_file: str) -> dict[str, int] | None:
    """Port -> window of the ``stram`` sources in one offset-log file (None if unreadable)."""
    try:
        text = fs.read_bytes(offset_file).decode()
    except (OSError, FileNotFoundError):
        return None
    out: dict[str, int] = {}
    for line in text.splitlines()[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and "window" in offset and "port" in offset:
            port = str(offset["port"])
            out[port] = min(int(offset["window"]), out.get(port, int(offset["window"])))
    return out


def read_file_sink(path: str) -> Any:
    """What a Spark file sink committed under ``path``, as one ``pyarrow.Table``.

    Reads the files the sink's ``_spark_metadata`` log lists (so files of a
    batch that was being written when a query died, and written again after
    it resumed, count once), or every data file when there is no log.

    Parameters
    ----------
    path : str
        The sink's output directory (local path or URI).

    Returns
    -------
    pyarrow.Table
        Empty (no columns) when nothing was committed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = fs.join(path, "_spark_metadata")
    files: dict[str, bool] = {}
    entries = [i for i in fs.list_dir(meta) if re.fullmatch(r"\d+(\.compact)?", i.base_name)]
    if entries:
        for info in sorted(entries, key=lambda i: int(i.base_name.split(".")[0])):
            for line in fs.read_bytes(fs.join(meta, info.base_name)).decode().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("isDir"):
                    continue
                files[entry["path"]] = entry.get("action", "add") != "delete"
        paths = [p for p, alive in files.items() if alive]
    else:
        paths = [fs.join(path, i.base_name) for i in fs.list_dir(path)
                 if i.base_name.endswith(".parquet") and not i.base_name.startswith((".", "_"))]
    tables = []
    for p in sorted(paths):
        local = p[len("file:"):] if p.startswith("file:") and not p.startswith("file://") else p
        filesystem, inner = fs.resolve(local)
        tables.append(pq.read_table(inner, filesystem=filesystem))
    tables = [t for t in tables if t.num_columns]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")


# ---------------------------------------------------------------- the session

_session_lock = threading.Lock()
_session: Any = None


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def get_session(conf: dict[str, Any] | None = None, app_name: str = "stram") -> Any:
    """The process's SparkSession, started on first use.

    Python workers of Spark run ``sys.executable`` with the repository root
    (and the current directory) on their ``PYTHONPATH``, so they import
    ``container`` and the application's modules. Static settings
    (``spark.master``…) apply only when the session starts; later callers
    share it.

    Parameters
    ----------
    conf : dict, optional
        Settings for the builder; ``spark.master`` defaults to ``local[*, 4]``
        (every core, up to 4 attempts per task).
    app_name : str
        Spark application name.
    """
    global _session
    with _session_lock:
        if _session is not None:
            try:
                alive = not _session.sparkContext._jsc.sc().isStopped()
            except Exception:  # noqa: BLE001 - a dead gateway: start anew
                alive = False
            if alive:
                for key, value in (conf or {}).items():
                    if key.startswith("spark.sql."):  # runtime settings apply to the shared session
                        try:
                            _session.conf.set(key, str(value))
                        except Exception:  # noqa: BLE001 - a static setting: ignored
                            pass
                return _session
            _session = None
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        for extra in (os.getcwd(), _repo_root()):
            if extra not in paths:
                paths.insert(0, extra)
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
        from pyspark.sql import SparkSession

        settings: dict[str, Any] = {
            "spark.master": "local[*, 4]",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "10s",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
        settings.update({k: str(v) if not isinstance(v, str) else v for k, v in (conf or {}).items()})
        if not str(settings["spark.master"]).startswith("local"):
            settings.pop("spark.driver.host", None)
            settings.pop("spark.driver.bindAddress", None)
        builder = SparkSession.builder.appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        for attempt in range(3):
            try:
                session = builder.getOrCreate()
                break
            except Exception as exc:  # noqa: BLE001
                # Forking the JVM's launcher from a process running gRPC threads fails now and then
                # (the child dies in gRPC's fork handler): try again.
                if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == 2:
                    raise
                log.warning("the Spark JVM did not start (%s); trying again", _first_line(exc))
                time.sleep(1.0)
        session.sparkContext.setLogLevel(str(settings.get("spark.log.level", "WARN")).upper())
        session.dataSource.register(StramDataSource)
        _session = session
        atexit.register(_stop_session)
        return session


def _stop_session() -> None:
    global _session
    session, _session = _session, None
    if session is not None:
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - the JVM may be gone already
            pass


# ---------------------------------------------------------------- the operator

@dataclass
class PipelineContext:
    """What a pipeline function learns about its host (its optional third argument).

    Attributes
    ----------
    name : str
        Operator name (and partition index when partitioned).
    checkpoint_location : str
        Spark checkpoint directory of the query, ``APP_PATH/spark/<name>``.
    trigger : str
        Processing-time trigger interval (``"500 milliseconds"``).
    query_name : str
        Name to give the query.
    output_path : str
        The operator's ``output_path`` property.
    options : dict
        The operator's ``options`` property.
    app_id, app_path : str
        The application.
    """

    name: str
    checkpoint_location: str
    trigger: str
    query_name: str
    output_path: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    app_id: str = ""
    app_path: str = ""

    def start(self, writer: Any) -> Any:
        """Start a ``DataStreamWriter`` with this operator's checkpoint location, trigger and name."""
        return (writer.option("checkpointLocation", self.checkpoint_location)
                .queryName(self.query_name).trigger(processingTime=self.trigger).start())


class _Stopped(Exception):
    """The operator was undeployed while its query was being built."""


@dataclass
class _Upstream:
    """One upstream physical partition feeding an input port."""

    port: str
    source: int
    publisher: str
    host: str
    port_number: int
    token: bytes
    mask: int
    keys: list[int]
    codec: str
    window: int | None = None
    changed: float = 0.0
    ended: int | None = None
    probed: float = 0.0
    #: A window known to exist after ``window`` (the stream goes on).
    proof: int = -1


class SparkPipeline(InputOperator):
    """Hosts a PySpark Structured Streaming query fed by stram streams.

    The operator reads its input streams itself (``external_inputs``): each
    connected input port becomes a streaming DataFrame over the ``stram``
    source, and ``pipeline`` builds the query on them. Spark's committed
    offsets become the operator's checkpoints, so buffer servers keep every
    window the query has not committed. The Spark checkpoint lives under
    ``APP_PATH/spark/<operator name>``, so a redeployed operator resumes the
    query where Spark committed. The operator shuts down once every upstream
    stream ended and the query processed the last window.

    Properties
    ----------
    pipeline : str
        ``"module:function"``, called as ``build(spark, inputs)`` or
        ``build(spark, inputs, ctx)`` with ``inputs`` mapping each connected
        input port to its streaming DataFrame and ``ctx`` a
        :class:`PipelineContext` (checkpoint location, trigger, query name,
        ``output_path``, ``options``). It returns a ``DataStreamWriter``
        (the operator starts it with its checkpoint location, trigger and
        query name: recommended), or a started ``StreamingQuery`` (then use
        ``ctx.start(writer)`` or those settings yourself).
    schema : str or dict
        Spark DDL of the tuples per input port (``{"input": "a INT, b STRING"}``),
        or one string when one input is connected.
    spark_conf : dict
        SparkSession settings; ``spark.master`` defaults to ``local[*, 4]``
        (``yarn`` on a cluster).
    trigger : str
        Processing-time trigger; default one streaming window.
    output_path : str
        Where the pipeline writes (passed on in ``ctx.output_path``).
    options : dict
        Anything else the pipeline needs (``ctx.options``).
    read_timeout : float
        Seconds a read task waits for data before it fails (and is retried).
    query_restarts : int
        Restarts of a failed query inside the operator before the operator fails.

    Notes
    -----
    Streams into a SparkPipeline must travel through buffer servers (not
    ``THREAD_LOCAL``/``CONTAINER_LOCAL``). A ``StreamingQuery`` started by the
    pipeline without a checkpoint location gets one under
    ``spark.sql.streaming.checkpointLocation`` (``APP_PATH/spark/<name>/queries``),
    resumable only when the query is named.
    """

    input = InputPort()
    input2 = InputPort(optional=True)

    external_inputs = True

    pipeline: str = ""
    schema: Union[str, dict[str, str], None] = None
    spark_conf: Optional[dict[str, Any]] = None
    trigger: Optional[str] = None
    output_path: str = ""
    options: Optional[dict[str, Any]] = None
    read_timeout: float = 60.0
    query_restarts: int = 3

    transient = ("_ctx", "_label", "_build", "_upstreams", "_channel", "_ckpt", "_commit_log", "_driver",
                 "_probe", "_lock", "_stop", "_error", "_fatal", "_done", "_progress", "_state_key",
                 "_next_poll", "_window", "_query", "_window_ms", "_uw_seen", "_pipeline_ctx", "_schemas", "_reportable")

    def __init__(self) -> None:
        #: Newest window Spark committed (reported as this operator's checkpoint).
        self.spark_committed = -1
        self._init_transient()

    def _init_transient(self) -> None:
        self._ctx: OperatorContext | None = None
        self._label = ""
        self._build: Callable[..., Any] | None = None
        self._upstreams: list[_Upstream] = []
        self._channel: Channel | None = None
        self._ckpt = ""
        self._commit_log: _CommitLog | None = None
        self._driver: threading.Thread | None = None
        self._probe: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error = ""
        self._fatal = False
        self._done = False
        self._progress: dict[str, Any] = {"spark_state": "starting"}
        self._state_key: Any = None
        self._next_poll = 0.0
        self._window = -1
        self._query: Any = None
        self._window_ms = 500
        self._uw_seen = False
        self._pipeline_ctx: PipelineContext | None = None
        self._schemas: dict[str, str] = {}
        self._reportable = -1

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._init_transient()

    # -- lifecycle ---------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._ctx = context
        self._window_ms = context.streaming_window_size_millis
        part = f"-{context.partition_index}" if context.partition_count > 1 else ""
        self._label = f"'{context.name}{part}' ({context.id})"
        if _PYSPARK_ERROR:
            raise FatalError(f"SparkPipeline {self._label}: {_PYSPARK_ERROR}")
        self._build = self._load_pipeline()
        self._upstreams = self._wire(context)
        self._schemas = self._port_schemas()
        self._channel = Channel(os.path.join(context.work_dir or os.getcwd(), f"spark-{context.id}"))
        root = fs.join(context.app_path, "spark", f"{context.name}{part}") if context.app_path \
            else os.path.join(context.work_dir or os.getcwd(), "spark-checkpoint", f"{context.name}{part}")
        self._ckpt = root[len("file://"):] if root.startswith("file://") else root
        self._commit_log = _CommitLog(self._ckpt)
        self.spark_committed = max(self.spark_committed, context.checkpoint_window)
        self._publish_state(force=True)
        self._driver = threading.Thread(target=self._drive, daemon=True, name=f"spark-{context.id}")
        self._driver.start()
        self._probe = threading.Thread(target=self._follow, daemon=True, name=f"spark-follow-{context.id}")
        self._probe.start()

    def _load_pipeline(self) -> Callable[..., Any]:
        ref = self.pipeline
        if not ref or ":" not in ref:
            raise FatalError(f"SparkPipeline {self._label}: property 'pipeline' must be 'module:function', "
                             f"got {ref!r}")
        module, _, name = ref.partition(":")
        try:
            obj: Any = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - import errors of user code come in every kind
            raise FatalError(f"SparkPipeline {self._label}: cannot import pipeline module {module!r} of "
                             f"{ref!r}: {type(exc).__name__}: {exc}") from None
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            raise FatalError(f"SparkPipeline {self._label}: module {module!r} has no {name!r} "
                             f"(pipeline {ref!r})") from None
        if not callable(obj):
            raise FatalError(f"SparkPipeline {self._label}: pipeline {ref!r} is not callable")
        return obj

    def _wire(self, context: OperatorContext) -> list[_Upstream]:
        ups = []
        for inp in context.inputs:
            if not inp.get("host") or not inp.get("port_number"):
                raise FatalError(
                    f"SparkPipeline {self._label}: stream {inp.get('stream')!r} into port '{inp['port']}' has no "
                    f"buffer server (it is THREAD_LOCAL or CONTAINER_LOCAL, or shares the container): a "
                    f"SparkPipeline reads its inputs from buffer servers; drop the stream's locality")
            ups.append(_Upstream(port=inp["port"], source=int(inp["source_node_id"]), publisher=inp["publisher"],
                                 host=inp["host"], port_number=int(inp["port_number"]),
                                 token=bytes(inp["token"]), mask=int(inp.get("mask") or 0),
                                 keys=[int(k) for k in inp.get("keys") or ()], codec=inp.get("codec") or "pickle"))
        if not ups and self.spark_committed < 0:
            raise FatalError(f"SparkPipeline {self._label}: no input stream is connected")
        if not ups:  # restored after every upstream ended and was removed: only finish the query
            log.info("SparkPipeline %s: its inputs ended before this deploy; finishing the query", self._label)
        return ups

    def _ports(self) -> list[str]:
        ports = {u.port for u in self._upstreams}
        if not ports:  # inputs removed after they ended: the ports the schema names
            ports = set(self.schema) if isinstance(self.schema, dict) else {"input"}
        return sorted(ports, key=lambda p: (p != "input", p))

    def _port_schemas(self) -> dict[str, str]:
        ports = self._ports()
        if isinstance(self.schema, str):
            if len(ports) > 1:
                raise FatalError(f"SparkPipeline {self._label}: {len(ports)} input ports are connected "
                                 f"({', '.join(ports)}); give 'schema' as a mapping port -> DDL")
            return {ports[0]: self.schema}
        schemas = dict(self.schema or {})
        missing = [p for p in ports if not schemas.get(p)]
        if missing:
            raise FatalError(f"SparkPipeline {self._label}: no schema for input port(s) {missing}: set the "
                             f"property 'schema' (Spark DDL, e.g. \"event_time TIMESTAMP, page STRING\")")
        return {p: schemas[p] for p in ports}

    def begin_window(self, window_id: int) -> None:
        self._window = window_id

    def emit_tuples(self) -> None:
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + 0.1
        if self._error:
            if self._fatal:
                raise FatalError(self._error)
            raise RuntimeError(self._error)
        self._publish_state()
        self._report_committed()
        if self._done:
            # Everything ended and Spark committed it: the state after this window is final.
            if self._window > self.spark_committed and self._ctx is not None:
                self._ctx.report_checkpoint(self._window)
            raise ShutdownException(f"SparkPipeline {self._label}: inputs ended and the query processed "
                                    f"window {self.spark_committed:x}")

    def end_window(self) -> None:
        if self._ctx is None:
            return
        with self._lock:
            metrics = dict(self._progress)
        metrics["spark_committed_window"] = self.spark_committed
        for key, value in metrics.items():
            self._ctx.set_metric(key, value)

    def teardown(self) -> None:
        self._stop.set()
        query, self._query = self._query, None
        if query is not None:
            _stop_query(query)
        if self._driver is not None:
            self._driver.join(5)

    # -- operator side of the channel ---------------------------------------
    def _publish_state(self, force: bool = False) -> None:
        ctx = self._ctx
        assert ctx is not None and self._channel is not None
        windows = ctx.upstream_windows()
        now = time.monotonic()
        with self._lock:
            if windows:
                self._uw_seen = True
            for up in self._upstreams:
                w = windows.get(up.source)
                if w is None:
                    # an upstream removed by the master after it shut down: its stream ended
                    if self._uw_seen and up.window is not None and up.ended is None and windows:
                        up.ended = up.window
                elif w != up.window:
                    up.window, up.changed = w, now
            key = tuple((u.source, u.window, u.ended) for u in self._upstreams)
            if key == self._state_key and not force:
                return
            self._state_key = key
            state = {
                "operator": self._label, "initial": int(ctx.checkpoint_window),
                "read_timeout": self.read_timeout, "connect_timeout": 10.0,
                "ports": {p: [{"publisher": u.publisher, "source": u.source, "host": u.host,
                               "port_number": u.port_number, "token": u.token.hex(), "mask": u.mask,
                               "keys": u.keys, "codec": u.codec} for u in self._upstreams if u.port == p]
                          for p in self._ports()},
                "windows": {str(u.source): u.window for u in self._upstreams if u.window is not None},
                "ended": {str(u.source): u.ended for u in self._upstreams if u.ended is not None},
            }
        self._channel.write_state(state)

    def _committed_window(self) -> int | None:
        """Newest window committed for every port, from Spark's commit log and ``commit`` calls."""
        assert self._channel is not None and self._commit_log is not None
        logged = self._commit_log.poll()
        result = None
        for port in self._ports():
            candidates = [w for w in (logged.get(port), self._channel.read_commit(port)) if w is not None]
            if not candidates:
                return None
            w = max(candidates)
            result = w if result is None else min(result, w)
        return result

    def _report_committed(self) -> None:
        window = self._reportable
        if window > self.spark_committed:
            self.spark_committed = window
            assert self._ctx is not None
            self._ctx.report_checkpoint(window)

    def _inputs_ended(self) -> int | None:
        """The last window of all inputs once every upstream stream ended, else None."""
        with self._lock:
            if any(u.ended is None for u in self._upstreams):
                return None
            initial = self._ctx.checkpoint_window if self._ctx is not None else -1
            return max([int(u.ended) for u in self._upstreams] + [initial])  # type: ignore[arg-type]

    def _follow(self) -> None:
        """Background: Spark's committed window, gated on the ends of the upstream streams.

        A committed window ``w`` becomes reportable once every upstream partition
        is known to have ended or to go on after ``w`` (a probe of its buffer
        server). Reporting the last window of an upstream that just ended lets the
        master remove it (and release its buffer server), so its END_STREAM must
        be seen first. Upstreams whose window stopped advancing are probed too.
        """
        stale = max(1.0, 2.5 * self._window_ms / 1000)
        held_since: float | None = None
        while not self._stop.wait(0.2):
            try:
                committed = self._committed_window()
                if committed is not None and committed > self._reportable:
                    now = time.monotonic()
                    if self._may_report(committed) or (held_since is not None and now - held_since > _HOLD_LIMIT):
                        self._reportable = committed
                        held_since = None
                    elif held_since is None:
                        held_since = now
                now = time.monotonic()
                with self._lock:
                    due = [u for u in self._upstreams if u.ended is None and u.window is not None
                           and now - u.changed >= stale and now - u.probed >= 1.0 and u.proof <= u.window]
                for up in due:
                    self._probe_upstream(up)
            except Exception:  # noqa: BLE001 - keep following; the driver reports real failures
                log.warning("SparkPipeline %s: following commits failed", self._label, exc_info=True)

    def _probe_upstream(self, up: _Upstream) -> None:
        ended, window = probe_end_of_stream(up.host, up.port_number, up.token, up.publisher,
                                            int(up.window))  # type: ignore[arg-type]
        with self._lock:
            up.probed = time.monotonic()
            if ended and up.ended is None:
                up.ended = window
                log.info("SparkPipeline %s: stream %s ended after window %x", self._label, up.publisher, window)
            elif ended is False:
                up.proof = max(up.proof, window)

    def _may_report(self, window: int) -> bool:
        """Every upstream partition ended, or has a window after ``window``."""
        def settled(u: _Upstream) -> bool:
            return u.ended is not None or u.window is None or window < u.window or window < u.proof

        with self._lock:
            pending = [u for u in self._upstreams if not settled(u)]
        for up in pending:
            self._probe_upstream(up)
        with self._lock:
            return all(settled(u) for u in self._upstreams)

    # -- the Spark side (driver thread) --------------------------------------
    def _drive(self) -> None:
        try:
            self._drive_query()
        except _Stopped:
            pass
        except FatalError as exc:
            self._fail(str(exc), fatal=True)
        except Exception as exc:  # noqa: BLE001
            self._fail(f"SparkPipeline {self._label}: {type(exc).__name__}: {exc}", fatal=False)

    def _fail(self, message: str, fatal: bool) -> None:
        if self._stop.is_set():
            return
        log.error("%s", message)
        with self._lock:
            self._progress["spark_state"] = "failed"
        self._fatal = fatal
        self._error = message

    def _drive_query(self) -> None:
        ctx = self._ctx
        assert ctx is not None
        started = time.monotonic()
        conf = dict(self.spark_conf or {})
        conf.setdefault("spark.sql.streaming.checkpointLocation", fs.join(self._ckpt, "queries"))
        try:
            spark = get_session(conf, app_name=f"stram:{ctx.app_id}:{ctx.name}")
        except Exception as exc:  # noqa: BLE001
            raise FatalError(f"SparkPipeline {self._label}: cannot start Spark: {type(exc).__name__}: "
                             f"{_first_line(exc)}") from None
        if self._stop.is_set():
            return
        startup = round(time.monotonic() - started, 1)
        with self._lock:
            self._progress.update({"spark_state": "running", "spark_startup_seconds": startup})
        restarts: list[float] = []
        while not self._stop.is_set():
            query = self._start_query(spark)
            self._query = query
            log.info("SparkPipeline %s: query %s started (Spark ready after %.1fs), checkpoint %s",
                     self._label, getattr(self._pipeline_ctx, "query_name", ""), startup, self._ckpt)
            try:
                outcome = self._watch(query)
            finally:
                if self._stop.is_set():  # undeployed meanwhile: leave no query behind
                    _stop_query(query)
            if outcome == "done" or self._stop.is_set():
                return
            # the query failed: classify, then restart it in place or give up
            text = _exception_text(query)
            if SCHEMA_MARKER in text:
                raise FatalError(_marker_line(text, SCHEMA_MARKER))
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < 300] + [now]
            reason = (_marker_line(text, READ_MARKER) if READ_MARKER in text else _first_line(text))
            if len(restarts) > self.query_restarts:
                msg = (f"SparkPipeline {self._label}: query of pipeline {self.pipeline!r} failed "
                       f"{len(restarts)} times: {reason}")
                if READ_MARKER in text:
                    raise RuntimeError(msg)  # reading failed: a redeploy gets fresh addresses
                raise FatalError(msg)
            log.warning("SparkPipeline %s: query failed (%s); restarting it from its checkpoint", self._label,
                        reason)
            ctx.log(f"query failed ({reason}); restarting it from its checkpoint")
            if self._stop.wait(2.0):
                return

    def _start_query(self, spark: Any) -> Any:
        ctx = self._ctx
        assert ctx is not None and self._build is not None and self._channel is not None
        inputs = {}
        for port, ddl in self._schemas.items():
            try:
                inputs[port] = (spark.readStream.format(SOURCE_NAME).schema(ddl)
                                .option("channel", self._channel.directory).option("port", port).load())
            except Exception as exc:  # noqa: BLE001
                raise FatalError(f"SparkPipeline {self._label}: schema of input port '{port}' ({ddl!r}) is "
                                 f"not valid Spark DDL: {_first_line(exc)}") from None
        part = f"-{ctx.partition_index}" if ctx.partition_count > 1 else ""
        pctx = PipelineContext(name=f"{ctx.name}{part}", checkpoint_location=self._ckpt,
                               trigger=self.trigger or f"{self._window_ms} milliseconds",
                               query_name=re.sub(r"\W", "_", f"{ctx.name}{part}"),
                               output_path=self.output_path, options=dict(self.options or {}),
                               app_id=ctx.app_id, app_path=ctx.app_path)
        self._pipeline_ctx = pctx
        try:
            params = inspect.signature(self._build).parameters.values()
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            wants_ctx = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)
        except (TypeError, ValueError):
            wants_ctx = False
        try:
            result = self._build(spark, inputs, pctx) if wants_ctx else self._build(spark, inputs)
        except Exception as exc:  # noqa: BLE001 - user code
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
            raise FatalError(f"SparkPipeline {self._label}: pipeline {self.pipeline!r} raised "
                             f"{type(exc).__name__}: {_first_line(exc)}{where}") from None
        from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

        if isinstance(result, DataStreamWriter):
            if self._stop.is_set():  # undeployed meanwhile: the next incarnation starts the query
                raise _Stopped()
            try:
                return pctx.start(result)
            except Exception as exc:  # noqa: BLE001
                raise FatalError(f"SparkPipeline {self._label}: the query of pipeline {self.pipeline!r} "
                                 f"did not start: {_first_line(exc)}") from None
        if isinstance(result, StreamingQuery):
            return result
        raise FatalError(f"SparkPipeline {self._label}: pipeline {self.pipeline!r} returned "
                         f"{type(result).__name__}; return a DataStreamWriter or a started StreamingQuery")

    def _watch(self, query: Any) -> str:
        """Follow a running query: progress metrics, the end of the inputs; "done" or "failed"."""
        self._locate_checkpoint(query)
        seen = -1
        total = 0
        while not self._stop.is_set():
            try:
                if not query.isActive:
                    return "failed"  # with an exception, or stopped by someone else: restart it
                recent = query.recentProgress
            except Exception:  # noqa: BLE001 - the gateway went away (process ending)
                if self._stop.is_set():
                    return "done"
                raise
            fresh = [p for p in recent if p.get("batchId", -1) > seen]
            if fresh:
                if seen < 0:
                    log.info("SparkPipeline %s: first batch done (%s ms)", self._label,
                             (fresh[0].get("durationMs") or {}).get("triggerExecution"))
                seen = fresh[-1]["batchId"]
                total += sum(int(p.get("numInputRows") or 0) for p in fresh)
                self._record_progress(fresh[-1], total)
            final = self._inputs_ended()
            if final is not None and self._publish_ended_ready():
                try:
                    query.processAllAvailable()  # includes the no-data batches that close windows
                except Exception:  # noqa: BLE001 - the query failed (or was stopped)
                    continue
                committed = self._committed_window()
                initial = self._ctx.checkpoint_window if self._ctx is not None else -1
                if max(committed if committed is not None else -1, initial) >= final:
                    fresh = [p for p in query.recentProgress if p.get("batchId", -1) > seen]
                    total += sum(int(p.get("numInputRows") or 0) for p in fresh)
                    if fresh:
                        self._record_progress(fresh[-1], total)
                    query.stop()
                    with self._lock:
                        self._progress["spark_state"] = "done"
                    self._done = True
                    return "done"
            self._stop.wait(0.5)
        return "done"

    def _publish_ended_ready(self) -> bool:
        """The channel state already tells the reader that every input ended."""
        key = self._state_key
        return key is not None and all(e is not None for _, _, e in key)

    def _locate_checkpoint(self, query: Any) -> None:
        """Follow the query's real checkpoint directory (a pipeline may start the query itself)."""
        try:
            root = query._jsq.streamingQuery().resolvedCheckpointRoot()
        except Exception:  # noqa: BLE001 - internal API: keep the configured location
            return
        if root:
            local = str(root)
            if local.startswith("file:"):
                local = re.sub(r"^file:(//)?", "", local)
                local = "/" + local.lstrip("/")
            if local.rstrip("/") != self._ckpt.rstrip("/"):
                self._ckpt = local
                self._commit_log = _CommitLog(local)

    def _record_progress(self, p: dict[str, Any], total: int) -> None:
        end_window = None
        for source in p.get("sources") or []:
            try:
                end = json.loads(source.get("endOffset") or "null")
            except (TypeError, ValueError):
                end = None
            if isinstance(end, dict) and "window" in end:
                w = int(end["window"])
                end_window = w if end_window is None else min(end_window, w)
        metrics = {
            "spark_batch_id": p.get("batchId"),
            "spark_input_rows": p.get("numInputRows"),
            "spark_input_rows_per_sec": round(float(p.get("inputRowsPerSecond") or 0.0), 1),
            "spark_processed_rows_per_sec": round(float(p.get("processedRowsPerSecond") or 0.0), 1),
            "spark_batch_millis": (p.get("durationMs") or {}).get("triggerExecution"),
            "spark_end_window": end_window,
            "spark_rows_total": total,
            "spark_watermark": (p.get("eventTime") or {}).get("watermark"),
        }
        with self._lock:
            self._progress.update(metrics)


def _stop_query(query: Any) -> None:
    try:
        if query.isActive:
            query.stop()
    except Exception:  # noqa: BLE001 - the JVM may be gone
        log.warning("stopping a streaming query failed", exc_info=True)


def _exception_text(query: Any) -> str:
    try:
        exc = query.exception()
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "" if exc is None else str(exc)


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__ if isinstance(exc, BaseException) else ""


def _marker_line(text: str, marker: str) -> str:
    for line in text.splitlines():
        if marker in line:
            return line[line.index(marker) + len(marker):].strip()
    return _first_line(text)
