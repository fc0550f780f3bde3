"""The umbilical gRPC service: turns container RPCs into MasterState events.

A thin translator (STYLE.md 3): its server refuses calls without a credential
(:class:`TokenGate`) and a container's calls about another container; the
servicer turns each call into an
event (:mod:`appmaster.state`) and passes it to the master's dispatcher (lock →
``MasterState.handle`` → journal → carry out), which returns the reply. Bad
input never takes the server down: each call fails on its own with a gRPC
status and a log line.
"""

from __future__ import annotations

import hmac
import logging
import time
from concurrent import futures
from typing import Any, Callable

import grpc

import proto
from appmaster.events import MasterPaused
from appmaster.state import ErrorReport, Heartbeat, InitContextRequest, MasterEvent, UnknownContainer
from container.logsetup import rate_limit
from container.secret import container_credential

log = logging.getLogger("appmaster.server")
container_log = logging.getLogger("appmaster.containers")
# a flood of refused or unknown calls must not fill the disk: repeats are counted, not written
rate_limit(log, burst=5, interval=10.0)
rate_limit(container_log, burst=50, interval=10.0)

#: Largest request the master accepts (a heartbeat is a few KB).
MAX_MESSAGE_BYTES = 4 << 20


def _now() -> int:
    return int(time.time() * 1000)


class UmbilicalServicer(proto.StreamingContainerUmbilicalServicer):
    """Serves container agents for one application.

    Parameters
    ----------
    dispatch:
        The master's one door into its state (:meth:`appmaster.master.Dispatcher.dispatch`):
        handles an event and returns its reply.
    token:
        The application's secret: :func:`create_server` refuses calls without it (:class:`TokenGate`)
        before they reach the servicer.
    """

    def __init__(self, dispatch: Callable[[MasterEvent], Any], token: str) -> None:
        self.dispatch = dispatch
        self.token = token

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
        caller = dict(context.invocation_metadata()).get(proto.CONTAINER_METADATA_KEY)
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


class TokenGate(grpc.ServerInterceptor):
    """Refuses a call without a valid credential before its request is parsed.

    A call carries a container's own credential with that container's id
    (metadata ``stram-token`` and ``stram-container``), or the application token
    alone (the master's own tools). The refusal handler never reads the request,
    and :func:`create_server` keeps the flow-control window small, so a flood of
    unauthenticated calls costs the master neither their bodies nor protobuf objects. It is the only credential check: the servicer is served
    through :func:`create_server` alone, and checks that a container's call is
    about that container (:meth:`UmbilicalServicer._as_caller`).
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

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        return continuation(details) if self.admits(details.invocation_metadata) else self._refuse

    @staticmethod
    def _refused(requests: Any, context: grpc.ServicerContext) -> Any:
        md = dict(context.invocation_metadata())
        supplied, container = md.get(proto.TOKEN_METADATA_KEY, ""), md.get(proto.CONTAINER_METADATA_KEY)
        what = "missing" if not supplied else "wrong"
        whose = f"container {container!r}'s credential" if container is not None else "application token"
        log.warning("refused call from %s: %s %s", context.peer(), what, whose)
        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                      f"{what} {whose} (metadata 'stram-token'{', stram-container' if container else ''})")


def create_server(servicer: UmbilicalServicer, host: str = "0.0.0.0", port: int = 0,
                  workers: int = 8, tls_identity: Any = None) -> tuple[grpc.Server, int]:
    """A started gRPC server for ``servicer`` and the port it bound (0: a free one); calls without
    a credential are refused before their requests are parsed (:class:`TokenGate`). With
    ``tls_identity`` (:class:`container.tls.Identity`) it serves TLS only."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="umbilical"),
        interceptors=[TokenGate(servicer.token)],
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                 # the flow-control window stays small (heartbeats are KBs): an unauthenticated
                 # caller cannot make the server take in megabytes before it is refused
                 ("grpc.http2.bdp_probe", 0),
                 ("grpc.max_send_message_length", 64 << 20),
                 ("grpc.so_reuseport", 0)])
    proto.add_StreamingContainerUmbilicalServicer_to_server(servicer, server)
    if tls_identity is not None:
        from container.tls import grpc_server_credentials
        bound = server.add_secure_port(f"{host}:{port}", grpc_server_credentials(tls_identity))
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind the umbilical server to {host}:{port}")
    server.start()
    return server, bound
