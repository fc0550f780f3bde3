"""Launchers start and stop container processes: locally, or on YARN (appmaster.yarn).

A launcher is the master's only way to get containers. The master calls
``launch``/``kill`` and polls ``poll()`` for containers that ended; the
decisions stay in :class:`appmaster.state.MasterState`.
"""

from __future__ import annotations

import abc
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

log = logging.getLogger("appmaster.launcher")


@dataclass
class ContainerRequest:
    container_id: str
    memory_mb: int
    vcores: int
    hosts: tuple[str, ...]
    env: dict[str, str]


class Launcher(abc.ABC):
    """Starts container agents (``python -m container``) with their environment."""

    @abc.abstractmethod
    def launch(self, request: ContainerRequest) -> None:
        """Start a container; it finds the master through APP_PATH/heartbeatUri."""

    @abc.abstractmethod
    def kill(self, container_id: str) -> None:
        """Stop a container now (SIGKILL locally)."""

    @abc.abstractmethod
    def poll(self) -> list[tuple[str, int | None]]:
        """Containers that ended since the last call: (container id, exit code)."""

    @abc.abstractmethod
    def stop_all(self, grace: float = 5.0) -> None:
        """Stop every container still running, politely then by force."""

    @abc.abstractmethod
    def running(self) -> list[str]:
        """Containers whose process has not been seen to end (:meth:`poll` reports the ends)."""

    def set_progress(self, fraction: float) -> None:
        """Report application progress where the platform shows it."""

    def finish(self, state: str, diagnostics: str) -> None:
        """Report the application's final state where the platform shows it."""


class LocalLauncher(Launcher):
    """Containers as local processes (the embedded default)."""

    def __init__(self, log_dir: str, cwd: str | None = None) -> None:
        self.log_dir = log_dir
        self.cwd = cwd or os.getcwd()
        self.processes: dict[str, subprocess.Popen] = {}
        os.makedirs(log_dir, exist_ok=True)

    def launch(self, request: ContainerRequest) -> None:
        env = dict(os.environ)
        env.update(request.env)
        env["STRAM_HOST"] = "127.0.0.1"
        env["STRAM_WORK_DIR"] = os.path.join(os.path.dirname(self.log_dir), "work", request.container_id)
        env.setdefault("PYTHONPATH", self.cwd)
        out = open(os.path.join(self.log_dir, f"{request.container_id}.log"), "ab")
        proc = subprocess.Popen([sys.executable, "-m", "container"], env=env, cwd=self.cwd,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        self.processes[request.container_id] = proc
        log.info("launched %s as pid %d", request.container_id, proc.pid)

    def kill(self, container_id: str) -> None:
        proc = self.processes.get(container_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            log.info("killed %s (pid %d)", container_id, proc.pid)

    def adopt(self, container_id: str, pid: int) -> None:
        """Track a container a previous master attempt started (a new attempt takes over)."""
        self.processes[container_id] = _Adopted(pid)  # type: ignore[assignment]
        log.info("adopted %s (pid %d) from the previous master attempt", container_id, pid)

    def pid(self, container_id: str) -> int | None:
        proc = self.processes.get(container_id)
        return proc.pid if proc is not None else None

    def poll(self) -> list[tuple[str, int | None]]:
        ended = []
        for cid, proc in list(self.processes.items()):
            code = proc.poll()
            if code is not None:
                ended.append((cid, code))
                del self.processes[cid]
        return ended

    def running(self) -> list[str]:
        return list(self.processes)

    def stop_all(self, grace: float = 5.0) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace
        for proc in self.processes.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()


class _Adopted:
    """A process this master did not start, with the parts of Popen the launcher uses."""

    def __init__(self, pid: int) -> None:
        import psutil
        self.pid = pid
        try:
            self._proc: "psutil.Process | None" = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._proc = None

    def poll(self) -> int | None:
        import psutil
        if self._proc is None:
            return -1
        try:
            if self._proc.status() == psutil.STATUS_ZOMBIE or not self._proc.is_running():
                return -1
        except psutil.NoSuchProcess:
            return -1
        return None

    def send_signal(self, signum: int) -> None:
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.05)
        return -1
