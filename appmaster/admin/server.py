"""The HTTP(S) server under the admin API and console: Hypercorn in a thread of the master.

:class:`AdminServer` serves a WSGI application (the Flask app of
:mod:`stram.master.admin.rest`) through ``a2wsgi``'s bridge on Hypercorn's asyncio
server, in one thread with its own event loop:

* connections cost a coroutine, not a thread: a connection that has not sent
  a whole request within ``channel_timeout`` seconds (and an idle kept-alive
  one) is closed, and a body that stalls as long too; at most
  ``connection_limit`` are open at once, more are closed as they come;
* requests run on a fixed pool of ``threads`` threads;
* a body announced larger than :data:`MAX_ANNOUNCED_BODY` is refused 413 before
  a byte of it is read, and headers are capped at 64 KiB;
* with a TLS identity (:mod:`stram.common.tls`) it serves HTTPS only, presenting
  the application's certificate; clients trust that certificate and nothing
  else (:func:`stram.client.adminhttp.request_json`'s ``ca``).

On YARN with TLS on, the ResourceManager's web proxy (through Skein's web UI,
which cannot reach an HTTPS page) needs a plain listener: ``proxy_host`` adds
one, and :mod:`stram.master.admin.auth` lets only proxied requests in there (a
token sent in plain text is refused, so it never has to travel unencrypted).
This is where Hadoop's own default leaves an application master's pages
(``yarn.resourcemanager.application-https.policy=NONE``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import weakref
from typing import Any

from stram.master.admin.bodies import MAX_BODY_BYTES

__all__ = ["AdminServer", "MAX_ANNOUNCED_BODY", "one_address"]

log = logging.getLogger("stram.master.admin")

#: Bodies announced larger than this are refused (413) before they are read.
MAX_ANNOUNCED_BODY = 4 * MAX_BODY_BYTES
#: Request headers larger than this close the connection.
MAX_HEADER_BYTES = 64 * 1024


def one_address(host: str) -> str:
    """One IP address of ``host`` (IPv4 first), so the server listens on exactly one socket."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except OSError:
        return host
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0] if infos else host


class _Listener(socket.socket):
    """A listening socket that holds at most ``limit`` accepted connections open at once:
    one more is closed as soon as it is accepted (asyncio's accept loop takes the
    ConnectionAbortedError as "nothing more to accept now"). Connections cost the
    master a file descriptor each, and the umbilical needs those too."""

    limit = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: list[weakref.ref] = []
        self.refused = 0

    def accept(self) -> tuple[socket.socket, Any]:
        conn, addr = super().accept()
        self._open = [ref for ref in self._open if (s := ref()) is not None and s.fileno() != -1]
        if len(self._open) >= self.limit:
            conn.close()
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("admin API: %d connections open, the most it keeps; refused %d so far (from %s)",
                            len(self._open), self.refused, addr[0] if addr else "?")
            raise ConnectionAbortedError("too many connections")
        self._open.append(weakref.ref(conn))
        return conn, addr


def _listen(host: str, limit: int) -> socket.socket:
    address = one_address(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = _Listener(family, socket.SOCK_STREAM)
    sock.limit = limit
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _tls_context(identity: Any) -> ssl.SSLContext:
    """A TLS 1.2+ server context presenting the application's certificate, HTTP/1.1 only."""
    from stram.common.tls import server_context
    ctx = server_context(identity)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class _Limits:
    """ASGI middleware: refuse an oversized announced body at once, and answer lifespan events."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > MAX_ANNOUNCED_BODY
                except ValueError:
                    too_big = False  # the bridge and Flask answer a malformed length
                if too_big:
                    body = (b'{"error": "the body is %d bytes; at most %d are read"}'
                            % (int(value), MAX_BODY_BYTES))
                    await send({"type": "http.response.start", "status": 413,
                                "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                            (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)


class AdminServer:
    """The admin API served in a thread, until :meth:`shutdown`.

    Parameters
    ----------
    app:
        The WSGI application.
    host:
        The address to listen on (``127.0.0.1`` locally, the node's address on YARN).
    threads:
        Threads that run requests.
    connection_limit:
        Connections held open at most, per listener; more are closed at once.
    channel_timeout:
        Seconds a connection may take to send a request (or stay idle), and a body read may stall.
    tls:
        The application's TLS identity (:class:`stram.common.tls.Identity`): serve HTTPS only.
    proxy_host:
        With ``tls``, also listen in plain HTTP here, for the YARN web proxy (see the module).
    """

    def __init__(self, app: Any, host: str, threads: int = 4, connection_limit: int = 64,
                 channel_timeout: int = 30, tls: Any = None, proxy_host: str | None = None) -> None:
        from a2wsgi import WSGIMiddleware
        from hypercorn.config import Config, Sockets

        self.host = host
        self.tls = tls is not None
        self._wsgi = WSGIMiddleware(app, workers=threads)
        self._asgi = _Limits(self._wsgi)
        main = _listen(host, connection_limit)
        plain = _listen(proxy_host, connection_limit) if (tls is not None and proxy_host) else None
        self.server_port = main.getsockname()[1]
        self.proxy_port = plain.getsockname()[1] if plain is not None else None
        context = _tls_context(tls) if tls is not None else None

        class _Config(Config):
            @property
            def ssl_enabled(self) -> bool:
                return context is not None

            def create_ssl_context(self) -> ssl.SSLContext | None:
                return context

        config = _Config()
        config.keep_alive_timeout = channel_timeout
        config.read_timeout = channel_timeout
        config.ssl_handshake_timeout = min(channel_timeout, 10)
        config.h11_max_incomplete_size = MAX_HEADER_BYTES
        config.graceful_timeout = 2.0
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        logging.getLogger("hypercorn.error").setLevel(logging.WARNING)
        if context is not None:
            self._sockets = Sockets([main], [plain] if plain is not None else [], [])
        else:
            self._sockets = Sockets([], [main], [])
        self._config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="admin-http")
        self._thread.start()
        self._ready.wait(30)
        if self._failed is not None:
            raise RuntimeError(f"the admin server did not start: {self._failed}") from self._failed

    def _run(self) -> None:
        from hypercorn.asyncio.run import worker_serve
        from hypercorn.utils import wrap_app

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await worker_serve(wrap_app(self._asgi, self._config.wsgi_max_body_size, "asgi"), self._config,
                               sockets=self._sockets, shutdown_trigger=self._stop.wait)

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the starter or logged
            self._failed = exc
            if self._ready.is_set():
                log.error("the admin server stopped: %s", exc)
            self._ready.set()
        finally:
            for sock in self._sockets.secure_sockets + self._sockets.insecure_sockets:
                sock.close()

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop listening, close every connection and the worker threads; returns once stopped."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop has just ended
        self._thread.join(timeout)
        self._wsgi.executor.shutdown(wait=True, cancel_futures=True)

