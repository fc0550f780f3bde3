"""What ``stram launch`` reads (a YAML spec or a Python app file), and talking to a running application.

:func:`load_spec` gives the validated spec of either kind of file (an app
file's :class:`~stram.flow.Flow` compiled, ``-D`` overrides applied the same
way); :func:`logical_dag` and :func:`format_dag` are what ``launch
--print-dag`` prints.

:func:`admin` routes an admin API call to a local master (its URL in
``admin.json``) or through YARN (the ResourceManager's web proxy, see
:mod:`stram.client.yarn.client`). :class:`LocalRun` is what
:func:`stram.client.follow.follow` watches for a local ``stram launch``: the
application's supervisor (:mod:`stram.master.process.supervise`), the one process that
starts master attempts (a new attempt resumes from the journal) for a
detached launch and a followed one alike.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any, Iterable

from stram.client.adminhttp import request_json
from stram.client.follow import pause_note, stall_note
from stram.common.apps import TERMINAL, find_app, pinned_tls, read_certificate, read_token
from stram.common.errors import ClusterUnreachable, StramError, UserError

__all__ = ["admin", "app_info", "failure_note", "LocalRun", "load_spec", "is_app_file", "logical_dag", "format_dag",
           "app_directory"]

#: Seconds a call waits for a starting master's admin API to come up.
STARTING_WAIT = 20.0


def is_app_file(path: str) -> bool:
    """Whether ``path`` is a Python app file (``.py``) rather than a YAML spec."""
    return path.endswith(".py")


def load_spec(path: str, overrides: Iterable[str] = ()) -> Any:
    """The validated :class:`~stram.master.spec.AppSpec` of a YAML spec or of the Flow a ``.py`` app file
    defines, with the ``-D`` ``overrides`` applied.

    Raises
    ------
    UserError
        No such file; the app file fails or defines no single Flow; the spec is invalid.
    """
    from stram.master.spec import AppSpec
    if is_app_file(path):
        from stram.flow import load_flow
        return load_flow(path).compile(overrides, source=path)
    try:
        return AppSpec.from_file(path, overrides=overrides)
    except FileNotFoundError:
        raise UserError(f"{path}: no such spec file") from None


def logical_dag(spec: Any) -> dict[str, Any]:
    """The logical DAG of a spec as JSON data: operators (class, partitions) and streams (source, sinks,
    locality), in the spec's order."""
    return {
        "name": spec.name,
        "operators": [{"name": name, "class": op.class_name, "partitions": op.partitions}
                      for name, op in spec.operators.items()],
        "streams": [{"name": name, "from": str(s.source), "to": [str(t) for t in s.sinks], "locality": s.locality}
                    for name, s in spec.streams.items()],
    }


def format_dag(dag: dict[str, Any]) -> str:
    """:func:`logical_dag` as text: one line per operator, then one per stream."""
    ops, streams = dag["operators"], dag["streams"]
    lines = [f"{dag['name']}: {len(ops)} operator{'s' * (len(ops) != 1)}, "
             f"{len(streams)} stream{'s' * (len(streams) != 1)}", "operators:"]
    width, cls = max(len(o["name"]) for o in ops), max(len(o["class"]) for o in ops)
    lines += [f"  {o['name']:<{width}}  {o['class']:<{cls}}  partitions={o['partitions']}" for o in ops]
    if streams:
        lines.append("streams:")
        width = max(len(s["name"]) for s in streams)
        lines += [f"  {s['name']:<{width}}  {s['from']} -> {', '.join(s['to'])}"
                  + (f"  [{s['locality']}]" if s["locality"] else "") for s in streams]
    return "\n".join(lines)


def app_directory(path: str) -> str | None:
    """The directory of an app file (its neighbours are importable), None for a YAML spec."""
    return os.path.dirname(os.path.abspath(path)) if is_app_file(path) else None


def admin(app: dict[str, Any], path: str, method: str = "GET", body: dict | None = None,
          timeout: float = 10.0) -> Any:
    """Call ``app``'s admin API (``/ws/v2/stram/<path>``); the parsed JSON answer
    (``timeout``: seconds to wait for it).

    Raises
    ------
    StramError
        The master is not running, does not answer, or refused the call.
    """
    if app.get("yarn"):
        from stram.client import yarn
        with yarn.connect() as client:
            return yarn.admin_request(app["id"], client, path, method, body, timeout=timeout)
    deadline = time.monotonic() + STARTING_WAIT
    while app.get("state") == "STARTING" and not app.get("admin_url") and time.monotonic() < deadline:
        time.sleep(0.2)  # the master is starting: its admin API comes up in a moment
        app = find_app(app["id"])
    if app.get("state") in TERMINAL or not app.get("admin_url"):
        raise StramError(f"application {app['id']} is {app.get('state')}; its master is not running")
    if pinned_tls(app["id"]) and not app["admin_url"].startswith("https://"):
        raise StramError(f"application {app['id']} was launched with TLS, but its admin.json names "
                         f"{app['admin_url']}: refusing to send its token without TLS (was admin.json changed?)")
    try:
        return request_json(app["admin_url"], path, method, body, timeout=timeout, token=read_token(app["id"]),
                            ca=read_certificate(app))
    except ClusterUnreachable as exc:
        raise ClusterUnreachable(f"the application master at {exc} does not answer; "
                                 f"is the application still running? (`stram list-apps`)") from None


def app_info(app: dict[str, Any]) -> dict[str, Any]:
    """Live info from the master, else the last status it wrote (saying so in ``stale``)."""
    if app.get("state") not in TERMINAL and app.get("admin_url"):
        try:
            return admin(app, "info")
        except StramError as exc:
            return dict(app, stale=f"the master did not answer ({exc}); this is the last status.json it wrote")
    return app


def failure_note(info: dict[str, Any]) -> str:
    """The newest operator failure, for a progress line: ``" | reader failed (2x): <exception line>"``."""
    failures = info.get("failures") or {}
    if not failures:
        return ""
    label, last = list(failures.items())[-1]
    count = f" ({last['count']}x)" if last.get("count", 1) > 1 else ""
    return f" | {label} failed{count}: {last.get('error', '')}"


class LocalRun:
    """A local application followed by ``stram launch``: its supervisor process
    (:mod:`stram.master.process.supervise`), which starts master attempts until the application ends.

    Parameters
    ----------
    app_id:
        The application id.
    supervisor:
        The supervisor's process.
    """

    def __init__(self, app_id: str, supervisor: subprocess.Popen) -> None:
        self.app_id = app_id
        self.supervisor = supervisor

    def poll(self) -> str | None:
        if self.supervisor.poll() is None:
            return None
        return find_app(self.app_id).get("state")

    def wait_end(self, seconds: float) -> None:
        """Wait up to ``seconds``, returning as soon as the supervisor (the application) ended."""
        try:
            self.supervisor.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    def progress(self, elapsed: float) -> str:
        try:
            app = find_app(self.app_id)
            if not app.get("admin_url"):
                return f"[{elapsed:6.1f}s] starting"
            info = admin(app, "info")
        except StramError:
            return ""
        rates = info.get("throughput", {})
        busiest = sorted(rates.items(), key=lambda kv: -kv[1])[:3]
        rate = " ".join(f"{k}={v:,.0f}/s" for k, v in busiest)
        return (f"[{elapsed:6.1f}s] {info['state']} operators={info['operators']} "
                f"containers={info['containers']} committed={info['committed_window_hex']} {rate}"
                + pause_note(info) + failure_note(info) + stall_note(info))

    def can_shut_down(self) -> bool:
        return True

    def shutdown(self) -> None:
        try:
            admin(find_app(self.app_id), "shutdown", "POST", {})
        except StramError:
            pass  # not up yet or already ending: the run ends on its own or by Ctrl-C

    def kill(self) -> None:
        self.supervisor.terminate()  # passed on to the master, which kills the application
        try:
            self.supervisor.wait(30)
        except subprocess.TimeoutExpired:
            self.supervisor.kill()
            self.supervisor.wait()

    def outcome(self) -> tuple[str, str]:
        app = find_app(self.app_id)
        return app.get("state"), app.get("diagnostics") or ""
