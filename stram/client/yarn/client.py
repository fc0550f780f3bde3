"""The CLI side of a YARN application: submit, follow, list, kill, and admin calls through the RM's proxy.

Everything here runs where the user types ``stram``, talking to the
ResourceManager through skein's driver (:func:`stram.client.yarn.driver.connect`)
and to a running master's admin API through YARN's web proxy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from typing import Any

from stram.client.adminhttp import ADMIN_KEY, request_json
from stram.client.follow import follow as follow_run
from stram.client.follow import pause_note, stall_note
from stram.client.yarn.appspec import (STRAM_TAG, add_pinned_services, application_spec, local_path_warnings,
                                       running_nodes)
from stram.client.yarn.driver import check_resources, connect, translate
from stram.common.apps import read_token, write_token
from stram.common.errors import AdminRequestError, ClusterUnreachable, StramError

log = logging.getLogger("stram.client.yarn")

__all__ = ["FOLLOW_INTERVAL", "YARN_TERMINAL", "submit", "follow", "YarnRun", "admin_request",
           "direct_admin_url", "admin_url_for", "list_apps", "kill_app", "wait_for"]

#: Seconds between two application reports while following a submission.
FOLLOW_INTERVAL = 2.0
#: YARN application states that are final (its final status then says how it ended).
YARN_TERMINAL = ("FINISHED", "FAILED", "KILLED")


def _kerberos() -> tuple[str | None, str | None]:
    return os.environ.get("STRAM_YARN_PRINCIPAL") or None, os.environ.get("STRAM_YARN_KEYTAB") or None


def submit(spec: Any, *, spec_path: str | None = None, detach: bool = False, duration: float | None = None,
           python_env: str | None = None, principal: str | None = None, keytab: str | None = None,
           app_path: str | None = None, node_label: str | None = None) -> int:
    """``stram launch --yarn``: submit ``spec`` and follow it unless ``detach``.

    Options left unset come from the environment: ``python_env``
    (``STRAM_PYTHON_ENV``), ``principal``/``keytab``
    (``STRAM_YARN_PRINCIPAL``/``STRAM_YARN_KEYTAB``), ``node_label``
    (``STRAM_YARN_NODE_LABEL``), ``app_path`` (``STRAM_YARN_APP_PATH``).

    Parameters
    ----------
    spec:
        The validated :class:`~stram.master.spec.AppSpec`.
    spec_path:
        The spec file it came from (only used in messages).
    detach:
        Print the application id and return once YARN accepted it.
    duration:
        Shut the application down gracefully after this many seconds.

    Returns
    -------
    int
        0 when detached after a successful submission, or when the
        application ended SUCCEEDED; 1 when it ended otherwise; 130 on Ctrl-C
        (the application is killed).

    Raises
    ------
    StramError
        Something needed is missing or YARN refused: what, and how to fix it.
    """
    principal = principal or os.environ.get("STRAM_YARN_PRINCIPAL") or None
    keytab = keytab or os.environ.get("STRAM_YARN_KEYTAB") or None
    for warning in local_path_warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)
    staging = tempfile.mkdtemp(prefix=f"stram-yarn-{spec.name}-")
    token = secrets.token_hex(16)
    try:
        aspec = application_spec(
            spec, spec_path, python_env=python_env or os.environ.get("STRAM_PYTHON_ENV") or None,
            principal=principal, keytab=keytab,
            app_path=app_path or os.environ.get("STRAM_YARN_APP_PATH") or None,
            node_label=node_label or os.environ.get("STRAM_YARN_NODE_LABEL") or None, staging_dir=staging,
            max_attempts=int(spec.attribute("MASTER_ATTEMPTS")), token=token)
        app_path = aspec.master.env["STRAM_APP_PATH"]
        with connect(principal, keytab, log_path=os.path.join(staging, "driver.log")) as client:
            check_resources(client, aspec, f" (queue {aspec.queue!r})")
            try:  # services pinned to each node and rack, for the master's placement and blacklist
                nodes = running_nodes(client)
            except Exception as exc:  # noqa: BLE001 - placement is relaxed, the application runs
                print(f"warning: could not list the cluster's nodes ({exc}); containers go where YARN "
                      f"puts them", file=sys.stderr)
                nodes = None
            note = add_pinned_services(aspec, spec, nodes)
            if note:
                print(f"warning: {note}", file=sys.stderr)
            try:
                app_id = client.submit(aspec)
            except Exception as exc:  # noqa: BLE001
                raise translate(exc, f"submitting {spec.name} to YARN queue {aspec.queue!r}",
                                log_path=os.path.join(staging, "driver.log")) from None
            write_token(app_id, token, yarn=True)  # the CLI's admin calls send it
            tracking = ""
            with contextlib.suppress(Exception):
                tracking = client.application_report(app_id).tracking_url
            print(f"submitted {spec.name} to YARN as {app_id} (queue {aspec.queue})", file=sys.stderr)
            print(f"  app path: {app_path}", file=sys.stderr)
            print(f"  tracking URL: {tracking or '(assigned when the master starts)'}", file=sys.stderr)
            print(app_id)
            sys.stdout.flush()
            if detach:
                return 0
            return follow(client, app_id, duration)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class YarnRun:
    """A YARN application as :func:`stram.client.follow.follow` watches it: YARN's application reports."""

    def __init__(self, client: Any, app_id: str) -> None:
        self.client = client
        self.app_id = app_id
        self.report: Any = None

    def poll(self) -> str | None:
        try:
            self.report = self.client.application_report(self.app_id)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"following {self.app_id}") from None
        return str(self.report.state) if str(self.report.state) in YARN_TERMINAL else None

    def progress(self, elapsed: float) -> str:
        state = str(self.report.state)
        line = f"[{elapsed:6.1f}s] {state} progress={self.report.progress:.0%}"
        if state == "RUNNING" and self.report.tracking_url:
            with contextlib.suppress(StramError):
                info = admin_request(self.app_id, self.client, "info", timeout=3.0)
                line += (f" operators={info.get('operators')} containers={info.get('containers')}"
                         f" committed={info.get('committed_window_hex')}" + pause_note(info) + stall_note(info))
        return line

    def can_shut_down(self) -> bool:
        return str(self.report.state) == "RUNNING"

    def shutdown(self) -> None:
        admin_request(self.app_id, self.client, "shutdown", "POST")

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.client.kill_application(self.app_id)

    def outcome(self) -> tuple[str, str]:
        final = str(self.report.final_status)
        if final == "UNDEFINED":
            final = str(self.report.state)
        diagnostics = (self.report.diagnostics or "").strip()
        return final, diagnostics if final != "SUCCEEDED" else ""


def follow(client: Any, app_id: str, duration: float | None = None,
           interval: float | None = None) -> int:
    """Show a YARN application's progress until it ends; Ctrl-C kills it.

    Parameters
    ----------
    client:
        A ``skein.Client`` (or anything with ``application_report`` and ``kill_application``).
    app_id:
        The YARN application id.
    duration:
        After this many seconds ask the master (through the YARN proxy) to shut
        the application down gracefully.
    interval:
        Seconds between reports (default :data:`FOLLOW_INTERVAL`).

    Returns
    -------
    int
        0 if the application SUCCEEDED, 130 after Ctrl-C, else 1.
    """
    return follow_run(YarnRun(client, app_id), duration,
                      interval=FOLLOW_INTERVAL if interval is None else interval, quiet_seconds=0.0)


def wait_for(client: Any, app_id: str, timeout: float | None = None, interval: float = 1.0) -> str:
    """Wait until a YARN application ended; its final status (SUCCEEDED, FAILED, KILLED).

    Raises
    ------
    StramError
        YARN does not know the application or cannot be asked, or it is still
        running after ``timeout`` seconds.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            report = client.application_report(app_id)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"asking YARN about {app_id}") from None
        if str(report.state) in YARN_TERMINAL:
            final = str(report.final_status)
            return str(report.state) if final == "UNDEFINED" else final
        if deadline is not None and time.monotonic() > deadline:
            raise StramError(f"{app_id} still {report.state} after {timeout:g}s")
        time.sleep(interval)


def direct_admin_url(app_id: str, client: Any) -> str | None:
    """The master's own admin URL (``http://node:port``), from the Skein web UI's page ``stram``.

    Asks the Skein application master over its gRPC address (``client.connect``);
    None when it cannot be reached or the page is not registered yet. With TLS on
    it is the HTTPS address instead (see :func:`direct_admin`).
    """
    return direct_admin(app_id, client)[0]


def direct_admin(app_id: str, client: Any) -> tuple[str | None, bytes | None]:
    """(the master's own admin URL, the certificate it presents or None).

    With TLS on the master publishes its HTTPS address and certificate in the
    application's key-value store (:data:`stram.client.adminhttp.ADMIN_KEY`), which
    only those Skein lets in can read; else the Skein page's plain target."""
    try:
        app = client.connect(app_id, wait=False)
    except Exception as exc:  # noqa: BLE001
        log.debug("no direct admin URL for %s: %s", app_id, exc)
        return None, None
    try:
        published = app.kv.get(ADMIN_KEY)
        if published:
            doc = json.loads(published)
            return str(doc["url"]), str(doc.get("cert") or "").encode() or None
    except Exception as exc:  # noqa: BLE001 - an older master publishes nothing: the page then
        log.debug("no published admin address for %s: %s", app_id, exc)
    try:
        page = app.ui.get_pages().get("stram")
    except Exception as exc:  # noqa: BLE001
        log.debug("no direct admin URL for %s: %s", app_id, exc)
        return None, None
    return getattr(page, "target", None), None


def admin_request(app_id: str, client: Any, path: str, method: str = "GET", body: dict | None = None,
                  timeout: float = 10.0) -> Any:
    """Call a YARN application's admin API (``/ws/v2/stram/<path>``); the parsed JSON answer.

    GET goes through the YARN web proxy (:func:`admin_url_for`). YARN's proxy
    forwards only GET and PUT, so POST and DELETE go to the master directly
    (:func:`direct_admin_url`), falling back to the proxy.

    Raises
    ------
    StramError
        The application is not running, or refused the call.
    ClusterUnreachable
        Neither route answered.
    """
    proxied = admin_url_for(app_id, client)
    token = read_token(app_id, yarn=True)  # the proxy does not forward it: GET through it needs none
    direct, cert = direct_admin(app_id, client) if method != "GET" else (None, None)
    routes = [proxied] if method == "GET" else [u for u in (direct, proxied) if u]
    problems = []
    for base in routes:
        try:
            return request_json(base, path, method, body, timeout=timeout, token=token,
                                ca=cert if base == direct else None)
        except AdminRequestError as exc:
            if exc.status == 405 and base == proxied:
                problems.append(f"{base}: the YARN web proxy does not forward {method}")
                continue
            raise StramError(f"{method} {path} on {app_id}: {exc.detail}") from None
        except ClusterUnreachable as exc:
            problems.append(str(exc))
    raise ClusterUnreachable(f"the master of {app_id} did not answer {method} {path} ("
                             + "; ".join(problems) + "); is the node reachable from here?")


def list_apps(client: Any = None, states: list[str] | None = None) -> list[dict[str, Any]]:
    """stram applications on the cluster (YARN tag ``stram``).

    Parameters
    ----------
    client:
        A ``skein.Client``; default: a new one through :func:`connect`.
    states:
        YARN application states to list (default: SUBMITTED, ACCEPTED, RUNNING).

    Returns
    -------
    list of dict
        One per application, newest first: ``id``, ``name``, ``state`` (the
        final status once finished, else the YARN state), ``yarn_state``,
        ``final_status``, ``user``, ``queue``, ``progress``, ``tracking_url``,
        ``started_millis``, ``finished_millis``, ``diagnostics``, ``tags``.
    """
    if client is None:
        with connect(*_kerberos()) as c:
            return list_apps(c, states)
    try:
        reports = client.get_applications(states=states) if states else client.get_applications()
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, "listing YARN applications") from None
    rows = []
    for r in reports:
        if STRAM_TAG not in set(r.tags or ()):
            continue
        yarn_state, final = str(r.state), str(r.final_status)
        rows.append({
            "id": r.id, "name": r.name,
            "state": final if yarn_state in YARN_TERMINAL and final != "UNDEFINED" else yarn_state,
            "yarn_state": yarn_state, "final_status": final, "user": r.user, "queue": r.queue,
            "progress": r.progress, "tracking_url": r.tracking_url,
            "started_millis": _millis(r.start_time), "finished_millis": _millis(r.finish_time),
            "diagnostics": r.diagnostics, "tags": sorted(r.tags or ())})
    rows.sort(key=lambda row: row["id"], reverse=True)
    return rows


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def kill_app(app_id: str, client: Any = None) -> None:
    """Kill a YARN application at once (YARN does not retry a killed application).

    Raises
    ------
    StramError
        YARN refused (unknown application, no permission) or cannot be reached.
    """
    if client is None:
        with connect(*_kerberos()) as c:
            return kill_app(app_id, c)
    try:
        client.kill_application(app_id)
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"killing {app_id}") from None
    return None


def admin_url_for(app_id: str, client: Any) -> str:
    """The base URL of a running master's admin API, behind the YARN web proxy.

    The master registers its admin server as the Skein web UI page ``stram``;
    the application's tracking URL leads to that UI, whose pages live under
    ``/pages/<route>``. Append ``/ws/v2/stram/...`` as for a local master.

    Raises
    ------
    StramError
        The application is not running (or YARN gives no tracking URL).
    """
    try:
        report = client.application_report(app_id)
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"asking YARN about {app_id}") from None
    state = str(report.state)
    if state != "RUNNING" or not report.tracking_url:
        final = str(report.final_status)
        raise StramError(f"application {app_id} is {final if state in YARN_TERMINAL else state}; "
                         f"its master is not running" + ("" if state in YARN_TERMINAL else
                                                         " yet (try again once it is RUNNING)"))
    url = report.tracking_url
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/") + "/pages/stram"
