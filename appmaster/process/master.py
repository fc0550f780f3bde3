"""The application master process: wires MasterState to gRPC, the launcher and files.

Runs as ``python -m stram.master`` (locally, or as the Skein master script on
YARN). Decisions live in :class:`stram.master.core.state.MasterState`; this module
turns what happens (heartbeats, container exits, the clock, admin requests)
into events, passes them through the one door, :class:`Dispatcher` (lock →
``MasterState.handle`` → journal → carry out), and carries out the
instructions: launching, adopting and killing containers, splitting and
deleting checkpoints, writing ``heartbeatUri`` and the status file under
``APP_PATH``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

from stram import wire as proto
from stram.common import apppath, fs, space, tls
from stram.common.logsetup import rate_limit
from stram.master.core import scaling
from stram.master.core.events import DiskFull, MasterPaused, Resumed
from stram.master.core.pacing import HeartbeatPacer
from stram.master.core.plan import GONE
from stram.master.core.reports import in_chunks
from stram.master.core.state import (AdoptContainer, AdoptContainers, ContainersStopped, ContainerStarted,
                                     DeleteCheckpoints, Finish, KillApp, KillContainer, LaunchContainer, MasterState,
                                     Note, ScaleRequest, ShutdownRequest, SplitCheckpoints, Start, Tick)
from stram.master.journal import compactor
from stram.master.journal.log import JournalWriter, read_journal
from stram.master.launch.local import Launcher, container_request_env
from stram.master.process import placing
from stram.master.process.addressfiles import AddressFiles
from stram.master.process.credentials import CredentialFiles
from stram.master.process.dispatcher import Dispatcher
from stram.master.process.housekeeping import Purger, pause_gc, purge_delay, switch_interval, tune_gc
from stram.master.process.listener import load_listener
from stram.master.umbilical.server import UmbilicalServer, UmbilicalServicer, create_server

log = logging.getLogger("stram.master")
#: Complaints that repeat every second on a full disk: rate-limited.
files_log = logging.getLogger("stram.master.files")
journal_log = logging.getLogger("stram.master.journal")
rate_limit(files_log, burst=3, interval=30.0)
rate_limit(journal_log, burst=3, interval=30.0)


def _now() -> int:
    return int(time.time() * 1000)


class AppMaster(AddressFiles):
    """One running application master."""

    def __init__(self, spec: Any, app_id: str, app_path: str, token: str, launcher: Launcher,
                 host: str | None = None, tune_gc: bool = False) -> None:
        self.spec = spec
        self.app_id = app_id
        self.app_path = app_path
        #: The application's secret; containers get credentials derived from it (:mod:`stram.common.secret`).
        self.token = token
        self.launcher = launcher
        #: Whether :meth:`start` tunes this process's garbage collector (:func:`tune_gc`).
        self.tune_gc = tune_gc
        self.host = host or os.environ.get("STRAM_HOST") or os.environ.get("NM_HOST") or socket.gethostname()
        self.lock = threading.RLock()
        if tune_gc:  # until start() has made the state: then the collector is tuned for it
            pause_gc()
        now = _now()
        previous = read_journal(app_path)  # JournalVersionError: one this stram cannot read
        #: Snapshots and the log of what changed between them (:mod:`stram.master.journal.log`), compacted apart.
        self.journal_writer = JournalWriter(app_path, (previous or {}).get("log_generation", 0), compactor.start)
        # the state's pacer: the heartbeat interval containers are asked for, stretched while answers
        # queue (stram.master.core.pacing), from the DAG attributes the state holds
        pacer = HeartbeatPacer.for_attributes(spec.attribute)
        if previous is not None:
            self.state = MasterState.restore(spec, previous, app_path, token, now, pacer=pacer)
        else:
            self.state = MasterState(spec, app_id, app_path, token, now, now, pacer=pacer)
        placing.prepare(self.state, launcher, spec, now)  # the launcher's nodes, before Start places containers
        self._journal_key: tuple | None = None
        #: The master's own writes that wait for space (the journal), and its time limit.
        self.pauses = space.Pauses(float(spec.attribute("DISK_FULL_TIMEOUT_SECS")))
        #: The thread whose journal write waits for space (events from others are refused).
        self._pause_thread: int | None = None
        self._starting: int | None = None  # the thread dispatching Start or AdoptContainers
        self._pause_wait = threading.Condition(self.lock)  # waits with the master's lock released
        self._last_pause_status = 0.0
        self._pending_exits: list[tuple[str, int | None]] = []
        #: Deletes obsolete checkpoints in a thread of its own (not in the heartbeat's answer),
        #: between two checkpoint waves.
        self.purger = Purger(delay=purge_delay(spec))
        #: Each container's credential file, written before its launch (several at once on HDFS).
        self.credentials = CredentialFiles(app_path, token)
        self.dispatcher = Dispatcher(self.state, self.lock, {
            LaunchContainer: self._launch_container, AdoptContainer: self._adopt_container,
            KillContainer: self._kill_container, DeleteCheckpoints: self._delete_checkpoints,
            SplitCheckpoints: self._split_checkpoints, Finish: self._finish}, journal=self.journal,
            refusing=self._refusing, prepare=self.credentials.write_ahead)
        #: The one way into the state (:meth:`Dispatcher.dispatch`).
        self.dispatch = self.dispatcher.dispatch
        #: Heartbeats that arrived together, under one hold of the lock (:meth:`Dispatcher.dispatch_many`).
        self.dispatch_many = self.dispatcher.dispatch_many
        self.finished = threading.Event()
        #: Set when the application leaves RUNNING: the main loop starts waiting for the containers at
        #: once, not at its next round (0.2 s later).
        self._wake = threading.Event()
        self.final: Finish | None = None
        self.server = None
        self.servicer: UmbilicalServicer | None = None
        self._switch_default = sys.getswitchinterval()
        self.port = 0
        self.admin = None
        self.admin_url = ""
        #: Where the YARN web proxy reaches the admin API (the plain listener when TLS is on).
        self.proxy_url = ""
        self.tls_identity: tls.Identity | None = None
        self._stop_requested = False
        #: Seconds a scale request retries a transient refusal (the CLI's HTTP timeout is 10 s).
        self.scale_wait = 5.0
        #: The DAG's STATS_LISTENER ("module:function"), called at most once a second.
        self.stats_listener = load_listener(spec)
        self._listener_millis = 0
        self._listener_heartbeats = -1
        self._listener_complaints: dict[str, str] = {}

    # ------------------------------------------------------------ instructions
    def journal(self) -> None:
        """Write the state a new master attempt needs, if it changed (caller holds the lock).

        Called before the effects of a decision leave the master (responses,
        checkpoint deletion), so a restarted master never resumes from
        anything that was already purged.
        """
        if self._starting == threading.get_ident():
            self._starting = None  # Start or AdoptContainers is handled: its actions need no gate
        what = f"writing the journal under {self.app_path}"
        began: float | None = None
        delay = 0.05
        while True:
            try:
                if self.journal_writer.write(self.state):  # a log line, or a snapshot (atomic)
                    self._journal_key = (self.journal_writer.snapshots, self.journal_writer.lines)
                break
            except OSError as exc:
                if not space.is_no_space(exc):
                    raise
                if self.state.state != "RUNNING":  # ending: nothing resumes from it, the status says it
                    journal_log.warning("the application is %s; its journal could not be written: %s",
                                        self.state.state, exc)
                    break
                if began is None:
                    began = time.monotonic()
                    self.pauses.begin(what, exc)
                    self._pause_thread = threading.get_ident()
                self._while_paused(what)
                if self.state.state != "RUNNING":  # killed, or failed for want of space: stop waiting
                    break
                self._pause_wait.wait(delay)  # the lock is released: the admin API still answers
                delay = min(delay * 2, space.MAX_DELAY)
        if self.state.state != "RUNNING":
            self._wake.set()
        if began is not None:
            self._pause_thread = None
            resumed = self.state.state == "RUNNING"
            self.pauses.end(what, resumed=resumed)
            if resumed:
                self.dispatch(Resumed(_now(), f"resumed after {time.monotonic() - began:.0f} s: space came "
                                              f"back {what}"))
            self.write_status(final=False)

    def _refusing(self) -> str:
        """Why events from this thread are refused now (agents retry a :data:`~stram.wire.PAUSED` refusal):
        another thread's journal waits for space, or the master takes over the last attempt's containers."""
        if self._starting not in (None, threading.get_ident()):
            return f"{proto.PAUSED} starting (taking over the containers)"
        owner = self._pause_thread
        if owner is None or owner == threading.get_ident() or self.state.state != "RUNNING":
            return ""  # an application that ends no longer waits for its journal
        return self.pauses.describe() or f"{proto.PAUSED} no space left on device"

    def _while_paused(self, what: str) -> None:
        """Between two tries of the journal (lock held): say why, end the wait when it is over.

        The status says the application is paused (at most once a second); a kill request
        kills it; past DISK_FULL_TIMEOUT_SECS it fails with the diagnostic. Either way the
        state leaves RUNNING and the journal stops waiting.
        """
        self.pauses.still(what)
        overdue = self.pauses.overdue()
        if overdue:
            log.error("the application fails: %s", overdue)
            self.dispatch(DiskFull(_now(), overdue))
        elif self._stop_requested:
            self.dispatch(KillApp(_now()))
        elif time.monotonic() - self._last_pause_status >= 1.0:
            self._last_pause_status = time.monotonic()
            self.write_status(final=False)

    def _launch_container(self, ins: LaunchContainer) -> None:
        # its own credential, never the application's token (stram.common.secret); on a full disk the
        # launch waits for space as the journal does (else the container would wait a minute to be
        # found not started), and past DISK_FULL_TIMEOUT_SECS the application fails saying why
        try:
            space.retry(f"writing the credential of {ins.container_id} under {self.app_path}",
                        self.credentials.write, ins.container_id, pauses=self.pauses,
                        stop=lambda: self.state.state != "RUNNING")
        except space.DiskFull as exc:
            log.error("the application fails: %s", exc)
            self.dispatch(DiskFull(_now(), str(exc)))
            return
        env = container_request_env(ins.container_id, self.app_path, self.app_id)
        started = self.launcher.launch(placing.container_request(ins, env))
        while started is not None:  # journaled: a later attempt takes over this process, and no other
            try:
                self.dispatch(ContainerStarted(ins.container_id, started[0], started[1], _now()))
                return
            except MasterPaused:
                if self.finished.wait(0.2):
                    return

    def _adopt_container(self, ins: AdoptContainer) -> None:
        self.launcher.adopt(ins.container_id, ins.pid, ins.started)  # type: ignore[attr-defined]

    def _kill_container(self, ins: KillContainer) -> None:
        log.info("killing %s: %s", ins.container_id, ins.reason)
        self.launcher.kill(ins.container_id)

    def _delete_checkpoints(self, ins: DeleteCheckpoints) -> None:
        self.purger.submit(apppath.checkpoint(self.app_path, ins.operator_id, w) for w in ins.windows)

    def _finish(self, ins: Finish) -> None:
        self.final = ins
        self.finished.set()
        self._wake.set()

    def _split_checkpoints(self, ins: SplitCheckpoints) -> None:
        """Read the old partitions' checkpoints, split them, write the new partitions' ones
        (under the lock, before the new plan is installed and journaled)."""
        change = ins.change
        old = {(op_id, window): self._read_checkpoint(op_id, window) for op_id, window in change.reads}
        for (op_id, window), state in scaling.split_states(change, old).items():
            self._write_checkpoint(op_id, window, state)

    # ------------------------------------------------------------ repartitioning
    def scale(self, name: str, count: int, source: str = "request", wait: float | None = None
              ) -> dict[str, Any]:
        """Give logical operator ``name`` ``count`` partitions while the application runs.

        A :class:`~stram.master.core.state.ScaleRequest` event: the state decides
        (:func:`stram.master.core.scaling.plan_scale`); the old partitions' checkpoints are read,
        split over the new partitions and written under the new operator ids
        (:class:`~stram.master.core.state.SplitCheckpoints`) before the new plan is installed
        and journaled. A transient
        refusal (no common checkpoint yet: partitions report their checkpoints in
        different heartbeats; partitions still deploying) is retried for up to
        ``wait`` seconds (default :attr:`scale_wait`), without holding the master's lock
        in between.

        Returns
        -------
        What was done (:meth:`stram.master.core.scaling.ScaleResult.to_dict`): old and new
        partitions, the window they start after, containers launched and released,
        operators redeployed.

        Raises
        ------
        ValueError
            The request was refused (:class:`stram.master.core.scaling.ScaleRefused`); nothing changed.
        """
        deadline = time.monotonic() + (self.scale_wait if wait is None else wait)
        while True:
            now = _now()
            try:
                return self.dispatch(ScaleRequest(name, count, now, source)).to_dict()
            except ValueError as exc:
                if not (getattr(exc, "transient", False) and time.monotonic() < deadline):
                    if source == "request":
                        self.dispatch(Note(now, "scale", f"refused {name} → {count}: {exc}"))
                    raise
            time.sleep(0.1)

    def _read_checkpoint(self, op_id: int, window: int) -> dict[str, Any]:
        import pickle
        uri = apppath.checkpoint(self.app_path, op_id, window)
        try:
            return pickle.loads(fs.read_bytes(uri))
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable file refuses the change
            raise scaling.ScaleRefused(f"cannot read checkpoint {window:x} of operator {op_id}: "
                                       f"{type(exc).__name__}: {exc}") from None

    def _write_checkpoint(self, op_id: int, window: int, state: dict[str, Any]) -> None:
        import pickle
        uri = apppath.checkpoint(self.app_path, op_id, window)
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
            self.dispatch(Note(_now(), "listener", msg))

    # ------------------------------------------------------------ run
    def start(self) -> None:
        servicer = self.servicer = UmbilicalServicer(self.dispatch, self.token, self.dispatch_many,
                                                     pacer=self.state.pacer)
        # only where callers are: 127.0.0.1 locally, the node's address on YARN (STRAM_BIND_HOST overrides)
        bind = os.environ.get("STRAM_BIND_HOST") or self.host
        self.tls_identity = self._tls_identity()
        if self._front_wanted():
            from stram.master.umbilical.front import create_front
            self.server, self.port = create_front(servicer, host=bind, port=0, tls_identity=self.tls_identity,
                                                  on_restart=self._umbilical_moved)
        else:
            self.server, self.port = create_server(servicer, host=bind, port=0, tls_identity=self.tls_identity)
        if self.state.attempt == 1:
            # the first attempt launches its containers now, and tells them where it is: their
            # start-up (a new interpreter, its imports) overlaps the admin API's. A later attempt
            # writes heartbeatUri only once it has taken over the containers that will read it.
            self._dispatch_first(Start(_now()))
            if getattr(self.launcher, "prestart", None) is not None:  # local: YARN's order is kept
                self.write_heartbeat_uri()
        from stram.master.admin.rest import base_url, start_admin
        register = getattr(self.launcher, "register_ui", None)  # YARN's: its web proxy speaks plain HTTP
        self.admin, self.admin_url = start_admin(self, self.host, bind, tls=self.tls_identity,
                                                 proxy_host=bind if register is not None else None)
        self.proxy_url = (base_url("http", self.host, self.admin.proxy_port) if self.admin.proxy_port
                          else self.admin_url)
        if register is not None:
            register(self.proxy_url, direct=self.admin_url,
                     cert=self.tls_identity.cert_pem if self.tls_identity is not None else None)
        # status.json first: whoever finds admin.json must not find the application still STARTING
        self.write_status(final=False)
        if self.tune_gc and self.state.attempt == 1:  # its 0.3 s (20,000 operators) before containers call
            tune_gc()
        # containers find the master in heartbeatUri: written last, once everything serves
        no_space = self._write_address_files()
        log.info("application %s: umbilical at %s:%d, admin API at %s", self.app_id, self.host,
                 self.port, self.admin_url)
        if self.state.attempt > 1:  # a new attempt takes over the containers the previous master started
            self._dispatch_first(AdoptContainers(_now(), getattr(self.launcher, "adopt", None) is not None))
        if self.tune_gc and self.state.attempt > 1:  # with the adopted containers' state
            tune_gc()
        if no_space and self.state.state == "RUNNING":  # after the adoption: its containers are stopped too
            log.error("the application fails: %s", no_space)
            self.dispatch(DiskFull(_now(), no_space))
        self.write_status()

    def _umbilical_moved(self, port: int) -> None:
        """The umbilical's front process was replaced on another port: containers find it there."""
        self.port = port
        self.write_heartbeat_uri()

    def _front_wanted(self) -> bool:
        """Whether the umbilical is served from a process of its own (UMBILICAL_PROCESS_MIN_CONTAINERS)."""
        least = self.spec.attribute("UMBILICAL_PROCESS_MIN_CONTAINERS")
        return least is not None and len(self.state.plan.containers) >= int(least)

    def _dispatch_first(self, event: Any) -> None:
        """Dispatch the attempt's first event; until it is handled, other threads' events are refused."""
        self._starting = threading.get_ident()
        try:
            self.dispatch(event)
        finally:
            self._starting = None

    def run(self) -> str:
        """Serve until the application ends; returns its final state."""
        self.start()
        last_status = 0.0
        last_files = time.monotonic()
        while not self._rest(0.2):
            if time.monotonic() - last_files > KEEP_FILES_SECONDS:
                last_files = time.monotonic()
                try:
                    self.keep_address_files()
                except OSError as exc:  # a full disk: rate-limited, and the files are still there
                    files_log.warning("could not rewrite the master's address files: %s", exc)
            try:
                self._pending_exits += self.launcher.poll()
                while self._pending_exits:
                    cid, code = self._pending_exits[0]
                    self.dispatch(placing.exited(self.launcher, cid, code, _now()))
                    self._pending_exits.pop(0)
                self.dispatch(Tick(_now()))
                self.poll_stats_listener()
                if self._stop_requested:
                    self.dispatch(KillApp(_now()))
            except MasterPaused:
                pass  # another thread waits for space and says so; its wait ends in a state
            except Exception:  # noqa: BLE001 - a hook or an action must never stop the master
                log.exception("the master's loop failed; going on")
            if time.monotonic() - last_status > 1.0:
                self.write_status(final=False)
                with self.lock:
                    done = len(self.state.removed)
                    total = done + len(self.state.plan.operators)
                    live = sum(1 for c in self.state.plan.containers.values() if c.state not in GONE)
                self.launcher.set_progress(done / total if total else 1.0)
                # (a front process accepts the calls in an interpreter of its own)
                if self.servicer is not None and isinstance(self.server, UmbilicalServer):
                    self._set_switch_interval(live, self.servicer.open_streams)
                last_status = time.monotonic()
            if self.state.state != "RUNNING" and not self.finished.is_set():
                self._wait_for_containers()
        self._wait_for_containers()
        final = self.final or Finish(self.state.state, self.state.diagnostics)
        # the terminal state is reported last: every container process has ended by now
        self.launcher.finish(final.state, final.diagnostics)
        self.write_status()
        self.stop()
        return final.state

    def _set_switch_interval(self, live: int, streams: int) -> None:
        """The GIL switch interval for how many of the ``live`` containers hold a heartbeat stream
        (:func:`stram.master.process.housekeeping.switch_interval`); a change is logged."""
        interval = switch_interval(live, streams, self._switch_default)
        if interval != sys.getswitchinterval():
            sys.setswitchinterval(interval)
            log.info("GIL switch interval %.1f ms (%d of %d containers hold a heartbeat stream)",
                     interval * 1000, streams, live)

    def _rest(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (less when the application leaves RUNNING); whether it finished."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self.finished.is_set()

    def _wait_for_containers(self, grace: float | None = None) -> None:
        """After the end: containers get ``shutdown`` in their heartbeat and exit; then force.

        An agent exits only after it carried out its last heartbeat response,
        committed window included, and undeployed its operators: the exit of every
        container process is the agents' confirmation that every output made its
        last window final. A container is given ``grace`` seconds (default:
        HEARTBEAT_TIMEOUT_MILLIS), and more while it heartbeats ``ending`` (an output
        still publishing), up to END_TIMEOUT_SECS (:mod:`stram.master.core.ending`).
        Released containers (empty, told to shut down earlier) count too.
        """
        if grace is None:
            grace = float(self.state.attr("HEARTBEAT_TIMEOUT_MILLIS")) / 1000
        started = time.monotonic()
        deadline = started + float(self.state.attr("END_TIMEOUT_SECS"))
        while time.monotonic() < deadline:
            self._pending_exits += self.launcher.poll()
            while self._pending_exits:
                cid, code = self._pending_exits[0]
                try:
                    self.dispatch(placing.exited(self.launcher, cid, code, _now()))
                except MasterPaused:
                    break  # the journal's wait is ending (the state left RUNNING): next round
                self._pending_exits.pop(0)
            with self.lock:
                if not self.state.containers_to_stop() and not self.launcher.running():
                    break
                if time.monotonic() - started > grace and not self._still_ending(grace):
                    break
            time.sleep(getattr(self.launcher, "exit_poll_seconds", 0.1))
        left = self.launcher.running()
        if left:
            log.warning("containers %s did not exit within %.0f s of the end; stopping them", left,
                        time.monotonic() - started)
        self.launcher.stop_all(grace=2.0)
        self.dispatch(ContainersStopped(_now(), tuple(left)))
        self.finished.set()

    def _still_ending(self, grace: float) -> bool:
        """Whether a running container said, less than ``grace`` s ago, that it still ends operators."""
        now = _now()
        for cid in self.launcher.running():
            container = self.state.plan.containers.get(cid)
            if container is not None and container.ending and now - container.last_heartbeat_millis < grace * 1000:
                return True
        return False

    def request_kill(self) -> None:
        """Kill the application (from a signal or the admin API)."""
        self._stop_requested = True

    def request_shutdown(self) -> None:
        """End the application gracefully: its input operators end their streams."""
        self.dispatch(ShutdownRequest(_now()))

    def stop(self) -> None:
        self.purger.close()
        self.journal_writer.close()
        if self.admin is not None:
            self.admin.shutdown()
        if self.server is not None:
            self.server.stop(grace=1.0)

    def _tls_identity(self) -> tls.Identity | None:
        """The application's TLS identity when TLS is on (made once, kept under APP_PATH/tls for
        containers and later attempts); None when off, its certificate removed so agents use plain TCP."""
        wanted = self.spec.attribute("TLS")
        if wanted if wanted is not None else self.launcher.tls_by_default:
            return tls.load_or_make_identity(self.app_path, self.app_id)
        fs.delete(tls.cert_uri(self.app_path))
        return None

    def write_status(self, final: bool = True) -> None:
        """``APP_PATH/status.json``: what list-apps shows once the master is gone.

        Until ``final``, an application that ended but whose containers are still
        finishing (outputs making their last windows final) is written RUNNING:
        a reader who sees SUCCEEDED must find the whole output.
        """
        info = self.info(brief=True)
        status = {k: info[k] for k in ("id", "name", "state", "diagnostics", "committed_window",
                                       "started_millis", "finished_millis", "containers", "operators",
                                       "failures", "paused")}
        if not final and status["state"] != "RUNNING":
            status["state"], status["diagnostics"] = "RUNNING", f"finishing: {status['diagnostics']}"
        status["admin_url"] = self.admin_url
        status["pid"] = os.getpid()
        try:  # on a full disk: rewritten in place; else kept in memory (the admin API) and tried again
            fs.write_status_file(apppath.file(self.app_path, apppath.STATUS), json.dumps(status).encode())
        except OSError as exc:
            files_log.warning("could not write status.json: %s", exc)

    def info(self, brief: bool = False) -> dict[str, Any]:
        """The state's info, with what waits for space: ``paused`` (who -> what) and, while the
        application runs, ``diagnostics`` ``paused: no space left on device writing …``
        (``brief``: without the per-operator tables)."""
        with self.lock:
            info = self.state.info_head(brief)
            ops = [] if brief else list(self.state.plan.operators.values())
        for tables in in_chunks(self.lock, ops, self.state.operator_info):  # heartbeats go on between
            for key, table in tables.items():
                info[key].update(table)
        paused = dict(info.get("paused") or {})
        mine = self.pauses.describe()
        if mine:
            paused = {"master": mine, **paused}
        info["paused"] = paused
        if paused and info["state"] == "RUNNING":
            who, what = next(iter(paused.items()))
            info["diagnostics"] = what if who == "master" else f"{what} (in {who})"
        return info


#: Seconds between two checks that ``heartbeatUri`` and ``admin.json`` are present and current.
KEEP_FILES_SECONDS = 2.0
#: The stats listener is called at most this often.
LISTENER_INTERVAL_MILLIS = 1000
