"""The umbilical's front: its gRPC server in a process of its own, beside the master's state.

A master answers every heartbeat of every container. In one interpreter, the
gRPC side of an answer (the asyncio server, its streams, the hand-off of each
batch to a worker thread and back) cost 0.16-0.22 ms of CPU per heartbeat
(``bench/bench_umbilical.py``), as much as the state's own work, and both
waited for the same interpreter lock: at 2,000 containers x 10 operators
heartbeating every second the master had no time left, and answers queued
whenever the operators' checkpoints made heartbeats dearer.

From :data:`~stram.common.attributes.ATTRIBUTES` ``UMBILICAL_PROCESS_MIN_CONTAINERS``
containers on, the master starts this module as a child process (``python -m
stram.master.umbilical.front FD``) and talks to it over a socket pair. The front serves the
umbilical's methods with the same credential check (:class:`~stram.master.umbilical.server.TokenGate`),
without parsing a request: it passes the calls that wait, heartbeats and
other calls alike, to the master as raw bytes in one message (up to
:data:`~stram.master.umbilical.server.MAX_BATCH`), the next once the answers came back,
and answers each call with the bytes (or the gRPC status) the master sent for
it. The master's relay thread (:class:`FrontServer`) parses them, hands them to
the same :class:`~stram.master.umbilical.server.UmbilicalServicer` as the in-process server
does (heartbeats as one batch), and sends the answers back. Each message also
carries how long the last answers took from arrival (for the master's pacer)
and how many heartbeat streams are open (the front also says so, without
calls, when streams open or end).

Frames, both ways: a 4-byte big-endian length, then a pickle. The front ends
when the master's end of the socket closes (the master stopped or died) or
when it is told to stop; the master ends it with its own stop. A front that
ends unasked (killed, or a bug) is replaced, on its port if it is free again
(the containers' calls fail over to it), else on another that the master
writes to ``heartbeatUri`` (agents read it again when a call fails).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable

log = logging.getLogger("stram.master.umbilical.front")

_LEN = struct.Struct(">I")
#: Unary methods of the umbilical (the stream is ``HeartbeatStream``).
UNARY = ("GetInitContext", "Log", "ReportError", "ProcessHeartbeat")
SERVICE = "stram.StreamingContainerUmbilical"
#: Largest frame either side accepts (a batch of heartbeats of a few KB each).
MAX_FRAME = 256 << 20
#: Front processes that may end unasked within a minute, each replaced, before the master gives up.
MAX_RESTARTS = 5


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=5)
    return _LEN.pack(len(data)) + data


# ---------------------------------------------------------------- the front process

class _Relay:
    """The front's side: calls that wait go to the master together (:class:`~stram.master.umbilical.server.Batches`),
    one message at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int) -> None:
        from stram.master.umbilical.server import Batches

        self.reader, self.writer = reader, writer
        self.batches = Batches(self._exchange, limit)
        #: Why the master no longer answers (None: it does).
        self.gone: str | None = None
        self.reply: asyncio.Future | None = None
        #: Seconds from arrival to answer of the heartbeats answered since the last message.
        self.observed: list[float] = []
        self.open_streams = 0
        self._streams_told = 0
        self._telling = False
        self.stopped: asyncio.Future = asyncio.get_running_loop().create_future()

    @property
    def closed(self) -> bool:
        return self.gone is not None

    def streams_changed(self, by: int) -> None:
        """A heartbeat stream opened (``by`` 1) or ended (-1): the master hears the count soon after,
        with calls or without (what its GIL switch interval goes by)."""
        self.open_streams += by
        if not self._telling:
            self._telling = True
            asyncio.get_running_loop().call_soon(self._tell_streams)

    def _tell_streams(self) -> None:
        self._telling = False
        if self.open_streams != self._streams_told and not self.closed:
            self._streams_told = self.open_streams
            self.writer.write(_frame(("streams", self.open_streams)))

    async def submit(self, method: str, caller: str | None, peer: str, data: bytes) -> tuple:
        """The master's answer to one call: ``("ok", bytes)``, ``("abort", code, details)`` or
        ``("error", text)``."""
        return await self.batches.submit((method, caller, peer, data))

    async def _exchange(self, calls: list[tuple[str, str | None, str, bytes]]) -> list[tuple]:
        """One message of ``calls`` to the master, and its answers; UNAVAILABLE for each once it is gone."""
        if not self.closed:
            observed, self.observed = self.observed, []
            self.reply = asyncio.get_running_loop().create_future()
            self._streams_told = self.open_streams
            try:
                self.writer.write(_frame(("calls", calls, observed, self.open_streams)))
                await self.writer.drain()
                return await self.reply
            except Exception as exc:  # noqa: BLE001 - the master is gone: every call of the batch is told
                self.gone = self.gone or f"the master is gone ({type(exc).__name__})"
        return [("abort", "UNAVAILABLE", self.gone)] * len(calls)

    async def read(self) -> None:
        """Take the master's messages until it stops the front or goes."""
        grace = 0.0
        why = "the master is gone"
        try:
            while True:
                msg = await _read_frame(self.reader)
                if msg is None:
                    break
                if msg[0] == "results" and self.reply is not None and not self.reply.done():
                    self.reply.set_result(msg[1])
                elif msg[0] == "stop":
                    grace, why = msg[1], "the master is stopping"
                    break
        finally:
            self.gone = why  # calls waiting and to come are answered UNAVAILABLE at once
            if self.reply is not None and not self.reply.done():
                self.reply.set_exception(ConnectionError(why))
            if not self.stopped.done():
                self.stopped.set_result(grace)


class _ToMaster(logging.Handler):
    """The front's log lines go to the master, which writes them to its own log."""

    def __init__(self, relay: _Relay, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.INFO)
        self.relay, self.loop = relay, loop

    def emit(self, record: logging.LogRecord) -> None:
        try:
            frame = _frame(("log", record.levelno, record.name, self.format(record)))
            self.loop.call_soon_threadsafe(self._write, frame)
        except Exception:  # noqa: BLE001 - a line that cannot go is dropped
            pass

    def _write(self, frame: bytes) -> None:
        if not self.relay.closed:
            self.relay.writer.write(frame)


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    try:
        head = await reader.readexactly(_LEN.size)
        (size,) = _LEN.unpack(head)
        if size > MAX_FRAME:
            raise ConnectionError(f"a frame of {size} bytes")
        return pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def _handlers(relay: _Relay) -> Any:
    import grpc

    from stram import wire as proto

    def caller_of(context: Any) -> tuple[str | None, str]:
        return dict(context.invocation_metadata() or ()).get(proto.CONTAINER_METADATA_KEY), context.peer()

    async def answer(context: Any, result: tuple) -> Any:
        if result[0] == "ok":
            return result[1]
        if result[0] == "abort":
            await context.abort(grpc.StatusCode[result[1]], result[2])
        await context.abort(grpc.StatusCode.UNKNOWN, result[1])

    def unary(method: str) -> Any:
        async def handle(request: bytes, context: Any) -> Any:
            began = time.monotonic()
            result = await relay.submit(method, *caller_of(context), request)
            if method == "ProcessHeartbeat":
                relay.observed.append(time.monotonic() - began)
            return await answer(context, result)
        return grpc.unary_unary_rpc_method_handler(handle)

    async def stream(requests: Any, context: Any) -> Any:
        call = caller_of(context)
        relay.streams_changed(1)
        try:
            async for request in requests:
                began = time.monotonic()
                result = await relay.submit("HeartbeatStream", *call, request)
                relay.observed.append(time.monotonic() - began)
                yield await answer(context, result)
        finally:
            relay.streams_changed(-1)

    methods = {name: unary(name) for name in UNARY}
    methods["HeartbeatStream"] = grpc.stream_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


async def _serve(sock: socket.socket) -> int:
    import grpc

    from stram.master.umbilical.server import TokenGate, server_options

    reader, writer = await asyncio.open_connection(sock=sock)
    config = await _read_frame(reader)
    if config is None:
        return 1
    relay = _Relay(reader, writer, config["max_batch"])
    logging.getLogger().addHandler(_ToMaster(relay, asyncio.get_running_loop()))
    server = grpc.aio.server(interceptors=[TokenGate(config["token"])], options=server_options())
    server.add_generic_rpc_handlers((_handlers(relay),))
    address = f"{config['host']}:{config['port']}"
    if config.get("key_pem"):
        port = server.add_secure_port(address, grpc.ssl_server_credentials([(config["key_pem"], config["cert_pem"])]))
    else:
        port = server.add_insecure_port(address)
    if not port:
        writer.write(_frame({"error": f"could not bind the umbilical server to {address}"}))
        await writer.drain()
        return 1
    await server.start()
    writer.write(_frame({"port": port, "pid": os.getpid()}))
    await writer.drain()
    await relay.read()
    await server.stop(relay.stopped.result())
    return 0


def main(argv: list[str]) -> int:
    # until the master is there to take them (and after), lines go to standard error too
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)
    sock = socket.socket(fileno=int(argv[1]))
    return asyncio.run(_serve(sock))


# ---------------------------------------------------------------- the master's side

class FrontServer:
    """The umbilical served by a front process; in the master, the relay between it and ``servicer``.

    The same face as :class:`~stram.master.umbilical.server.UmbilicalServer` to the master (:meth:`stop`);
    :attr:`port` is the port the front bound (``port`` 0: a free one).
    """

    def __init__(self, servicer: Any, host: str, port: int, tls_identity: Any = None,
                 max_batch: int | None = None, on_restart: Callable[[int], None] | None = None) -> None:
        from stram.master.umbilical.server import MAX_BATCH

        self.servicer = servicer
        self.on_restart = on_restart
        self._stopping = False
        self._send_lock = threading.Lock()
        self._config = {"token": servicer.token, "host": host, "max_batch": max_batch or MAX_BATCH,
                        "key_pem": tls_identity.key_pem if tls_identity is not None else None,
                        "cert_pem": tls_identity.cert_pem if tls_identity is not None else None}
        self._restarts: list[float] = []
        #: Front processes started in place of one that ended unasked.
        self.replaced = 0
        self.port: int = self._spawn(port)
        self._thread = threading.Thread(target=self._relay, name="umbilical-relay", daemon=True)
        self._thread.start()

    def _spawn(self, port: int) -> int:
        """Start a front process serving on ``port`` (0: a free one); the port it bound."""
        parent, child = socket.socketpair()
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "stram.master.umbilical.front", str(child.fileno())],
                                     pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=env)
        child.close()
        self.sock = parent
        self._file = parent.makefile("rb")
        try:
            self._send({**self._config, "port": port})
            first = self._recv()
        except OSError:
            first = None
        if not first or "port" not in first:
            self._end()
            raise OSError((first or {}).get("error") or
                          f"the umbilical's front process ended at start (exit code {self.proc.poll()})")
        log.info("umbilical served by its front process (pid %d) on port %d", self.proc.pid, first["port"])
        return first["port"]

    def _send(self, obj: Any) -> None:
        with self._send_lock:
            self.sock.sendall(_frame(obj))

    def _recv(self) -> Any:
        head = self._file.read(_LEN.size)
        if len(head) < _LEN.size:
            return None
        (size,) = _LEN.unpack(head)
        data = self._file.read(size)
        return pickle.loads(data) if len(data) == size else None

    def _relay(self) -> None:
        while not self._stopping:
            self._serve_front()
            if self._stopping or not self._restart():
                break

    def _restart(self) -> bool:
        """A new front after the last one ended unasked: on its port if that is free again (the
        containers' calls go on there), else on another (``on_restart`` tells the master, which
        rewrites heartbeatUri). At most :data:`MAX_RESTARTS` a minute."""
        code = self.proc.poll()
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < 60] + [now]
        if len(self._restarts) > MAX_RESTARTS:
            log.error("the umbilical's front process ended (exit code %s) %d times within a minute: "
                      "containers can no longer reach the master", code, len(self._restarts))
            return False
        log.error("the umbilical's front process ended (exit code %s); starting another", code)
        self._end()
        for port in (self.port, 0):
            try:
                bound = self._spawn(port)
                break
            except OSError as exc:
                log.warning("could not start the umbilical's front process on port %d: %s", port, exc)
        else:
            return False
        if bound != self.port:
            self.port = bound
            if self.on_restart is not None:
                self.on_restart(bound)
        self.replaced += 1
        return True

    def _serve_front(self) -> None:
        """Relay the current front's calls until it ends."""
        pacer = self.servicer.pacer
        while True:
            try:
                msg = self._recv()
            except (OSError, ValueError):
                msg = None
            if msg is None:
                break
            if msg[0] == "streams":
                self.servicer.open_streams = msg[1]
                continue
            if msg[0] == "log":  # a line of the front's, already rate-limited there
                logging.getLogger(msg[2]).log(msg[1], msg[3])
                continue
            _, calls, observed, open_streams = msg
            self.servicer.open_streams = open_streams
            if pacer is not None:
                for seconds in observed:
                    pacer.observe(seconds)
            results = self.handle(calls)
            try:
                self._send(("results", results))
            except OSError:
                break

    def handle(self, calls: list[tuple[str, str | None, str, bytes]]) -> list[tuple]:
        """The answers to the calls of one message of the front, in order (heartbeats as one batch)."""
        from google.protobuf.message import DecodeError

        from stram import wire as proto
        from stram.master.umbilical.server import Abort, CallContext

        results: list[tuple] = [("error", "not answered")] * len(calls)
        beats: list[tuple[Any, Any]] = []
        where: list[int] = []
        for i, (method, caller, peer, data) in enumerate(calls):
            call = CallContext.of(caller, peer)
            try:
                if method in ("HeartbeatStream", "ProcessHeartbeat"):
                    beats.append((proto.ContainerHeartbeat.FromString(data), call))
                    where.append(i)
                    continue
                if method not in _REQUESTS:
                    raise Abort(_status("UNIMPLEMENTED"), f"no method {method!r}")
                request = getattr(proto, _REQUESTS[method]).FromString(data)
                results[i] = ("ok", getattr(self.servicer, method)(request, call).SerializeToString())
            except Abort as exc:
                results[i] = ("abort", exc.code.name, exc.details)
            except DecodeError as exc:
                log.warning("malformed %s request from %s: %s", method, peer, exc)
                results[i] = ("abort", "INVALID_ARGUMENT", f"malformed {method} request: {exc}")
            except Exception as exc:  # noqa: BLE001 - this call's answer; the others go on
                log.exception("%s from %s failed", method, peer)
                results[i] = ("error", f"{type(exc).__name__}: {exc}")
        if beats:
            for i, answer in zip(where, self.servicer.heartbeats(beats)):
                if isinstance(answer, Abort):
                    results[i] = ("abort", answer.code.name, answer.details)
                elif isinstance(answer, BaseException):
                    results[i] = ("error", f"{type(answer).__name__}: {answer}")
                else:
                    results[i] = ("ok", answer.SerializeToString())
        return results

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (calls in flight get ``grace`` seconds), then the front process."""
        self._stopping = True
        try:
            self._send(("stop", grace or 0.0))
        except OSError:
            pass
        self._end((grace or 0) + 5)

    def _end(self, timeout: float = 5.0) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._file.close()
        self.sock.close()


def create_front(servicer: Any, host: str = "0.0.0.0", port: int = 0, tls_identity: Any = None,
                 on_restart: Callable[[int], None] | None = None) -> tuple[FrontServer, int]:
    """:func:`stram.master.umbilical.server.create_server`, served by a front process: the server and its port
    (``on_restart``: told the new port if a front that ended had to be replaced on another)."""
    served = FrontServer(servicer, host, port, tls_identity, on_restart=on_restart)
    return served, served.port


#: Request message of each unary method but ProcessHeartbeat (a heartbeat, batched).
_REQUESTS = {"GetInitContext": "InitContextRequest", "Log": "LogRequest", "ReportError": "ReportErrorRequest"}


def _status(name: str) -> Any:
    import grpc

    return grpc.StatusCode[name]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
