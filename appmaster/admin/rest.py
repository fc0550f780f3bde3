"""The master's admin API: HTTP/JSON under ``/ws/v2/stram/`` (Apex's paths), on Flask.

The CLI reaches a running master through it; its URL is written to
``APP_PATH/admin.json``. On YARN the same pages sit behind the tracking URL.
Requests that change something become events passed to the master's
dispatcher (kill a container, scale, ask for a stack trace) or its requests
(shut down, kill); the pages read the state under the master's lock.
``/metrics`` serves Prometheus's text format (:mod:`stram.master.admin.metrics`), ``/`` the web
console (:mod:`stram.master.admin.console`).
Every endpoint is listed in ``docs/rest-api.md``.

Every request is authorized first (:mod:`stram.master.admin.auth`: the
application's token, a browser session from ``/login``, or YARN's web proxy);
request bodies are checked against a small schema per endpoint
(:mod:`stram.master.admin.bodies`). The server is Hypercorn (:mod:`stram.master.admin.server`):
a bounded thread pool, slow and idle connections closed after a timeout,
bodies capped, HTTPS when the application's TLS is on.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable

import orjson
from flask import Flask, Response, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from stram.master.admin import auth as adminauth
from stram.master.admin import console, metrics
from stram.master.admin.bodies import MAX_BODY_BYTES, BadBody, Field, parse
from stram.master.admin.pagejson import OperatorPage
from stram.master.admin.server import AdminServer
from stram.master.core.events import ContainerNotRunning, MasterPaused
from stram.master.core.reports import in_chunks, operator_rows
from stram.master.core.scaling import MAX_PARTITIONS
from stram.master.core.state import KillContainerRequest, StackTraceRequest, UnknownContainer

log = logging.getLogger("stram.master.admin")


#: Seconds a stack trace request waits for the container's answer by default, and at most.
STACK_TRACE_WAIT = 10.0
STACK_TRACE_WAIT_MAX = 60.0


#: The body of the scale call; the other calls that change something take none (or ``{}``).
SCALE_BODY = {"count": Field(int, required=True, low=1, high=MAX_PARTITIONS)}
NO_BODY: dict[str, Field] = {}


def body(schema: dict[str, Field]) -> dict[str, Any]:
    """The current request's body checked against ``schema`` (:class:`BadBody`: answered 400)."""
    return parse(request.get_data(cache=True), schema)


class FastJSON(DefaultJSONProvider):
    """Flask's JSON answers, encoded by orjson: the operators page of 20,000 operators (10 MB)
    took 290 ms of the master's interpreter with the standard encoder, 54 ms with orjson.
    Keys sorted and compact as before; what orjson refuses (an integer past 64 bits in a
    metric, say) is encoded the standard way."""

    OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS

    def __init__(self, app: Flask) -> None:
        super().__init__(app)
        self.page = OperatorPage()

    def response(self, *args: Any, **kwargs: Any) -> Response:
        if self._app.debug or self.compact is False:
            return super().response(*args, **kwargs)
        obj = self._prepare_response_obj(args, kwargs)
        return self._app.response_class(self.encode(obj) + b"\n", mimetype=self.mimetype)

    def encode(self, obj: Any) -> bytes:
        """``obj`` as compact JSON with sorted keys; the standard encoder's where orjson refuses."""
        try:
            return orjson.dumps(obj, default=self.default, option=self.OPTIONS)
        except TypeError:
            return self.dumps(obj, separators=(",", ":")).encode()

    def operators_response(self, chunks: Iterable[list[tuple]]) -> Response:
        """``{"operators": [...]}`` of the operators in ``chunks`` (of
        :func:`~stram.master.core.reports.operator_copies`), each chunk encoded as it comes
        by :class:`~stram.master.admin.pagejson.OperatorPage` (the standard way where orjson refuses a
        value). One call for a whole page of 20,000 operators (10 MB) held the interpreter
        50-130 ms, every heartbeat of the master waiting for it."""
        if self._app.debug or self.compact is False:  # indented, as :meth:`response` answers then
            return self.response({"operators": [row for chunk in chunks for row in operator_rows(chunk)]})
        parts = []
        for chunk in chunks:
            try:
                part = self.page.rows(chunk)
            except TypeError:
                part = self.encode(operator_rows(chunk))[1:-1]
            if part:
                parts.append(part)
        text = b'{"operators":[' + b",".join(parts) + b"]}\n"
        return self._app.response_class(text, mimetype=self.mimetype)


def create_app(master: Any, auth: adminauth.AdminAuth | None = None) -> Flask:
    """The admin API of ``master`` (authorized by ``auth``, default :meth:`AdminAuth.for_master`)."""
    app = Flask("stram-admin")
    app.json = FastJSON(app)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    adminauth.install(app, auth or adminauth.AdminAuth.for_master(master))
    registry = metrics.registry_for(master)

    @app.errorhandler(BadBody)
    def bad_body(exc: BadBody):  # noqa: ANN202
        log.warning("admin API: %s %s from %s: bad body: %s", request.method, request.path,
                    request.remote_addr, exc)
        return jsonify({"error": f"bad request body: {exc}"}), 400

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):  # noqa: ANN202
        """Unknown paths and wrong methods answer JSON too: ``{"error": ...}``."""
        return jsonify({"error": f"{exc.name}: {request.method} {request.path}"}), exc.code

    @app.errorhandler(Exception)
    def internal_error(exc: Exception):  # noqa: ANN202
        log.exception("admin API: %s %s failed", request.method, request.path)
        return jsonify({"error": f"internal error: {type(exc).__name__}: {exc}"}), 500

    def locked(fn):  # noqa: ANN001
        with master.lock:
            return fn()

    @app.errorhandler(MasterPaused)
    def paused(exc: MasterPaused):  # noqa: ANN202
        return jsonify({"error": str(exc)}), 503

    @app.get("/ws/v2/stram/info")
    def info():  # noqa: ANN202
        return jsonify(master.info())

    @app.get("/ws/v2/stram/operators")
    def operators():  # noqa: ANN202
        # copied under the lock a few hundred operators at a time, each chunk encoded (most of the
        # work) without it
        ops = locked(lambda: list(master.state.plan.operators.values()))
        return app.json.operators_response(in_chunks(master.lock, ops, master.state.operator_copies))

    @app.get("/ws/v2/stram/containers")
    def containers():  # noqa: ANN202
        return jsonify({"containers": locked(master.state.container_rows)})

    @app.get("/ws/v2/stram/snapshot")
    def snapshot():  # noqa: ANN202
        """info, operators and containers as of one moment (one hold of the lock)."""
        def read() -> dict[str, Any]:
            return {"info": master.info(), "operators": master.state.operator_copies(),
                    "containers": master.state.container_rows()}
        doc = locked(read)
        doc["operators"] = operator_rows(doc["operators"])
        return jsonify(doc)

    @app.get("/ws/v2/stram/plan")
    def plan():  # noqa: ANN202
        return jsonify(locked(master.state.plan.to_dict))

    @app.route("/ws/v2/stram/containers/<container_id>", methods=["DELETE", "PUT"])
    def kill_container(container_id: str):  # noqa: ANN202
        body(NO_BODY)
        try:
            master.dispatch(KillContainerRequest(container_id, int(time.time() * 1000)))
        except UnknownContainer:
            return jsonify({"error": f"unknown container {container_id!r}"}), 404
        return jsonify({"killed": container_id})

    @app.get("/ws/v2/stram/containers/<container_id>/stackTrace")
    def stack_trace(container_id: str):  # noqa: ANN202
        """Every thread's stack in a running container (Apex's STACKTRACE), waiting for its answer."""
        try:
            wait = float(request.args.get("timeout", STACK_TRACE_WAIT))
        except ValueError:
            wait = -1.0
        if not 0 < wait <= STACK_TRACE_WAIT_MAX:
            return jsonify({"error": f"timeout must be a number of seconds in (0, {STACK_TRACE_WAIT_MAX:g}], "
                                     f"got {request.args.get('timeout')!r}"}), 400
        deadline = time.monotonic() + wait
        try:
            seq = master.dispatch(StackTraceRequest(container_id, int(time.time() * 1000)))
            while True:
                trace = locked(lambda: master.state.stack_trace(container_id, seq))
                if trace is not None:
                    return jsonify(trace)
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        except UnknownContainer:
            return jsonify({"error": f"unknown container {container_id!r}"}), 404
        except ContainerNotRunning as exc:
            return jsonify({"error": str(exc)}), 409
        last = locked(lambda: master.state.plan.containers[container_id].last_heartbeat_millis)
        return jsonify({"error": f"container {container_id} did not answer within {wait:g} s (its last "
                                 f"heartbeat was {max(0, time.time() * 1000 - last) / 1000:.1f} s ago)"}), 504

    @app.get("/metrics")
    def prometheus():  # noqa: ANN202
        return Response(metrics.exposition(registry), mimetype=None, content_type=metrics.CONTENT_TYPE)

    @app.route("/ws/v2/stram/shutdown", methods=["POST", "PUT"])
    def shutdown():  # noqa: ANN202
        body(NO_BODY)
        master.request_shutdown()
        return jsonify({"shutdown": "requested"})

    @app.route("/ws/v2/stram/kill", methods=["POST", "PUT"])
    def kill():  # noqa: ANN202
        body(NO_BODY)
        master.request_kill()
        return jsonify({"kill": "requested"})

    @app.route("/ws/v2/stram/operators/<name>/partitions", methods=["POST", "PUT"])
    def scale(name: str):  # noqa: ANN202
        count = body(SCALE_BODY)["count"]
        scale_fn = getattr(master, "scale", None)
        if scale_fn is None:
            return jsonify({"error": "live repartitioning is not available in this version"}), 501
        try:
            return jsonify(scale_fn(name, count))
        except (KeyError, ValueError) as exc:
            return jsonify({"error": str(exc)}), 400

    console.register(app, master)

    return app


def start_admin(master: Any, host: str, bind: str | None = None, tls: Any = None,
                proxy_host: str | None = None) -> tuple[AdminServer, str]:
    """Serve the admin API on a free port of ``bind`` (default ``host``) in a thread; (server, base URL).

    With ``tls`` (the application's identity) it serves HTTPS; ``proxy_host`` adds the plain
    listener for the YARN web proxy (:class:`stram.master.admin.server.AdminServer`)."""
    server = AdminServer(create_app(master), bind or host, tls=tls, proxy_host=proxy_host)
    return server, base_url(server.scheme, host, server.server_port)


def base_url(scheme: str, host: str, port: int) -> str:
    """``scheme://host:port``, an IPv6 address in brackets."""
    shown = host if ":" not in host else f"[{host}]"
    return f"{scheme}://{shown}:{port}"
