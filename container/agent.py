"""The container agent: finds the master, heartbeats, deploys and runs operators.

Started as ``python -m stram.agent`` with ``STRAM_CONTAINER_ID`` and
``STRAM_APP_PATH`` in its environment (the launcher sets them); its own
credential is the file ``APP_PATH/credentials/<id>`` the master wrote (it never
holds the application's token). It reads the master's address from ``APP_PATH/heartbeatUri``, calls
``GetInitContext``, starts its buffer server, and then heartbeats at the
interval the master gives, carrying out the instructions in each response.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import pickle
import socket
import threading
import time
from typing import Any

import grpc
import psutil

from stram import wire as proto
from stram.agent.bufferserver.server import BufferServer
from stram.agent.engine import arrowprobe, streams
from stram.agent.engine.node import QUEUE_CAPACITY, Node, NodeState
from stram.agent.engine.streams import DirectSink, PublisherSink, QueueSink
from stram.agent.umbilical import COMPLAIN_SECONDS, MasterGone, Umbilical  # noqa: F401 - re-exported
from stram.common import apppath, fs, space, tls
from stram.common.attributes import default as attribute_default
from stram.common.imports import load_class
from stram.common.logsetup import rate_limit
from stram.common.partition import key_field, key_function
from stram.common.stacks import thread_stacks
from stram.common.windows import initial_window
from stram.operator import InputConnection, OperatorContext

log = logging.getLogger("stram.agent.agent")
rate_limit(log, burst=5, interval=10.0)  # reconnect warnings and the like: repeats are counted

_LOCALITY = {proto.THREAD_LOCAL: "THREAD_LOCAL", proto.CONTAINER_LOCAL: "CONTAINER_LOCAL"}
_KIND = {v: k for k, v in proto.OperatorDeployInfo.OperatorType.items()}


#: Heartbeat period of a container with no operator left running, for IDLE_FAST_SECONDS after that.
IDLE_HEARTBEAT_SECONDS = 0.1
IDLE_FAST_SECONDS = 3.0


def advertised_host(host: str | None = None, env: Any = None) -> str:
    """The address a container advertises: ``host``, else STRAM_HOST, else NM_HOST (YARN's name of
    the node), else this machine's host name."""
    env = os.environ if env is None else env
    return host or env.get("STRAM_HOST") or env.get("NM_HOST") or socket.gethostname()


def bind_host(host: str, env: Any = None) -> str:
    """Where the buffer server listens: the advertised ``host`` itself, or STRAM_BIND_HOST when set
    (``0.0.0.0`` to listen everywhere). Never every interface by default: on a machine with
    several nodes' addresses (or a shared one) a container listens on its own node's only."""
    env = os.environ if env is None else env
    return env.get("STRAM_BIND_HOST") or host


class Agent:
    """Runs the operators the master deploys to this container."""

    def __init__(self, container_id: str, app_path: str, credential: str,
                 host: str | None = None, work_dir: str | None = None) -> None:
        self.container_id = container_id
        self.app_path = app_path
        #: The address this container advertises (its buffer server's): STRAM_HOST, which the YARN
        #: container script sets from NM_HOST (the node's address as YARN knows it).
        self.host = advertised_host(host)
        self.work_dir = work_dir or os.path.join(os.getcwd(), f"work-{container_id}")
        #: ``credential``: this container's own (:func:`stram.common.secret.container_credential`)
        self.umbilical = Umbilical(app_path, credential, container_id=container_id)
        self.tls_client = None
        self.nodes: dict[int, Node] = {}
        #: Operators that shut down: kept for committed() until undeployed.
        self.finished: dict[int, Node] = {}
        #: Operators whose deploy failed: reported FAILED once, then forgotten.
        self.failed_deploys: dict[int, str] = {}
        #: Operators being undeployed (their teardown runs): id -> "name (id)".
        self._ending: dict[int, str] = {}
        #: Threads running the teardowns of undeployed operators.
        self._teardowns: dict[int, threading.Thread] = {}
        #: Operators whose SHUTDOWN the last heartbeat carried.
        self._reported_shutdown: set[int] = set()
        #: Last windows of upstream operators, for operators reading their inputs themselves.
        self.upstream_windows: dict[int, int] = {}
        #: Watermark alignment: the ceiling of each aligned input operator here (stram.master.core.alignment).
        self.watermark_ceilings: dict[int, int] = {}
        #: upstream operator id -> the last window of its stream, once it ended (from the master)
        self.ended_upstreams: dict[int, int] = {}
        self.committed = -1
        self.buffer_server: BufferServer | None = None
        self.buffer_address = ("", 0)
        self.context: proto.StreamingContainerContext | None = None
        self.interval = 1.0
        #: The master asked for every thread's stack (stack_trace_required): the next heartbeat, at once.
        self._stack_wanted = False
        self._stop = threading.Event()
        #: Set to send the next heartbeat at once (an operator ended or failed, or the agent stops).
        self._wake = threading.Event()
        self._idle_since: float | None = None
        self._lock = threading.Lock()
        self._process = psutil.Process()
        #: What heartbeats name this process by (Apex's JVM name, "pid@host"): the node's address, which
        #: tells apart nodes that share a machine (a mini cluster's), not the machine's host name.
        self.process_name = f"{os.getpid()}@{self.host}"

    # ------------------------------------------------------------ main loop
    def run(self) -> int:
        self.umbilical.connect()
        self.context = self._call_with_retry("GetInitContext",
                                             proto.InitContextRequest(container_id=self.container_id))
        ctx = self.context
        #: What this container's subscribers trust (None: TLS is off): the application's certificate.
        self.tls_client = tls.client_context(self.umbilical.cert) if self.umbilical.cert else None
        self.interval = ctx.heartbeat_interval_millis / 1000
        space.PAUSES.timeout = float(self.dag_attribute("DISK_FULL_TIMEOUT_SECS"))
        os.makedirs(self.work_dir, exist_ok=True)
        if ctx.deploy_buffer_server:
            spool = os.path.join(self.work_dir, "spool") if self.dag_attribute("BUFFER_SPOOLING") else None
            bind = bind_host(self.host)
            lag = self.dag_attribute("BUFFER_LAG_MB")  # flow control (None: none)
            self.buffer_server = BufferServer(
                token=ctx.buffer_server_token, host=bind, port=0,
                memory_limit_mb=float(self.dag_attribute("BUFFER_MEMORY_MB")), spool_dir=spool,
                lag_limit_mb=None if lag is None else float(lag),
                ssl_context=tls.server_context(tls.load_identity(self.app_path)) if self.umbilical.cert else None)
            _, port = self.buffer_server.start()
            self.buffer_address = (self.host, port)
        self.log(f"container {self.container_id} started (pid {os.getpid()}, buffer server "
                 f"{self.buffer_address[0]}:{self.buffer_address[1]})")
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                response = self._call_with_retry("ProcessHeartbeat", self._heartbeat())
                if self._apply(response):
                    break
                if not self._stack_wanted:
                    self._wake.wait(max(0.0, self._next_interval() - (time.monotonic() - started)))
                    self._wake.clear()
        finally:
            self._close()
            self.umbilical.close()
        return 0

    def _close(self) -> None:
        """Undeploy every operator before the process exits, heartbeating ``ending`` meanwhile.

        Teardowns may take long (an output whose broker is away makes its last committed
        windows final): the heartbeats tell the master this container still works on the
        end, so it waits for it instead of stopping it after a fixed grace. They are single
        tries: a master that is gone does not delay the exit.
        """
        closer = threading.Thread(target=self.shutdown, name="closing", daemon=True)
        closer.start()
        while True:
            closer.join(self.interval)
            if not closer.is_alive():
                break
            ending = sorted(self._ending.copy().values())  # the closing thread changes it
            if not ending or self.umbilical.stub is None:
                continue
            try:
                self.umbilical.call("ProcessHeartbeat", proto.ContainerHeartbeat(
                    container_id=self.container_id, jvm_name=self.process_name,
                    sent_millis=int(time.time() * 1000), ending=ending), timeout=max(self.interval, 1.0))
            except grpc.RpcError as exc:
                log.debug("heartbeat while ending %s: %s", ending, exc.code())

    def _next_interval(self) -> float:
        """Seconds to the next heartbeat: short for a few seconds once no operator is left running.

        The application's end reaches a container only in a heartbeat response; a container whose
        operators all ended asks often for a while, so it exits right after the application ends.
        """
        if self.nodes or self.failed_deploys:
            self._idle_since = None
            return self.interval
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        return min(self.interval, IDLE_HEARTBEAT_SECONDS) if now - self._idle_since < IDLE_FAST_SECONDS \
            else self.interval

    def dag_attribute(self, name: str) -> Any:
        """A DAG attribute from the init context, else its default from the attribute table."""
        if self.context is not None and name in self.context.attributes:
            return json.loads(self.context.attributes[name])
        return attribute_default(name)

    def _call_with_retry(self, method: str, request: Any) -> Any:
        """Call the master; on failure re-read heartbeatUri (a new master attempt) and retry."""
        timeout_ms = 30000
        if self.context is not None:
            timeout_ms = int(self.dag_attribute("HEARTBEAT_TIMEOUT_MILLIS"))
        deadline = time.monotonic() + max(timeout_ms / 1000, 10.0) * 2
        delay = 0.1
        while True:
            try:
                return self.umbilical.call(method, request)
            except grpc.RpcError as exc:
                code = exc.code()
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT):
                    raise MasterGone(f"master refused {method}: {exc.details()}") from None
                if code == grpc.StatusCode.UNAVAILABLE and (exc.details() or "").startswith(proto.PAUSED):
                    # the master is alive and waits for space (its own time limit ends the wait)
                    deadline = time.monotonic() + max(timeout_ms / 1000, 10.0) * 2
                    self.umbilical.complain(f"the master is {exc.details()}")
                    time.sleep(min(delay, 1.0))
                    delay = min(delay * 2, 2.0)
                    continue
                if time.monotonic() > deadline:
                    raise MasterGone(f"master unreachable for {method}: {exc.details()}") from None
                self.umbilical.complain(f"{method} to {self.umbilical.address or '?'} failed: "
                                        f"{code.name} ({exc.details()})")
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                try:
                    self.umbilical.connect(wait=5.0)
                except MasterGone:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def log(self, msg: str, level: str = "INFO") -> None:
        log.log(getattr(logging, level, logging.INFO), msg)
        try:
            self.umbilical.call("Log", proto.LogRequest(container_id=self.container_id, msg=msg, level=level))
        except grpc.RpcError:
            pass

    def report_error(self, operators: list[int], msg: str) -> None:
        try:
            self.umbilical.call("ReportError", proto.ReportErrorRequest(
                container_id=self.container_id, operators=operators, msg=msg))
        except grpc.RpcError:
            log.warning("could not report error for %s", operators)

    # ------------------------------------------------------------ heartbeat
    def _heartbeat(self) -> proto.ContainerHeartbeat:
        now = int(time.time() * 1000)
        stats = proto.ContainerStats(container_id=self.container_id)
        for node in list(self.nodes.values()):
            ohb = self._operator_heartbeat(node, now)
            stats.operators.append(ohb)
            if ohb.state == proto.OperatorHeartbeat.SHUTDOWN:
                self._reported_shutdown.add(node.id)
        for op_id, error in list(self.failed_deploys.items()):
            stats.operators.append(proto.OperatorHeartbeat(
                node_id=op_id, generated_tms=now, state=proto.OperatorHeartbeat.FAILED, error=error))
            del self.failed_deploys[op_id]
        mem = psutil.virtual_memory()
        publishers = []
        if self.buffer_server is not None:
            for pub, st in self.buffer_server.stats().items():
                publishers.append(proto.PublisherStats(
                    publisher=pub, memory_bytes=st.get("memory_bytes", 0), spilled_bytes=st.get("spilled_bytes", 0),
                    windows=st.get("windows", 0), first_window=st.get("first_window") or 0,
                    last_window=st.get("last_window") or 0, throttled_millis=st.get("throttled_millis", 0)))
        stack_trace = ""
        if self._stack_wanted:
            self._stack_wanted = False
            threads = {n.thread.ident: n.id for n in list(self.nodes.values()) + list(self.finished.values())
                       if n.thread is not None}
            stack_trace = json.dumps(thread_stacks(threads))
        return proto.ContainerHeartbeat(
            publishers=publishers, stack_trace=stack_trace,
            container_id=self.container_id,
            buffer_server_host=self.buffer_address[0], buffer_server_port=self.buffer_address[1],
            jvm_name=self.process_name,
            memory_mb_free=mem.available // (1 << 20),
            memory_mb_used=self._process.memory_info().rss // (1 << 20),
            gc_collection_count=sum(s["collections"] for s in gc.get_stats()),
            container_stats=stats, sent_millis=now, paused=space.PAUSES.describe())

    def _operator_heartbeat(self, node: Node, now: int) -> proto.OperatorHeartbeat:
        hb = proto.OperatorHeartbeat(node_id=node.id, generated_tms=now,
                                     interval_ms=int(self.interval * 1000),
                                     state=getattr(proto.OperatorHeartbeat, node.state))
        while node.stats:
            ws = node.stats.popleft()
            stats = hb.window_stats.add(window_id=ws.window_id, cpu_time_used=ws.cpu_nanos,
                                        tuples_in=sum(ws.input_counts.values()),
                                        tuples_out=sum(ws.output_counts.values()),
                                        end_window_millis=ws.end_window_timestamp)
            stats.checkpoint.window_id = ws.checkpoint
            if ws.watermark is not None:  # an operator with event time
                stats.watermark = ws.watermark
                stats.has_watermark = True
            for port, n in ws.input_counts.items():
                stats.input_ports.add(id=port, tuple_count=n, end_window_timestamp=ws.end_window_timestamp,
                                      queue_size=ws.queue_size)
            for port, n in ws.output_counts.items():
                stats.output_ports.add(id=port, tuple_count=n, end_window_timestamp=ws.end_window_timestamp,
                                       buffer_server_bytes=ws.buffer_server_bytes.get(port, 0))
            if ws.checkpoint_start:
                stats.checkpoint_stats.checkpoint_time_millis = ws.checkpoint_millis
                stats.checkpoint_stats.checkpoint_start_time = ws.checkpoint_start
                stats.checkpoint_stats.checkpoint_size = ws.checkpoint_size
            for k, v in ws.metrics.items():
                stats.metrics[k] = json.dumps(v, default=str)
        hb.current_window_id = node.current_window
        while node.saved_checkpoints:
            hb.saved_checkpoints.append(node.saved_checkpoints.pop(0))
        if node.state == NodeState.FAILED:
            hb.error = node.error
            hb.fatal = node.fatal
        return hb

    def _on_state_change(self, node: Node) -> None:
        if node.state == NodeState.FAILED:
            self.report_error([node.id], node.error)
        # the master hears of an operator's end (its last window, its final checkpoint) at once, not at
        # the next heartbeat: the application finishes as soon as its last operator does
        self._wake.set()

    # ------------------------------------------------------------ responses
    def _apply(self, r: proto.ContainerHeartbeatResponse) -> bool:
        """Carry out a heartbeat response; True when the container should exit."""
        if r.heartbeat_interval_millis:
            self.interval = r.heartbeat_interval_millis / 1000
        if r.stack_trace_required:
            self._stack_wanted = True
        # replaced every time: upstream operators that were removed must disappear
        self.upstream_windows = dict(r.upstream_windows)
        self.ended_upstreams = dict(r.ended_upstreams)
        if r.watermark_ceilings or self.watermark_ceilings:  # watermark alignment: each time, all of them
            self.watermark_ceilings = dict(r.watermark_ceilings)
            for op_id, node in self.nodes.items():
                node.watermark_ceiling = self.watermark_ceilings.get(op_id)
        # Reported SHUTDOWN once (in the heartbeat this answers): not reported again.
        for op_id in list(self._reported_shutdown):
            self._reported_shutdown.discard(op_id)
            if op_id in self.nodes:
                self.finished[op_id] = self.nodes.pop(op_id)
        if r.committed_window_id > self.committed:
            self.committed = r.committed_window_id
            for node in self.nodes.values():
                node.requests.append(("committed", self.committed))
            if self.buffer_server is not None:
                # every restart resumes after a checkpoint >= committed, so windows <= committed
                # are never replayed; "- 1" keeps the newest of them as a one-window safety margin
                self.buffer_server.purge("", self.committed - 1)
        for node in self.finished.values():
            self._tell_committed(node)
        for op_id in r.undeploy_request:
            self._undeploy(op_id)
        for pub in r.reset_publishers:
            if self.buffer_server is not None:
                self.buffer_server.reset(pub)
        if r.deploy_request:
            self._deploy(list(r.deploy_request))
            # the next heartbeat at once: the master hears the operators are ACTIVE (and the
            # application's deploy ends) without waiting out an interval
            self._wake.set()
        for req in r.node_requests:
            node = self.nodes.get(req.operator_id)
            if node is not None and req.request_type == proto.StramToNodeRequest.SHUTDOWN_OPERATOR:
                node.requests.append(("shutdown", None))
        return r.shutdown

    def _tell_committed(self, node: Node) -> None:
        """An operator that ended: ``committed`` with the newest committed window, from this thread.

        Its own thread took committed windows between windows and is gone, and one that
        reached it after its last window (a heartbeat's answer while it was ending) is still
        queued: without this an output would never make its last windows final.
        """
        if node.committed_seen < self.committed:
            node.committed_seen = self.committed
            self._safe(node, node.operator.committed, self.committed)

    def _safe(self, node: Node, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001
            log.exception("operator %s: %s failed", node.id, getattr(fn, "__name__", fn))
            self.report_error([node.id], f"{getattr(fn, '__name__', fn)}: {exc!r}")

    def _undeploy(self, op_id: int) -> None:
        """Stop an operator's thread and inputs now; its teardown runs on a thread of its own.

        A teardown may take long (an output publishing its last committed windows):
        heartbeats go on meanwhile, and while the agent exits they say which
        operators are still ending (``ending``, see :meth:`_close`).
        """
        node = self.nodes.pop(op_id, None) or self.finished.pop(op_id, None)
        if node is None:
            return
        node.stop(teardown=False)  # nothing it does reaches a stream after this
        self._link_aligned()
        if node.state == NodeState.SHUTDOWN:  # ended, its end not yet reported: its last windows are final
            self._tell_committed(node)
        self._await_teardown(op_id)
        self._ending[op_id] = f"{node.name} ({op_id})"
        thread = threading.Thread(target=self._tear_down, args=(node,), name=f"teardown-{op_id}", daemon=True)
        self._teardowns[op_id] = thread
        thread.start()

    def _tear_down(self, node: Node) -> None:
        try:
            node.tear_down()
        finally:
            self._ending.pop(node.id, None)
        if node.teardown_error is not None:
            exc = node.teardown_error
            self.report_error([node.id], f"teardown of {node.name} failed: {type(exc).__name__}: {exc}")
        self.log(f"undeployed operator {node.id} ({node.name})")

    def _await_teardown(self, op_id: int) -> None:
        """Wait for the teardown of an earlier instance of ``op_id`` (redeployed in place)."""
        thread = self._teardowns.pop(op_id, None)
        if thread is not None:
            thread.join()

    def shutdown(self) -> None:
        for op_id in list(self.nodes) + list(self.finished):
            self._undeploy(op_id)
        for op_id in list(self._teardowns):
            self._await_teardown(op_id)
        if self.buffer_server is not None:
            self.buffer_server.stop()
            self.buffer_server = None

    # ------------------------------------------------------------ deploy
    def _deploy(self, infos: list[proto.OperatorDeployInfo]) -> None:
        ctx = self.context
        assert ctx is not None
        created: list[Node] = []
        duplicates = [i for i in infos if i.id in self.nodes or i.id in self.finished]
        if duplicates:  # a new master attempt re-sending what this container runs already
            log.warning("ignoring deploy of running operators %s", [i.id for i in duplicates])
            infos = [i for i in infos if i not in duplicates]
            if not infos:
                return
        for info in infos:
            self._await_teardown(info.id)  # the instance it replaces has finished its teardown
            try:
                created.append(self._create(info))
            except Exception as exc:  # noqa: BLE001 - operator construction is user code
                import traceback
                msg = f"deploy of operator {info.id} ({info.name}) failed: " + "".join(
                    traceback.format_exception(exc)).strip()
                log.error(msg)
                self.report_error([info.id], msg)
                self.failed_deploys.update({i.id: msg for i in infos})
                return
        arrowprobe.settle()  # the operators' modules are imported: pyarrow need not import pandas
        for node, info in zip(created, infos):
            self.nodes[node.id] = node
        for node, info in zip(created, infos):
            self._wire(node, info)
        self._link_aligned()
        for node in sorted(created, key=lambda n: not n.inline):
            node.start()
        self.log("deployed " + ", ".join(f"{n.id} ({n.name}) from window {n.current_window:x}"
                                         for n in created))

    def _link_aligned(self) -> None:
        """Give each aligned input operator the members of its group deployed here (watermark alignment
        between them is local: :meth:`Node._local_ceiling`; the master's ceilings cover the others)."""
        groups: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            if node.align_group:
                groups.setdefault(node.align_group, []).append(node)
        for members in groups.values():
            for node in members:
                node.align_peers = [m for m in members if m is not node]

    def _create(self, info: proto.OperatorDeployInfo) -> Node:
        ctx = self.context
        cls = load_class(info.class_name)
        operator = cls()
        for key, value in info.properties.items():
            setattr(operator, key, json.loads(value))
        attrs = {k: json.loads(v) for k, v in info.context_attributes.items()}
        checkpoint = info.checkpoint.window_id
        start = initial_window(ctx.start_window_millis)
        if checkpoint > start:
            data = fs.read_bytes(apppath.checkpoint(self.app_path, info.id, checkpoint))
            operator.set_state(pickle.loads(data))
        else:
            checkpoint = start if checkpoint < start else checkpoint
        count = int(attrs.get("CHECKPOINT_WINDOW_COUNT", ctx.checkpoint_window_count))
        context = OperatorContext(
            id=info.id, name=info.name, partition_index=info.partition_index,
            partition_count=max(info.partition_count, 1), attributes=attrs,
            app_path=self.app_path, app_id=ctx.app_id, work_dir=self.work_dir,
            checkpoint_window=checkpoint, streaming_window_size_millis=ctx.streaming_window_size_millis,
            log=lambda msg, _id=info.id: self.log(f"operator {_id}: {msg}"),
            upstream_windows=lambda: dict(self.upstream_windows),
            ended_upstreams=lambda: dict(self.ended_upstreams))
        node = Node(info.id, info.name, operator, context, _KIND[info.type], checkpoint, count,
                    apppath.checkpoints(self.app_path),
                    exactly_once=attrs.get("PROCESSING_MODE") == "EXACTLY_ONCE",
                    queue_capacity=int(attrs.get("QUEUE_CAPACITY") or QUEUE_CAPACITY))
        node.inline = info.type == proto.OperatorDeployInfo.OIO
        node.on_state_change = self._on_state_change
        return node

    def _wire(self, node: Node, info: proto.OperatorDeployInfo) -> None:
        if node.self_checkpointing:
            for inp in info.inputs:
                node.context.inputs.append(InputConnection(
                    port=inp.port_name, stream=inp.declared_stream_id, source_node_id=inp.source_node_id,
                    publisher=f"{inp.source_node_id}.{inp.source_port_name}",
                    host=inp.buffer_server_host, port_number=inp.buffer_server_port,
                    token=bytes(inp.buffer_server_token), mask=inp.partition_mask,
                    keys=list(inp.partition_keys), codec=inp.stream_codecs.get(0, "pickle"),
                    tls_cert=self.umbilical.cert))
        for inp in ([] if node.self_checkpointing else info.inputs):
            src = node.add_source(inp.port_name)
            locality = _LOCALITY.get(inp.locality)
            upstream = self.nodes.get(inp.source_node_id) if locality else None
            if upstream is not None:
                out = upstream.outputs[inp.source_port_name]
                if locality == "THREAD_LOCAL" and node.inline:
                    out.add_sink(DirectSink(node, src))
                else:
                    out.add_sink(QueueSink(node, src))
                continue
            # AT_MOST_ONCE recovery skips the windows missed while down
            start = max(node.current_window + 1, int(node.context.attributes.get("RESUME_FROM_WINDOW", 0)))
            # where the master said the publisher is: on a cluster, another node's address
            log.info("operator %s subscribes to %s.%s at %s:%d from window %d", info.name, inp.source_node_id,
                     inp.source_port_name, inp.buffer_server_host, inp.buffer_server_port, start)
            node.remote_inputs.append(streams.subscribe(
                node, src, inp.buffer_server_host, inp.buffer_server_port, inp.buffer_server_token,
                f"{inp.source_node_id}.{inp.source_port_name}", start, inp.stream_codecs.get(0, "pickle"),
                mask=inp.partition_mask, keys=list(inp.partition_keys), ssl_context=self.tls_client))
        for out in info.outputs:
            if out.remote and self.buffer_server is not None:
                publisher = self.buffer_server.publisher(f"{node.id}.{out.port_name}", node.current_window + 1)
                node.outputs[out.port_name].add_sink(
                    PublisherSink(publisher, out.stream_codecs.get(0, "pickle"), out.partition_mask,
                                  key_function(out.context_attributes.get("PARTITION_KEY")),
                                  field=key_field(out.context_attributes.get("PARTITION_KEY"))))

