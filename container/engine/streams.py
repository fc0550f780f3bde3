"""Streams between operators, both sides: where an output port's batches go, and how a remote input is fed.

Publish side: 
A :class:`PortOutput` collects what an operator emits into a batch and hands
it to every sink of the port between operator calls:

* :class:`DirectSink` (THREAD_LOCAL): the downstream's input handler, called on this thread;
* :class:`QueueSink` (CONTAINER_LOCAL): the downstream node's bounded queue, unencoded;
* :class:`PublisherSink` (remote): encoded by the stream codec, in frames of about
  :data:`FRAME_TARGET_BYTES`, and published to this container's buffer server.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable

from stram.agent.bufferserver.client import Subscriber
from stram.agent.bufferserver.protocol import MessageType
from stram.agent.engine.codec import get_codec
from stram.agent.engine.messages import BEGIN_WINDOW, CHECKPOINT, DATA, END_STREAM, END_WINDOW, WATERMARK, Receiver
from stram.common.arrowtypes import is_arrow
from stram.common.partition import arrow_tags, default_key, partition_hash

log = logging.getLogger("stram.agent.engine.streams")

#: Tuples per batch before an output port is flushed mid-window.
BATCH_SIZE = 1024
#: Record batches per batch on Arrow ports.
ARROW_BATCH_SIZE = 16
#: Encoded batches larger than this are split before publishing.
MAX_PAYLOAD_BYTES = 32 << 20
#: Size a publisher aims its encoded frames at: frames of 16 MB (4,096 strings of 4 KiB) moved
#: fewer tuples/s than frames of 1 MB (docs/performance.md, "The engine's bounds").
FRAME_TARGET_BYTES = 1 << 20
#: Tuples encoded first, alone, to learn a stream's encoded bytes per tuple.
FRAME_PROBE_TUPLES = 64
#: Distinct str tuples whose partition tag a publisher remembers (then it starts over).
TAG_CACHE_SIZE = 1 << 16


class Sink:
    """Receives an output port's batches and control tuples."""

    def data(self, batch: list) -> None:
        raise NotImplementedError

    def control(self, kind: int, window_id: int) -> None:
        """A control message: its window id (a watermark's value for WATERMARK)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class QueueSink(Sink):
    """CONTAINER_LOCAL: hands batches to a downstream node's queue, unencoded.

    A batch longer than ``BATCH_SIZE`` (one ``emit_batch`` of many tuples)
    goes in pieces of that size, so the bounded queue bounds the tuples held.
    """

    def __init__(self, node: Receiver, source_index: int) -> None:
        self.node = node
        self.src = source_index

    def data(self, batch: list) -> None:
        if len(batch) <= BATCH_SIZE:
            self.node.put(self.src, DATA, batch)
            return
        for i in range(0, len(batch), BATCH_SIZE):
            self.node.put(self.src, DATA, batch[i:i + BATCH_SIZE])

    def control(self, kind: int, window_id: int) -> None:
        self.node.put(self.src, kind, window_id)


class DirectSink(Sink):
    """THREAD_LOCAL: batches and control tuples go straight to the downstream node, on this thread.

    A batch is one call of the downstream's input handler (a batch handler,
    or a loop over its per-tuple handler): no queue, no lock, and the tuples
    are counted per batch like on every other stream.
    """

    def __init__(self, node: Receiver, source_index: int) -> None:
        self.node = node
        self.src = source_index

    def data(self, batch: list) -> None:
        self.node.on_message(self.src, DATA, batch)

    def control(self, kind: int, window_id: int) -> None:
        self.node.on_message(self.src, kind, window_id)


class PublisherSink(Sink):
    """Remote subscribers: encode and publish to this container's buffer server."""

    def __init__(self, publisher: Any, codec_name: str, mask: int,
                 key: Callable[[Any], Any] = default_key, field: str | None = None) -> None:
        self.publisher = publisher
        self.codec = get_codec(codec_name)
        self.mask = mask
        self.key = key
        #: The key's field when the key is one (``field:NAME``): Arrow batches are split by it column-wise.
        self.field = field
        self.bytes = 0
        #: Encoded bytes per tuple in the last frame (0: none yet), to cut batches into frames
        #: of about FRAME_TARGET_BYTES before encoding them.
        self._per_tuple = 0.0
        #: str tuple -> its tag, for the default key (words and the like repeat: one hash per distinct one)
        self._tags: dict[str, int] = {}

    def data(self, batch: list) -> None:
        if not self.mask:
            self._publish(0, batch)
            return
        mask, key = self.mask, self.key
        groups: dict[int, list] = collections.defaultdict(list)
        if self.field is not None and is_arrow(batch[0]):
            self._split_arrow(batch, groups)
        elif key is default_key:
            tags = self._tags
            if len(tags) > TAG_CACHE_SIZE:
                tags.clear()
            get = tags.get
            for t in batch:
                if type(t) is str:  # its own key; exactly str: 1 == 1.0 == True hash alike, not alike here
                    tag = get(t)
                    if tag is None:
                        tag = tags[t] = partition_hash(t) & mask
                else:
                    tag = partition_hash(default_key(t)) & mask
                groups[tag].append(t)
        else:
            for t in batch:
                groups[partition_hash(key(t)) & mask].append(t)
        for tag, tuples in groups.items():
            self._publish(tag, tuples)

    def _split_arrow(self, batch: list, groups: dict[int, list]) -> None:
        """Record batches split by their rows' tags (:func:`stram.common.partition.arrow_tags`); the
        pieces of each tag keep their rows' order."""
        import pyarrow.compute as pc
        mask, field, key = self.mask, self.field, self.key
        for b in batch:
            if not is_arrow(b):
                groups[partition_hash(key(b)) & mask].append(b)
                continue
            tags = arrow_tags(b, field, mask)
            values = pc.unique(tags).to_pylist()
            if len(values) == 1:
                groups[values[0]].append(b)
                continue
            for tag in values:
                groups[tag].append(b.filter(pc.equal(tags, tag)))

    def _publish(self, tag: int, tuples: list) -> None:
        n = len(tuples)
        if n > FRAME_PROBE_TUPLES:
            per = self._per_tuple
            if not per:  # a first batch: a few tuples tell how big the rest will be
                self._publish_frame(tag, tuples[:FRAME_PROBE_TUPLES])
                tuples, n, per = tuples[FRAME_PROBE_TUPLES:], n - FRAME_PROBE_TUPLES, self._per_tuple
            if n * per > FRAME_TARGET_BYTES:
                step = max(1, int(FRAME_TARGET_BYTES / per))
                for i in range(0, n, step):
                    self._publish_frame(tag, tuples[i:i + step])
                return
        self._publish_frame(tag, tuples)

    def _publish_frame(self, tag: int, tuples: list) -> None:
        pieces = self.codec.encode_parts(tuples)  # kept by the buffer server as they are
        size = sum(map(len, pieces))
        if size > MAX_PAYLOAD_BYTES and len(tuples) > 1:
            half = len(tuples) // 2  # big tuples: keep frames well under the frame limit
            self._publish_frame(tag, tuples[:half])
            self._publish_frame(tag, tuples[half:])
            return
        if tuples:
            self._per_tuple = size / len(tuples) or 1.0
        self.bytes += size
        self.publisher.payload(tag, pieces[0] if len(pieces) == 1 else pieces)  # bytes, as ever, when one

    def control(self, kind: int, window_id: int) -> None:
        p = self.publisher
        if kind == BEGIN_WINDOW:
            p.begin_window(window_id)
        elif kind == END_WINDOW:
            p.end_window(window_id)
        elif kind == CHECKPOINT:
            p.checkpoint(window_id)
        elif kind == WATERMARK:
            p.watermark(window_id)
        elif kind == END_STREAM:
            p.end_stream()


class PortOutput:
    """Runtime side of an output port: the current batch and the sinks.

    The bound port's ``emit`` is the batch's ``append`` and its
    ``emit_batch`` the batch's ``extend`` (C calls, no Python layer per
    tuple); the engine flushes the batch to every sink between operator calls.
    """

    def __init__(self, name: str, bound_port: Any) -> None:
        self.name = name
        self.port = bound_port
        self.sinks: list[Sink] = []
        self.batch: list = []
        self.tuples = 0  # tuples flushed in the current window
        #: Tuples per batch before a mid-window flush: ARROW_BATCH_SIZE for record batches (big ones: a
        #: thousand slices would pin their row groups), BATCH_SIZE for records. Until the first flush
        #: shows which the port emits (a step on Arrow batches may have a port of any codec), the lower.
        self.batch_limit = ARROW_BATCH_SIZE
        #: Whether the limit still waits for the first flush to tell (no Arrow codec on the port or a sink).
        self._sniff = getattr(bound_port, "codec", "pickle") != "arrow"
        self._bind()

    def _bind(self) -> None:
        self.port.emit = self.batch.append
        self.port.emit_batch = self.batch.extend

    def add_sink(self, sink: Sink) -> None:
        self.sinks.append(sink)
        if getattr(getattr(sink, "codec", None), "name", "") == "arrow":
            self.batch_limit = ARROW_BATCH_SIZE
            self._sniff = False

    def flush(self) -> None:
        batch = self.batch
        if batch:
            if self._sniff:
                self._sniff = False
                if not is_arrow(batch[0]):
                    self.batch_limit = BATCH_SIZE
            self.tuples += len(batch)
            self.batch = []
            self._bind()
            for sink in self.sinks:
                sink.data(batch)

    def control(self, kind: int, window_id: int) -> None:
        self.flush()
        for sink in self.sinks:
            sink.control(kind, window_id)


# ---------------------------------------------------------------- the subscribe side

_CONTROL = {MessageType.BEGIN_WINDOW: BEGIN_WINDOW, MessageType.END_WINDOW: END_WINDOW,
            MessageType.CHECKPOINT: CHECKPOINT, MessageType.WATERMARK: WATERMARK}


def subscribe(node: Any, src: int, host: str, port: int, token: bytes, publisher: str, from_window: int,
              codec_name: str, mask: int = 0, keys: list[int] | None = None, ssl_context: Any = None) -> Subscriber:
    """Subscribe ``node``'s input ``src`` to ``publisher`` on a buffer server, from ``from_window`` on:
    a thread of its own decodes what arrives and puts it on the node's queue (blocking there:
    backpressure reaches the publisher). The subscription, for the node to close."""
    codec = get_codec(codec_name)
    sub = Subscriber(host, port, token, publisher, from_window, mask=mask, keys=keys or [],
                     ssl_context=ssl_context, alloc=codec.receive_buffer)
    threading.Thread(target=_feed, args=(sub, node, src, codec), daemon=True,
                     name=f"sub-{node.id}-{publisher.partition('.')[0]}").start()
    return sub


def _feed(sub: Subscriber, node: Any, src: int, codec: Any) -> None:
    """Move a subscription's messages onto a node's queue until END_STREAM or the node stops."""
    decode = codec.decode
    put = node.put
    try:
        for kind, value in sub.messages():
            if kind == MessageType.PAYLOAD:
                put(src, DATA, decode(value[1]))
            elif kind in _CONTROL:
                put(src, _CONTROL[kind], value)
            elif kind == MessageType.END_STREAM:
                put(src, END_STREAM, None)
                return
    except Exception:  # noqa: BLE001
        if not node.stopping:
            log.exception("subscription of operator %s failed", node.id)
