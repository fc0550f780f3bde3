"""The ``stram`` streaming data source of PySpark, and its reads from buffer servers.

A SparkPipeline's input streams appear to Spark through the Python streaming
data source registered as format ``stram`` (:class:`StramDataSource`):
offsets are window ids, ``latestOffset`` is the newest window every upstream
partition has finished, ``partitions(start, end)`` gives one Spark input
partition per upstream physical partition, and ``read`` subscribes to that
partition's buffer server for windows ``(start, end]``
(:func:`read_partition`). The reader learns the upstream partitions from the
hosting operator, and tells it Spark's commits, through the operator's
channel (:mod:`stram.spark.channel`).

Spark ships these classes to its Python workers by reference to this module
(``stram.spark.source``); the workers import it from the repository root
that :func:`stram.spark.session.get_session` puts on their ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

from stram.spark.batches import rows_to_batch
from stram.spark.channel import Channel, latest_window
from stram.spark.errors import StramReadError

try:  # stram.spark must import without pyspark (spec validation, the master)
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    PYSPARK_ERROR = ""
except ImportError as _exc:  # pragma: no cover - exercised only without pyspark
    PYSPARK_ERROR = f"pyspark is not installed ({_exc}); install it with: pip install 'stram[spark]'"

    class DataSource:  # type: ignore[no-redef]
        def __init__(self, options: dict) -> None:
            self.options = options

    class DataSourceStreamReader:  # type: ignore[no-redef]
        pass

    class InputPartition:  # type: ignore[no-redef]
        def __init__(self, value: Any) -> None:
            self.value = value

__all__ = ["StramDataSource", "StramStreamReader", "StramPartition", "read_partition", "probe_end_of_stream",
           "SOURCE_NAME"]

#: Format name of the streaming data source.
SOURCE_NAME = "stram"


class StramPartition(InputPartition):
    """One Spark input partition: windows ``(start, end]`` of one upstream publisher."""

    def __init__(self, port: str, publisher: str, host: str, port_number: int, token: str, mask: int,
                 keys: list[int], codec: str, start: int, end: int, operator: str,
                 read_timeout: float, connect_timeout: float, tls_cert: str | None = None) -> None:
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
        self.tls_cert = tls_cert  # PEM; None: TLS is off
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
                               float(state.get("read_timeout", 60.0)), float(state.get("connect_timeout", 10.0)),
                               p.get("tls_cert"))
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

    from stram.agent.bufferserver.client import Subscriber
    from stram.agent.bufferserver.protocol import BufferServerError, MessageType
    from stram.agent.engine.codec import get_codec

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    names = list(arrow_schema.names)
    p = partition
    where = (f"SparkPipeline {p.operator}, input port '{p.port}', stream from {p.publisher}")
    span = f"windows ({p.start:x}, {p.end:x}] of {p.publisher} at {p.host}:{p.port_number}"
    codec = get_codec(p.codec)
    sub = Subscriber(p.host, p.port_number, bytes.fromhex(p.token), p.publisher, p.start + 1,
                     mask=p.mask, keys=p.keys, reconnect=False, connect_timeout=p.connect_timeout,
                     subscriber_id=f"spark:{p.operator}:{os.getpid()}",
                     ssl_context=_client_context(p.tls_cert.encode() if p.tls_cert else None),
                     alloc=codec.receive_buffer)
    PAYLOAD, END_WINDOW, BEGIN_WINDOW, END_STREAM = (MessageType.PAYLOAD, MessageType.END_WINDOW,
                                                     MessageType.BEGIN_WINDOW, MessageType.END_STREAM)
    rows: list = []
    last_data = time.monotonic()
    done = False

    def flush() -> Iterator[Any]:
        batch = rows_to_batch(rows, arrow_schema, names, where)
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


def _client_context(cert: bytes | None) -> Any:
    """The TLS client context trusting the application's certificate; None when TLS is off."""
    if cert is None:
        return None
    from stram.common.tls import client_context
    return client_context(cert)


def probe_end_of_stream(host: str, port_number: int, token: bytes, publisher: str, after_window: int,
                        wait: float = 0.6, connect_timeout: float = 2.0,
                        tls_cert: bytes | None = None) -> tuple[bool | None, int]:
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
    tls_cert : bytes, optional
        The application's certificate when TLS is on.

    Returns
    -------
    (ended, window)
        ``(True, after_window)`` once END_STREAM arrived right after it (so
        ``after_window`` was the last window); ``(False, w)`` with
        ``w > after_window`` when window ``w`` exists (the stream goes on);
        ``(False, after_window)`` when neither came within ``wait``; ``(None,
        after_window)`` when the buffer server could not be asked.
    """
    from stram.agent.bufferserver.client import Subscriber
    from stram.agent.bufferserver.protocol import BufferServerError, MessageType

    sub = Subscriber(host, port_number, token, publisher, after_window + 1, mask=0xFFFFFFFF, keys=(),
                     reconnect=False, connect_timeout=connect_timeout, subscriber_id=f"spark-probe:{os.getpid()}",
                     ssl_context=_client_context(tls_cert))
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
