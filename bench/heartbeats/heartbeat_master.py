"""The master's side of the heartbeat load harness (:mod:`bench.heartbeats.bench_heartbeats`) beyond heartbeats.

In the master's process (``--master``):

* :func:`watch` records when the master attempt is *resumed*: every operator
  of its plan ACTIVE and every container of the plan that is not lost or
  released RUNNING and heard from (a heartbeat) by this attempt. It writes
  ``sim/progress-<attempt>.json`` once the attempt serves (``serving_s``:
  seconds from the process's start) and again once resumed (``deploy_s``:
  seconds from when planning began, the AppMaster's construction;
  ``since_process_start_s``: from the process's start; ``launched`` and
  ``lost``: what this attempt launched and could not adopt by then).
* :func:`adopting` turns the harness's launcher into one that behaves as
  :class:`stram.master.launch.local.LocalLauncher` does: every launch is a (simulated)
  process with a pid and a start time, which the master journals
  (``ContainerStarted``); a new master attempt adopts a container only if the
  pid and start time it journaled are those the launch recorded and the
  container has not exited or been killed since, else the container is
  reported ended (lost) and the master launches a replacement. The simulated
  agents report that pid in their heartbeats (``jvm_name``), as a real agent
  does, so the master's impostor check passes.

In the harness: :class:`MasterProcess` runs the master's process(es): with
``--restart-at S`` it SIGKILLs the first attempt after S seconds and starts
the second one from the same application directory and journal, as the
supervisor does (``python -m stram.master`` again: the attempt number comes
from the journal). :func:`list_operators` runs the real CLI against it.

In the agent processes: :class:`Umbilical` is their channel to the master.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

#: The simulated containers' pids start here (above most real pids; they are never signalled).
FIRST_PID = 4_000_000
#: As stram.master.launch.local.START_TIME_TOLERANCE: two readings of one start time agree to within it.
START_TOLERANCE = 0.05


def own_cpu_seconds() -> float:
    """CPU seconds this process has used (user and system): a harness process's own share."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
    from stram.master.core.events import Heartbeat
    from stram.master.core.plan import ContainerState, OperatorState

    created = psutil.Process().create_time()
    attempt = master.state.attempt
    path = os.path.join(sim, f"progress-{attempt}.json")
    figures: dict[str, Any] = {"attempt": attempt,
                               "plan_seconds" if attempt == 1 else "restore_seconds": construct_seconds}
    heard: set[str] = set()
    dispatch, dispatch_many, start = master.dispatch, master.dispatch_many, master.start

    def counting(event: Any) -> Any:
        answer = dispatch(event)
        if type(event) is Heartbeat:
            heard.add(event.heartbeat.container_id)
        return answer

    def counting_many(events: list[Any]) -> list[Any]:
        answers = dispatch_many(events)
        for event, answer in zip(events, answers):
            if type(event) is Heartbeat and not isinstance(answer, Exception):
                heard.add(event.heartbeat.container_id)
        return answers

    pending: list[Any] = []  # operators not ACTIVE at the last look: only they are looked at again

    def resumed() -> bool:
        nonlocal pending
        gone = (ContainerState.LOST, ContainerState.RELEASED)
        with master.lock:  # briefly: every heartbeat waits for it
            plan = master.state.plan
            live = [c for c in plan.containers.values() if c.state not in gone]
            if len(heard) < len(live) or not all(c.state == ContainerState.RUNNING and c.id in heard
                                                 for c in live):
                return False
            pending = [op for op in pending if op.state != OperatorState.ACTIVE]
            if not pending:  # all of them ACTIVE now: look at every operator (once, or again)
                pending = [op for op in plan.operators.values() if op.state != OperatorState.ACTIVE]
            return not pending

    def poll() -> None:
        while not master.finished.is_set():
            if resumed():
                figures.update(deploy_s=time.perf_counter() - planned_at, deployed_at=time.time(),
                               since_process_start_s=time.time() - created,
                               launched=getattr(master.launcher, "launched", 0),
                               lost=getattr(master.launcher, "lost", 0))
                write_json(path, figures)
                return
            time.sleep(0.1)

    def serving() -> None:
        start()
        figures["serving_s"] = time.time() - created
        write_json(path, figures)
        threading.Thread(target=poll, name="bench-progress", daemon=True).start()

    # the umbilical servicer is made in start(), with master.dispatch and master.dispatch_many
    master.dispatch, master.dispatch_many = counting, counting_many
    master.start = serving


def adopting(base: type) -> type:
    """The harness's launcher class ``base`` as one that records processes and adopts them."""

    class AdoptingLauncher(base):  # type: ignore[misc, valid-type]
        """Launches record ``launch <id> <pid> <start time>``; :meth:`adopt` proves them."""

        def __init__(self) -> None:
            super().__init__()
            self.launched = 0
            self.lost = 0
            self._lost: list[tuple[str, int | None]] = []
            self._records: tuple[dict[str, tuple[int, float]], set[str]] | None = None
            records, _ = self._read_records()
            self.next_pid = max((pid for pid, _ in records.values()), default=FIRST_PID - 1) + 1

        def launch(self, request: Any) -> tuple[int, float]:
            pid, started = self.next_pid, time.time()
            self.next_pid += 1
            self.launched += 1
            self.live.add(request.container_id)
            self.out.write(f"launch {request.container_id} {pid} {started!r}\n")
            return pid, started

        def _read_records(self) -> tuple[dict[str, tuple[int, float]], set[str]]:
            """What was launched (id -> pid, start time) and what has ended (exited or killed)."""
            records: dict[str, tuple[int, float]] = {}
            ended: set[str] = set()
            with open(os.path.join(self.sim, "launched")) as f:
                for line in f.read().splitlines():
                    verb, cid, *process = line.split()
                    if verb == "launch" and process:
                        records[cid] = (int(process[0]), float(process[1]))
                    elif verb == "kill":
                        ended.add(cid)
            for name in os.listdir(self.sim):
                if name.startswith("exited-"):
                    with open(os.path.join(self.sim, name)) as f:
                        ended.update(f.read().split())
            return records, ended

        def adopt(self, container_id: str, pid: int, started: float) -> bool:
            """As LocalLauncher.adopt: only the process launched as this container, still running."""
            if self._records is None:  # read once: adoption asks for every container in a row
                self._records = self._read_records()
            records, ended = self._records
            recorded = records.get(container_id)
            if recorded is None or recorded[0] != pid or abs(recorded[1] - started) > START_TOLERANCE \
                    or container_id in ended:
                self.lost += 1
                self._lost.append((container_id, None))
                return False
            self.live.add(container_id)
            return True

        def poll(self) -> list[tuple[str, int | None]]:
            ended, self._lost = self._lost, []
            return ended + super().poll()

    return AdoptingLauncher


# ---------------------------------------------------------------- the harness's side

class MasterProcess:
    """The master's process, and after :meth:`restart` the next attempt's; their CPU time and peak RSS."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: str, sim: str) -> None:
        self.cmd, self.env, self.cwd, self.sim = cmd, env, cwd, sim
        self.attempt = 0
        self.cpu_before = 0.0  # CPU seconds of the attempts that ended
        self.peak_rss = 0
        self.restarted_at = 0.0
        self._start()

    def _start(self) -> None:
        self.attempt += 1
        self.popen = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd)
        self.proc = psutil.Process(self.popen.pid)
        self.children_cpu: dict[int, float] = {}  # pid -> CPU seconds, of this attempt's children
        self.cpu0 = self._cpu()
        self.children_cpu0 = sum(self.children_cpu.values())

    def _cpu(self) -> float:
        """CPU seconds of the attempt's process and of its children (the umbilical's front
        process, :mod:`stram.master.umbilical.front`: part of the master), the latter also in :attr:`children_cpu`."""
        times = self.proc.cpu_times()
        for child in self._children():
            try:
                t = child.cpu_times()
            except psutil.Error:
                continue  # gone: its last figure stands
            self.children_cpu[child.pid] = t.user + t.system
        return times.user + times.system + sum(self.children_cpu.values())

    def _children(self) -> list[Any]:
        try:
            return self.proc.children(recursive=True)
        except psutil.Error:
            return []

    def sample(self) -> None:
        """Note the RSS, the children's with it (raises psutil.Error once the process is gone)."""
        rss = self.proc.memory_info().rss
        for child in self._children():
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                pass
        self.peak_rss = max(self.peak_rss, rss)

    def front_cpu_seconds(self) -> float:
        """The CPU seconds of the current attempt's children (its umbilical front) so far."""
        self._cpu()
        return sum(self.children_cpu.values()) - self.children_cpu0

    def cpu_seconds(self) -> float:
        return self.cpu_before + self._cpu() - self.cpu0

    def progress(self) -> dict[str, Any]:
        """What the current attempt recorded (:func:`watch`)."""
        return read_json(os.path.join(self.sim, f"progress-{self.attempt}.json"))

    def restart(self) -> None:
        """SIGKILL this attempt (no chance to write anything) and start the next one."""
        self.cpu_before = self.cpu_seconds()
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait()
        self.restarted_at = time.time()
        with open(os.path.join(self.sim, "restarted"), "w") as f:
            f.write(repr(self.restarted_at))
        self._start()

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def list_operators(home: str, app_id: str, root: str) -> tuple[float | None, int, str]:
    """Run ``stram list-operators APP`` (the CLI's entry point, ``stram.client.cli:main``, in a new
    interpreter, as a user would) with ``STRAM_HOME=home``: its wall time (None if it
    failed), the rows it printed, and the end of its stderr."""
    env = dict(os.environ, STRAM_HOME=home, PYTHONPATH=root)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "list-operators", app_id], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    rows = max(0, len(proc.stdout.strip().splitlines()) - 1)  # a header, then a row per operator
    return (took if proc.returncode == 0 else None), rows, proc.stderr[-2000:]


def split_latencies(latencies: list[float], starts: list[float], sim: str) -> list[float]:
    """The latencies of the calls that began after the restart (none without one)."""
    try:
        with open(os.path.join(sim, "restarted")) as f:
            at = float(f.read())
    except (OSError, ValueError):
        return []
    return [lat for lat, began in zip(latencies, starts) if began >= at]


class Umbilical:
    """An agent process's channel to the master; re-reads ``heartbeatUri`` when a call finds it gone
    (UNAVAILABLE: a new master attempt serves elsewhere), as a real agent does."""

    def __init__(self, app_dir: str) -> None:
        self.path = os.path.join(app_dir, "heartbeatUri")
        self.address = ""
        self.channels: list[Any] = []
        self.stub: Any = None
        #: The heartbeat methods taking a serialized request (what the harness sends): stream, unary.
        self.raw_stream: Any = None
        self.raw_unary: Any = None
        self.read_at = 0.0

    def connect(self) -> bool:
        """A channel to the address in heartbeatUri (a new one if it changed); False while there is none."""
        import grpc

        from stram import wire as proto
        self.read_at = time.monotonic()
        try:
            address = open(self.path).read().strip()
        except OSError:
            return False
        if address and address != self.address:
            self.address = address
            # the old channels are closed at the end: calls in flight on them fail by themselves
            self.channels.append(grpc.aio.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 64 << 20)]))
            self.stub = proto.StreamingContainerUmbilicalStub(self.channels[-1])
            answer = proto.ContainerHeartbeatResponse.FromString
            self.raw_stream = self.channels[-1].stream_stream(
                "/stram.StreamingContainerUmbilical/HeartbeatStream", response_deserializer=answer)
            self.raw_unary = self.channels[-1].unary_unary(
                "/stram.StreamingContainerUmbilical/ProcessHeartbeat", response_deserializer=answer)
        return bool(self.address)

    def failed(self, code: str) -> None:
        """A call failed with ``code``: on UNAVAILABLE, read heartbeatUri again (at most every 50 ms)."""
        if code == "UNAVAILABLE" and time.monotonic() - self.read_at > 0.05:
            self.connect()

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
