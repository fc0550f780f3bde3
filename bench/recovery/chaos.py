"""A chaos soak: partitioned word counts under random faults must end SUCCEEDED with exact output.

    python -m bench.recovery.chaos --runs N --seed S [--mode exactly_once|at_least_once|both]
                                   [--no-disk] [--keep] [--timeout T] [--tls]

Run ``i`` uses seed ``S + i``; everything about it comes from a ``random.Random`` of that seed:
the input, the partition counts, the mode (``--mode both``: even seeds EXACTLY_ONCE, odd
AT_LEAST_ONCE), and when and where faults strike. Each run launches, detached,
``reader -> split (partitioned) -> count (partitioned) -> unifier -> out`` in a private
``STRAM_HOME``, then, at random times:

- ``kill``: SIGKILL a random container's agent; one kill always takes the output's container
  (the unifier of ``count`` runs THREAD_LOCAL with ``out``), one a partition of ``count``;
- ``stop``: SIGSTOP a container for longer than ``HEARTBEAT_TIMEOUT_MILLIS``, then SIGCONT it:
  the master must replace it, and the old process must go away without touching the output;
- ``master``: SIGKILL the application master (its supervisor starts the next attempt, which
  adopts the running containers);
- ``disk``: fill the output's file system (a small tmpfs; root only, else skipped and said so),
  hold it full a while, then free it.

It waits up to ``--timeout`` seconds for a final state and checks the output against counts
computed in Python (:mod:`bench.recovery.chaos_check` says exactly what each mode must satisfy).
A run is ``exact``, ``wrong`` (SUCCEEDED but the output is not right, or a process of it was
left running), ``failed`` (FAILED or KILLED) or ``hung`` (no final state in time: killed). Each
run prints one line; the summary names every seed that was not exact with the command that
replays it, and the exit status is non-zero then. Latest results: bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import psutil

from bench.recovery.chaos_check import check_at_least_once, check_exactly_once, duplication, make_input
from stram.client import commands as stram_client
from stram.common import apps as stram_apps
from stram.common.errors import StramError
from stram.master.process.supervise import stop_containers

#: The repository: the launches' working directory.
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: How to run this soak again (the replay commands of its summary).
COMMAND = "python -m bench.recovery.chaos"

__all__ = ["RunResult", "run_one", "soak", "main"]

MODES = {"exactly_once": "EXACTLY_ONCE", "at_least_once": "AT_LEAST_ONCE"}
WINDOW_MILLIS = 100
HEARTBEAT_MILLIS = 300
HEARTBEAT_TIMEOUT_MILLIS = 3000

SPEC = """name: chaos-{seed}
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: {window}, HEARTBEAT_INTERVAL_MILLIS: {heartbeat},
             HEARTBEAT_TIMEOUT_MILLIS: {timeout}, CHECKPOINT_WINDOW_COUNT: {checkpoint},
             PROCESSING_MODE: {mode}, MASTER_ATTEMPTS: {attempts}}}
operators:
  reader: {{class: "stram.operators.io:LineReader", properties: {{path: "{input}", lines_per_window: {lpw}}}}}
  split: {{class: "stram.operators.text:WordSplitter", partitions: {split}}}
  count: {{class: "stram.operators.aggregate:KeyCounter", partitions: {count}}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{out}"}}}}
streams:
  lines: {{from: reader.output, to: [split.input]}}
  words: {{from: split.output, to: [count.input]}}
  counts: {{from: count.output, to: [out.input]}}
"""


@dataclass
class RunResult:
    """One run: its seed and mode, the faults injected, how it ended."""

    seed: int
    mode: str
    result: str = "hung"  #: exact | wrong | failed | hung
    faults: list[str] = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""
    app_id: str = ""
    app_path: str = ""
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        faults = " ".join(self.faults) or "-"
        text = f"seed {self.seed} {self.mode:13s} {self.result:6s} {self.seconds:5.1f}s faults: {faults}"
        return text + (f"\n    {self.detail}" if self.detail else "")


# ---------------------------------------------------------------- processes

def _proc_env(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def app_processes(app_id: str) -> list[psutil.Process]:
    """Every live process of an application: supervisor, master, containers (zombies excluded)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            if app_id in " ".join(proc.info["cmdline"] or ()) or _proc_env(proc).get("STRAM_APP_ID") == app_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def agent_pid(app_id: str, container_id: str) -> int | None:
    """The pid of a container's agent (``python -m stram.agent``); None when it is gone."""
    for proc in app_processes(app_id):
        try:
            env = _proc_env(proc)
            if env.get("STRAM_CONTAINER_ID") == container_id and proc.cmdline()[-2:] == ["-m", "stram.agent"]:
                return proc.pid
        except psutil.Error:
            continue
    return None


def master_pid(app: dict) -> int | None:
    """The pid of the application's running master, proven by its command line; None if none runs."""
    doc = stram_apps.read_json(os.path.join(app["app_path"], "admin.json")) or {}
    try:
        proc = psutil.Process(int(doc.get("pid", 0)))
        cmd = proc.cmdline()
        if proc.status() != psutil.STATUS_ZOMBIE and "stram.master" in cmd and app["id"] in cmd:
            return proc.pid
    except (psutil.Error, ValueError):
        pass
    return None


def _admin(app_id: str, path: str) -> dict:
    try:
        return stram_client.admin(stram_apps.find_app(app_id), path) or {}
    except (StramError, OSError, ValueError):
        return {}


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_everything(app_id: str) -> None:
    """Stop what is left of an application: kill-app, then SIGKILL every process of it."""
    subprocess.run([sys.executable, "-m", "stram.client.cli", "kill-app", app_id], cwd=ROOT,
                   capture_output=True, timeout=60)
    deadline = time.monotonic() + 15
    while app_processes(app_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop_containers(app_id, grace=1.0)
    for proc in app_processes(app_id):
        try:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        except psutil.Error:
            pass


# ---------------------------------------------------------------- faults

class Injector:
    """Carries out the faults of one run against a running application."""

    def __init__(self, app_id: str, rng: random.Random, disk_dir: pathlib.Path | None) -> None:
        self.app_id = app_id
        self.rng = rng
        self.disk_dir = disk_dir
        self.stopped: list[int] = []  #: pids SIGSTOPped and not yet continued
        self.filler: pathlib.Path | None = None

    def _containers(self, where: str) -> list[tuple[str, str]]:
        """(id, operators) of running containers matching ``where`` (any | out | count)."""
        rows = _admin(self.app_id, "containers").get("containers", [])
        found = []
        for row in rows:
            ops = row.get("operators") or []
            if row.get("state") != "RUNNING" or not ops:
                continue
            if where == "out" and "out" not in ops:
                continue
            if where == "count" and not any(o.startswith("count[") for o in ops):
                continue
            found.append((row["id"], ",".join("unifier" if "unifier" in o else o for o in ops)))
        return found

    def _victim(self, where: str, stopped_too: bool = False) -> tuple[str, str, int] | None:
        """A running container matching ``where``: one not SIGSTOPped, else (``stopped_too``) a stopped one."""
        choices = self._containers(where)
        self.rng.shuffle(choices)
        frozen = None
        for cid, ops in choices:
            pid = agent_pid(self.app_id, cid)
            if pid and pid not in self.stopped:
                return cid, ops, pid
            if pid and frozen is None:
                frozen = (cid, ops, pid)
        return frozen if stopped_too else None

    def kill(self, where: str) -> str | None:
        # a stopped container is fair game too: when the only output container is the one
        # stopped, its kill would otherwise wait until the application had ended
        victim = self._victim(where, stopped_too=True)
        if victim is None:
            return None
        cid, ops, pid = victim
        os.kill(pid, signal.SIGKILL)
        if pid in self.stopped:
            self.stopped.remove(pid)
        return f"kill({ops})"

    def stop(self, where: str) -> str | None:
        victim = self._victim(where)
        if victim is None:
            return None
        cid, ops, pid = victim
        os.kill(pid, signal.SIGSTOP)
        self.stopped.append(pid)
        return f"stop({ops})"

    def cont(self) -> list[int]:
        """SIGCONT every stopped process; their pids."""
        pids, self.stopped = self.stopped, []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return pids

    def master(self) -> str | None:
        try:
            app = stram_apps.find_app(self.app_id)
        except StramError:
            return None
        pid = master_pid(app)
        if pid is None:
            return None
        os.kill(pid, signal.SIGKILL)
        return "master"

    def fill(self) -> str | None:
        """Fill the output's file system until a write fails with ENOSPC."""
        if self.disk_dir is None or not self._containers("out"):
            return None  # no disk, or no output writing to it yet
        self.filler = self.disk_dir / "chaos-filler"
        block = b"\0" * (1 << 16)
        try:
            with open(self.filler, "wb") as f:
                while True:
                    f.write(block)
                    f.flush()
        except OSError:
            pass
        return "disk"

    def free(self) -> None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None


def plan_faults(rng: random.Random, duration: float, disk: bool) -> list[tuple[float, str, str]]:
    """(seconds after start, kind, where) for one run, sorted by time."""
    faults = [("kill", "out"), ("kill", "count"), ("kill", "any"), ("stop", rng.choice(("any", "out"))),
              ("master", "")]
    if rng.random() < 0.5:
        faults.append(("kill", "any"))
    if disk:
        faults.append(("disk", "out"))
    return sorted((round(rng.uniform(0.05, 0.7) * duration, 2), kind, where) for kind, where in faults)


def inject(inj: Injector, plan: list[tuple[float, str, str]], t0: float, done: Callable[[], bool],
           hold: Callable[[], float]) -> list[str]:
    """Carry out ``plan`` (retrying each fault a little while it finds no target); what was done."""
    events = [(at, kind, where) for at, kind, where in plan]
    injected: list[str] = []
    while events and not done():
        events.sort()
        at, kind, where = events[0]
        if time.monotonic() - t0 < at:
            time.sleep(min(0.1, at - (time.monotonic() - t0)))
            continue
        events.pop(0)
        if kind == "cont":
            inj.cont()
            continue
        if kind == "free":
            inj.free()
            continue
        what = {"kill": inj.kill, "stop": inj.stop, "master": lambda _: inj.master(),
                "disk": lambda _: inj.fill()}[kind](where)
        if what is None:
            if at < 120:  # nothing to hit right now (starting, recovering): a little later
                events.append((at + 0.5, kind, where))
            continue
        injected.append(f"{what}@{time.monotonic() - t0:.1f}")
        if kind == "stop":
            events.append((time.monotonic() - t0 + HEARTBEAT_TIMEOUT_MILLIS / 1000 + hold(), "cont", ""))
        elif kind == "disk":
            events.append((time.monotonic() - t0 + hold(), "free", ""))
    inj.cont()
    inj.free()
    return injected


# ---------------------------------------------------------------- one run

def _mount_tmpfs(path: pathlib.Path, size_mb: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _state(app_id: str) -> str:
    try:
        return stram_apps.find_app(app_id).get("state", "")
    except StramError:
        return ""


def run_one(seed: int, mode: str, work: pathlib.Path, *, disk: bool = True, timeout: float = 240.0,
            log: Callable[[str], None] = lambda s: None, tls: bool = False) -> RunResult:
    """One chaos run in ``work`` (a fresh directory): launch, inject, wait, check; its result.

    Sets ``STRAM_HOME`` to ``work/home`` in this process's environment while it runs.
    """
    rng = random.Random(seed)
    mode = MODES.get(mode, mode)
    result = RunResult(seed, mode)
    lines = rng.randint(2500, 4500)
    lpw = rng.choice((15, 20, 25))
    duration = lines / lpw * WINDOW_MILLIS / 1000  # seconds of input at full pace
    plan = plan_faults(rng, duration, disk)
    input_path = work / "input.txt"
    truth = make_input(rng, input_path, lines)
    out_root = work / "disk"
    mounted = False
    if disk:
        if os.geteuid() == 0 and _mount_tmpfs(out_root, 8):
            mounted = True
        else:
            result.notes.append("disk fault skipped: mounting a tmpfs needs root")
            plan = [p for p in plan if p[1] != "disk"]
    out = out_root / "out"
    masters = sum(1 for p in plan if p[1] == "master")
    spec = work / "spec.yaml"
    spec.write_text(SPEC.format(seed=seed, window=WINDOW_MILLIS, heartbeat=HEARTBEAT_MILLIS,
                                timeout=HEARTBEAT_TIMEOUT_MILLIS, checkpoint=rng.choice((3, 5, 10)),
                                mode=mode, attempts=masters + 2, input=input_path, lpw=lpw,
                                split=rng.randint(1, 3), count=rng.randint(2, 4), out=out))
    old_home = os.environ.get("STRAM_HOME")
    os.environ["STRAM_HOME"] = str(work / "home")
    t0 = time.monotonic()
    try:
        launched = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", "--detach", str(spec),
                                   *(("-D", "TLS=true") if tls else ())],
                                  cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
        if launched.returncode != 0:
            result.result, result.detail = "failed", f"launch failed: {launched.stderr.strip()[-500:]}"
            return result
        result.app_id = app_id = launched.stdout.strip().splitlines()[-1]
        result.app_path = stram_apps.find_app(app_id)["app_path"]
        inj = Injector(app_id, rng, out_root if mounted else None)
        ended = lambda: _state(app_id) in stram_apps.TERMINAL  # noqa: E731
        result.faults = inject(inj, plan, t0, ended, lambda: rng.uniform(1.0, 3.0))
        while not ended() and time.monotonic() - t0 < timeout:
            time.sleep(0.2)
        result.seconds = time.monotonic() - t0
        state = _state(app_id)
        if state not in stram_apps.TERMINAL:
            result.result = "hung"
            result.detail = f"no final state after {timeout:.0f}s (last state {state})"
            kill_everything(app_id)
            return result
        left = _wait_exit(app_id, 30)
        if state != "SUCCEEDED":
            info = stram_apps.find_app(app_id)
            result.result, result.detail = "failed", f"{state}: {info.get('diagnostics', '')[:400]}"
        else:
            if mode == "EXACTLY_ONCE":
                wrong = check_exactly_once(out, truth)
            else:
                wrong = check_at_least_once(out, truth, len(result.faults))
                if not wrong:
                    result.notes.append(f"counted {duplication(out, truth):.3f}x the input")
            if left:
                wrong = (wrong + "; " if wrong else "") + f"processes left running 30 s after the end: {left}"
            result.result, result.detail = ("wrong", wrong) if wrong else ("exact", "")
        if left:
            kill_everything(app_id)
        return result
    finally:
        if not result.seconds:
            result.seconds = time.monotonic() - t0
        if result.app_id and app_processes(result.app_id):
            kill_everything(result.app_id)
        if mounted:
            subprocess.run(["umount", "-l", str(out_root)], capture_output=True)
        if old_home is None:
            os.environ.pop("STRAM_HOME", None)
        else:
            os.environ["STRAM_HOME"] = old_home
        if result.detail and result.app_path:
            result.detail += f"\n    logs: {result.app_path}/logs"


def _wait_exit(app_id: str, seconds: float) -> list[str]:
    """Wait for an ended application's processes to exit; the ones still there after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = app_processes(app_id)
        if not left:
            return []
        time.sleep(0.3)
    out = []
    for proc in app_processes(app_id):
        try:
            out.append(f"{proc.pid} {' '.join(proc.cmdline()[-2:])} ({proc.status()})")
        except psutil.Error:
            continue
    return out


# ---------------------------------------------------------------- the soak

def soak(runs: int, seed: int, mode: str = "both", *, disk: bool = True, keep: bool = False,
         timeout: float = 240.0, out: Callable[[str], None] = print, tls: bool = False) -> list[RunResult]:
    """``runs`` runs from ``seed`` on, each printed as it ends; every result."""
    results = []
    for i in range(runs):
        s = seed + i
        m = mode if mode != "both" else ("exactly_once" if s % 2 == 0 else "at_least_once")
        work = pathlib.Path(tempfile.mkdtemp(prefix=f"stram-chaos-{s}-"))
        try:
            r = run_one(s, m, work, disk=disk, timeout=timeout, tls=tls)
        except Exception as exc:  # noqa: BLE001 - a soak error ends this run, not the soak
            r = RunResult(s, MODES[m], "failed", detail=f"the soak itself failed: {exc!r}")
        results.append(r)
        out(r.line() + "".join(f"\n    {n}" for n in r.notes))
        if r.result == "exact" and not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            out(f"    kept {work}")
    return results


def summary(results: list[RunResult], disk: bool, tls: bool = False) -> str:
    counts = {k: sum(1 for r in results if r.result == k) for k in ("exact", "wrong", "hung", "failed")}
    text = (f"runs {len(results)} / exact {counts['exact']} / wrong {counts['wrong']} / "
            f"hung {counts['hung']} / failed {counts['failed']}")
    for r in results:
        if r.result != "exact":
            mode = [k for k, v in MODES.items() if v == r.mode][0]
            text += (f"\n  seed {r.seed} {r.result}: {COMMAND} --runs 1 --seed {r.seed} "
                     f"--mode {mode}{'' if disk else ' --no-disk'}{' --tls' if tls else ''}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run (run i: seed + i)")
    parser.add_argument("--mode", choices=("exactly_once", "at_least_once", "both"), default="both")
    parser.add_argument("--no-disk", action="store_true", help="no full-disk fault")
    parser.add_argument("--keep", action="store_true", help="keep every run's directory (default: failed only)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a run may take (default 240)")
    parser.add_argument("--tls", action="store_true", help="the applications run with TLS on (-D TLS=true)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.timeout <= 0:
        parser.error("--runs and --timeout must be positive")
    disk = not args.no_disk
    if disk and os.geteuid() != 0:
        print("note: not root, so no tmpfs can be mounted: the full-disk fault is skipped", flush=True)
    results = soak(args.runs, args.seed, args.mode, disk=disk, keep=args.keep, timeout=args.timeout,
                   out=lambda s: print(s, flush=True), tls=args.tls)
    print(summary(results, disk, args.tls))
    return 0 if all(r.result == "exact" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
