"""The web console at ``/``: a static page that draws the application from the admin API.

The page (``appmaster/static/console/``: HTML, JavaScript, CSS; no library,
nothing fetched from the internet) polls ``ws/v2/stram/snapshot`` and
``ws/v2/stram/windows`` about once a second with relative URLs, so it works
directly and behind YARN's web proxy (``/proxy/<app id>/pages/stram/``). This
module registers its routes on the admin server's Flask app, and the few
documents the page needs beyond the rest of the API:

- ``GET /ws/v2/stram/logicalPlan``: the logical DAG (operators with their
  live partition counts, streams with their locality) and the header's
  attributes (user, queue, processing mode, window size);
- ``GET /ws/v2/stram/windows``: the committed window as wall-clock time and
  its lag, each operator's newest checkpoint and latency;
- ``GET /ws/v2/stram/containers/<id>/log``: the tail of a container's log
  (local applications), or where the NodeManager shows it (YARN).

Every string the page shows is inserted as text, never as HTML.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from flask import Flask, Response, jsonify, request, send_from_directory

from stram.common import logs as applogs
from stram.common.errors import UserError
from stram.common.windows import window_millis
from stram.master.core.reports import END_MILLIS, WINDOW_ID, window_hex

__all__ = ["register", "STATIC_DIR", "SECURITY_HEADERS", "logical_plan", "window_report", "LOG_TAIL_DEFAULT", "LOG_TAIL_MAX"]

log = logging.getLogger("stram.master.admin.console")

#: The console's files (package data).
STATIC_DIR = Path(__file__).parent / "static" / "console"
#: Files the console serves under ``console/``; nothing else in the directory is reachable.
ASSETS = ("console.js", "console.css")


def _inline_script_hashes() -> str:
    """CSP sources for the page's own inline scripts (its trailing-slash redirect), by their hashes."""
    page = (STATIC_DIR / "index.html").read_text()
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
                    for s in scripts)


#: Headers on every answer of the admin server: the console is never framed (clickjacking), content
#: types are never sniffed, no referrer leaves it, and its page runs only its own scripts and styles.
SECURITY_HEADERS = {
    "Content-Security-Policy": (f"default-src 'self'; script-src 'self' {_inline_script_hashes()}; "
                                "style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'"),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
#: Lines of a container's log shown by default, and at most.
LOG_TAIL_DEFAULT = 500
LOG_TAIL_MAX = 20_000


def _user() -> str:
    """Who runs the application: YARN's user in a YARN container, else the master's process user."""
    for name in ("HADOOP_USER_NAME", "USER"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry for the uid
        return str(os.getuid())


def logical_plan(state: Any) -> dict[str, Any]:
    """The logical DAG and the console header's attributes (call under the master's lock).

    Partition counts are the live ones (a scaled operator shows its new count);
    unifiers are not logical operators and are not counted.
    """
    spec = state.spec
    counts: dict[str, int] = {}
    for op in state.plan.operators.values():
        if op.kind != "UNIFIER":
            counts[op.name] = counts.get(op.name, 0) + 1
    return {
        "name": spec.name,
        "attributes": {"user": _user(), "queue": spec.attribute("QUEUE"),
                       "processing_mode": spec.attribute("PROCESSING_MODE"),
                       "window_millis": int(state.attr("STREAMING_WINDOW_SIZE_MILLIS"))},
        "operators": [{"name": name, "class": o.class_name, "partitions": counts.get(name, 0)}
                      for name, o in spec.operators.items()],
        "streams": [{"name": name, "from": str(s.source), "to": [str(t) for t in s.sinks],
                     "locality": s.locality}
                    for name, s in spec.streams.items()],
    }


def window_report(state: Any, now_millis: int) -> dict[str, Any]:
    """The committed window in wall-clock time, and per operator its checkpoint and latency.

    An operator's latency is how long after its nominal end its newest reported
    window ended at the operator (``end_millis - window end``, at least 0): the
    time tuples take to arrive through the DAG plus the operator's own work.
    Window ids are also given in hex (``*_hex``, as Apex prints them): a
    browser's JSON numbers cannot hold 64 bits exactly. Call under the master's lock.
    """
    size = int(state.attr("STREAMING_WINDOW_SIZE_MILLIS"))
    committed_end = window_millis(state.committed + 1, size)
    operators = {}
    for op in state.plan.operators.values():
        history = state.window_history.get(op.id) or []
        last = history[-1] if history else None
        checkpoint = op.checkpoints[-1] if op.checkpoints else None
        operators[str(op.id)] = {
            "checkpoint": checkpoint, "checkpoint_hex": None if checkpoint is None else window_hex(checkpoint),
            "current_window_hex": window_hex(op.current_window),
            "recovery_checkpoint_hex": window_hex(op.recovery_checkpoint),
            "latency_millis": max(0, last[END_MILLIS] - window_millis(last[WINDOW_ID] + 1, size))
            if last else None}
    return {"now_millis": now_millis, "window_millis": size, "committed_window": state.committed,
            "committed_window_hex": window_hex(state.committed),
            "committed_millis": committed_end,
            "committed_lag_seconds": max(0.0, (now_millis - committed_end) / 1000),
            "operators": operators}


def _tail_arg() -> int:
    raw = request.args.get("tail", str(LOG_TAIL_DEFAULT))
    try:
        tail = int(raw)
    except ValueError:
        tail = -1
    if not 0 < tail <= LOG_TAIL_MAX:
        raise UserError(f"tail must be a count of lines in [1, {LOG_TAIL_MAX}], got {raw!r}")
    return tail


def register(app: Flask, master: Any) -> None:
    """Add the console's page, its assets and its documents to the admin server's app."""

    def locked(fn):  # noqa: ANN001
        with master.lock:
            return fn()

    @app.after_request
    def secure_headers(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.get("/")
    def console_index():  # noqa: ANN202
        response = send_from_directory(STATIC_DIR, "index.html", max_age=0)
        response.headers["Cache-Control"] = "no-cache"
        return response

    @app.get("/console/<name>")
    def console_asset(name: str):  # noqa: ANN202
        if name not in ASSETS:
            return jsonify({"error": f"Not Found: GET {request.path}"}), 404
        response = send_from_directory(STATIC_DIR, name, max_age=0)
        response.headers["Cache-Control"] = "no-cache"
        return response

    @app.get("/ws/v2/stram/logicalPlan")
    def console_logical_plan():  # noqa: ANN202
        return jsonify(locked(lambda: logical_plan(master.state)))

    @app.get("/ws/v2/stram/windows")
    def console_windows():  # noqa: ANN202
        now = int(time.time() * 1000)
        return jsonify(locked(lambda: window_report(master.state, now)))

    @app.get("/ws/v2/stram/containers/<container_id>/log")
    def console_container_log(container_id: str):  # noqa: ANN202
        try:
            tail = _tail_arg()
        except UserError as exc:
            return jsonify({"error": str(exc)}), 400
        known = locked(lambda: container_id in master.state.plan.containers)
        if not known:
            return jsonify({"error": f"unknown container {container_id!r}"}), 404
        log_page = getattr(master.launcher, "log_page", None)
        if log_page is not None:  # YARN: the NodeManager serves it
            url = log_page(container_id)
            if not url:
                return jsonify({"error": f"YARN does not know where {container_id} runs (any more); "
                                         f"`stram logs APP {container_id}` reads its aggregated log"}), 404
            return jsonify({"container": container_id, "url": url})
        log_dir = getattr(master.launcher, "log_dir", None)
        if not log_dir or not os.path.isdir(log_dir):
            return jsonify({"error": "this master's containers keep no log files it can read"}), 404
        try:
            files = applogs.pick(applogs.logs_in(log_dir), container_id)
        except UserError as exc:
            return jsonify({"error": str(exc)}), 404
        text = applogs.render(files, tail)
        if request.args.get("format") == "json":
            return jsonify({"container": container_id, "tail": tail, "text": text})
        return Response(text, content_type="text/plain; charset=utf-8")
