"""The application master process: wires MasterState to gRPC, the launcher and files.

Runs as ``python -m appmaster`` (locally, or as the Skein master script on
YARN). Decisions live in :class:`appmaster.state.MasterState`; this module
carries out its instructions: launching and killing containers, deleting old
checkpoints, writing ``heartbeatUri`` and the status file under ``APP_PATH``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from appmaster import scaling
from appmaster.launcher import ContainerRequest, Launcher
from appmaster.plan import ContainerState
from appmaster.server import UmbilicalServicer, create_server
from appmaster.state import (DeleteCheckpoints, Finish, Instruction, KillContainer, LaunchContainer,
                             MasterState)
from container import fs

log = logging.getLogger("appmaster")


def _now() -> int:
    return int(time.time() * 1000)


class AppMaster:
    """One running application master."""

    def __init__(self, spec: Any, app_id: str, app_path: str, token: str, launcher: Launcher,
                 host: str | None = None) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_path = app_path
        self.token = token
        self.launcher = launcher
        self.host = host or os.environ.get("STRAM_HOST") or socket.gethostname()
        self.lock = threading.RLock()
        now = _now()
        journal = fs.join(app_path, "journal", "snapshot")
        if fs.exists(journal):
            import pickle
            self.state = MasterState.restore(spec, pickle.loads(fs.read_bytes(journal)), app_path, token, now)
        else:
            self.state = MasterState(spec, app_id, app_path, token, now, now)
        self._journal_key: tuple | None = None
        self.finished = threading.Event()
        self.final: Finish | None = None
        self.server = None
        self.port = 0
        self.admin = None
        self.admin_url = ""
        self._stop_requested = False
        #: Seconds a scale request retries a transient refusal (the CLI's HTTP timeout is 10 s).
        self.scale_wait = 5.0
        #: The DAG's STATS_LISTENER ("module:function"), called at most once a second.
        self.stats_listener = _load_listener(spec)
        self._listener_millis = 0
        self._listener_heartbeats = -1
        self._listener_complaints: dict[str, str] = {}

    # ------------------------------------------------------------ instructions
    def execute(self, instructions: list[Instruction]) -> None:
        for ins in instructions:
            try:
                self._execute(ins)
            except Exception:  # noqa: BLE001 - one failed action must not stop the master
                log.exception("could not carry out %s", ins)

    def journal(self) -> None:
        """Write the state a new master attempt needs, if it changed (caller holds the lock).

        Called before the effects of a decision leave the master (responses,
        checkpoint deletion), so a restarted master never resumes from
        anything that was already purged.
        """
        key = self.state.journal_key()
        if key == self._journal_key:
            return
        import pickle
        fs.write_atomic(fs.join(self.app_path, "journal", "snapshot"),
                        pickle.dumps(self.state.snapshot(), protocol=pickle.HIGHEST_PROTOCOL))
        self._journal_key = key

    def _execute(self, ins: Instruction) -> None:
        if isinstance(ins, LaunchContainer):
            env = {"STRAM_CONTAINER_ID": ins.container_id, "STRAM_APP_PATH": self.app_path,
                   "STRAM_TOKEN": self.token, "STRAM_APP_ID": self.app_id}
            self.launcher.launch(ContainerRequest(ins.container_id, ins.memory_mb, ins.vcores, ins.hosts, env))
        elif isinstance(ins, KillContainer):
            log.info("killing %s: %s", ins.container_id, ins.reason)
            self.launcher.kill(ins.container_id)
        elif isinstance(ins, DeleteCheckpoints):
            for window in ins.windows:
                fs.delete(fs.join(self.app_path, "checkpoints", str(ins.operator_id), str(window)))
        elif isinstance(ins, Finish):
            self.final = ins
            self.finished.set()

    # ------------------------------------------------------------ repartitioning
    def scale(self, name: str, count: int, source: str = "request", wait: float | None = None
              ) -> dict[str, Any]:
        """Give logical operator ``name`` ``count`` partitions while the application runs.

        The decision is :func:`appmaster.scaling.plan_scale`; here the old partitions'
        checkpoints are read, split over the new partitions and written under the new
        operator ids before the new plan is installed and journaled. A transient
        refusal (no common checkpoint yet: partitions report their checkpoints in
        different heartbeats; partitions still deploying) is retried for up to
        ``wait`` seconds (default :attr:`scale_wait`), without holding the master's lock
        in between.

        Returns
        -------
        What was done (:meth:`appmaster.scaling.ScaleResult.to_dict`): old and new
        partitions, the window they start after, containers launched and released,
        operators redeployed.

        Raises
        ------
        ValueError
            The request was refused (:class:`appmaster.scaling.ScaleRefused`); nothing changed.
        """
        deadline = time.monotonic() + (self.scale_wait if wait is None else wait)
        while True:
            now = _now()
            with self.lock:
                try:
                    change = scaling.plan_scale(self.state, name, count)
                    old = {(op_id, window): self._read_checkpoint(op_id, window)
                           for op_id, window in change.reads}
                    for (op_id, window), state in scaling.split_states(change, old).items():
                        self._write_checkpoint(op_id, window, state)
                    result, instructions = scaling.apply_scale(self.state, change, now, source)
                    self.journal()
                    break
                except ValueError as exc:
                    if getattr(exc, "transient", False) and time.monotonic() < deadline:
                        pass
                    else:
                        if source == "request":
                            self.state.event(now, "scale", f"refused {name} → {count}: {exc}")
                        raise
            time.sleep(0.1)
        self.execute(instructions)
        return result.to_dict()

    def _read_checkpoint(self, op_id: int, window: int) -> dict[str, Any]:
        import pickle
        uri = fs.join(self.app_path, "checkpoints", str(op_id), str(window))
        try:
            return pickle.loads(fs.read_bytes(uri))
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file refuses the change
            raise scaling.ScaleRefused(f"cannot read checkpoint {window:x} of operator {op_id}: "
                                       f"{type(exc).__name__}: {exc}") from None

    def _write_checkpoint(self, op_id: int, window: int, state: dict[str, Any]) -> None:
        import pickle
        uri = fs.join(self.app_path, "checkpoints", str(op_id), str(window))
        try:
            fs.write_atomic(uri, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            raise scaling.ScaleRefused(f"cannot write checkpoint {window:x} of new operator {op_id}: "
                                       f"{exc}") from None

    def poll_stats_listener(self) -> list[dict[str, Any]]:
        """Call STATS_LISTENER with the operators' stats (at most once a second, after new
        heartbeats) and apply the partition counts it asks for; what was scaled.

        The listener's errors and refused requests are logged; they never stop the master.
        """
        listener = self.stats_listener
        if listener is None:
            return []
        now = _now()
        with self.lock:
            if self.state.state != "RUNNING" or now - self._listener_millis < LISTENER_INTERVAL_MILLIS \
                    or self.state.heartbeats == self._listener_heartbeats:
                return []
            self._listener_millis = now
            self._listener_heartbeats = self.state.heartbeats
            view = scaling.stats_view(self.state)
        try:
            wanted = scaling.listener_requests(view, listener(view))
        except Exception as exc:  # noqa: BLE001 - user code
            self._complain("listener", f"stats listener {self.spec.attribute('STATS_LISTENER')} failed: "
                                       f"{type(exc).__name__}: {exc}")
            return []
        done = []
        for name, count in wanted:
            try:
                done.append(self.scale(name, count, source="stats listener", wait=0))
                self._listener_complaints.pop(name, None)
            except ValueError as exc:
                self._complain(name, f"stats listener asked for {count} partitions of {name}: {exc}")
            except Exception:  # noqa: BLE001
                log.exception("stats listener: scaling %s to %d failed", name, count)
        return done

    def _complain(self, key: str, msg: str) -> None:
        """Log a listener problem once until it changes (the listener runs every second)."""
        if self._listener_complaints.get(key) != msg:
            self._listener_complaints[key] = msg
            with self.lock:
                self.state.event(_now(), "listener", msg)

    # ------------------------------------------------------------ run
    def start(self) -> None:
        servicer = UmbilicalServicer(self.state, self.lock, self.execute, journal=self.journal)
        self.server, self.port = create_server(servicer, host="0.0.0.0", port=0)
        from appmaster.admin import start_admin
        self.admin, self.admin_url = start_admin(self, self.host)
        register = getattr(self.launcher, "register_ui", None)
        if register is not None:
            register(self.admin_url)
        fs.write_atomic(fs.join(self.app_path, "admin.json"), json.dumps(
            {"url": self.admin_url, "pid": os.getpid(), "host": self.host}).encode())
        # containers find the master here; written last, once everything serves
        fs.write_atomic(fs.join(self.app_path, "heartbeatUri"), f"{self.host}:{self.port}".encode())
        log.info("application %s: umbilical at %s:%d, admin API at %s", self.app_id, self.host,
                 self.port, self.admin_url)
        with self.lock:
            if self.state.attempt == 1:
                instructions = self.state.start(_now())
            else:
                instructions = self._adopt()
            self.journal()
        self.execute(instructions)
        self.write_status()

    def _adopt(self) -> list[Instruction]:
        """A new attempt: take over the containers the previous master started."""
        adopt = getattr(self.launcher, "adopt", None)
        instructions: list[Instruction] = []
        for container in self.state.plan.containers.values():
            if container.state not in (ContainerState.PENDING, ContainerState.RUNNING):
                continue
            pid = container.process.split("@", 1)[0]
            if adopt is not None and pid.isdigit():
                adopt(container.id, int(pid))
            elif container.state == ContainerState.PENDING:
                instructions.append(self.state._launch(container, _now()))
        return instructions

    def run(self) -> str:
        """Serve until the application ends; returns its final state."""
        self.start()
        last_status = 0.0
        while not self.finished.wait(0.2):
            ended = self.launcher.poll()
            with self.lock:
                instructions: list[Instruction] = []
                for cid, code in ended:
                    instructions += self.state.container_exited(cid, code, _now())
                instructions += self.state.tick(_now())
                self.journal()
            self.execute(instructions)
            try:
                self.poll_stats_listener()
            except Exception:  # noqa: BLE001 - the hook must never stop the master
                log.exception("stats listener hook failed")
            if self._stop_requested:
                with self.lock:
                    self.execute(self.state.kill(_now()))
            if time.monotonic() - last_status > 1.0:
                self.write_status()
                with self.lock:
                    done = len(self.state.removed)
                    total = done + len(self.state.plan.operators)
                self.launcher.set_progress(done / total if total else 1.0)
                last_status = time.monotonic()
            if self.state.state != "RUNNING" and not self.finished.is_set():
                self._wait_for_containers()
        self._wait_for_containers()
        final = self.final or Finish(self.state.state, self.state.diagnostics)
        self.launcher.finish(final.state, final.diagnostics)
        self.write_status()
        self.stop()
        return final.state

    def _wait_for_containers(self, grace: float = 10.0) -> None:
        """After the end: containers get ``shutdown`` in their heartbeat; then force."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            ended = self.launcher.poll()
            with self.lock:
                for cid, code in ended:
                    self.execute(self.state.container_exited(cid, code, _now()))
                if not self.state.containers_to_stop():
                    break
            time.sleep(0.1)
        self.launcher.stop_all(grace=2.0)
        with self.lock:
            for container in self.state.plan.containers.values():
                if container.state in (ContainerState.PENDING, ContainerState.RUNNING):
                    container.state = ContainerState.RELEASED
            self.execute(self.state._maybe_finish(force=True))
        self.finished.set()

    def request_kill(self) -> None:
        """Kill the application (from a signal or the admin API)."""
        self._stop_requested = True

    def request_shutdown(self) -> None:
        with self.lock:
            self.state.request_shutdown(_now())

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.shutdown()
        if self.server is not None:
            self.server.stop(grace=1.0)

    def write_status(self) -> None:
        """``APP_PATH/status.json``: what list-apps shows once the master is gone."""
        with self.lock:
            info = self.state.info()
        status = {k: info[k] for k in ("id", "name", "state", "diagnostics", "committed_window",
                                       "started_millis", "finished_millis", "containers", "operators")}
        status["admin_url"] = self.admin_url
        status["pid"] = os.getpid()
        try:
            fs.write_atomic(fs.join(self.app_path, "status.json"), json.dumps(status).encode())
        except OSError:
            log.exception("could not write status.json")


#: The stats listener is called at most this often.
LISTENER_INTERVAL_MILLIS = 1000


def _load_listener(spec: Any) -> Any:
    """The DAG's STATS_LISTENER function, or None (a broken reference is logged, not fatal)."""
    try:
        ref = spec.attribute("STATS_LISTENER")
    except Exception:  # noqa: BLE001 - specs without the attribute
        return None
    if not ref:
        return None
    from container.engine import load_class
    try:
        return load_class(ref)
    except Exception:  # noqa: BLE001
        log.exception("cannot load STATS_LISTENER %s; running without it", ref)
        return None


def install_signal_handlers(master: AppMaster) -> None:
    """SIGTERM/SIGINT kill the application: containers stopped, state KILLED."""
    def handler(signum: int, frame: Any) -> None:
        log.info("signal %d: killing the application", signum)
        master.request_kill()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
