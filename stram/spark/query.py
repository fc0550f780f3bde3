"""The Spark side of a SparkPipeline: its query built, started, watched and restarted in the driver thread.

:class:`PipelineContext` is what the pipeline function learns about its host;
:class:`QueryDriver` is the part of :class:`~stram.spark.pipeline.SparkPipeline`
that runs in its driver thread.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from stram.common import fs
from stram.operator import FatalError
from stram.spark.commitlog import CommitLog
from stram.spark.errors import READ_MARKER, SCHEMA_MARKER, first_line, marker_line
from stram.spark.session import get_session
from stram.spark.source import SOURCE_NAME

__all__ = ["PipelineContext"]

log = logging.getLogger("stram.spark")


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


class QueryDriver:
    """The driver thread of a :class:`~stram.spark.pipeline.SparkPipeline` (a base class of it).

    It starts the SparkSession and the pipeline's query, follows the query's
    progress and the end of the inputs, and restarts a failed query from its
    checkpoint. Its state is the operator's (``SparkPipeline._init_transient``).
    """

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
                             f"{first_line(exc)}") from None
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
                    stop_query(query)
            if outcome == "done" or self._stop.is_set():
                return
            # the query failed: classify, then restart it in place or give up
            text = _exception_text(query)
            if SCHEMA_MARKER in text:
                raise FatalError(marker_line(text, SCHEMA_MARKER))
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < 300] + [now]
            reason = (marker_line(text, READ_MARKER) if READ_MARKER in text else first_line(text))
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
                                 f"not valid Spark DDL: {first_line(exc)}") from None
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
                             f"{type(exc).__name__}: {first_line(exc)}{where}") from None
        from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

        if isinstance(result, DataStreamWriter):
            if self._stop.is_set():  # undeployed meanwhile: the next incarnation starts the query
                raise _Stopped()
            try:
                return pctx.start(result)
            except Exception as exc:  # noqa: BLE001
                raise FatalError(f"SparkPipeline {self._label}: the query of pipeline {self.pipeline!r} "
                                 f"did not start: {first_line(exc)}") from None
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
                self._commit_log = CommitLog(local)

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


def stop_query(query: Any) -> None:
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
