"""Where applications are found: the local registry under ``$STRAM_HOME`` and YARN application ids.

A local application is a directory ``$STRAM_HOME/apps/<appId>/`` (its
``APP_PATH``) holding ``status.json`` (written by the master),
``admin.json`` (the master's admin URL and pid while it runs) and
``supervisor.json`` (the process that starts its master attempts,
:mod:`stram.master.process.supervise`). An application whose supervisor and master are
both gone is FAILED, whatever its last ``status.json`` said. An application
is described to the rest of stram as a plain dict: ``id``, ``state``,
``app_path``, ``admin_url``, and ``yarn: True`` for a YARN application.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from stram.common import apppath
from stram.common.errors import UserError

__all__ = ["TERMINAL", "stram_home", "apps_dir", "local_apps", "find_app", "read_json", "process_alive",
           "yarn_configured", "token_path", "write_token", "read_token", "read_certificate", "write_pin",
           "pinned_tls"]

#: The states an application never leaves.
TERMINAL = ("SUCCEEDED", "FAILED", "KILLED")


def stram_home() -> str:
    """``$STRAM_HOME`` (default ``~/.stram``), absolute."""
    return os.path.abspath(os.path.expanduser(os.environ.get("STRAM_HOME", "~/.stram")))


def apps_dir() -> str:
    """The directory of local applications: ``$STRAM_HOME/apps``."""
    return os.path.join(stram_home(), "apps")


def token_path(app_id: str, yarn: bool = False) -> str:
    """Where the machine that launched ``app_id`` keeps its secret: ``$STRAM_HOME/secrets/<appId>/token``
    for a local application (not in its APP_PATH, which every container is told), or
    ``$STRAM_HOME/yarn/<appId>/token``."""
    return os.path.join(stram_home(), "yarn" if yarn else "secrets", app_id, apppath.TOKEN)


#: The file beside a local application's token that pins how its admin API is reached.
_PIN = "admin-pin.json"


def write_pin(app_id: str, tls: bool) -> None:
    """Record, at launch, whether ``app_id``'s admin API serves TLS: the CLI never sends the
    token over ``http://`` to an application launched with TLS, whatever ``admin.json`` says."""
    path = os.path.join(os.path.dirname(token_path(app_id)), _PIN)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"tls": bool(tls)}, f)


def pinned_tls(app_id: str) -> bool | None:
    """Whether ``app_id`` was launched with TLS (None: launched before pins, or elsewhere)."""
    doc = read_json(os.path.join(os.path.dirname(token_path(app_id)), _PIN))
    return None if doc is None else bool(doc.get("tls"))


def write_token(app_id: str, token: str, yarn: bool = False) -> str:
    """Keep ``token`` where :func:`read_token` finds it, readable by its owner only; the path.
    The directory is created ``0700`` if missing; the file is created ``0600`` before any
    byte is written, so no one else ever sees it."""
    path = token_path(app_id, yarn)
    os.makedirs(os.path.dirname(os.path.dirname(path)), mode=0o700, exist_ok=True)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(token)
    return path


def read_token(app_id: str, yarn: bool = False) -> str | None:
    """The secret :func:`write_token` kept for ``app_id``; None when this machine has none."""
    try:
        with open(token_path(app_id, yarn)) as f:
            return f.read().strip() or None
    except OSError:
        return None


def read_certificate(app: dict[str, Any]) -> bytes | None:
    """A local application's TLS certificate (``APP_PATH/tls/cert.pem``), which its HTTPS admin
    API presents; None when TLS is off."""
    try:
        with open(os.path.join(app.get("app_path", ""), "tls", "cert.pem"), "rb") as f:
            return f.read()
    except OSError:
        return None


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON document in a local file; None when missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def process_alive(doc: dict[str, Any] | None) -> bool | None:
    """Whether the process a ``{"pid", "started"}`` document names still runs (one that is
    exiting, a zombie, or another process that reuses the pid, does not); None when the
    document names none."""
    if not doc or not doc.get("pid"):
        return None
    import psutil

    from stram.common import liveness
    try:
        proc = psutil.Process(int(doc["pid"]))
        if liveness.ended(proc):
            return False
        started = doc.get("started")
        return not started or abs(proc.create_time() - float(started)) < 0.05
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # there, but not ours to inspect


def _master_gone(path: str, status: dict[str, Any], admin: dict[str, Any]) -> bool:
    """True when nothing runs the application any more: its supervisor (which starts new
    master attempts, :mod:`stram.master.process.supervise`) and its master have both exited."""
    supervisor = process_alive(read_json(os.path.join(path, apppath.SUPERVISOR)))
    master = process_alive(admin or ({"pid": status["pid"]} if status.get("pid") else None))
    if supervisor is None and master is None:
        return False  # starting: nothing written yet
    return not supervisor and not master


def _persist(path: str, status: dict[str, Any]) -> None:
    """Write the final state found for an application nobody runs any more, so that its
    ``status.json`` stops saying RUNNING (nothing else is left to write it); best effort."""
    from stram.common import fs
    try:
        fs.write_status_file(os.path.join(path, apppath.STATUS), json.dumps(status).encode(), local=True)
    except OSError:
        pass


def local_apps() -> list[dict[str, Any]]:
    """Every local application under $STRAM_HOME/apps, newest first."""
    out: list[dict[str, Any]] = []
    if not os.path.isdir(apps_dir()):
        return out
    for app_id in sorted(os.listdir(apps_dir()), reverse=True):
        path = os.path.join(apps_dir(), app_id)
        status = read_json(os.path.join(path, apppath.STATUS)) or {"id": app_id, "state": "STARTING"}
        admin = read_json(os.path.join(path, apppath.ADMIN)) or {}
        if status.get("state") not in TERMINAL and _master_gone(path, status, admin):
            status["state"] = "FAILED"
            last = status.get("diagnostics")
            status["diagnostics"] = ("the master process and its supervisor exited without a final state"
                                     + (f" (last said: {last})" if last else ""))
            _persist(path, status)
        status.setdefault("id", app_id)
        status["app_path"] = path
        status_url = status.get("admin_url", "")
        status["admin_url"] = admin.get("url", "")
        if status_url and status_url != status["admin_url"] and status.get("state") not in TERMINAL \
                and not process_alive(admin) and process_alive({"pid": status.get("pid")}):
            status["admin_url"] = status_url  # a new master attempt that cannot write admin.json yet
        out.append(status)
    return out


def yarn_configured() -> bool:
    """True when a Hadoop configuration is named (then YARN application ids are looked up too)."""
    return bool(os.environ.get("HADOOP_CONF_DIR"))


def find_app(ref: str) -> dict[str, Any]:
    """An application by id, unique id suffix/prefix, or name (newest wins).

    Raises
    ------
    UserError
        No application, or more than one, matches ``ref``.
    """
    apps = local_apps()
    exact = [a for a in apps if a["id"] == ref]
    if exact:
        return exact[0]
    partial = [a for a in apps if ref in a["id"]]
    if len(partial) == 1:
        return partial[0]
    named = [a for a in apps if a.get("name") == ref]
    if named:
        return named[0]
    if len(partial) > 1:
        raise UserError(f"'{ref}' matches {len(partial)} applications; give more of the id "
                        f"(see `stram list-apps`)")
    if yarn_configured() and re.fullmatch(r"application_\d+_\d+", ref):
        return {"id": ref, "yarn": True, "state": "RUNNING", "admin_url": "yarn"}
    raise UserError(f"no application '{ref}' under {apps_dir()}; see `stram list-apps`")
