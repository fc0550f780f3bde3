"""The master's admin API: HTTP/JSON under ``/ws/v2/stram/`` (Apex's paths), on Flask.

The CLI reaches a running master through it; its URL is written to
``APP_PATH/admin.json``. On YARN the same pages sit behind the tracking URL.
Requests that change something become events passed to the master's
dispatcher (kill a container, scale, ask for a stack trace) or its requests
(shut down, kill); the pages read the state under the master's lock.
``/metrics`` serves Prometheus's text format (:mod:`appmaster.metrics`), ``/`` the web
console (:mod:`appmaster.console`).
Every endpoint is listed in ``docs/rest-api.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException
from werkzeug.serving import make_server

from appmaster import console, metrics
from appmaster.events import ContainerNotRunning, MasterPaused
from appmaster.reports import operator_rows
from appmaster.state import KillContainerRequest, StackTraceRequest, UnknownContainer

log = logging.getLogger("appmaster.admin")


#: Seconds a stack trace request waits for the container's answer by default, and at most.
STACK_TRACE_WAIT = 10.0
STACK_TRACE_WAIT_MAX = 60.0


def create_app(master: Any) -> Flask:
    app = Flask("stram-admin")
    registry = metrics.registry_for(master)

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
        # copied under the lock, turned into rows (most of the work) without it
        return jsonify({"operators": operator_rows(locked(master.state.operator_copies))})

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
        import time
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
        master.request_shutdown()
        return jsonify({"shutdown": "requested"})

    @app.route("/ws/v2/stram/kill", methods=["POST", "PUT"])
    def kill():  # noqa: ANN202
        master.request_kill()
        return jsonify({"kill": "requested"})

    @app.route("/ws/v2/stram/operators/<name>/partitions", methods=["POST", "PUT"])
    def scale(name: str):  # noqa: ANN202
        body = request.get_json(silent=True) or {}
        scale_fn = getattr(master, "scale", None)
        if scale_fn is None:
            return jsonify({"error": "live repartitioning is not available in this version"}), 501
        try:
            return jsonify(scale_fn(name, int(body.get("count", 0))))
        except (KeyError, ValueError) as exc:
            return jsonify({"error": str(exc)}), 400

    console.register(app, master)

    return app


def start_admin(master: Any, host: str) -> tuple[Any, str]:
    """Serve the admin API on a free port in a thread; (server, base URL)."""
    server = make_server("0.0.0.0", 0, create_app(master), threaded=True)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # a short poll: shutdown() waits for the loop to notice (the default 0.5 s delayed every app's end)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                     name="admin-http").start()
    return server, f"http://{host}:{server.server_port}"
