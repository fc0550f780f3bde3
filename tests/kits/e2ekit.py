"""The end-to-end kit: launch real applications through the CLI, watch them, kill their processes.

Every slow test that runs a real master and real container processes uses
these instead of its own copies. Applications are launched with ``python -m
stram.client.cli`` from the repository root, as a user would run ``stram``; the
answers they produce are checked by the tests against independently computed
truth (``conftest.word_truth``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

import psutil
from conftest import ROOT

from stram.client import commands as stram_client
from stram.common import apps as stram_apps
from stram.common.errors import StramError

__all__ = ["launch_detached", "wait_until", "admin", "running_operators", "wait_final", "app_processes",
           "agent_pid", "kill_container_of"]


def launch_detached(*args: str, env: dict[str, str] | None = None) -> str:
    """``stram launch ARGS --detach``; the application id it printed."""
    out = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", *args, "--detach"],
                         capture_output=True, text=True, cwd=ROOT, check=True,
                         env=dict(os.environ, **(env or {})))
    return out.stdout.strip().splitlines()[-1]


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition",
               interval: float = 0.1) -> Any:
    """The first truthy value of ``predicate()``; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {value!r})")


def admin(app_id: str, path: str) -> Any:
    """A GET on the application's admin API; None while its master does not answer."""
    try:
        return stram_client.admin(stram_apps.find_app(app_id), path)
    except StramError:
        return None


def running_operators(app_id: str) -> int:
    """How many of the application's operators are ACTIVE (0 while the master does not answer)."""
    rows = (admin(app_id, "operators") or {}).get("operators", [])
    return sum(1 for r in rows if r["state"] == "ACTIVE")


def app_processes(app_id: str) -> list[psutil.Process]:
    """Every live process of an application: its master and its containers."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if app_id in " ".join(proc.info["cmdline"] or ()) or proc.environ().get("STRAM_APP_ID") == app_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_final(app_id: str, timeout: float) -> dict:
    """Wait until the application reached a final state and its processes are gone; its status."""
    app = wait_until(lambda: (a := stram_apps.find_app(app_id)).get("state") in stram_apps.TERMINAL and a,
                     timeout=timeout, what=f"{app_id} to end")
    wait_until(lambda: not app_processes(app_id), timeout=30, what=f"the processes of {app_id} to exit")
    return app


def agent_pid(app_id: str, container_id: str) -> int | None:
    """Pid of a container's agent (``python -m stram.agent``, not its JVM or Spark workers); None if gone."""
    for proc in app_processes(app_id):
        try:
            cmd = proc.cmdline()
            if proc.environ().get("STRAM_CONTAINER_ID") == container_id and cmd[-2:] == ["-m", "stram.agent"]:
                return proc.pid
        except psutil.NoSuchProcess:
            continue
    return None


def kill_container_of(app_id: str, label_prefix: str, timeout: float = 30.0) -> str:
    """SIGKILL the running container of an operator whose label starts with ``label_prefix``; its id."""
    def find() -> tuple[str, int] | None:
        rows = (admin(app_id, "containers") or {}).get("containers", [])
        for row in rows:
            if row["state"] == "RUNNING" and any(op.startswith(label_prefix) for op in row["operators"]):
                pid = agent_pid(app_id, row["id"])
                if pid:
                    return row["id"], pid
        return None
    container, pid = wait_until(find, timeout, what=f"the container of {label_prefix}")
    os.kill(pid, signal.SIGKILL)

    def dead() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # gone, even between a look-up and a read of its status
            return True
    wait_until(dead, 10, what=f"{container} to die")
    return container
