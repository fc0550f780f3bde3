"""The SparkPipeline operator: a PySpark Structured Streaming query fed by stram streams.

The operator publishes its upstream partitions to its ``stram`` readers through
its channel (:mod:`stram.spark.channel`), runs the query in a driver thread
(:mod:`stram.spark.query`), and polls the commit files and Spark's own
commit log (:mod:`stram.spark.commitlog`) to declare the newest committed
window its checkpoint (``context.report_checkpoint``). That puts Spark's
offset commits into the master's committed-window rule: buffer servers keep
every window Spark has not committed, and a restarted query replays exactly
what it had not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from stram.common import apppath
from stram.common.imports import ReferenceLoadError, load_reference
from stram.operator import FatalError, InputOperator, InputPort, OperatorContext, ShutdownException
from stram.spark.channel import Channel
from stram.spark.commitlog import CommitLog
from stram.spark.query import PipelineContext, QueryDriver, stop_query
from stram.spark.source import PYSPARK_ERROR, probe_end_of_stream

__all__ = ["SparkPipeline"]

log = logging.getLogger("stram.spark")

#: Seconds a committed window may wait for upstream probes before it is reported anyway.
_HOLD_LIMIT = 15.0


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
    #: The application's certificate to trust (PEM); None: TLS is off.
    tls_cert: bytes | None = None
    window: int | None = None
    changed: float = 0.0
    ended: int | None = None
    probed: float = 0.0
    #: A window known to exist after ``window`` (the stream goes on).
    proof: int = -1


class SparkPipeline(QueryDriver, InputOperator):
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
                 "_next_poll", "_window", "_query", "_window_ms", "_pipeline_ctx", "_schemas", "_reportable")

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
        self._commit_log: CommitLog | None = None
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
        if PYSPARK_ERROR:
            raise FatalError(f"SparkPipeline {self._label}: {PYSPARK_ERROR}")
        self._build = self._load_pipeline()
        self._upstreams = self._wire(context)
        self._schemas = self._port_schemas()
        self._channel = Channel(os.path.join(context.work_dir or os.getcwd(), f"spark-{context.id}"))
        root = apppath.spark_checkpoint(context.app_path, f"{context.name}{part}") if context.app_path \
            else os.path.join(context.work_dir or os.getcwd(), "spark-checkpoint", f"{context.name}{part}")
        self._ckpt = root[len("file://"):] if root.startswith("file://") else root
        self._commit_log = CommitLog(self._ckpt)
        self.spark_committed = max(self.spark_committed, context.checkpoint_window)
        self._publish_state(force=True)
        self._driver = threading.Thread(target=self._drive, daemon=True, name=f"spark-{context.id}")
        self._driver.start()
        self._probe = threading.Thread(target=self._follow, daemon=True, name=f"spark-follow-{context.id}")
        self._probe.start()

    def _load_pipeline(self) -> Callable[..., Any]:
        ref = self.pipeline
        try:
            obj = load_reference(ref, "function")
        except ReferenceLoadError as exc:
            if exc.missing is not None:
                raise FatalError(f"SparkPipeline {self._label}: module {exc.module!r} has no "
                                 f"{ref.partition(':')[2]!r} (pipeline {ref!r})") from None
            if exc.module is not None:
                cause = exc.cause
                raise FatalError(f"SparkPipeline {self._label}: cannot import pipeline module {exc.module!r} of "
                                 f"{ref!r}: {type(cause).__name__}: {cause}") from None
            raise FatalError(f"SparkPipeline {self._label}: property 'pipeline' must be 'module:function', "
                             f"got {ref!r}") from None
        if not callable(obj):
            raise FatalError(f"SparkPipeline {self._label}: pipeline {ref!r} is not callable")
        return obj

    def _wire(self, context: OperatorContext) -> list[_Upstream]:
        ups = []
        for inp in context.inputs:
            if not inp.host or not inp.port_number:
                raise FatalError(
                    f"SparkPipeline {self._label}: stream {inp.stream!r} into port '{inp.port}' has no "
                    f"buffer server (it is THREAD_LOCAL or CONTAINER_LOCAL, or shares the container): a "
                    f"SparkPipeline reads its inputs from buffer servers; drop the stream's locality")
            ups.append(_Upstream(port=inp.port, source=inp.source_node_id, publisher=inp.publisher,
                                 host=inp.host, port_number=inp.port_number, token=inp.token, mask=inp.mask,
                                 keys=list(inp.keys), codec=inp.codec, tls_cert=inp.tls_cert))
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
            stop_query(query)
        if self._driver is not None:
            self._driver.join(5)

    # -- operator side of the channel ---------------------------------------
    def _publish_state(self, force: bool = False) -> None:
        ctx = self._ctx
        assert ctx is not None and self._channel is not None
        windows = ctx.upstream_windows()
        ended = ctx.ended_upstreams()
        now = time.monotonic()
        with self._lock:
            for up in self._upstreams:
                if up.source in ended:  # the master removed it after it shut down: its stream ended
                    last = ended[up.source]
                    if up.ended is None:
                        up.ended = last
                    if up.window is None or up.window < last:
                        up.window, up.changed = last, now
                    continue
                w = windows.get(up.source)
                if w is not None and w != up.window:
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
                               "keys": u.keys, "codec": u.codec,
                               "tls_cert": u.tls_cert.decode() if u.tls_cert else None}
                              for u in self._upstreams if u.port == p]
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
                                            int(up.window), tls_cert=up.tls_cert)  # type: ignore[arg-type]
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
