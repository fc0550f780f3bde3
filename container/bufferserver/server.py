"""The buffer server: a TCP server in front of the per-publisher stores.

:class:`BufferServer` accepts connections, checks each one's request and token,
then either reads a remote publisher's frames into its :class:`Stream` or
sends a subscriber its stream from the requested window on. It also serves
PURGE and RESET requests and offers the same operations in-process
(:meth:`BufferServer.publisher`, :meth:`~BufferServer.purge`, ...).
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import re
import select
import shutil
import socket
import ssl
import tempfile
import threading
import time

from stram.agent.bufferserver.connection import FrameReader, send_buffers, shutdown
from stram.agent.bufferserver.protocol import (END_STREAM, END_STREAM_FRAME, I64, KNOWN, MAX_FRAME, PAYLOAD, REQUESTS,
                                               TYPE_OF, WINDOW_MSGS, Body, BufferServerError, MessageType,
                                               ProtocolError, as_token, encode_frame)
from stram.agent.bufferserver.store import Publisher, Stream, Sub, flatten, wanted
from stram.common.logsetup import rate_limit
from stram.common.secret import scoped_credential

__all__ = ["BufferServer"]

#: One logger for the whole package, under the name it always had.
log = logging.getLogger("stram.agent.bufferserver")
#: A flood of refused or broken connections must not fill the container's disk: a message
#: (whatever its peer) is written at most 50 times in 10 s, then counted.
LOG_LIMIT = rate_limit(log, burst=50, interval=10.0)

_MAX_REQUEST = 1 << 20                 # largest request frame (before a connection's role is known)


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "<unknown peer>"


def _readable(sock: socket.socket) -> bool:
    """True when the peer sent data or closed (a subscriber must do neither)."""
    if isinstance(sock, ssl.SSLSocket):  # no recv flags under TLS: any record counts
        return bool(sock.pending()) or bool(select.select([sock], [], [], 0)[0])
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _close_with_error(sock: socket.socket, reason: str) -> None:
    """Best effort: send ERROR, then drop unread input so the close does not reset the peer."""
    try:
        sock.settimeout(0.5)
        sock.sendall(encode_frame(MessageType.ERROR, reason.encode()))
        sock.shutdown(socket.SHUT_WR)
        for _ in range(64):
            if not sock.recv(65536, socket.MSG_DONTWAIT):
                break
    except (OSError, ValueError):  # ValueError: a TLS socket (no recv flags)
        pass


#: Requests a scoped credential may make (purge and reset: only the server's owner).
_SCOPED = {MessageType.PUBLISH: "publish", MessageType.SUBSCRIBE: "subscribe"}


# --------------------------------------------------------------------------- server

class BufferServer:
    """The buffer server of one container.

    Parameters
    ----------
    token : bytes
        The server's key (``bufferServerToken`` of the container's init context): its owner's
        credential, good for every request. A client of anyone else presents a credential
        scoped to its request and publisher id, ``scoped_credential(key, "publish" |
        "subscribe", publisher id)`` (:mod:`stram.common.secret`), which the master hands out.
    host, port : str, int
        Address to bind; port 0 picks a free port.
    memory_limit_mb : float
        In-memory bytes allowed per publisher (MiB).
    spool_dir : str, optional
        Where windows beyond the memory limit spill. None: publishers block
        in ``payload`` until a purge frees memory.
    lag_limit_mb : float, optional
        Flow control: a publisher waits while a subscriber that is reading is more than this
        many MiB of its stream behind (:mod:`stram.agent.bufferserver.store`). None: never.
    max_frame : int
        Largest frame length accepted; a longer length closes the connection.
    handshake_timeout : float
        Seconds a new connection has to send its request (and to finish its TLS handshake).
    ssl_context : ssl.SSLContext, optional
        Serve TLS (:func:`stram.common.tls.server_context`); None: plain TCP.

    Notes
    -----
    One thread accepts, one thread serves each connection; idle threads sleep
    on sockets or conditions. A bad connection is closed with a warning on the
    ``stram.agent.bufferserver`` logger and never affects others.
    """

    def __init__(self, token: bytes | str, host: str = "127.0.0.1", port: int = 0,
                 memory_limit_mb: float = 64, spool_dir: str | None = None,
                 lag_limit_mb: float | None = None,
                 max_frame: int = MAX_FRAME, handshake_timeout: float = 10.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.token = as_token(token)
        self.ssl_context = ssl_context
        self.host, self.port = host, port
        self.memory_limit = int(memory_limit_mb * (1 << 20))
        self.lag_limit = int(lag_limit_mb * (1 << 20)) if lag_limit_mb is not None else None
        self.max_frame = max_frame
        self.handshake_timeout = handshake_timeout
        self.spool_root: str | None = None
        if spool_dir is not None:
            os.makedirs(spool_dir, exist_ok=True)
            self.spool_root = tempfile.mkdtemp(prefix="bufferserver-", dir=spool_dir)
        self._streams: dict[str, Stream] = {}
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = False
        self._dir_ids = itertools.count()

    def _authorized(self, mtype: int, token: bytes, publisher_id: str) -> bool:
        """``token`` is the server's key, or the credential scoped to this request's publisher."""
        if hmac.compare_digest(token, self.token):
            return True
        action = _SCOPED.get(mtype)
        return action is not None and hmac.compare_digest(
            token, scoped_credential(self.token, action, publisher_id).encode())

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> tuple[str, int]:
        """Bind and start serving; returns the bound ``(host, port)``."""
        listener = socket.create_server((self.host, self.port), backlog=128)
        self._listener = listener
        self.host, self.port = listener.getsockname()[:2]
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name=f"bufferserver-accept-{self.port}")
        self._accept_thread.start()
        log.info("buffer server listening on %s:%d", self.host, self.port)
        return self.host, self.port

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving: close every connection, wake blocked publishers, delete spill files.

        Parameters
        ----------
        grace : float
            Seconds to wait for connection threads to finish.
        """
        self._stopping = True
        if self._listener is not None:
            shutdown(self._listener)
            self._listener.close()
        with self._lock:
            streams = list(self._streams.values())
            conns = dict(self._conns)
        for st in streams:
            with st.cond:
                st.cond.notify_all()
        for sock in conns:
            shutdown(sock)
        deadline = time.monotonic() + grace
        for t in [self._accept_thread, *conns.values()]:
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        if self.spool_root is not None:
            shutil.rmtree(self.spool_root, ignore_errors=True)

    def __enter__(self) -> "BufferServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- in-process API ----------------------------------------------------
    def publisher(self, publisher_id: str, from_window: int) -> Publisher:
        """Publish ``publisher_id`` from this process.

        Parameters
        ----------
        publisher_id : str
            ``"<operatorId>.<portName>"``.
        from_window : int
            Stored windows ``>= from_window`` (and any unfinished window) are
            dropped and replaced by what is published next; subscribers that
            already received dropped data get an ERROR.

        Returns
        -------
        Publisher
        """
        stream = self._stream(publisher_id)
        return Publisher(stream, stream.attach(from_window, None), self.max_frame)

    def purge(self, publisher_id: str, window: int) -> int:
        """Drop complete windows ``<= window`` of one publisher (``""``: all); returns how many."""
        with self._lock:
            streams = list(self._streams.values()) if publisher_id == "" else \
                [s for s in (self._streams.get(publisher_id),) if s is not None]
        return sum(s.purge(window) for s in streams)

    def reset(self, publisher_id: str) -> None:
        """Drop all data of ``publisher_id``; disconnect its publisher and subscribers.

        Subscribers that had received some of the data get an ERROR; the
        others are disconnected without one and may subscribe again.
        """
        with self._lock:
            stream = self._streams.get(publisher_id)
        if stream is not None:
            stream.reset()      # the (now empty) entry stays: waiting subscribers hold it

    def disconnect_subscribers(self, publisher_id: str | None = None) -> int:
        """Close subscriber connections (of one publisher or all) without an ERROR.

        Clients with ``reconnect`` resume exactly where they were (the tests
        cut connections with it). Returns the number closed.
        """
        with self._lock:
            streams = [s for k, s in self._streams.items() if publisher_id in (None, k)]
        n = 0
        for st in streams:
            with st.cond:
                subs = list(st.subscribers)
                for sub in subs:
                    sub.kicked = True
                st.cond.notify_all()
            for sub in subs:
                shutdown(sub.sock)
            n += len(subs)
        return n

    def stats(self) -> dict[str, dict]:
        """Per publisher id: ``memory_bytes``, ``spilled_bytes``, ``windows``,
        ``first_window``, ``last_window`` (None when empty), ``subscribers``, ``publishing``,
        ``throttled_millis`` (how long its publisher waited for a subscriber: flow control)."""
        with self._lock:
            streams = list(self._streams.items())
        return {k: s.stats() for k, s in streams}

    def _stream(self, publisher_id: str) -> Stream:
        with self._lock:
            stream = self._streams.get(publisher_id)
            if stream is None:
                stream = self._streams[publisher_id] = Stream(self, publisher_id)
            return stream

    def _stream_dir(self, publisher_id: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", publisher_id)[:80]
        path = os.path.join(self.spool_root, f"{next(self._dir_ids):04d}-{safe}")
        os.makedirs(path, exist_ok=True)
        return path

    # -- connections -------------------------------------------------------
    def _accept_loop(self) -> None:
        listener = self._listener
        while not self._stopping:
            try:
                conn, _ = listener.accept()
            except OSError as e:
                if self._stopping:
                    break
                log.warning("buffer server accept failed: %s", e)
                time.sleep(0.1)
                continue
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name=f"bufferserver-conn-{_peer_name(conn)}")
            with self._lock:
                if self._stopping:
                    conn.close()
                    break
                self._conns[conn] = t
            t.start()

    def _tls(self, sock: socket.socket, peer: str) -> ssl.SSLSocket | None:
        """``sock`` after the TLS handshake (it replaces ``sock`` among the connections); None
        when the handshake failed (logged, rate-limited; ``sock`` closed)."""
        sock.settimeout(self.handshake_timeout)
        try:
            wrapped = self.ssl_context.wrap_socket(sock, server_side=True)  # type: ignore[union-attr]
        except (OSError, ValueError) as e:
            log.warning("buffer server: refused connection from %s: TLS handshake failed: %s", peer, e)
            with self._lock:
                self._conns.pop(sock, None)
            sock.close()
            return None
        with self._lock:
            thread = self._conns.pop(sock, None)
            if thread is not None:
                self._conns[wrapped] = thread
        return wrapped

    def _serve(self, sock: socket.socket) -> None:
        peer = _peer_name(sock)
        if self.ssl_context is not None:
            wrapped = self._tls(sock, peer)
            if wrapped is None:
                return
            sock = wrapped
        reader = FrameReader(sock, min(self.max_frame, _MAX_REQUEST), size=64 << 10)
        try:
            sock.settimeout(self.handshake_timeout)
            try:
                body = reader.read_frame()
            except socket.timeout:
                raise ProtocolError(f"no request within {self.handshake_timeout:g}s") from None
            if body is None:
                log.debug("connection from %s closed before a request", peer)
                return
            sock.settimeout(None)
            reader.max_frame = self.max_frame
            mtype = body[0]
            if mtype not in KNOWN:
                raise ProtocolError(f"unknown message type {mtype}")
            if mtype not in REQUESTS:
                raise ProtocolError(f"expected a request, got {TYPE_OF[mtype].name}")
            req = Body(body)
            try:
                token = req.blob()
            except ProtocolError:
                raise ProtocolError(f"missing token in {TYPE_OF[mtype].name} request") from None
            if not token:
                raise ProtocolError(f"missing token in {TYPE_OF[mtype].name} request")
            publisher_id = req.text()
            if not self._authorized(mtype, token, publisher_id):
                raise ProtocolError(f"wrong token in {TYPE_OF[mtype].name} request for {publisher_id!r}")
            if mtype == MessageType.PUBLISH:
                from_window = req.i64()
                req.done()
                self._serve_publisher(sock, peer, reader, publisher_id, from_window)
            elif mtype == MessageType.SUBSCRIBE:
                from_window, mask, nkeys = req.i64(), req.u32(), req.u16()
                keys = frozenset(req.u32() for _ in range(nkeys))
                name = req.text()
                req.done()
                self._serve_subscriber(sock, peer, publisher_id, from_window, mask, keys, name)
            elif mtype == MessageType.PURGE:
                window = req.i64()
                req.done()
                n = self.purge(publisher_id, window)
                sock.sendall(encode_frame(MessageType.OK, f"purged {n} windows".encode()))
            else:
                req.done()
                self.reset(publisher_id)
                sock.sendall(encode_frame(MessageType.OK))
        except ProtocolError as e:
            log.warning("buffer server: closing connection from %s: %s", peer, e)
            _close_with_error(sock, str(e))
        except BufferServerError as e:
            log.info("buffer server: closing connection from %s: %s", peer, e)
        except OSError as e:
            if not self._stopping:
                log.info("buffer server: connection from %s lost: %s", peer, e)
        except Exception:  # never let one connection take the server down
            log.exception("buffer server: unexpected error on connection from %s", peer)
        finally:
            with self._lock:
                self._conns.pop(sock, None)
            sock.close()

    def _serve_publisher(self, sock: socket.socket, peer: str, reader: FrameReader,
                         publisher_id: str, from_window: int) -> None:
        stream = self._stream(publisher_id)
        gen = stream.attach(from_window, sock)
        log.debug("publisher %r from %s, window %d", publisher_id, peer, from_window)
        try:
            sock.sendall(encode_frame(MessageType.OK))
            buf, view = reader.buf, reader.view
            unpack_i64 = I64.unpack_from
            while True:
                frames = reader.parse()
                if frames:
                    buf, view = reader.buf, reader.view
                    items = []
                    for s, e in frames:
                        mtype, n = buf[s + 4], e - s - 4
                        if mtype == PAYLOAD:
                            if n < 5:
                                raise ProtocolError("garbled PAYLOAD frame: no partition tag")
                            items.append((mtype, bytes(view[s:e]), 0))
                        elif mtype in WINDOW_MSGS:
                            if n != 9:
                                raise ProtocolError(f"garbled {TYPE_OF[mtype].name} frame: {n} bytes")
                            items.append((mtype, bytes(view[s:e]), unpack_i64(buf, s + 5)[0]))
                        elif mtype == END_STREAM:
                            if n != 1:
                                raise ProtocolError(f"garbled END_STREAM frame: {n} bytes")
                            items.append((mtype, END_STREAM_FRAME, 0))
                        elif mtype in KNOWN:
                            raise ProtocolError(f"unexpected {TYPE_OF[mtype].name} on a publisher connection")
                        else:
                            raise ProtocolError(f"unknown message type {mtype}")
                    stream.append_many(gen, items)
                if not reader.fill():
                    if stream.generation != gen:
                        raise BufferServerError(f"publisher {publisher_id!r} was superseded or reset")
                    if reader.pending():
                        raise ProtocolError(f"truncated frame: connection closed after "
                                            f"{reader.pending()} bytes of a frame")
                    log.debug("publisher %r from %s disconnected", publisher_id, peer)
                    return
        finally:
            stream.detach(gen)

    def _serve_subscriber(self, sock: socket.socket, peer: str, publisher_id: str, from_window: int,
                          mask: int, keys: frozenset, name: str) -> None:
        stream = self._stream(publisher_id)
        sub = Sub(sock, peer, name, from_window, mask, keys)
        with stream.cond:
            stream.subscribers.add(sub)
        log.debug("subscriber %r from %s to %r from window %d", name, peer, publisher_id, from_window)
        fh = None
        try:
            sock.sendall(encode_frame(MessageType.OK))
            while True:
                with stream.cond:
                    while (item := stream.collect(sub)) is None:
                        if not stream.cond.wait(1.0) and _readable(sock):
                            item = ("stop", None)   # the client sent something or went away
                            break
                kind, value = item
                if kind == "mem":
                    if mask:
                        value = [f for f in value if wanted(f, mask, keys)]
                    if value:
                        send_buffers(sock, flatten(value))
                elif kind == "file":
                    unit, first, last, offsets = value
                    if fh is None or fh.name != unit.path:
                        if fh is not None:
                            fh.close()
                        try:
                            fh = open(unit.path, "rb")
                        except FileNotFoundError:
                            if unit.alive:
                                raise
                            fh = None
                            continue          # purged meanwhile: nobody needs it any more
                    start = offsets[0]
                    if not mask:  # the file's bytes as they are: the kernel copies them (sendfile)
                        sock.sendfile(fh, start, offsets[-1] - start)
                        continue
                    fh.seek(start)
                    data = fh.read(offsets[-1] - start)
                    mv = memoryview(data)
                    parts = [mv[a - start:b - start] for a, b in zip(offsets, offsets[1:])]
                    parts = [f for f in parts if wanted(f, mask, keys)]
                    if parts:
                        send_buffers(sock, parts)
                elif kind == "end":
                    sock.shutdown(socket.SHUT_WR)
                    return
                elif kind == "fail":
                    log.info("subscriber %r from %s: %s", name, peer, value)
                    sock.sendall(encode_frame(MessageType.ERROR, value.encode()))
                    return
                else:
                    return
        finally:
            if fh is not None:
                fh.close()
            with stream.cond:
                stream.subscribers.discard(sub)
