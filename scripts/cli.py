"""The ``stram`` command line: launch applications and talk to running masters.

``main(args=None)`` is callable from tests. User mistakes print
``error: <what, where, how to fix>`` and exit 1 without a traceback; ``--json``
prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable

TERMINAL = ("SUCCEEDED", "FAILED", "KILLED")


class CLIError(Exception):
    """A user-facing error: printed as ``error: ...``, exit code 1."""


# ---------------------------------------------------------------- local apps

def stram_home() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("STRAM_HOME", "~/.stram")))


def apps_dir() -> str:
    return os.path.join(stram_home(), "apps")


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def local_apps() -> list[dict[str, Any]]:
    """Every local application under $STRAM_HOME/apps, newest first."""
    out = []
    if not os.path.isdir(apps_dir()):
        return out
    for app_id in sorted(os.listdir(apps_dir()), reverse=True):
        path = os.path.join(apps_dir(), app_id)
        status = _read_json(os.path.join(path, "status.json")) or {"id": app_id, "state": "STARTING"}
        admin = _read_json(os.path.join(path, "admin.json")) or {}
        pid = admin.get("pid") or status.get("pid")
        if status.get("state") not in TERMINAL and pid and not _pid_alive(pid):
            status["state"] = "FAILED"
            status["diagnostics"] = "the master process exited without a final state"
        status.setdefault("id", app_id)
        status["app_path"] = path
        status["admin_url"] = admin.get("url", "")
        out.append(status)
    return out


def find_app(ref: str) -> dict[str, Any]:
    """An application by id, unique id suffix/prefix, or name (newest wins)."""
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
        raise CLIError(f"'{ref}' matches {len(partial)} applications; give more of the id "
                       f"(see `stram list-apps`)")
    if _yarn_configured() and re.fullmatch(r"application_\d+_\d+", ref):
        return {"id": ref, "yarn": True, "state": "RUNNING", "admin_url": "yarn"}
    raise CLIError(f"no application '{ref}' under {apps_dir()}; see `stram list-apps`")


def _http(url: str, method: str = "GET", body: dict | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            detail = exc.reason
        raise CLIError(f"{detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CLIError(f"the application master at {url} does not answer ({exc}); "
                       f"is the application still running? (`stram list-apps`)") from None


def _yarn_configured() -> bool:
    return bool(os.environ.get("HADOOP_CONF_DIR"))


def admin(app: dict[str, Any], path: str, method: str = "GET", body: dict | None = None) -> Any:
    if app.get("yarn"):
        from appmaster import yarn
        with yarn.connect() as client:
            return yarn.admin_request(app["id"], client, path, method, body)
    deadline = time.monotonic() + 20
    while app.get("state") == "STARTING" and not app.get("admin_url") and time.monotonic() < deadline:
        time.sleep(0.2)  # the master is starting: its admin API comes up in a moment
        app = find_app(app["id"])
    if app.get("state") in TERMINAL or not app.get("admin_url"):
        raise CLIError(f"application {app['id']} is {app.get('state')}; its master is not running")
    return _http(app["admin_url"].rstrip("/") + "/ws/v2/stram/" + path, method, body)


def app_info(app: dict[str, Any]) -> dict[str, Any]:
    """Live info from the master, else the last status it wrote."""
    if app.get("state") not in TERMINAL and app.get("admin_url"):
        try:
            return admin(app, "info")
        except CLIError:
            pass
    return app


# ---------------------------------------------------------------- output

def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if value is None:
        return ""
    return str(value)


def _emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(human(data))


# ---------------------------------------------------------------- launch

def launch(args: argparse.Namespace) -> int:
    from appmaster.spec import AppSpec, SpecError
    # application modules resolve from the working directory, as they will in
    # the master and the containers (which run with it on PYTHONPATH)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        spec = AppSpec.from_file(args.spec, overrides=args.define or ())
    except SpecError as exc:
        raise CLIError(str(exc)) from None
    except FileNotFoundError:
        raise CLIError(f"{args.spec}: no such spec file") from None
    if args.yarn or args.dry_run:
        from appmaster import yarn
        if args.dry_run:
            if not args.yarn:
                raise CLIError("--dry-run prints the Skein ApplicationSpec for --yarn; use `launch --yarn --dry-run`")
            print(yarn.application_spec(spec, args.spec).to_yaml(), end="")
            return 0
        return yarn.submit(spec, args)
    app_id = f"application_{int(time.time() * 1000)}_{secrets.randbelow(10000):04d}"
    app_path = os.path.join(apps_dir(), app_id)
    os.makedirs(os.path.join(app_path, "logs"), exist_ok=True)
    with open(os.path.join(app_path, "spec.yaml"), "w") as f:
        f.write(spec.to_yaml())
    token = secrets.token_hex(16)
    env = dict(os.environ, STRAM_TOKEN=token, STRAM_HOST="127.0.0.1")
    here = os.getcwd()
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    def start_master() -> subprocess.Popen:
        with open(os.path.join(app_path, "logs", "master.out"), "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "appmaster", "--app-path", f"file://{app_path}", "--app-id", app_id],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=here)

    master = start_master()
    print(f"launched {spec.name} as {app_id}", file=sys.stderr)
    print(f"  app path: {app_path}", file=sys.stderr)
    if args.detach:
        print(app_id)
        return 0
    return follow(app_id, master, args.duration, restart=start_master)


#: Master attempts in a foreground local launch (YARN's default max_attempts is 2 as well).
MASTER_ATTEMPTS = 2


def follow(app_id: str, master: subprocess.Popen, duration: float | None,
           restart: Callable[[], subprocess.Popen] | None = None) -> int:
    """Show progress until the application ends; Ctrl-C kills it.

    A master that dies without a final state is started again (a new attempt
    resumes from its journal), up to MASTER_ATTEMPTS attempts in all.
    """
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    previous_term = signal.signal(signal.SIGTERM, lambda *_: interrupted.append(True))
    started = time.monotonic()
    shutdown_sent = False
    last_line = ""
    last_print = -10.0
    attempts = 1
    tty = sys.stderr.isatty()
    try:
        while True:
            if master.poll() is not None:
                written = _read_json(os.path.join(apps_dir(), app_id, "status.json")) or {}
                if written.get("state") in TERMINAL or restart is None or attempts >= MASTER_ATTEMPTS:
                    break
                attempts += 1
                print(f"\nthe application master exited ({master.returncode}) without a final state; "
                      f"starting attempt {attempts}", file=sys.stderr)
                master = restart()
            if interrupted:
                print("\ninterrupted: killing the application", file=sys.stderr)
                master.send_signal(signal.SIGTERM)
                try:
                    master.wait(30)
                except subprocess.TimeoutExpired:
                    master.kill()
                    master.wait()
                return 130
            elapsed = time.monotonic() - started
            if duration is not None and elapsed >= duration and not shutdown_sent:
                shutdown_sent = True
                print(f"\n--duration {duration:g}s reached: shutting the application down", file=sys.stderr)
                try:
                    admin(find_app(app_id), "shutdown", "POST", {})
                except CLIError:
                    pass
            due = tty or elapsed - last_print >= 5.0
            line = _progress_line(app_id, elapsed) if due else ""
            if line and line != last_line:
                last_print = elapsed
                print(("\r" + line.ljust(100)) if tty else line, end="" if tty else "\n",
                      file=sys.stderr, flush=True)
                last_line = line
            time.sleep(0.5)
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    app = find_app(app_id)
    state = app.get("state")
    print(("\n" if tty else "") + f"{app_id} {state}" +
          (f": {app.get('diagnostics')}" if app.get("diagnostics") else ""), file=sys.stderr)
    return 0 if state == "SUCCEEDED" else 1


def _progress_line(app_id: str, elapsed: float) -> str:
    try:
        app = find_app(app_id)
        if not app.get("admin_url"):
            return f"[{elapsed:6.1f}s] starting"
        info = admin(app, "info")
    except CLIError:
        return ""
    rates = info.get("throughput", {})
    busiest = sorted(rates.items(), key=lambda kv: -kv[1])[:3]
    rate = " ".join(f"{k}={v:,.0f}/s" for k, v in busiest)
    return (f"[{elapsed:6.1f}s] {info['state']} operators={info['operators']} "
            f"containers={info['containers']} committed={info['committed_window_hex']} {rate}")


# ---------------------------------------------------------------- other commands

def list_apps(args: argparse.Namespace) -> int:
    apps = local_apps()
    if _yarn_configured():
        from appmaster import yarn
        try:
            apps += [dict(a, app_path=a.get("app_path", ""), yarn=True) for a in yarn.list_apps()]
        except CLIError as exc:
            print(f"warning: YARN applications not listed: {exc}", file=sys.stderr)
    rows = [{"id": a["id"], "name": a.get("name", ""), "state": a.get("state"),
             "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["started_millis"] / 1000))
             if a.get("started_millis") else "", "app_path": a["app_path"]} for a in apps]
    _emit(rows, args.json, lambda r: _table(r, ["id", "name", "state", "started"]))
    return 0


def get_app_info(args: argparse.Namespace) -> int:
    info = app_info(find_app(args.app))

    def human(i: dict[str, Any]) -> str:
        lines = [f"{i.get('name')} ({i.get('id')}): {i.get('state')}"]
        if i.get("diagnostics"):
            lines.append(f"  diagnostics: {i['diagnostics']}")
        for key in ("committed_window_hex", "containers", "operators", "app_path"):
            if key in i:
                lines.append(f"  {key.replace('_hex', '')}: {i[key]}")
        for key in ("throughput", "recovery_checkpoints", "restarts", "shutdown_operators"):
            if i.get(key):
                lines.append(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in i[key].items()))
        if i.get("blocked"):
            lines.append(f"  blocked: {', '.join(i['blocked'])}")
        for e in i.get("errors", [])[-5:]:
            lines.append(f"  error [{e['container']} {e['operators']}]: {e['msg'].strip().splitlines()[-1]}")
        for r in i.get("removed", [])[-5:]:
            lines.append(f"  removed {r['label']}: {r['reason']}")
        return "\n".join(lines)
    _emit(info, args.json, human)
    return 0


def list_containers(args: argparse.Namespace) -> int:
    rows = admin(find_app(args.app), "containers")["containers"]
    _emit(rows, args.json, lambda r: _table(r, ["id", "state", "process", "buffer_server", "operators"]))
    return 0


def list_operators(args: argparse.Namespace) -> int:
    rows = admin(find_app(args.app), "operators")["operators"]
    _emit(rows, args.json, lambda r: _table(
        r, ["id", "label", "kind", "state", "container", "tuples_per_sec", "restarts"]))
    return 0


def kill_container(args: argparse.Namespace) -> int:
    admin(find_app(args.app), f"containers/{args.container}", "DELETE")
    print(f"killed {args.container}")
    return 0


def shutdown_app(args: argparse.Namespace) -> int:
    app = find_app(args.app)
    admin(app, "shutdown", "POST", {})
    print(f"shutdown requested for {app['id']}")
    return 0


def kill_app(args: argparse.Namespace) -> int:
    app = find_app(args.app)
    if app.get("yarn"):
        from appmaster import yarn
        yarn.kill_app(app["id"])
        print(f"{app['id']} KILLED")
        return 0
    admin(app, "kill", "POST", {})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and find_app(app["id"]).get("state") not in TERMINAL:
        time.sleep(0.2)
    print(f"{app['id']} {find_app(app['id']).get('state')}")
    return 0


def wait(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout if args.timeout else None
    while True:
        app = find_app(args.app)
        if app.get("yarn"):
            return _wait_yarn(app["id"], args.timeout, deadline)
        if app.get("state") in TERMINAL:
            print(f"{app['id']} {app['state']}")
            return 0 if app["state"] == "SUCCEEDED" else 1
        if deadline is not None and time.monotonic() > deadline:
            raise CLIError(f"{app['id']} still {app.get('state')} after {args.timeout:g}s")
        time.sleep(0.3)


def _wait_yarn(app_id: str, timeout: float | None, deadline: float | None) -> int:
    """``wait`` for a YARN application: YARN's application report says when it ended and how."""
    from appmaster import yarn
    with yarn.connect() as client:
        while True:
            try:
                report = client.application_report(app_id)
            except Exception as exc:  # noqa: BLE001 - unknown application, RM gone: one clear line
                detail = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                raise CLIError(f"asking YARN about {app_id}: {detail}") from None
            if str(report.state) in ("FINISHED", "FAILED", "KILLED"):
                final = str(report.final_status)
                final = str(report.state) if final == "UNDEFINED" else final
                print(f"{app_id} {final}")
                return 0 if final == "SUCCEEDED" else 1
            if deadline is not None and time.monotonic() > deadline:
                raise CLIError(f"{app_id} still {report.state} after {timeout:g}s")
            time.sleep(1.0)


def scale(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise CLIError(f"partition count must be at least 1, got {args.count}")
    result = admin(find_app(args.app), f"operators/{args.operator}/partitions", "POST", {"count": args.count})
    print(json.dumps(result))
    return 0


# ---------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stram", description="Streaming applications on Hadoop YARN, in Python.",
        epilog=f"Local applications live under $STRAM_HOME/apps (now: {apps_dir()}).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("launch", help="launch an application from a spec",
                       description="Validate SPEC and start its application master.")
    p.add_argument("spec", metavar="SPEC", help="application spec (YAML)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run as local processes (default)")
    where.add_argument("--yarn", action="store_true", help="submit to YARN through Skein")
    p.add_argument("-D", dest="define", action="append", metavar="NAME=VALUE",
                   help="set a DAG attribute (NAME=VALUE) or an operator property "
                        "(operators.OP.PROPERTY=VALUE); repeatable")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="shut the application down gracefully after SECONDS")
    p.add_argument("--detach", action="store_true", help="print the application id and return")
    p.add_argument("--dry-run", action="store_true", help="with --yarn: print the Skein ApplicationSpec")
    p.set_defaults(func=launch)

    p = sub.add_parser("list-apps", help="list applications")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=list_apps)

    for name, func, helptext in (("get-app-info", get_app_info, "state, committed window, containers, "
                                  "operators, throughput"),
                                 ("list-containers", list_containers, "containers of an application"),
                                 ("list-operators", list_operators, "operators of an application")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("app", metavar="APP", help="application id (or a unique part of it, or its name)")
        p.add_argument("--json", action="store_true", help="one JSON document on stdout")
        p.set_defaults(func=func)

    p = sub.add_parser("kill-container", help="kill a container (the master recovers it)")
    p.add_argument("app", metavar="APP")
    p.add_argument("container", metavar="CONTAINER")
    p.set_defaults(func=kill_container)

    p = sub.add_parser("shutdown-app", help="graceful: end the streams, finish, SUCCEEDED")
    p.add_argument("app", metavar="APP")
    p.set_defaults(func=shutdown_app)

    p = sub.add_parser("kill-app", help="immediate: stop everything, KILLED")
    p.add_argument("app", metavar="APP")
    p.set_defaults(func=kill_app)

    p = sub.add_parser("wait", help="wait for an application to end; exit 0 when it SUCCEEDED")
    p.add_argument("app", metavar="APP")
    p.add_argument("--timeout", type=float, metavar="SECONDS")
    p.set_defaults(func=wait)

    p = sub.add_parser("scale", help="change an operator's partition count while it runs")
    p.add_argument("app", metavar="APP")
    p.add_argument("operator", metavar="OPERATOR")
    p.add_argument("count", metavar="N", type=int)
    p.set_defaults(func=scale)
    return parser


def main(args: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(args)
    try:
        return ns.func(ns)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # run as `python -m scripts.cli`: use the importable module so that its
    # CLIError is the one other modules (appmaster.yarn) raise
    from scripts.cli import main as _main
    sys.exit(_main())
