"""The umbilical gRPC service: turns container RPCs into MasterState events.

A thin translator: its server refuses calls without a credential
(:class:`TokenGate`) and a container's calls about another container; the
servicer turns each call into an
event (:mod:`stram.master.core.state`) and passes it to the master's dispatcher (lock →
``MasterState.handle`` → journal → carry out), which returns the reply. Bad
input never takes the server down: each call fails on its own with a gRPC
status and a log line.

The server is gRPC's asyncio one, on an event loop in a thread of its own
(:class:`UmbilicalServer`); the servicer's methods are plain functions run in
a pool of worker threads (the dispatcher takes the master's lock and may wait
for it, or for space on a full disk). Containers send their heartbeats over
one long-lived call each (``HeartbeatStream``): a stream message cost the
master 0.14 ms of CPU against 0.39 ms for a unary call on the threaded server,
and at 2,000 containers that is most of a core (``bench/bench_heartbeats.py``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from concurrent import futures
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from stram import wire as proto
from stram.common.logsetup import rate_limit
from stram.common.secret import container_credential
from stram.master.core.events import MasterPaused
from stram.master.core.state import ErrorReport, Heartbeat, InitContextRequest, MasterEvent, UnknownContainer

log = logging.getLogger("stram.master.umbilical.server")
container_log = logging.getLogger("stram.master.containers")
# a flood of refused or unknown calls must not fill the disk: repeats are counted, not written
rate_limit(log, burst=5, interval=10.0)
rate_limit(container_log, burst=50, interval=10.0)

#: Largest request the master accepts (a heartbeat is a few KB).
MAX_MESSAGE_BYTES = 4 << 20
#: Calls gRPC keeps waiting for the server's event loop before it refuses new ones at random
#: (CANCELLED; every one at twice as many). gRPC's own 1,000 refused 15-200 of the GetInitContext
#: calls of 2,000 containers starting together while the master's interpreter was busy
#: (``bench/bench_heartbeats.py``), and a refused agent waits and calls again.
MAX_PENDING_CALLS = 10_000


def _now() -> int:
    return int(time.time() * 1000)


class UmbilicalServicer(proto.StreamingContainerUmbilicalServicer):
    """Serves container agents for one application.

    Parameters
    ----------
    dispatch:
        The master's one door into its state (:meth:`stram.master.process.master.Dispatcher.dispatch`):
        handles an event and returns its reply.
    token:
        The application's secret: :func:`create_server` refuses calls without it (:class:`TokenGate`)
        before they reach the servicer.
    """

    def __init__(self, dispatch: Callable[[MasterEvent], Any], token: str,
                 dispatch_many: Callable[[list[MasterEvent]], list[Any]] | None = None,
                 pacer: Any = None) -> None:
        self.dispatch = dispatch
        self.token = token
        #: Told how long each heartbeat took from its arrival to its answer
        #: (:class:`stram.master.core.pacing.HeartbeatPacer`); None: nobody.
        self.pacer = pacer
        #: HeartbeatStream calls open now (:class:`AsyncUmbilical` counts them, on its event loop).
        self.open_streams = 0
        #: Handles a batch of events at once (:meth:`stram.master.process.dispatcher.Dispatcher.dispatch_many`):
        #: per event its reply or the exception it raised. Default: ``dispatch`` one by one.
        self.dispatch_many = dispatch_many or self._one_by_one

    def _one_by_one(self, events: list[MasterEvent]) -> list[Any]:
        results: list[Any] = []
        for event in events:
            try:
                results.append(self.dispatch(event))
            except Exception as exc:  # noqa: BLE001 - that event's answer
                results.append(exc)
        return results

    def _dispatch(self, event: MasterEvent, context: grpc.ServicerContext) -> Any:
        """The master's answer to ``event``; UNAVAILABLE ``paused: …`` while its writes wait for space."""
        try:
            return self.dispatch(event)
        except MasterPaused as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

    @staticmethod
    def _as_caller(container_id: str, context: grpc.ServicerContext) -> None:
        """Refuse a call whose credential is another container's than the one it is about.

        :class:`TokenGate` proved the caller holds the credential of the container its
        metadata names (or the application token, which may speak for any container).
        """
        caller = context.caller if isinstance(context, CallContext) else \
            dict(context.invocation_metadata()).get(proto.CONTAINER_METADATA_KEY)
        if caller is not None and caller != container_id:
            log.warning("refused call from %s: container %r's credential used for container %r",
                        context.peer(), caller, container_id)
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"the credential of container {caller!r} does not speak for {container_id!r}")

    def GetInitContext(self, request: proto.InitContextRequest, context: grpc.ServicerContext) -> Any:
        self._as_caller(request.container_id, context)
        try:
            return self._dispatch(InitContextRequest(request.container_id), context)
        except UnknownContainer:
            log.warning("GetInitContext from unknown container %r (%s)", request.container_id, context.peer())
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown container {request.container_id!r}")

    def Log(self, request: proto.LogRequest, context: grpc.ServicerContext) -> Any:
        self._as_caller(request.container_id, context)
        level = getattr(logging, request.level or "INFO", logging.INFO)
        container_log.log(level if isinstance(level, int) else logging.INFO, "[%s] %s",
                          request.container_id, request.msg[:10000])
        return proto.Empty()

    def ReportError(self, request: proto.ReportErrorRequest, context: grpc.ServicerContext) -> Any:
        self._as_caller(request.container_id, context)
        container_log.error("[%s] error in operators %s: %s", request.container_id,
                            list(request.operators), request.msg[:20000])
        self._dispatch(ErrorReport(request.container_id, tuple(request.operators), request.msg, _now()), context)
        return proto.Empty()

    def ProcessHeartbeat(self, request: proto.ContainerHeartbeat, context: grpc.ServicerContext) -> Any:
        self._as_caller(request.container_id, context)
        # the dispatcher journals before the response or any deletion acts on the new state
        return self._dispatch(Heartbeat(request, _now(), context.peer()), context)

    def heartbeats(self, calls: list[tuple[proto.ContainerHeartbeat, "CallContext"]]) -> list[Any]:
        """Heartbeats from several streams, handled together (:meth:`dispatch_many`).

        Per heartbeat: its response, or what ends its call: an :class:`Abort` (refused,
        or ``paused: …``) or the exception its handling raised.
        """
        results: list[Any] = [None] * len(calls)
        events: list[MasterEvent] = []
        where: list[int] = []
        now = _now()
        for i, (request, call) in enumerate(calls):
            try:
                self._as_caller(request.container_id, call)
            except Abort as exc:
                results[i] = exc
                continue
            events.append(Heartbeat(request, now, call.peer()))
            where.append(i)
        if events:
            try:
                answers = self.dispatch_many(events)
            except Exception as exc:  # noqa: BLE001 - MasterPaused, or the journal failed: every one's answer
                answers = [exc] * len(events)
            for i, answer in zip(where, answers):
                results[i] = Abort(grpc.StatusCode.UNAVAILABLE, str(answer)) \
                    if isinstance(answer, MasterPaused) else answer
        return results


class Abort(Exception):
    """A servicer method's ``context.abort`` in a worker thread, carried to the event loop."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class CallContext:
    """The part of a call's context the servicer uses, for a method run in a worker thread."""

    __slots__ = ("_metadata", "_peer", "caller")

    def __init__(self, context: Any) -> None:
        self._metadata = tuple(context.invocation_metadata() or ())
        self._peer = context.peer()
        #: The container the call's credential belongs to (None: the application token); read once
        #: per call, not per message of a heartbeat stream.
        self.caller = dict(self._metadata).get(proto.CONTAINER_METADATA_KEY)

    @classmethod
    def of(cls, caller: str | None, peer: str) -> "CallContext":
        """The context of a call the umbilical's front process took (:mod:`stram.master.umbilical.front`)."""
        call = cls.__new__(cls)
        call._metadata = ((proto.CONTAINER_METADATA_KEY, caller),) if caller is not None else ()
        call._peer, call.caller = peer, caller
        return call

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Abort(code, details)


class AsyncUmbilical(proto.StreamingContainerUmbilicalServicer):
    """The asyncio server's face of :class:`UmbilicalServicer`: each call runs its method in ``pool``."""

    def __init__(self, servicer: UmbilicalServicer, pool: futures.Executor) -> None:
        self.servicer = servicer
        self.pool = pool
        self.batches = Batches(self._heartbeats)

    async def _heartbeats(self, calls: list[tuple[Any, CallContext]]) -> list[Any]:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.servicer.heartbeats, calls)

    async def _run(self, method: Callable[[Any, Any], Any], request: Any, context: Any,
                   call: CallContext | None = None) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self.pool, method, request, call or CallContext(context))
        except Abort as exc:
            await context.abort(exc.code, exc.details)

    async def GetInitContext(self, request: Any, context: Any) -> Any:
        return await self._run(self.servicer.GetInitContext, request, context)

    async def Log(self, request: Any, context: Any) -> Any:
        return await self._run(self.servicer.Log, request, context)

    async def ReportError(self, request: Any, context: Any) -> Any:
        return await self._run(self.servicer.ReportError, request, context)

    async def ProcessHeartbeat(self, request: Any, context: Any) -> Any:
        began = time.monotonic()
        answer = await self._run(self.servicer.ProcessHeartbeat, request, context)
        if self.servicer.pacer is not None:
            self.servicer.pacer.observe(time.monotonic() - began)
        return answer

    async def HeartbeatStream(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        """One response per heartbeat, in order; a refused heartbeat ends the call with its status.

        The heartbeats of all streams that wait meanwhile are handled together (:class:`Batches`).
        """
        call = CallContext(context)
        pacer = self.servicer.pacer
        self.servicer.open_streams += 1
        try:
            async for request in requests:
                began = time.monotonic()
                answer = await self.batches.submit((request, call))
                if pacer is not None:
                    pacer.observe(time.monotonic() - began)
                if isinstance(answer, Abort):
                    await context.abort(answer.code, answer.details)
                if isinstance(answer, BaseException):
                    raise answer
                yield answer
        finally:
            self.servicer.open_streams -= 1


#: Most heartbeats handled in one batch (one hold of the master's lock, one journal write).
MAX_BATCH = 64


class Batches:
    """Calls of every stream, handed to ``handle`` in batches, one batch at a time.

    While a batch is handled, the calls that arrive wait and form the next one: alone, a
    heartbeat is a batch of one; under load, the master takes its lock and writes its journal
    once for up to :data:`MAX_BATCH` of them. Runs on the event loop; ``handle`` is a coroutine
    function of a batch's items that returns their answers in order (in the master's process:
    :meth:`UmbilicalServicer.heartbeats` in the worker pool; in its front process
    (:mod:`stram.master.umbilical.front`): a message to the master).
    """

    def __init__(self, handle: Callable[[list[Any]], Awaitable[list[Any]]], limit: int = MAX_BATCH) -> None:
        self.handle = handle
        self.limit = limit
        self.waiting: list[tuple[Any, asyncio.Future]] = []
        self.running = False

    async def submit(self, item: Any) -> Any:
        """The answer to ``item``: what ``handle`` gave for it, or the exception it raised."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self.waiting.append((item, answer))
        if not self.running:
            self.running = True
            loop.create_task(self._drain())
        return await answer

    async def _drain(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting[:self.limit], self.waiting[self.limit:]
                # a heartbeat whose call ended while it waited (its agent gave up and will send
                # another) is not handled at all
                batch = [(item, answer) for item, answer in batch if not answer.done()]
                if not batch:
                    continue
                try:
                    answers = await self.handle([item for item, _ in batch])
                except Exception as exc:  # noqa: BLE001 - every call of the batch gets it
                    answers = [exc] * len(batch)
                for (_, answer), value in zip(batch, answers):
                    if not answer.done():  # its call may have ended meanwhile
                        answer.set_result(value)
        finally:
            self.running = False


class TokenGate(grpc.aio.ServerInterceptor):
    """Refuses a call without a valid credential before its request is parsed.

    A call carries a container's own credential with that container's id
    (metadata ``stram-token`` and ``stram-container``), or the application token
    alone (the master's own tools). The refusal handler never reads the request,
    and :func:`create_server` keeps the flow-control window small, so a flood of
    unauthenticated calls costs the master neither their bodies nor protobuf objects. It is the
    only credential check: the servicer is served through :func:`create_server` alone, and
    checks that a container's call is about that container (:meth:`UmbilicalServicer._as_caller`).
    """

    def __init__(self, token: str) -> None:
        self.token = token
        # a request-streaming handler that never reads its requests: the refused call's body is
        # not received beyond HTTP/2's flow-control window, let alone parsed or kept
        self._refuse = grpc.stream_unary_rpc_method_handler(self._refused)

    def admits(self, metadata: Any) -> bool:
        """Whether ``metadata`` (gRPC invocation metadata) carries a valid credential."""
        md = dict(metadata or ())
        supplied, container = md.get(proto.TOKEN_METADATA_KEY, ""), md.get(proto.CONTAINER_METADATA_KEY)
        if not isinstance(supplied, str) or not supplied:
            return False
        if container is None:
            expected = self.token
        elif isinstance(container, str) and container:
            expected = container_credential(self.token, container)
        else:
            return False
        return hmac.compare_digest(supplied.encode(), expected.encode())

    async def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        if self.admits(details.invocation_metadata):
            return await continuation(details)
        return self._refuse

    @staticmethod
    async def _refused(requests: Any, context: Any) -> Any:
        md = dict(context.invocation_metadata() or ())
        supplied, container = md.get(proto.TOKEN_METADATA_KEY, ""), md.get(proto.CONTAINER_METADATA_KEY)
        what = "missing" if not supplied else "wrong"
        whose = f"container {container!r}'s credential" if container is not None else "application token"
        log.warning("refused call from %s: %s %s", context.peer(), what, whose)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                            f"{what} {whose} (metadata 'stram-token'{', stram-container' if container else ''})")


def server_options() -> list[tuple[str, Any]]:
    """The umbilical server's gRPC options (in the master, or in its front process)."""
    return [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # the flow-control window stays small (heartbeats are KBs): an unauthenticated
            # caller cannot make the server take in megabytes before it is refused
            ("grpc.http2.bdp_probe", 0),
            ("grpc.max_send_message_length", 64 << 20),
            # a burst of starting containers waits for the loop instead of being refused
            ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),
            ("grpc.server.max_pending_requests_hard_limit", 2 * MAX_PENDING_CALLS),
            ("grpc.so_reuseport", 0)]


class UmbilicalServer:
    """gRPC's asyncio server on an event loop in a thread of its own, serving :class:`UmbilicalServicer`.

    The servicer's methods run in a pool of ``workers`` threads (they block on the
    master's lock). :meth:`stop` ends the server, the loop and the pool.
    """

    def __init__(self, servicer: UmbilicalServicer, workers: int = 8) -> None:
        self.pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="umbilical")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="umbilical-loop", daemon=True)
        self._thread.start()
        self.server: grpc.aio.Server = self._run(self._make(servicer))

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _make(self, servicer: UmbilicalServicer) -> grpc.aio.Server:
        server = grpc.aio.server(interceptors=[TokenGate(servicer.token)], options=server_options())
        proto.add_StreamingContainerUmbilicalServicer_to_server(AsyncUmbilical(servicer, self.pool), server)
        return server

    def bind(self, address: str, credentials: Any = None) -> int:
        """Listen on ``address`` (TLS with ``credentials``); the port bound, 0 if it could not."""
        async def add() -> int:
            if credentials is not None:
                return self.server.add_secure_port(address, credentials)
            return self.server.add_insecure_port(address)
        return self._run(add())

    def start(self) -> None:
        self._run(self.server.start())

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (calls in flight get ``grace`` seconds), then the loop and the pool."""
        if not self.loop.is_closed():
            try:
                self._run(self.server.stop(grace), timeout=(grace or 0) + 10)
            except Exception:  # noqa: BLE001 - the loop ends all the same
                log.exception("the umbilical server did not stop cleanly")
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def create_server(servicer: UmbilicalServicer, host: str = "0.0.0.0", port: int = 0,
                  workers: int = 8, tls_identity: Any = None) -> tuple[UmbilicalServer, int]:
    """A started server for ``servicer`` and the port it bound (0: a free one); calls without
    a credential are refused before their requests are parsed (:class:`TokenGate`). With
    ``tls_identity`` (:class:`stram.common.tls.Identity`) it serves TLS only. (In a process of its
    own: :func:`stram.master.umbilical.front.create_front`.)"""
    server = UmbilicalServer(servicer, workers)
    try:
        credentials = None
        if tls_identity is not None:
            from stram.common.tls import grpc_server_credentials
            credentials = grpc_server_credentials(tls_identity)
        bound = server.bind(f"{host}:{port}", credentials)
        if bound == 0:
            raise OSError(f"could not bind the umbilical server to {host}:{port}")
        server.start()
    except BaseException:
        server.stop(0)
        raise
    return server, bound
