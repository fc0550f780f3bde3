"""Launchers start and stop container processes: locally, or on YARN (stram.client.yarn).

A launcher is the master's only way to get containers. The master calls
``launch``/``kill`` and polls ``poll()`` for containers that ended; the
decisions stay in :class:`stram.master.core.state.MasterState`.

Locally, a new master attempt takes over the containers of the previous one
(:meth:`LocalLauncher.adopt`) only when the live process is proven to be that
container (:func:`proven_container`: the start time recorded at launch and
``STRAM_CONTAINER_ID`` in its environment); a pid reused by another process
is never taken over and never signalled.
"""

from __future__ import annotations

import abc
import collections
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil

from stram.common import liveness

log = logging.getLogger("stram.master.launch.local")

#: Set in the environment of a container process started ahead of the plan: it imports what it
#: needs, then waits for a line on stdin ("go": run; end of file: exit) (:meth:`LocalLauncher.prestart`).
HOLD = "STRAM_HOLD"
#: The first container a fresh plan asks for (:class:`stram.master.core.plan.PhysicalPlan`'s numbering).
FIRST_CONTAINER_ID = "container_000001"


def container_request_env(container_id: str, app_path: str, app_id: str) -> dict[str, str]:
    """What the master puts in a container's environment, whatever launches it."""
    return {"STRAM_CONTAINER_ID": container_id, "STRAM_APP_PATH": app_path, "STRAM_APP_ID": app_id}


#: The exit code a launcher reports for a container lost with its node (YARN's ABORTED, -100, with
#: "lost node" in its diagnostics): the node failed, not the container's own process.
NODE_LOST_EXIT = -100


@dataclass
class ContainerRequest:
    """What the master asks a launcher for: a container's shape, where, and its environment."""

    container_id: str
    memory_mb: int
    vcores: int
    #: Wanted hosts, the first preferred.
    hosts: tuple[str, ...]
    env: dict[str, str]
    #: Wanted racks (when no wanted host can take it).
    racks: tuple[str, ...] = ()
    #: YARN node label expression (None: the application's).
    node_label: str | None = None
    #: Hosts not to use (blacklisted).
    avoid: tuple[str, ...] = ()
    #: Whether it may be placed elsewhere when the wanted hosts/racks cannot take it in time
    #: (PLACEMENT_TIMEOUT_MILLIS); False: the launcher reports it unplaceable.
    relax: bool = True


class Launcher(abc.ABC):
    """Starts container agents (``python -m stram.agent``) with their environment."""

    #: Whether an application's channels use TLS when its spec does not say (the TLS attribute).
    tls_by_default = False
    #: Seconds between two :meth:`poll` calls while the master waits for its containers to exit
    #: after the end (each poll may be a call to the cluster).
    exit_poll_seconds = 0.1

    @abc.abstractmethod
    def launch(self, request: ContainerRequest) -> tuple[int, float] | None:
        """Start a container; it finds the master through APP_PATH/heartbeatUri.

        Returns the process started, ``(pid, start time)``, where this launcher can take
        it over in a later master attempt; else None.
        """

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

    def nodes(self) -> list[tuple[str, str]]:
        """The (host, rack) pairs this launcher can place containers on ([]: no placement)."""
        return []

    def node_of(self, container_id: str) -> str | None:
        """The host a container was put on (known once allocated; kept after it ended), else None."""
        return None

    def unplaceable(self, container_id: str) -> str | None:
        """Why a container :meth:`poll` reported ended could not be placed as asked (a request that
        may not be relaxed): the application cannot run as asked. None: it was placed."""
        return None

    def set_progress(self, fraction: float) -> None:
        """Report application progress where the platform shows it."""

    def finish(self, state: str, diagnostics: str) -> None:
        """Report the application's final state where the platform shows it."""


class LocalLauncher(Launcher):
    """Containers as local processes (the embedded default)."""

    #: A poll is a ``waitpid`` per process: the end is seen within 20 ms of the last exit.
    exit_poll_seconds = 0.02
    #: At most this many container processes start within :attr:`start_window_seconds`: each
    #: spends its first fraction of a second importing on a core, and hundreds started at once
    #: (a large plan) would starve the master and each other; later launches wait their turn.
    max_starting = max(8, 4 * (os.cpu_count() or 1))
    start_window_seconds = 1.0
    #: The agent's command line.
    command: tuple[str, ...] = (sys.executable, "-m", "stram.agent")
    #: The one host local containers run on (what they advertise: STRAM_HOST).
    HOST = "127.0.0.1"

    def __init__(self, log_dir: str, cwd: str | None = None, app_id: str = "") -> None:
        self.log_dir = log_dir
        self.cwd = cwd or os.getcwd()
        #: Whose containers these are: a kill finds a container not (yet) taken over by its environment.
        self.app_id = app_id
        self.processes: dict[str, subprocess.Popen] = {}
        #: When the processes spawned within the last :attr:`start_window_seconds` were.
        self._spawned: collections.deque[float] = collections.deque()
        #: Containers a new attempt could not take over: reported ended by poll().
        self._lost: list[tuple[str, int | None]] = []
        #: Processes started ahead of the plan (:meth:`prestart`) and the environment they have.
        self._held: dict[str, tuple[subprocess.Popen, dict[str, str]]] = {}
        #: Held processes let go, not yet seen to exit.
        self._released: list[subprocess.Popen] = []
        os.makedirs(log_dir, exist_ok=True)

    def _env(self, request_env: dict[str, str], container_id: str) -> dict[str, str]:
        env = dict(os.environ)
        # secrets travel as files, never in the environment; and the master's token file is the
        # master's alone (a container reads its own credential, stram.common.secret)
        for name in ("STRAM_TOKEN", "STRAM_TOKEN_FILE"):
            env.pop(name, None)
        env.update(request_env)
        env["STRAM_HOST"] = self.HOST
        env["STRAM_WORK_DIR"] = os.path.join(os.path.dirname(self.log_dir), "work", container_id)
        env.setdefault("PYTHONPATH", self.cwd)
        # the agent logs to <container>.log itself (rotating); <container>.out catches a crash's traceback
        env["STRAM_LOG_DIR"] = self.log_dir
        return env

    def _spawn(self, container_id: str, env: dict[str, str], stdin: Any) -> subprocess.Popen:
        spawned = self._spawned
        while len(spawned) >= self.max_starting:
            wait = spawned[0] + self.start_window_seconds - time.monotonic()
            if wait <= 0:
                spawned.popleft()
                continue
            log.info("%d containers started in the last %.1f s: %s waits %.2f s for its turn",
                     len(spawned), self.start_window_seconds, container_id, wait)
            time.sleep(wait)
        spawned.append(time.monotonic())
        out = open(os.path.join(self.log_dir, f"{container_id}.out"), "ab")
        try:
            return subprocess.Popen(list(self.command), env=env, cwd=self.cwd,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=stdin)
        finally:
            out.close()

    def prestart(self, container_id: str, request_env: dict[str, str]) -> None:
        """Start the process of a container the master is about to plan, held before it reads
        its credential (``STRAM_HOLD``): its interpreter starts and its imports run while the
        master starts. :meth:`launch` of the same container with the same environment lets it
        go on; any other use releases it (it exits at once, unseen)."""
        env = self._env(request_env, container_id)
        try:
            self._held[container_id] = (self._spawn(container_id, dict(env, **{HOLD: "1"}), subprocess.PIPE), env)
        except OSError as exc:  # launch() starts it the usual way
            log.warning("could not start %s ahead of the plan: %s", container_id, exc)

    def release_held(self, wait: float = 5.0) -> None:
        """Let every held process exit (its pipe closes: none of them is launched), waiting up
        to ``wait`` seconds for them (:meth:`poll` reaps those that take longer)."""
        for proc, _ in self._held.values():
            try:
                proc.stdin.close()
            except OSError:
                pass
            self._released.append(proc)
        self._held.clear()
        deadline = time.monotonic() + wait
        for proc in self._released:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                if wait:
                    proc.kill()
                    proc.wait()
        self._released = [proc for proc in self._released if proc.returncode is None]

    def _held_for(self, container_id: str, env: dict[str, str]) -> subprocess.Popen | None:
        """The held process for ``container_id`` if it is alive with exactly ``env``; every
        other held process is released (the plan is not the one guessed: they would only wait)."""
        held = self._held.pop(container_id, None)
        if held is not None and (held[0].poll() is not None or held[1] != env):
            self._held[container_id] = held
            held = None
        self.release_held(wait=0)
        return held[0] if held is not None else None

    def launch(self, request: ContainerRequest) -> tuple[int, float] | None:
        env = self._env(request.env, request.container_id)
        held = self._held_for(request.container_id, env)
        stop_strays(request.env.get("STRAM_APP_ID", ""), request.container_id,
                    spare=held.pid if held is not None else None)
        if held is not None:
            try:  # it goes on: it reads its credential (written) and finds the master
                held.stdin.write(b"go\n")
                held.stdin.close()
            except OSError:  # it died meanwhile: started anew
                held.wait()
                held = None
        proc = held if held is not None else self._spawn(request.container_id, env, subprocess.DEVNULL)
        self.processes[request.container_id] = proc
        log.info("launched %s as pid %d%s", request.container_id, proc.pid,
                 " (started ahead of the plan)" if held is not None else "")
        try:  # our child: its pid is not reused before we reap it
            return proc.pid, psutil.Process(proc.pid).create_time()
        except psutil.Error:
            return None  # already gone: poll() reports the exit

    def kill(self, container_id: str) -> None:
        proc = self.processes.get(container_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            log.info("killed %s (pid %d)", container_id, proc.pid)
        elif proc is None:  # a previous attempt's container this attempt has not taken over yet
            stop_strays(self.app_id, container_id)

    def adopt(self, container_id: str, pid: int, started: float) -> bool:
        """Track a container a previous master attempt started (a new attempt takes over),
        if the live process ``pid`` is proven to be it (:func:`proven_container`); else the
        container is reported ended by the next :meth:`poll` and ``pid`` is never signalled."""
        proc = proven_container(pid, started, container_id)
        if proc is None:
            self._lost.append((container_id, None))
            log.warning("not taking over %s: pid %d is not that container (gone, or another process "
                        "with its pid); the container is lost", container_id, pid)
            return False
        self.processes[container_id] = _Adopted(proc)  # type: ignore[assignment]
        log.info("adopted %s (pid %d) from the previous master attempt", container_id, pid)
        return True

    def pid(self, container_id: str) -> int | None:
        proc = self.processes.get(container_id)
        return proc.pid if proc is not None else None

    def poll(self) -> list[tuple[str, int | None]]:
        ended, self._lost = self._lost, []
        self._released = [proc for proc in self._released if proc.poll() is None]
        for cid, proc in list(self.processes.items()):
            code = proc.poll()
            if code is not None:
                ended.append((cid, code))
                del self.processes[cid]
        return ended

    def running(self) -> list[str]:
        return list(self.processes)

    def node_of(self, container_id: str) -> str | None:
        """Every local container runs on this machine: :attr:`HOST` (no placement: :meth:`nodes` is [])."""
        return self.HOST

    def stop_all(self, grace: float = 5.0) -> None:
        self.release_held()
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


#: Start times of one process, as read by two processes, agree to within this many seconds.
START_TIME_TOLERANCE = 0.05


def proven_container(pid: int, started: float, container_id: str,
                     app_id: str | None = None) -> psutil.Process | None:
    """The live process ``pid`` if it is proven to be container ``container_id``: it started
    at ``started`` (``create_time``, as recorded at launch) and its environment carries
    ``STRAM_CONTAINER_ID=<container_id>`` (and ``STRAM_APP_ID=<app_id>`` when given).
    None otherwise: gone, exiting, a zombie, another process that reuses the pid, or one we may
    not inspect."""
    if not pid or not started:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > START_TIME_TOLERANCE or liveness.ended(proc):
            return None
        env = proc.environ()
    except psutil.Error:
        return None
    if env.get("STRAM_CONTAINER_ID") != container_id:
        return None
    if app_id is not None and env.get("STRAM_APP_ID") != app_id:
        return None
    return proc


def stop_strays(app_id: str, container_id: str, spare: int | None = None) -> int:
    """SIGKILL every live process that carries ``STRAM_APP_ID=<app_id>`` and
    ``STRAM_CONTAINER_ID=<container_id>`` in its environment; how many there were.

    Called before a container is launched: such a process is one an earlier master
    attempt started but died before recording (so the new attempt launches the
    container again), and two processes must never speak for one container. ``spare``:
    the pid of this master's own process for it, started ahead (:meth:`LocalLauncher.prestart`).
    """
    if not app_id:
        return 0
    strays = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.info["cmdline"] and proc.info["cmdline"][-2:] == ["-m", "stram.agent"]:
                env = proc.environ()
                if (env.get("STRAM_APP_ID") == app_id and env.get("STRAM_CONTAINER_ID") == container_id
                        and proc.pid != spare):
                    proc.kill()
                    strays.append(proc)
        except psutil.Error:
            continue
    if strays:
        log.warning("killed %d process(es) of %s an earlier master attempt started: %s", len(strays),
                    container_id, ", ".join(str(p.pid) for p in strays))
        psutil.wait_procs(strays, timeout=5)
    return len(strays)


class _Adopted:
    """A process this master did not start, with the parts of Popen the launcher uses.

    Signals go through ``psutil``, which refuses a process whose pid was reused since
    (it compares the start time), so a stranger is never signalled.
    """

    def __init__(self, proc: psutil.Process) -> None:
        self.pid = proc.pid
        self._proc = proc

    def poll(self) -> int | None:
        return -1 if liveness.ended(self._proc) else None

    def send_signal(self, signum: int) -> None:
        try:
            self._proc.send_signal(signum)
        except psutil.NoSuchProcess:  # gone, or its pid now belongs to another process
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
