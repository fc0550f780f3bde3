"""Buffer-server clients: the remote publisher, the subscriber, and the PURGE/RESET calls.

They run in whatever process reads or writes a stream over TCP, each on its
own connection speaking :mod:`stram.agent.bufferserver.protocol`: a downstream
container's agent and a Spark task read with :class:`Subscriber`; agents
publish in-process (:class:`~stram.agent.bufferserver.store.Publisher`), so
:class:`RemotePublisher`, :func:`purge` and :func:`reset` serve tools,
benchmarks and tests.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from typing import Any, Callable, Iterable, Iterator

from stram.agent.bufferserver.connection import FrameReader, send_buffers, shutdown
from stram.agent.bufferserver.protocol import (BEGIN, CHECKPOINT, CTRL, END, END_STREAM, END_STREAM_FRAME, I64,
                                               MAX_FRAME, PAYLOAD, PAYLOAD_HDR, RESET_WINDOW, TYPE_OF, U32, WATERMARK,
                                               BufferServerError, MessageType, ProtocolError, as_token, encode_publish,
                                               encode_purge, encode_reset, encode_subscribe)
from stram.common.tls import SERVER_NAME

__all__ = ["RemotePublisher", "Subscriber", "purge", "reset"]

#: One logger for the whole package, under the name it always had.
log = logging.getLogger("stram.agent.bufferserver")


def _connect(host: str, port: int, timeout: float, ssl_context: ssl.SSLContext | None = None) -> socket.socket:
    """A connected socket; with ``ssl_context``, TLS to a server that proves it is the application's
    (:mod:`stram.common.tls`). A server that cannot is refused: :class:`BufferServerError`, not retried."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ssl_context is None:
        return sock
    try:
        return ssl_context.wrap_socket(sock, server_hostname=SERVER_NAME)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise BufferServerError(f"the buffer server at {host}:{port} is not this application's "
                                f"(TLS: {exc.verify_message})") from None
    except BaseException:
        sock.close()
        raise


def _expect_ok(reader: FrameReader, what: str) -> bytes:
    body = reader.read_frame()
    if body is None:
        raise BufferServerError(f"{what}: connection closed by the buffer server")
    if body[0] == MessageType.ERROR:
        raise BufferServerError(f"{what}: {body[1:].decode(errors='replace')}")
    if body[0] != MessageType.OK:
        raise ProtocolError(f"{what}: expected OK, got message type {body[0]}")
    return body[1:]


def _request(host: str, port: int, frame: bytes, what: str, timeout: float,
             ssl_context: ssl.SSLContext | None = None) -> bytes:
    with _connect(host, port, timeout, ssl_context) as sock:
        sock.sendall(frame)
        return _expect_ok(FrameReader(sock, MAX_FRAME, size=4096), what)


def purge(host: str, port: int, token: bytes | str, publisher_id: str, window: int,
          timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None) -> None:
    """Ask a buffer server to drop complete windows ``<= window`` (``publisher_id=""``: all publishers).

    Raises
    ------
    BufferServerError
        When the server rejects the request.
    """
    _request(host, port, encode_purge(as_token(token), publisher_id, window),
             f"purge {publisher_id!r}", timeout, ssl_context)


def reset(host: str, port: int, token: bytes | str, publisher_id: str, timeout: float = 10.0,
          ssl_context: ssl.SSLContext | None = None) -> None:
    """Ask a buffer server to drop all data of ``publisher_id`` and disconnect its clients."""
    _request(host, port, encode_reset(as_token(token), publisher_id), f"reset {publisher_id!r}", timeout,
             ssl_context)


class RemotePublisher:
    """Publishes a stream into a buffer server over TCP.

    Same methods as :class:`Publisher`. Frames are buffered and sent in one
    ``sendmsg`` when ``flush_bytes`` are pending and at every ``end_window``,
    ``checkpoint`` and ``end_stream``. Backpressure from the server shows up
    as a blocking send.

    Parameters
    ----------
    host, port, token
        The buffer server and its token.
    publisher_id : str
        ``"<operatorId>.<portName>"``.
    from_window : int
        Rewind point, as for :meth:`BufferServer.publisher`.
    flush_bytes : int
        Pending bytes that trigger a send.
    ssl_context : ssl.SSLContext, optional
        TLS to the server (:func:`stram.common.tls.client_context`); None: plain TCP.
    """

    def __init__(self, host: str, port: int, token: bytes | str, publisher_id: str, from_window: int,
                 *, flush_bytes: int = 1 << 20, connect_timeout: float = 10.0,
                 max_frame: int = MAX_FRAME, ssl_context: ssl.SSLContext | None = None) -> None:
        self.publisher_id = publisher_id
        self.flush_bytes, self.max_frame = flush_bytes, max_frame
        self._pending: list = []
        self._pending_bytes = 0
        self._sock = _connect(host, port, connect_timeout, ssl_context)
        try:
            self._sock.sendall(encode_publish(as_token(token), publisher_id, from_window))
            _expect_ok(FrameReader(self._sock, MAX_FRAME, size=4096), f"publish {publisher_id!r}")
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)

    def _ctrl(self, mtype: int, window_id: int, flush: bool) -> None:
        self._pending.append(CTRL.pack(9, mtype, window_id))
        self._pending_bytes += 13
        if flush or self._pending_bytes >= self.flush_bytes:
            self.flush()

    def begin_window(self, window_id: int) -> None:
        """Start window ``window_id``."""
        self._ctrl(BEGIN, window_id, False)

    def payload(self, tag: int, data: bytes | tuple) -> None:
        """Append one encoded batch with partition tag ``tag``: bytes, or its pieces in order."""
        pieces = data if data.__class__ is tuple else (data,)
        size = sum(map(len, pieces))
        if size + 5 > self.max_frame:
            raise ValueError(f"payload of {size} bytes exceeds the frame limit of {self.max_frame}")
        self._pending.append(PAYLOAD_HDR.pack(size + 5, PAYLOAD, tag))
        self._pending += pieces
        self._pending_bytes += size + 9
        if self._pending_bytes >= self.flush_bytes:
            self.flush()

    def end_window(self, window_id: int) -> None:
        """End window ``window_id`` and send what is pending."""
        self._ctrl(END, window_id, True)

    def checkpoint(self, window_id: int) -> None:
        """Append a CHECKPOINT marker and send what is pending."""
        self._ctrl(CHECKPOINT, window_id, True)

    def watermark(self, value: int) -> None:
        """Append the window's event-time watermark (sent with its END_WINDOW)."""
        self._ctrl(WATERMARK, value, False)

    def reset_window(self, window_id: int) -> None:
        """Append a RESET_WINDOW marker."""
        self._ctrl(RESET_WINDOW, window_id, False)

    def end_stream(self) -> None:
        """Append END_STREAM and send what is pending."""
        self._pending.append(END_STREAM_FRAME)
        self._pending_bytes += len(END_STREAM_FRAME)
        self.flush()

    def flush(self) -> None:
        """Send every pending frame."""
        if not self._pending:
            return
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        try:
            send_buffers(self._sock, pending)
        except OSError as e:
            raise BufferServerError(f"publisher {self.publisher_id!r}: connection lost: {e}") from e

    def close(self) -> None:
        """Flush and close; the server keeps the data."""
        try:
            self.flush()
        finally:
            try:
                self._sock.shutdown(socket.SHUT_WR)
                self._sock.settimeout(5.0)
                while self._sock.recv(4096):   # wait for the server to finish reading
                    pass
            except OSError:
                pass
            self._sock.close()

    def __enter__(self) -> "RemotePublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


Message = tuple[MessageType, object]


class Subscriber:
    """Reads one publisher's stream from a buffer server, exactly once across reconnects.

    Messages are ``(MessageType, value)``: the window id for BEGIN_WINDOW,
    END_WINDOW, CHECKPOINT and RESET_WINDOW, ``(tag, bytes)`` for PAYLOAD (see
    ``alloc``) and None for END_STREAM (the last message).

    When the connection drops and ``reconnect`` is on, the subscriber
    subscribes again from the window it was in and skips the messages of that
    window it already delivered (the server's order is deterministic), with
    exponential backoff between attempts. An ERROR from the server (rejected
    request, publisher rewound or reset under it) raises
    :class:`BufferServerError` instead.

    Parameters
    ----------
    host, port, token
        The upstream buffer server.
    publisher_id : str
        Stream to read.
    from_window : int
        First window wanted (the first delivered is the first id ``>=`` it).
    mask : int
        Partition mask; 0 delivers every payload.
    keys : iterable of int
        A payload with tag ``t`` is delivered when ``t & mask`` is in ``keys``.
    reconnect : bool
        Resume after a dropped connection.
    backoff : (float, float)
        First and largest delay between reconnect attempts, seconds.
    subscriber_id : str
        Name in the server's logs.
    ssl_context : ssl.SSLContext, optional
        TLS to the server (:func:`stram.common.tls.client_context`); None: plain TCP.
    alloc : callable, optional
        ``alloc(n)``: a writable buffer of ``n`` bytes. Given, a payload frame of
        :data:`~stram.agent.bufferserver.connection.BIG_FRAME` bytes or more is received
        into one of its own and delivered as a ``memoryview`` of it, not copied out of the
        shared receive buffer: for a codec whose decoded tuples point into the payload
        (:meth:`stram.agent.engine.codec.Codec.receive_buffer`). None: every payload is ``bytes``.
    """

    def __init__(self, host: str, port: int, token: bytes | str, publisher_id: str, from_window: int,
                 mask: int = 0, keys: Iterable[int] = (), *, reconnect: bool = True,
                 backoff: tuple[float, float] = (0.05, 2.0), subscriber_id: str = "",
                 connect_timeout: float = 10.0, max_frame: int = MAX_FRAME,
                 ssl_context: ssl.SSLContext | None = None, alloc: Callable[[int], Any] | None = None) -> None:
        self.alloc = alloc
        self.host, self.port, self.token = host, port, as_token(token)
        self.ssl_context = ssl_context
        self.publisher_id, self.from_window = publisher_id, from_window
        self.mask, self.keys = mask, tuple(keys)
        self.reconnect, self.backoff = reconnect, backoff
        self.subscriber_id = subscriber_id or f"{publisher_id}@{os.getpid()}"
        self.connect_timeout, self.max_frame = connect_timeout, max_frame
        self._bytes_done = 0              # bytes of closed connections
        #: Connections made after the first.
        self.reconnects = 0
        #: Messages received again after a reconnect and dropped (already delivered).
        self.skipped = 0
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._resume_from = from_window   # window to subscribe from on reconnect
        self._count = 0                   # messages delivered since the current unit began
        self._skip = 0                    # messages to drop after a reconnect
        self._ended = False
        self._closed = threading.Event()
        self._delay = backoff[0]
        self._connections = 0
        self._timeout: float | None = None
        self._deferred: BufferServerError | None = None

    # -- connection --------------------------------------------------------
    def _open(self) -> None:
        sock = _connect(self.host, self.port, self.connect_timeout, self.ssl_context)
        try:
            sock.sendall(encode_subscribe(self.token, self.publisher_id, self._resume_from,
                                          self.mask, self.keys, self.subscriber_id))
            reader = FrameReader(sock, self.max_frame, alloc=self.alloc)
            _expect_ok(reader, f"subscribe {self.publisher_id!r}")
        except BaseException:
            sock.close()
            raise
        self._timeout = None
        sock.settimeout(None)
        if self._connections:
            self.reconnects += 1
        self._connections += 1
        self._sock, self._reader, self._skip = sock, reader, self._count
        if self._closed.is_set():
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            if self._reader is not None:
                self._bytes_done += self._reader.bytes_received
            shutdown(self._sock)
            self._sock.close()
            self._sock = self._reader = None

    def _lost(self, reason: object) -> None:
        self._drop()
        if self._closed.is_set():
            return
        if not self.reconnect:
            raise BufferServerError(f"subscriber {self.publisher_id!r}: connection lost: {reason}")
        log.info("subscriber %r: connection lost (%s); resubscribing from window %d in %.2fs",
                 self.publisher_id, reason, self._resume_from, self._delay)
        self._closed.wait(self._delay)
        self._delay = min(self._delay * 2, self.backoff[1])

    # -- reading -----------------------------------------------------------
    def _batch(self, timeout: float | None) -> list[Message] | None:
        """One receive's worth of messages; [] on timeout; None when finished."""
        while not self._closed.is_set() and not self._ended:
            if self._sock is None:
                try:
                    self._open()
                except BufferServerError:
                    raise
                except OSError as e:
                    self._lost(e)
                    continue
            if self._deferred is not None:
                err, self._deferred = self._deferred, None
                if not isinstance(err, ProtocolError):
                    self._drop()
                    raise err
                self._lost(err)
                continue
            reader = self._reader
            try:
                out = self._parse(reader)       # frames already buffered first
                if out:
                    self._delay = self.backoff[0]
                    return out
                if timeout != self._timeout:
                    self._sock.settimeout(timeout)
                    self._timeout = timeout
                n = reader.fill()
            except socket.timeout:
                return []
            except (ProtocolError, OSError) as e:
                self._lost(e)
                continue
            if not n:
                self._lost(f"truncated frame ({reader.pending()} bytes)" if reader.pending()
                           else "closed by the server")
        return None

    def _parse(self, reader: FrameReader) -> list[Message]:
        out: list[Message] = []
        unpack_i64, unpack_u32 = I64.unpack_from, U32.unpack_from
        big = reader.take_big()  # a big payload: handed on in its own buffer, not copied
        buf, view = reader.buf, reader.view
        frames = [(buf, view, s, e) for s, e in reader.parse()]
        if big is not None:
            frames.insert(0, (big, big, 0, len(big)))
        for buf, view, s, e in frames:
            t = buf[s + 4]
            if t == PAYLOAD:
                msg = (PAYLOAD, (unpack_u32(buf, s + 5)[0],
                                  view[9:] if buf is big else bytes(view[s + 9:e])))
            elif t == END:
                msg = (END, unpack_i64(buf, s + 5)[0])
            elif t == BEGIN or t == CHECKPOINT or t == RESET_WINDOW or t == WATERMARK:
                msg = (TYPE_OF[t], unpack_i64(buf, s + 5)[0])
            elif t == END_STREAM:
                msg = (END_STREAM, None)
            elif t == MessageType.ERROR:   # raised after the messages before it are delivered
                reason = bytes(view[s + 5:e]).decode(errors="replace")
                self._deferred = BufferServerError(f"subscriber {self.publisher_id!r}: {reason}")
                break
            else:
                self._deferred = ProtocolError(f"unexpected message type {t} in a stream")
                break
            if self._skip:
                self._skip -= 1
                self.skipped += 1
                continue
            if t == END:
                self._resume_from, self._count = msg[1] + 1, 0
            else:
                self._count += 1
                if t == BEGIN:
                    self._resume_from = msg[1]
                elif t == END_STREAM:
                    self._ended = True
                    out.append(msg)
                    self._drop()
                    break
            out.append(msg)
        return out

    def messages(self) -> Iterator[Message]:
        """Yield messages in order until END_STREAM or :meth:`close`."""
        while (batch := self._batch(None)) is not None:
            yield from batch

    def poll(self, timeout: float | None = None) -> list[Message] | None:
        """Messages available within ``timeout`` seconds ([] if none); None once finished."""
        return self._batch(timeout)

    @property
    def bytes_received(self) -> int:
        """Bytes received from the server, over all connections."""
        reader = self._reader
        return self._bytes_done + (reader.bytes_received if reader is not None else 0)

    @property
    def ended(self) -> bool:
        """True once END_STREAM was delivered."""
        return self._ended

    def close(self) -> None:
        """Stop: shut down and close the connection; a blocked :meth:`messages` or :meth:`poll` returns."""
        self._closed.set()
        sock = self._sock
        shutdown(sock)
        if sock is not None:
            sock.close()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self._drop()
