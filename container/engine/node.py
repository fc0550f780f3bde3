"""Runs deployed operators: window generation, window alignment, streams, checkpoints.

Each deployed operator is a :class:`Node`. Input operators and operators with
queued or remote inputs run on their own thread; an operator whose inputs are
all THREAD_LOCAL runs on its upstream's thread (direct calls). Data moves in
batches: an output port's ``emit`` is a ``list.append`` and the batch is
flushed between operator calls to every sink of the port:

* THREAD_LOCAL: the downstream's input handler is called with the batch, on this thread;
* CONTAINER_LOCAL (or any upstream in the same container): the batch goes on
  the downstream node's bounded queue (never encoded);
* remote: the batch is encoded by the stream codec and published to this
  container's buffer server, from which downstream containers subscribe.

Control messages (BEGIN_WINDOW, END_WINDOW, CHECKPOINT, END_STREAM) travel in
band; a node with several sources begins window w after BEGIN_WINDOW w from
all of them and ends it after END_WINDOW w from all of them.

Event-time watermarks (WATERMARK, :mod:`stram.common.watermarks`) travel the
same way, just before a window's END_WINDOW, and only once they change: an
input operator sets its own (``context.emit_watermark``); any other node's is
the minimum over its sources, computed when the window's END_WINDOWs are all
in, handed to the operator's ``on_watermark`` when it advanced, and forwarded.
"""

from __future__ import annotations

import collections
import logging
import pickle
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from stram.agent.engine.batch import batch_handler
from stram.agent.engine.inbox import Inbox
from stram.agent.engine.messages import (BEGIN_WINDOW, CHECKPOINT, DATA, END_STREAM, END_WINDOW, WATERMARK,
                                         message_weight)
from stram.agent.engine.streams import PortOutput
from stram.common import fs, space
from stram.common.attributes import default as attribute_default
from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK, combine
from stram.common.windows import is_checkpoint_window, window_millis
from stram.operator import FatalError, InputOperator, Operator, OperatorContext, ShutdownException, output_ports

log = logging.getLogger("stram.agent.engine.node")

#: An emit_tuples call that returns faster than this without output means "idle".
IDLE_CALL_SECONDS = 50e-6
#: How long an aligned input operator above its watermark ceiling sleeps before it looks again.
ALIGNED_WAIT_SECONDS = 0.005
#: Default bound of a node's input queue (:class:`stram.agent.engine.inbox.Inbox`), from the QUEUE_CAPACITY
#: attribute: tuples, a control tuple counting one and an Arrow record batch its rows; a faster
#: upstream waits until the queue is half drained. A bigger bound buys a little speed with memory
#: (docs/performance.md, "The engine's bounds").
QUEUE_CAPACITY: int = attribute_default("QUEUE_CAPACITY")




# ---------------------------------------------------------------- nodes

@dataclass
class WindowStats:
    window_id: int
    checkpoint: int
    input_counts: dict[str, int]
    output_counts: dict[str, int]
    end_window_timestamp: int
    cpu_nanos: int
    queue_size: int
    checkpoint_millis: int = 0
    checkpoint_start: int = 0
    checkpoint_size: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    #: The operator's event-time watermark after the window (None: it has none).
    watermark: int | None = None
    buffer_server_bytes: dict[str, int] = field(default_factory=dict)


class NodeState:
    ACTIVE = "ACTIVE"
    SHUTDOWN = "SHUTDOWN"
    FAILED = "FAILED"


class Node:
    """One deployed physical operator."""

    def __init__(self, op_id: int, name: str, operator: Operator, context: OperatorContext,
                 kind: str, checkpoint_window: int, checkpoint_count: int,
                 checkpoint_dir: str | None, exactly_once: bool = False,
                 queue_capacity: int = QUEUE_CAPACITY) -> None:
        self.id = op_id
        self.name = name
        self.operator = operator
        self.context = context
        self.kind = kind
        self.checkpoint_count = checkpoint_count
        self.checkpoint_dir = checkpoint_dir
        self.exactly_once = exactly_once
        self.outputs: dict[str, PortOutput] = {
            name: PortOutput(name, getattr(operator, name)) for name in output_ports(type(operator))}
        #: per source index: batch handler (see :func:`stram.agent.engine.batch.batch_handler`) and port name
        self.handlers: list[Callable[[list], None]] = []
        self.source_ports: list[str] = []
        self.queue = Inbox(queue_capacity)
        self.state = NodeState.ACTIVE
        self.error = ""
        self.fatal = False
        #: What the operator's ``teardown`` raised (the agent reports it), or None.
        self.teardown_error: Exception | None = None
        #: last window finished (end_window done)
        self.current_window = checkpoint_window
        self.last_checkpoint = checkpoint_window
        self.saved_checkpoints: list[int] = []
        self.stats: collections.deque[WindowStats] = collections.deque(maxlen=1000)
        self.requests: collections.deque[tuple[str, Any]] = collections.deque()
        #: The newest committed window the operator's ``committed`` was called with.
        self.committed_seen = -1
        self.thread: threading.Thread | None = None
        self.inline = False  # runs on its upstream's thread
        self.stopped = threading.Event()
        self._stop = False
        self.on_state_change: Callable[["Node"], None] = lambda node: None
        self.remote_inputs: list[Any] = []  # Subscriber threads feeding this node
        # window alignment
        self._active_sources: set[int] = set()
        self._begun: set[int] = set()
        self._ended: set[int] = set()
        self._blocked: set[int] = set()
        self._backlog: dict[int, collections.deque] = {}
        self._in_window = False
        self._window = checkpoint_window
        self._next_window = checkpoint_window + 1
        self._in_counts: dict[str, int] = {}
        self._cpu_start = 0
        self._metrics: dict[str, Any] = {}
        context.set_metric = self._metrics.__setitem__
        context.report_checkpoint = self.report_checkpoint
        context.emit_watermark = self.emit_watermark
        # event time: per source index its latest watermark; this node's (input) watermark; the
        # last one sent downstream. All MIN_WATERMARK until some source declares one.
        self._source_watermarks: dict[int, int] = {}
        self.watermark = MIN_WATERMARK
        #: An aligned input operator's ceiling from the master (None: unbounded): above it, it waits; until
        #: the master's first word, past its first rows (its peers may not have started).
        group = context.attributes.get("WATERMARK_ALIGNMENT_GROUP") if isinstance(operator, InputOperator) else None
        self.watermark_ceiling: int | None = MIN_WATERMARK if group else None
        #: An aligned input operator's group, and the members of it deployed in this container beside it
        #: (set by the agent): their watermarks bound this one's here, at every call, where the master's
        #: ceiling, which leaves them out, comes at the heartbeats' pace.
        self.align_group: str | None = str(group) if group else None
        self.align_peers: list[Node] = []
        self._align_drift = int(context.attributes.get("WATERMARK_MAX_DRIFT_MILLIS") or 0)
        self._high_watermark = MIN_WATERMARK
        self._sent_watermark = MIN_WATERMARK
        self._on_watermark = getattr(operator, "on_watermark", None)
        #: An operator that wants each input port's own watermark too (a join bounding its state by it).
        self._on_input_watermarks = getattr(operator, "on_input_watermarks", None)
        #: operators reading their own inputs checkpoint only when they say so
        self.self_checkpointing = getattr(type(operator), "external_inputs", False)

    # -- wiring -------------------------------------------------------------
    def add_source(self, port: str) -> int:
        """Register an upstream source feeding ``port``; returns its index."""
        handler = batch_handler(self.operator, port)
        idx = len(self.handlers)
        self.handlers.append(handler)
        self.source_ports.append(port)
        self._active_sources.add(idx)
        self._backlog[idx] = collections.deque()
        self._in_counts.setdefault(port, 0)
        self._source_watermarks[idx] = MIN_WATERMARK
        return idx

    def put(self, src: int, kind: int, value: Any) -> None:
        """Deliver a message from source ``src`` (blocks when the queue is full)."""
        self.queue.put((src, kind, value), message_weight(kind, value))

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> None:
        if self.inline:
            self._setup()
            return
        target = self._run_input if self.kind == "INPUT" else self._run_generic
        self.thread = threading.Thread(target=self._guard, args=(target,), daemon=True,
                                       name=f"op-{self.id}-{self.name}")
        self.thread.start()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (a failing subscription then is no error)."""
        return self._stop

    def stop(self, timeout: float = 5.0, teardown: bool = True) -> None:
        """End the operator's thread and inputs; then its ``teardown`` (unless ``teardown`` is
        False: the caller runs :meth:`tear_down` itself, as the agent does on another thread)."""
        self._stop = True
        if self.thread is not None:
            self.queue.put_anyway((-1, END_STREAM, None))
            self.thread.join(timeout)
        for sub in self.remote_inputs:
            sub.close()
        if teardown:
            self.tear_down()

    def _setup(self) -> None:
        self.operator.setup(self.context)

    def tear_down(self) -> None:
        """The operator's ``teardown`` (once); what it raised is kept in :attr:`teardown_error`."""
        if getattr(self, "_torn_down", False):
            return
        self._torn_down = True
        try:
            self.operator.teardown()
        except Exception as exc:  # noqa: BLE001 - logged, and reported by the agent (teardown_error)
            log.exception("teardown of operator %s failed", self.id)
            self.teardown_error = exc

    def _guard(self, target: Callable[[], None]) -> None:
        try:
            self._setup()
            target()
        except ShutdownException:
            self._shutdown()
        except Exception as exc:  # noqa: BLE001 - operator code may raise anything
            self._fail(exc)
        finally:
            self.stopped.set()

    def _fail(self, exc: BaseException) -> None:
        if self._stop:
            return
        self.error = "".join(traceback.format_exception(exc)).strip()
        self.fatal = isinstance(exc, FatalError)
        log.error("operator %s (%s) failed: %s", self.id, self.name, self.error)
        self.state = NodeState.FAILED
        self.on_state_change(self)

    def _shutdown(self) -> None:
        """End the operator: finish its window, final checkpoint, END_STREAM downstream."""
        if self._in_window:
            try:
                self._end_window()
            except ShutdownException:
                pass
        self._in_window = False
        if self.last_checkpoint < self.current_window and not self.self_checkpointing:
            self._checkpoint(self.current_window)
        for out in self.outputs.values():
            out.control(END_STREAM, self.current_window)
        self.state = NodeState.SHUTDOWN
        log.info("operator %s (%s) shut down at window %x", self.id, self.name, self.current_window)
        self.on_state_change(self)

    # -- window steps --------------------------------------------------------
    def _begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._in_window = True
        self._cpu_start = time.thread_time_ns()
        for port in self._in_counts:
            self._in_counts[port] = 0
        for out in self.outputs.values():
            out.tuples = 0
            out.control(BEGIN_WINDOW, window_id)
        self.operator.begin_window(window_id)

    def _end_window(self) -> None:
        window_id = self._window
        self._in_window = False
        if self._source_watermarks:
            self._input_watermark()
        self.operator.end_window()
        watermark = self.watermark
        if watermark != self._sent_watermark:
            self._sent_watermark = watermark
            for out in self.outputs.values():
                out.control(WATERMARK, watermark)
        for out in self.outputs.values():
            out.control(END_WINDOW, window_id)
        self.current_window = window_id
        ckpt = (0, 0, 0)
        if not self.self_checkpointing and is_checkpoint_window(window_id, self.checkpoint_count):
            ckpt = self._checkpoint(window_id)
            for out in self.outputs.values():
                out.control(CHECKPOINT, window_id)
        self.stats.append(WindowStats(
            window_id=window_id, checkpoint=self.last_checkpoint,
            input_counts=dict(self._in_counts),
            output_counts={n: o.tuples for n, o in self.outputs.items()},
            end_window_timestamp=int(time.time() * 1000),
            cpu_nanos=time.thread_time_ns() - self._cpu_start,
            queue_size=self.queue.weight(),
            checkpoint_millis=ckpt[0], checkpoint_start=ckpt[1], checkpoint_size=ckpt[2],
            metrics=dict(self._metrics),
            watermark=None if watermark == MIN_WATERMARK else watermark,
            buffer_server_bytes={n: sum(getattr(s, "bytes", 0) for s in o.sinks)
                                 for n, o in self.outputs.items()}))
        self._metrics.clear()
        self._handle_requests()

    def _checkpoint(self, window_id: int) -> tuple[int, int, int]:
        """Save the operator's state after ``window_id``; (millis, start, size)."""
        if self.checkpoint_dir is None:
            return (0, 0, 0)
        start = time.time()
        state = self.operator.get_state()
        try:
            data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - name the attribute that cannot be saved
            bad = []
            for name, value in state.items():
                try:
                    pickle.dumps(value)
                except Exception:  # noqa: BLE001
                    bad.append(name)
            raise TypeError(f"cannot checkpoint {type(self.operator).__name__}: attribute(s) "
                            f"{', '.join(bad) or '?'} cannot be pickled ({exc}); list them in the "
                            f"class's `transient` tuple or make them picklable") from exc
        uri = fs.join(self.checkpoint_dir, str(self.id), str(window_id))
        # a full disk pauses the operator until space returns (or DiskFull after the time limit)
        space.retry(f"writing checkpoint {window_id:x} of operator {self.id} ({self.name}) under "
                    f"{self.checkpoint_dir}", fs.write_atomic, uri, data, stop=lambda: self._stop)
        self.last_checkpoint = window_id
        self.saved_checkpoints.append(window_id)
        self.operator.checkpointed(window_id)
        return (int((time.time() - start) * 1000), int(start * 1000), len(data))

    def _local_ceiling(self) -> int | None:
        """The ceiling the aligned members beside this one set (None: they bound nothing): the lowest of
        their watermarks plus the drift, by the master's rules (one that ended, stopped or is idle holds
        nobody back; one without a watermark yet holds the others at their first rows)."""
        lowest = None
        for peer in self.align_peers:
            mark = peer.watermark
            if peer._stop or peer.state != NodeState.ACTIVE or mark == IDLE or mark == MAX_WATERMARK:
                continue
            if mark == MIN_WATERMARK:
                return MIN_WATERMARK
            if lowest is None or mark < lowest:
                lowest = mark
        return None if lowest is None else lowest + self._align_drift

    def emit_watermark(self, value: int) -> None:
        """An input operator's watermark for the rest of this window: monotone; IDLE until the
        operator declares a value again."""
        if value == IDLE:
            self.watermark = IDLE
            return
        if value > self._high_watermark:
            self._high_watermark = value
        self.watermark = self._high_watermark

    def _input_watermark(self) -> None:
        """A non-input node at a window's end: the minimum over its live sources that are not
        idle (IDLE when all are); the operator hears of each advance, and an operator with
        ``on_input_watermarks`` of each port's own minimum first."""
        live = [self._source_watermarks[s] for s in self._active_sources]
        if not live:
            return
        if self._on_input_watermarks is not None:
            ports: dict[str, list[int]] = {}
            for s in self._active_sources:
                ports.setdefault(self.source_ports[s], []).append(self._source_watermarks[s])
            self._on_input_watermarks({port: combine(marks) for port, marks in ports.items()})
        value = combine(live)
        if value == IDLE:
            self.watermark = IDLE
            return
        if value > self._high_watermark:
            self._high_watermark = value
            if self._on_watermark is not None:
                self._on_watermark(value)
        self.watermark = self._high_watermark

    def report_checkpoint(self, window_id: int) -> None:
        """An operator with external inputs declares everything up to ``window_id`` durable."""
        if window_id > self.last_checkpoint:
            self._checkpoint(window_id)

    def _handle_requests(self) -> None:
        """Between windows: committed notifications and master requests."""
        while self.requests:
            what, value = self.requests.popleft()
            if what == "committed":
                self.operator.committed(value)
                self.committed_seen = value
            elif what == "shutdown":
                drain = getattr(self.operator, "request_shutdown", None)
                if drain is None:
                    raise ShutdownException("shutdown requested by the master")
                drain()  # the operator drains what it holds and raises ShutdownException itself

    # -- input operators -----------------------------------------------------
    def _run_input(self) -> None:
        op = self.operator
        assert isinstance(op, InputOperator)
        size = self.context.streaming_window_size_millis
        outputs = list(self.outputs.values())
        window_id = self.current_window + 1
        while not self._stop:
            self._begin_window(window_id)
            deadline = window_millis(window_id, size) + size
            while True:
                ceiling = self.watermark_ceiling
                if self.align_peers:
                    local = self._local_ceiling()
                    if local is not None and (ceiling is None or local < ceiling):
                        ceiling = local
                if ceiling is not None and self._high_watermark > ceiling and self.watermark != IDLE:
                    # aligned, and ahead of its group: the window closes empty (stram.master.core.alignment)
                    now = time.time() * 1000
                    if now >= deadline or self._stop:
                        break
                    time.sleep(min(ALIGNED_WAIT_SECONDS, (deadline - now) / 1000))
                    continue
                before = sum(len(o.batch) for o in outputs)
                started = time.perf_counter()
                op.emit_tuples()
                took = time.perf_counter() - started
                after = 0
                for o in outputs:
                    n = len(o.batch)
                    after += n
                    if n >= o.batch_limit:
                        o.flush()
                now = time.time() * 1000
                if now >= deadline or self._stop:
                    break
                if after == before and took < IDLE_CALL_SECONDS:
                    # nothing came out and the call was near-instant: an idle source; don't spin
                    time.sleep(min(0.002, (deadline - now) / 1000))
            self._end_window()
            window_id += 1

    # -- generic operators ---------------------------------------------------
    def _run_generic(self) -> None:
        get = self.queue.get
        while not self._stop:
            src, kind, value = get()
            if src < 0:
                return
            self.on_message(src, kind, value)
            if self.state != NodeState.ACTIVE:
                return

    def on_message(self, src: int, kind: int, value: Any) -> None:
        """Handle one message from a source, keeping windows aligned across sources."""
        if src in self._blocked:
            self._backlog[src].append((kind, value))
            return
        self._handle(src, kind, value)
        while self._drain():
            pass

    def _drain(self) -> bool:
        progressed = False
        for src, backlog in self._backlog.items():
            while backlog and src not in self._blocked and self.state == NodeState.ACTIVE:
                kind, value = backlog.popleft()
                self._handle(src, kind, value)
                progressed = True
        return progressed

    def _handle(self, src: int, kind: int, value: Any) -> None:
        try:
            if kind == DATA:
                self.handlers[src](value)
                self._in_counts[self.source_ports[src]] += len(value)
                for out in self.outputs.values():
                    if len(out.batch) >= out.batch_limit:
                        out.flush()
            elif kind == BEGIN_WINDOW:
                self._next_window = value
                self._begun.add(src)
                self._blocked.add(src)
                if self._begun >= self._active_sources:
                    self._begin_window(value)
                    self._begun.clear()
                    self._blocked.clear()
            elif kind == END_WINDOW:
                self._ended.add(src)
                self._blocked.add(src)
                if self._ended >= self._active_sources:
                    self._ended.clear()
                    self._blocked.clear()
                    self._end_window()
            elif kind == END_STREAM:
                self._active_sources.discard(src)
                self._blocked.discard(src)
                self._begun.discard(src)
                self._ended.discard(src)
                if not self._active_sources:
                    raise ShutdownException("all inputs ended")
                if self._in_window and self._ended >= self._active_sources:
                    self._ended.clear()
                    self._blocked.clear()
                    self._end_window()
                elif not self._in_window and self._begun and self._begun >= self._active_sources:
                    self._begun.clear()
                    self._blocked.clear()
                    self._begin_window(self._next_window)
            elif kind == WATERMARK:
                self._source_watermarks[src] = value
            # CHECKPOINT: windows are checkpointed by id, the marker only travels on
        except ShutdownException:
            if self.inline:
                self._shutdown()
            else:
                raise
        except Exception as exc:  # noqa: BLE001
            if self.inline:
                self._fail(exc)
            else:
                raise
