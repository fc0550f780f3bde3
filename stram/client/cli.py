"""The ``stram`` command line: launch applications and talk to running masters.

``main(args=None)`` is callable from tests. User mistakes print
``error: <what, where, how to fix>`` and exit 1 without a traceback; ``--json``
prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import sys
import time
from typing import Any, Callable

from stram.client.commands import LocalRun, admin, app_directory, app_info, format_dag, load_spec, logical_dag
from stram.client.follow import follow
from stram.common import apppath, fs
from stram.common.apps import TERMINAL, apps_dir, find_app, local_apps, write_pin, write_token, yarn_configured
from stram.common.errors import StramError, UserError

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

#: What ``launch --yarn --dry-run`` puts in the token file instead of a secret.
DRY_RUN_TOKEN = "<placeholder: a new token is made at submission>"

def launch(args: argparse.Namespace) -> int:
    # application modules resolve from the working directory, as they will in
    # the master and the containers (which run with it on PYTHONPATH)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if args.json and not args.print_dag:
        raise UserError("--json goes with --print-dag (`stram launch --print-dag --json SPEC`)")
    if args.print_dag and (args.yarn or args.dry_run or args.detach or args.duration is not None):
        raise UserError("--print-dag prints the DAG and launches nothing; leave out --yarn, --dry-run, "
                        "--detach and --duration")
    # a YAML spec, or the Flow of a Python app file compiled: the same AppSpec from here on
    spec = load_spec(args.spec, args.define or ())
    if args.print_dag:
        _emit(logical_dag(spec), args.json, format_dag)
        return 0
    if args.yarn or args.dry_run:
        from stram.client import yarn
        if args.dry_run:
            if not args.yarn:
                raise UserError("--dry-run prints the Skein ApplicationSpec for --yarn; use `launch --yarn --dry-run`")
            # no secret is made or shown: the token file holds a placeholder
            print(yarn.application_spec(spec, args.spec, token=DRY_RUN_TOKEN).to_yaml(), end="")
            return 0
        return yarn.submit(spec, spec_path=args.spec, detach=args.detach, duration=args.duration)
    app_id = f"application_{int(time.time() * 1000)}_{secrets.randbelow(10000):04d}"
    app_path = os.path.join(apps_dir(), app_id)
    os.makedirs(apps_dir(), exist_ok=True)
    os.mkdir(app_path, 0o700)  # private: its checkpoints and journal are pickles
    os.chmod(app_path, 0o700)
    os.mkdir(os.path.join(app_path, apppath.LOGS), 0o700)
    fs.keep_private(app_path)
    fd = os.open(os.path.join(app_path, apppath.SPEC), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(spec.to_yaml())
    token = secrets.token_hex(16)
    tls = spec.attribute("TLS")
    # the master and containers read the token from this 0600 file, never from their environment
    env = dict(os.environ, STRAM_TOKEN_FILE=write_token(app_id, token), STRAM_HOST="127.0.0.1")
    write_pin(app_id, bool(tls))  # the local launcher's default is no TLS
    env.pop("STRAM_TOKEN", None)
    here = os.getcwd()
    # an app file's neighbours (modules of operator classes it names) import in the master and containers too
    paths = [here] + [d for d in [app_directory(args.spec)] if d and d != here]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    from stram.master.process import supervise
    supervisor = supervise.start(app_id, app_path, env, here, int(spec.attribute("MASTER_ATTEMPTS")),
                                 detach=args.detach)
    print(f"launched {spec.name} as {app_id}", file=sys.stderr)
    print(f"  app path: {app_path}", file=sys.stderr)
    if args.detach:
        print(app_id)
        return 0
    return follow(LocalRun(app_id, supervisor), args.duration)


# ---------------------------------------------------------------- other commands

def list_apps(args: argparse.Namespace) -> int:
    apps = local_apps()
    if yarn_configured():
        from stram.client import yarn
        try:
            apps += [dict(a, app_path=a.get("app_path", ""), yarn=True) for a in yarn.list_apps()]
        except StramError as exc:
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
        if i.get("stale"):
            lines.append(f"  note: {i['stale']}")
        if i.get("diagnostics"):
            lines.append(f"  diagnostics: {i['diagnostics']}")
        for key in ("committed_window_hex", "containers", "operators", "app_path"):
            if key in i:
                lines.append(f"  {key.replace('_hex', '')}: {i[key]}")
        for key in ("throughput", "recovery_checkpoints", "restarts", "shutdown_operators"):
            if i.get(key):
                lines.append(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in i[key].items()))
        for label, f in (i.get("failures") or {}).items():
            lines.append(f"  failed {label} ({f.get('count')}x, last after window {f.get('window')}): "
                         f"{f.get('error')}")
        if i.get("blocked"):
            lines.append(f"  blocked: {', '.join(i['blocked'])}")
        for b in i.get("blacklistedNodes") or []:
            lines.append(f"  blacklisted node {b['host']}: {b['failures']} container failures, until "
                         f"{utc_time(b['until'])}")
        if i.get("stalled"):
            lines.append(f"  stalled: {i['stalled']}")
        for e in i.get("errors", [])[-5:]:
            lines.append(f"  error [{e['container']} {e['operators']}]: {e['msg'].strip().splitlines()[-1]}")
        for r in i.get("removed", [])[-5:]:
            lines.append(f"  removed {r['label']}: {r['reason']}")
        return "\n".join(lines)
    _emit(info, args.json, human)
    return 0


def utc_time(millis: Any) -> str:
    """Wall-clock millis as ``YYYY-MM-DD HH:MM:SS UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(millis) / 1000))


def list_containers(args: argparse.Namespace) -> int:
    rows = admin(find_app(args.app), "containers")["containers"]
    _emit(rows, args.json, lambda r: _table(r, ["id", "state", "process", "buffer_server", "operators"]))
    return 0


def watermark_text(watermark: Any, lag: Any) -> tuple[str, str]:
    """An operators page row's watermark for people: (its UTC time, its lag in seconds);
    "idle"/"end" as they are, "" for none."""
    if watermark is None or isinstance(watermark, str):
        return watermark or "", ""
    try:
        when = datetime.datetime.fromtimestamp(watermark / 1000, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond the calendar: the milliseconds
        return str(watermark), "" if lag is None else f"{lag / 1000:.1f}s"
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z", \
        "" if lag is None else f"{lag / 1000:.1f}s"


def list_operators(args: argparse.Namespace) -> int:
    rows = admin(find_app(args.app), "operators")["operators"]

    def human(rows: list[dict[str, Any]]) -> str:
        shown = []
        for r in rows:
            when, lag = watermark_text(r.get("watermark"), r.get("watermark_lag_millis"))
            shown.append({**r, "watermark": when, "watermark_lag": lag})
        return _table(shown, ["id", "label", "kind", "state", "container", "tuples_per_sec", "watermark",
                              "watermark_lag", "restarts"])
    _emit(rows, args.json, human)
    return 0


def kill_container(args: argparse.Namespace) -> int:
    admin(find_app(args.app), f"containers/{args.container}", "DELETE")
    print(f"killed {args.container}")
    return 0


def stack(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from stram.common.stacks import format_thread
    if not 0 < args.timeout <= 60:
        raise UserError(f"--timeout must be more than 0 and at most 60 seconds, got {args.timeout:g}")
    app = find_app(args.app)
    try:
        trace = admin(app, f"containers/{quote(args.container, safe='')}/stackTrace?timeout={args.timeout:g}",
                      timeout=args.timeout + 10)
    except StramError as exc:
        raise StramError(f"no stack trace of {args.container} in {app['id']}: {exc}"
                         + ("; see `stram list-containers`" if "unknown container" in str(exc) else "")) from None

    def human(t: dict[str, Any]) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(t["millis"] / 1000))
        head = f"{len(t['threads'])} threads in {t['container']} at {when}"
        return "\n\n".join([head] + [format_thread(th) for th in t["threads"]])
    _emit(trace, args.json, human)
    return 0


def shutdown_app(args: argparse.Namespace) -> int:
    app = find_app(args.app)
    admin(app, "shutdown", "POST", {})
    print(f"shutdown requested for {app['id']}")
    return 0


def kill_app(args: argparse.Namespace) -> int:
    app = find_app(args.app)
    if app.get("yarn"):
        from stram.client import yarn
        yarn.kill_app(app["id"])
        print(f"{app['id']} KILLED")
        return 0
    try:
        admin(app, "kill", "POST", {})
    except StramError as exc:  # the master is down (crashing, between attempts) or does not answer
        if app.get("state") in TERMINAL:
            raise
        from stram.master.process import supervise
        print(f"the master does not answer ({exc}); {supervise.kill_without_master(app['id'], app['app_path'])}",
              file=sys.stderr)
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
            from stram.client import yarn
            with yarn.connect() as client:
                final = yarn.wait_for(client, app["id"], args.timeout)
            print(f"{app['id']} {final}")
            return 0 if final == "SUCCEEDED" else 1
        if app.get("state") in TERMINAL:
            print(f"{app['id']} {app['state']}")
            return 0 if app["state"] == "SUCCEEDED" else 1
        if deadline is not None and time.monotonic() > deadline:
            raise StramError(f"{app['id']} still {app.get('state')} after {args.timeout:g}s")
        time.sleep(0.3)


def scale(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UserError(f"partition count must be at least 1, got {args.count}")
    result = admin(find_app(args.app), f"operators/{args.operator}/partitions", "POST", {"count": args.count})
    print(json.dumps(result))
    return 0


def logs(args: argparse.Namespace) -> int:
    from stram.common import logs as applogs
    if args.tail is not None and args.tail < 0:
        raise UserError(f"--tail takes a count of lines >= 0, got {args.tail}")
    app = find_app(args.app)
    if app.get("yarn"):
        if args.follow:
            raise UserError("--follow is for local applications; a YARN application's running "
                            "containers' logs are on the NodeManager's pages behind the tracking URL")
        files = applogs.yarn_logs(app["id"], args.container, args.all or args.list)
    else:
        files = applogs.pick(applogs.local_logs(app["app_path"]), args.container, args.all or args.list)
    if args.list:
        print(_table([{"log": f.name, "where": f.where, "bytes": f.size} for f in files],
                     ["log", "where", "bytes"]))
        return 0
    sys.stdout.write(applogs.render(files, args.tail))
    sys.stdout.flush()
    if args.follow:
        paths = [os.path.join(f.where, f.name) for f in files if not f.name[-1].isdigit()]
        try:
            for chunk in applogs.follow_files(paths, running=lambda: find_app(app["id"]).get("state")
                                              not in TERMINAL):
                sys.stdout.write(chunk)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0


def driver(args: argparse.Namespace) -> int:
    from stram.client.yarn import holder, standing
    if args.action == "start":
        principal = args.principal or os.environ.get("STRAM_YARN_PRINCIPAL") or None
        keytab = args.keytab or os.environ.get("STRAM_YARN_KEYTAB") or None
        record = holder.start(principal, keytab)
        print(f"standing driver at {record['address']} (pid {record['pid']}) for "
              f"{record['key']['conf_dir']}; stop it with `stram driver stop`")
    elif args.action == "stop":
        record = holder.stop()
        print(f"stopped the standing driver (pid {record['pid']})" if record else "no standing driver runs")
    else:
        record = standing.running()
        if args.json:
            print(json.dumps(record, indent=2))
        elif record is None:
            print("no standing driver runs: each command on YARN starts a driver of its own")
        else:
            key = record["key"]
            login = key["principal"] or "none given (on a secure cluster: the ticket cache)"
            print(f"standing driver at {record['address']} (pid {record['pid']}), up "
                  f"{time.time() - record['started']:.0f}s\n  HADOOP_CONF_DIR {key['conf_dir']}\n"
                  f"  principal {login}\n  logs in {standing.driver_dir()}")
        return 0 if record is not None else 3
    return 0


# ---------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stram", description="Streaming applications on Hadoop YARN, in Python.",
        epilog=f"Local applications live under $STRAM_HOME/apps (now: {apps_dir()}).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("launch", help="launch an application from a spec or a Python app file",
                       description="Validate SPEC and start its application master. SPEC is a YAML spec or a "
                                   "Python app file (.py) that defines one module-level stram.flow.Flow: the file "
                                   "runs, its Flow compiles to the same spec (functions pickled by value) and "
                                   "launches the same way.")
    p.add_argument("spec", metavar="SPEC", help="application spec (YAML) or app file (.py)")
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
    p.add_argument("--print-dag", action="store_true",
                   help="print the logical DAG (operators with class and partitions, streams with source, "
                        "sinks and locality) and launch nothing")
    p.add_argument("--json", action="store_true", help="with --print-dag: one JSON document on stdout")
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

    p = sub.add_parser("stack", help="every thread's Python stack in a container",
                       description="Ask a running container for every thread's Python stack (through "
                                   "the master, in its next heartbeat) and print it, most recent call last.")
    p.add_argument("app", metavar="APP")
    p.add_argument("container", metavar="CONTAINER", help="container id (see `stram list-containers`)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long to wait for the container's answer (default 10, at most 60)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=stack)

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

    p = sub.add_parser("logs", help="print the master's or a container's log",
                       description="Print an application's logs: the master's (every attempt's), or "
                                   "CONTAINER's. Local applications keep them under their app dir's "
                                   "logs/; YARN applications in the YARN container log directories "
                                   "(read with Hadoop's `yarn logs`).")
    p.add_argument("app", metavar="APP")
    p.add_argument("container", metavar="CONTAINER", nargs="?",
                   help="a container id (see `stram list-containers`); default: the master")
    p.add_argument("-n", "--tail", type=int, metavar="N", help="only the last N lines (of each log)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="local applications: keep printing what is appended until the application ends")
    p.add_argument("--all", action="store_true", help="every log of the application, each with a header")
    p.add_argument("--list", action="store_true", help="list the application's logs and their sizes")
    p.set_defaults(func=logs)

    p = sub.add_parser("driver", help="start, stop or show the standing YARN driver",
                       description="Every command on YARN talks to the ResourceManager through skein's Java "
                                   "driver, which takes seconds to start. `stram driver start` starts one that "
                                   "stays, and the commands use it while it runs, as long as HADOOP_CONF_DIR, "
                                   "the Kerberos login and SKEIN_CONFIG are the ones it was started with. "
                                   "`status` exits 3 when none runs. It lives under $STRAM_HOME/driver.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--principal", help="Kerberos principal (default $STRAM_YARN_PRINCIPAL, else the ticket cache)")
    p.add_argument("--keytab", help="its keytab (default $STRAM_YARN_KEYTAB)")
    p.add_argument("--json", action="store_true", help="status: one JSON document on stdout")
    p.set_defaults(func=driver)
    return parser


def main(args: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(args)
    try:
        return ns.func(ns)
    except StramError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
