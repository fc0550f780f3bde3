"""The master's side of the heartbeat load harness (bench/bench_heartbeats.py) beyond heartbeats.

In the master's process (``--master``), :func:`watch` records when the master
attempt has deployed: every operator of its plan ACTIVE and every container
of the plan that is not lost or released RUNNING and heard from (a
heartbeat) by this attempt. It writes ``sim/progress-<attempt>.json`` once
the attempt serves (``serving_s``: seconds from the process's start) and
again once deployed (``deploy_s``: seconds from when planning began, the
AppMaster's construction; ``since_process_start_s``: from the process's
start).

In the harness: :class:`MasterProcess` runs the master's process;
:func:`list_operators` runs the real CLI against it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

def write_json(path: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` so that a reader never sees half of it."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------- the master's side

def watch(master: Any, sim: str, construct_seconds: float, planned_at: float) -> None:
    """Record this master attempt's progress in ``sim/progress-<attempt>.json`` (call before ``run``).

    ``construct_seconds``: how long the AppMaster's construction took (planning in the
    first attempt, reading the journal and restoring in a later one); ``planned_at``: the
    ``perf_counter`` when it began.
    """
    from appmaster.events import Heartbeat
    from appmaster.plan import ContainerState, OperatorState

    created = psutil.Process().create_time()
    attempt = master.state.attempt
    path = os.path.join(sim, f"progress-{attempt}.json")
    figures: dict[str, Any] = {"attempt": attempt,
                               "plan_seconds" if attempt == 1 else "restore_seconds": construct_seconds}
    heard: set[str] = set()
    dispatch, start = master.dispatch, master.start

    def counting(event: Any) -> Any:
        answer = dispatch(event)
        if type(event) is Heartbeat:
            heard.add(event.heartbeat.container_id)
        return answer

    def resumed() -> bool:
        gone = (ContainerState.LOST, ContainerState.RELEASED)
        with master.lock:
            plan = master.state.plan
            live = [c for c in plan.containers.values() if c.state not in gone]
            if len(heard) < len(live):  # cheap first: some container has not been heard from yet
                return False
            return all(c.state == ContainerState.RUNNING and c.id in heard for c in live) and \
                all(op.state == OperatorState.ACTIVE for op in plan.operators.values())

    def poll() -> None:
        while not master.finished.is_set():
            if resumed():
                figures.update(deploy_s=time.perf_counter() - planned_at,
                               since_process_start_s=time.time() - created)
                write_json(path, figures)
                return
            time.sleep(0.1)

    def serving() -> None:
        start()
        figures["serving_s"] = time.time() - created
        write_json(path, figures)
        threading.Thread(target=poll, name="bench-progress", daemon=True).start()

    master.dispatch = counting  # the umbilical servicer is made in start(), with master.dispatch
    master.start = serving


# ---------------------------------------------------------------- the harness's side

class MasterProcess:
    """The master's process (its attempts'): their CPU time and peak RSS."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: str, sim: str) -> None:
        self.cmd, self.env, self.cwd, self.sim = cmd, env, cwd, sim
        self.attempt = 0
        self.cpu_before = 0.0  # CPU seconds of the attempts that ended
        self.peak_rss = 0
        self._start()

    def _start(self) -> None:
        self.attempt += 1
        self.popen = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd)
        self.proc = psutil.Process(self.popen.pid)
        self.cpu0 = self._cpu()

    def _cpu(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system

    def sample(self) -> None:
        """Note the RSS (raises psutil.Error once the process is gone)."""
        self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)

    def cpu_seconds(self) -> float:
        return self.cpu_before + self._cpu() - self.cpu0

    def progress(self) -> dict[str, Any]:
        """What the current attempt recorded (:func:`watch`)."""
        return read_json(os.path.join(self.sim, f"progress-{self.attempt}.json"))

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def list_operators(home: str, app_id: str, root: str) -> tuple[float | None, int, str]:
    """Run ``stram list-operators APP`` (the CLI's entry point, ``scripts.cli:main``, in a new
    interpreter, as a user would) with ``STRAM_HOME=home``: its wall time (None if it
    failed), the rows it printed, and the end of its stderr."""
    env = dict(os.environ, STRAM_HOME=home, PYTHONPATH=root)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "scripts.cli", "list-operators", app_id], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    rows = max(0, len(proc.stdout.strip().splitlines()) - 1)  # a header, then a row per operator
    return (took if proc.returncode == 0 else None), rows, proc.stderr[-2000:]

