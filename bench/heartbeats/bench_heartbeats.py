"""The master under heartbeat load: C containers x K operators of simulated agents over real gRPC.

    python -m bench.heartbeats.bench_heartbeats             # 100x10, 500x10, 2000x10 for 60 s each
    python -m bench.heartbeats.bench_heartbeats --containers 2000 --operators 10 --seconds 120
    python -m bench.heartbeats.bench_heartbeats --profile   # also a cProfile of the master
    python -m bench.heartbeats.bench_heartbeats --containers 2000 --operators 10 --seconds 40 --restart-at 20

The production master (gRPC server, dispatcher, state, journal, admin API) runs in its own
process; only its launcher starts nothing: agent processes of this harness follow what it
launches and heartbeat for every container as real agents do. It tells whether a master keeps
up with thousands of containers, and where its time goes when it does not. What each printed
figure means, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import pathlib
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

from bench.heartbeats import heartbeat_master, heartbeat_report
from bench.heartbeats.heartbeat_wire import SimContainer
from stram.common import apps

#: The repository: the master's and the agents' working directory.
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: This module, run again as the master's process (``--master``) and the agent processes (``--agents``).
MODULE = "bench.heartbeats.bench_heartbeats"

#: Partitions per chain of the generated DAG (the spec allows at most 256 per operator).
CHAIN_WIDTH = 250
SIM = "sim"
#: The application's id; its directory is ``$STRAM_HOME/apps/<APP_ID>`` under a temporary STRAM_HOME.
APP_ID = "application_0_0001"


def spec_yaml(containers: int, operators: int, interval_ms: int, window_ms: int, checkpoint_count: int,
              timeout_ms: int, max_interval_ms: int | None = None, front_from: int | None = None) -> str:
    """``containers`` CONTAINER_LOCAL chains of ``operators`` operators: one chain partition per container."""
    chains = max(1, math.ceil(containers / CHAIN_WIDTH))
    widths = [containers // chains + (1 if c < containers % chains else 0) for c in range(chains)]
    lines = ["name: heartbeat-load", "attributes:",
             f"  HEARTBEAT_INTERVAL_MILLIS: {interval_ms}", f"  STREAMING_WINDOW_SIZE_MILLIS: {window_ms}",
             f"  CHECKPOINT_WINDOW_COUNT: {checkpoint_count}", f"  HEARTBEAT_TIMEOUT_MILLIS: {timeout_ms}",
             *([f"  HEARTBEAT_MAX_INTERVAL_MILLIS: {max_interval_ms}"] if max_interval_ms else []),
             *([f"  UMBILICAL_PROCESS_MIN_CONTAINERS: {front_from}"] if front_from is not None else []),
             "  RECOVERY_ATTEMPTS: 1000000", "operators:"]
    for c, width in enumerate(widths):
        for k in range(operators):
            cls = "Source" if k == 0 else "Relay"
            lines.append(f"  c{c}o{k}: {{class: 'bench.heartbeats.heartbeat_ops:{cls}', partitions: {width}}}")
    lines.append("streams:")
    for c in range(chains):
        for k in range(operators - 1):
            lines.append(f"  c{c}s{k}: {{from: c{c}o{k}.output, to: [c{c}o{k + 1}.input], "
                         f"locality: CONTAINER_LOCAL}}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the master's side

def run_master(app_dir: str, profile: bool, adopt: bool) -> int:
    """``--master``: the production AppMaster with a launcher that only writes what it launches.

    ``adopt`` (with ``--restart-at``): the launcher records a pid and start time per launch and
    adopts containers as LocalLauncher does (:func:`bench.heartbeats.heartbeat_master.adopting`).
    """
    import logging

    from stram.master.launch.local import ContainerRequest, Launcher
    from stram.master.process.master import AppMaster
    from stram.master.spec import AppSpec

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        filename=os.path.join(app_dir, "master.log"))
    sim = os.path.join(app_dir, SIM)

    class FileLauncher(Launcher):
        """Launches by appending the container id to ``sim/launched``; exits are read from ``sim/exited-*``."""

        def __init__(self) -> None:
            self.sim = sim
            self.out = open(os.path.join(sim, "launched"), "a", buffering=1)
            self.live: set[str] = set()
            self.seen: dict[str, int] = {}

        def launch(self, request: ContainerRequest) -> None:
            self.live.add(request.container_id)
            self.out.write(f"launch {request.container_id}\n")

        def kill(self, container_id: str) -> None:
            if container_id in self.live:
                self.out.write(f"kill {container_id}\n")

        def poll(self) -> list[tuple[str, int | None]]:
            if os.path.exists(os.path.join(sim, "done")):  # the agent processes have all exited
                ended = [(cid, -9) for cid in sorted(self.live)]
                self.live.clear()
                return ended
            ended = []
            for name in os.listdir(sim):
                if not name.startswith("exited-"):
                    continue
                with open(os.path.join(sim, name)) as f:
                    f.seek(self.seen.get(name, 0))
                    text = f.read()
                    complete = text[:text.rfind("\n") + 1]
                    self.seen[name] = self.seen.get(name, 0) + len(complete.encode())
                for cid in complete.split():
                    if cid in self.live:
                        self.live.discard(cid)
                        ended.append((cid, -9))
            return ended

        def stop_all(self, grace: float = 5.0) -> None:
            for cid in list(self.live):
                self.kill(cid)
            self.live.clear()

        def running(self) -> list[str]:
            return sorted(self.live)

    with open(os.path.join(app_dir, "spec.yaml")) as f:
        spec = AppSpec.from_yaml(f.read(), source="spec.yaml")
    token = open(os.path.join(sim, "token")).read().strip()
    launcher = heartbeat_master.adopting(FileLauncher)() if adopt else FileLauncher()
    started = time.perf_counter()
    # the garbage collector tuned as in a master process (python -m stram.master)
    master = AppMaster(spec, APP_ID, f"file://{app_dir}", token, launcher, host="127.0.0.1", tune_gc=True)
    figures: dict[str, Any] = {"plan_seconds": time.perf_counter() - started}
    heartbeat_master.watch(master, sim, figures["plan_seconds"], started)
    journal_times: list[float] = []
    committed_times: list[float] = []
    journal_file = os.path.join(app_dir, "journal", "snapshot")
    journal_write = master.journal

    def timed_journal() -> None:
        t0 = time.perf_counter()
        before = master._journal_key
        journal_write()
        if master._journal_key is not before:
            journal_times.append(time.perf_counter() - t0)

    master.dispatcher.journal = timed_journal  # type: ignore[attr-defined]
    update = master.state.committed_window.update

    def timed_update(state: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return update(state)
        finally:
            committed_times.append(time.perf_counter() - t0)

    master.state.committed_window.update = timed_update  # type: ignore[method-assign]
    batches: list[int] = []  # sizes of the heartbeat batches (Dispatcher.dispatch_many)
    dispatch_many = master.dispatch_many

    def counted_many(events: list[Any]) -> list[Any]:
        batches.append(len(events))
        return dispatch_many(events)

    master.dispatch_many = counted_many
    pauses: list[tuple[float, int, float]] = []  # each cyclic collection: its end, generation, seconds
    gc_began = [0.0]

    def gc_timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_began[0] = time.perf_counter()
        else:
            pauses.append((time.time(), info["generation"], time.perf_counter() - gc_began[0]))

    gc.callbacks.append(gc_timed)
    answers: list[float] = []  # in the master: each heartbeat's arrival to its answer (what its pacer sees)
    answered_at: list[float] = []  # and when (wall clock), to tell the steady state's apart
    pacer = master.state.pacer
    observe = pacer.observe

    def timed_observe(seconds: float) -> None:
        answers.append(seconds)
        answered_at.append(time.time())
        observe(seconds)

    pacer.observe = timed_observe  # type: ignore[method-assign]
    profiler = None
    if profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()

    def stop(*_: Any) -> None:
        master.dispatch(__import__("stram.master.core.events", fromlist=["KillApp"]).KillApp(int(time.time() * 1000)))

    signal.signal(signal.SIGTERM, stop)
    master.run()
    gc.callbacks.remove(gc_timed)  # not the interpreter's collection at exit
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(app_dir, "master.prof"))
    journal_dir = os.path.dirname(journal_file)
    journal_bytes = sum(os.path.getsize(os.path.join(journal_dir, name)) for name in os.listdir(journal_dir))
    writer = master.journal_writer
    figures.update(journal_snapshots=writer.snapshots, journal_lines=writer.lines,
                   journal_compactions=getattr(writer, "compactions", 0))
    deployed_at = heartbeat_master.read_json(os.path.join(sim, f"progress-{master.state.attempt}.json")).get(
        "deployed_at")
    if deployed_at is not None:  # answered once every operator was ACTIVE: the master apart from the agents
        steady = sorted(a for a, at in zip(answers, answered_at) if at >= deployed_at)
        if steady:
            figures["steady_answer_ms"] = {"p50": 1000 * steady[len(steady) // 2],
                                           "p99": 1000 * steady[int(0.99 * (len(steady) - 1))]}
    figures["gc"] = _gc_figures(pauses, deployed_at)
    figures.update(journal_writes=len(journal_times), journal_ms=_ms(journal_times), journal_bytes=journal_bytes,
                   committed_updates=len(committed_times), committed_ms=_ms(committed_times),
                   batches=len(batches), batch_mean=sum(batches) / len(batches) if batches else 0.0,
                   batch_max=max(batches, default=0), answer_ms=_ms(answers), interval_ms=pacer.interval_ms)
    with open(os.path.join(sim, "master.json"), "w") as f:
        json.dump(figures, f)
    return 0


def _gc_figures(collections: list[tuple[float, int, float]], deployed_at: float | None) -> dict[str, float]:
    """The garbage collector's pauses in the master: per generation how many and the longest, and
    those once every operator was ACTIVE (the ``gc_*`` figures, bench/README.md)."""
    figures: dict[str, float] = {}
    for name, generation in (("gc_young", 0), ("gc_gen1", 1), ("gc_full", 2)):
        pauses = [s for _, gen, s in collections if gen == generation]
        figures.update({name: len(pauses), f"{name}_max_ms": round(1000 * max(pauses, default=0.0), 1)})
    steady = [s for at, _, s in collections if deployed_at is not None and at >= deployed_at]
    return {**figures, "gc_steady": len(steady), "gc_steady_max_ms": round(1000 * max(steady, default=0.0), 1),
            "gc_steady_total_ms": round(1000 * sum(steady), 1)}


def _ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {"mean": 1000 * statistics.fmean(ordered), "p99": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
            "max": 1000 * ordered[-1]}


# ---------------------------------------------------------------- the simulated agents

async def _agents(app_dir: str, index: int, procs: int, seconds: float, lose_every: float, seed: int,
                  unary: bool = False) -> None:  # noqa: PLR0913
    import grpc

    from stram import wire as proto
    sim = os.path.join(app_dir, SIM)
    token = open(os.path.join(sim, "token")).read().strip()
    umbilical = heartbeat_master.Umbilical(app_dir)
    while not umbilical.connect():
        await asyncio.sleep(0.05)
    from stram.common.secret import container_credential
    latencies: list[float] = []
    starts: list[float] = []  # when each call began (wall clock), to tell calls after a restart
    errors: dict[str, int] = {}
    details: list[str] = []  # the first failures, with when (seconds into the run) and why
    containers: dict[str, SimContainer] = {}
    tasks: list[asyncio.Task] = []
    exited = open(os.path.join(sim, f"exited-{index}"), "a", buffering=1)
    rng = random.Random(seed + index)
    began_at = time.monotonic()
    end = began_at + seconds

    def failed(call: str, exc: Any) -> None:
        errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
        if len(details) < 20:
            details.append(f"{call} at {time.monotonic() - began_at:.1f} s: {exc.code().name} {exc.details()}")

    async def run_container(c: SimContainer) -> None:
        # each agent presents its own credential, as a real one does (the master checks it per call)
        metadata = ((proto.TOKEN_METADATA_KEY, container_credential(token, c.id)),
                    (proto.CONTAINER_METADATA_KEY, c.id))
        delay = 0.1  # after UNAVAILABLE: a real agent's backoff (stram.agent.agent), doubling up to 2 s
        ctx = None
        while ctx is None and not c.ended and time.monotonic() < end:
            try:
                ctx = await umbilical.stub.GetInitContext(proto.InitContextRequest(container_id=c.id),
                                                          metadata=metadata, timeout=30)
            except grpc.aio.AioRpcError as exc:
                failed("GetInitContext", exc)
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT):
                    return  # refused: a real agent gives up too (any other failure it retries)
                umbilical.failed(exc.code().name)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)
        if ctx is None:
            return
        interval = ctx.heartbeat_interval_millis / 1000
        # the first heartbeat at once, as stram.agent.agent sends it: the containers' moments apart come
        # from when each got its init context (a random wait of up to an interval here put every
        # operator ACTIVE up to a second later than real agents would be)
        stream = None  # as the real agent: heartbeats over one HeartbeatStream call (unary with --unary)
        while not c.ended and time.monotonic() < end:
            request = c.heartbeat_bytes(ctx, int(time.time() * 1000))
            began, t0 = time.time(), time.perf_counter()
            try:
                if unary:
                    response = await umbilical.raw_unary(request, metadata=metadata, timeout=30)
                else:
                    if stream is None:
                        stream = umbilical.raw_stream(metadata=metadata)
                    await stream.write(request)
                    if hasattr(asyncio, "timeout"):  # Python 3.11: no task per read, as wait_for makes
                        async with asyncio.timeout(30):
                            response = await stream.read()
                    else:
                        response = await asyncio.wait_for(stream.read(), 30)
                    if response is grpc.aio.EOF:
                        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, "stream ended")
            except (grpc.aio.AioRpcError, asyncio.TimeoutError, asyncio.InvalidStateError) as exc:
                if stream is not None:  # a write to a call that ended raises InvalidStateError
                    stream.cancel()
                    stream = None
                if not isinstance(exc, grpc.aio.AioRpcError):
                    exc = grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED if isinstance(
                        exc, asyncio.TimeoutError) else grpc.StatusCode.UNAVAILABLE, None, None, str(exc))
                failed("heartbeat", exc)
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    umbilical.failed(exc.code().name)
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 2.0)
                else:
                    await asyncio.sleep(interval)
                continue
            delay = 0.1
            latencies.append(time.perf_counter() - t0)
            starts.append(began)
            for info in response.deploy_request:
                c.ops[info.id] = info.checkpoint.window_id
            for op_id in response.undeploy_request:
                c.ops.pop(op_id, None)
            if response.shutdown:
                c.ended = True
                exited.write(f"{c.id}\n")
                if stream is not None:
                    await stream.done_writing()
                return
            interval = (response.heartbeat_interval_millis or ctx.heartbeat_interval_millis) / 1000
            if not response.deploy_request:  # a real agent heartbeats again at once after a deploy
                # and otherwise an interval after it sent the last one (stram.agent.agent), not after
                # the answer: a slow answer does not move its next heartbeat later
                await asyncio.sleep(max(0.0, interval - (time.perf_counter() - t0)))

    async def follow_launches() -> None:
        offset = 0
        path = os.path.join(sim, "launched")
        last_loss = time.monotonic()
        while time.monotonic() < end:
            with open(path) as f:
                f.seek(offset)
                text = f.read()
            complete = text[:text.rfind("\n") + 1]
            offset += len(complete.encode())
            for line in complete.splitlines():
                verb, cid, *process = line.split()  # "launch <id> [<pid> <start time>]" or "kill <id>"
                if zlib.crc32(cid.encode()) % procs != index:
                    continue
                if verb == "launch":
                    containers[cid] = SimContainer(cid, int(process[0]) if process else 1000 + index)
                    tasks.append(asyncio.ensure_future(run_container(containers[cid])))
                elif verb == "kill" and cid in containers and not containers[cid].ended:
                    containers[cid].ended = True
                    exited.write(f"{cid}\n")
            if lose_every and time.monotonic() - last_loss > lose_every:
                live = [c for c in containers.values() if not c.ended and c.ops]
                if live:
                    victim = rng.choice(live)
                    victim.ended = True
                    exited.write(f"{victim.id}\n")
                last_loss = time.monotonic()
            await asyncio.sleep(0.1)

    await follow_launches()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await umbilical.close()
    with open(os.path.join(sim, f"agents-{index}.json"), "w") as f:
        json.dump({"latencies": latencies, "errors": errors, "details": details, "containers": len(containers),
                   "cpu_s": heartbeat_master.own_cpu_seconds(),  # the harness's share, apart from the master's
                   "after_restart": heartbeat_master.split_latencies(latencies, starts, sim),
                   "starts": starts}, f)


# ---------------------------------------------------------------- the run

def measure(containers: int, operators: int, seconds: float, procs: int, interval_ms: int, lose_every: float,
            profile: bool, keep: bool, restart_at: float = 0.0, unary: bool = False,
            max_interval_ms: int | None = None, front_from: int | None = None, checkpoint_windows: int = 10,
            admin_every: float = 5.0) -> dict[str, Any]:
    import psutil

    home = tempfile.mkdtemp(prefix="stram-bench-hb-")  # STRAM_HOME: the CLI finds the application there
    app_dir = os.path.join(home, "apps", APP_ID)
    sim = os.path.join(app_dir, SIM)
    os.makedirs(sim)
    with open(os.path.join(app_dir, "spec.yaml"), "w") as f:
        f.write(spec_yaml(containers, operators, interval_ms, 500, checkpoint_windows, 30_000, max_interval_ms,
                          front_from))
    token = secrets.token_hex(16)
    with open(os.open(os.path.join(sim, "token"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:  # the harness's
        f.write(token)
    os.environ["STRAM_HOME"] = home  # the CLI's copy, where `stram list-operators` looks for it
    apps.write_token(APP_ID, token)
    open(os.path.join(sim, "launched"), "w").close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    me = [sys.executable, "-m", MODULE]
    master = heartbeat_master.MasterProcess(
        [*me, "--master", app_dir] + (["--profile"] if profile else []) + (["--adopt"] if restart_at else []),
        env, str(ROOT), sim)
    agents = [subprocess.Popen([*me, "--agents", app_dir, "--index", str(i), "--procs", str(procs),
                                "--seconds", str(seconds), "--lose-every", str(lose_every)]
                               + (["--unary"] if unary else []), env=env, cwd=ROOT)
              for i in range(procs)]
    t0 = time.monotonic()
    admin_ms: list[float] = []
    next_admin = t0 + admin_every if admin_every else math.inf
    cli: tuple[float | None, int, str] | None = None
    while any(a.poll() is None for a in agents):
        try:
            master.sample()
        except psutil.Error:
            break
        if cli is None and "deploy_s" in master.progress():  # every operator ACTIVE: the CLI, once
            cli = heartbeat_master.list_operators(home, APP_ID, str(ROOT))
        # the restart comes once the first attempt has deployed everything (on a loaded machine
        # later than asked): a master killed mid-deploy is another case, and its CLI figures would be lost
        if restart_at and master.attempt == 1 and cli is not None and time.monotonic() - t0 >= restart_at:
            master.restart()
        if cli is not None and time.monotonic() > next_admin:  # from the end of the deploy on
            try:
                url = json.load(open(os.path.join(app_dir, "admin.json")))["url"]
                a0 = time.perf_counter()
                rows = read_operators_page(url, token)
                admin_ms.append(1000 * (time.perf_counter() - a0))
                if rows != containers * operators:
                    raise RuntimeError(f"the operators page had {rows} rows, not {containers * operators}")
            except OSError:  # not up yet
                pass
            next_admin = time.monotonic() + admin_every
        time.sleep(0.25)
    cpu = master.cpu_seconds()
    front_cpu = master.front_cpu_seconds()
    wall = time.monotonic() - t0
    open(os.path.join(sim, "done"), "w").close()
    master.stop()
    latencies: list[float] = []
    after: list[float] = []
    mfig = heartbeat_master.read_json(os.path.join(sim, "master.json"))  # the last attempt's
    first, second = (heartbeat_master.read_json(os.path.join(sim, f"progress-{n}.json")) for n in (1, 2))
    errors: dict[str, int] = {}
    details: list[str] = []
    deployed_at = first.get("deployed_at")  # wall clock; heartbeats begun later are the steady state's
    steady: list[float] = []
    by_second: dict[int, list[float]] = {}  # the steady state's latencies by the second they began in
    harness_cpu = 0.0
    for i in range(procs):
        with open(os.path.join(sim, f"agents-{i}.json")) as f:
            doc = json.load(f)
        latencies += doc["latencies"]
        after += doc["after_restart"]
        if deployed_at is not None:
            for lat, began in zip(doc["latencies"], doc["starts"]):
                if began >= deployed_at:
                    steady.append(lat)
                    by_second.setdefault(int(began - deployed_at), []).append(lat)
        details += doc["details"][:3]
        harness_cpu += doc["cpu_s"]
        for k, v in doc["errors"].items():
            errors[k] = errors.get(k, 0) + v
    log_text = open(os.path.join(app_dir, "master.log"), errors="replace").read()
    timeouts = log_text.count("no heartbeat from")
    latencies.sort()
    after.sort()
    steady.sort()
    slow_seconds = heartbeat_report.slow_seconds(by_second)
    answered = max(len(latencies), 1)
    pick = lambda q, xs=latencies: 1000 * xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0  # noqa: E731
    result = {
        "containers": containers, "operators": operators * containers, "seconds": round(wall, 1),
        "transport": "unary" if unary else "stream",
        "heartbeats": len(latencies), "heartbeats_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(pick(0.50), 2), "p99_ms": round(pick(0.99), 2), "max_ms": round(pick(1.0), 2),
        # heartbeats begun once every operator was ACTIVE, and the interval the master asked for at the end
        "steady_heartbeats": len(steady), "steady_p50_ms": round(pick(0.50, steady), 2),
        "steady_p99_ms": round(pick(0.99, steady), 2), "interval_ms": mfig.get("interval_ms", interval_ms),
        "steady_s": len(by_second), "steady_slow_s": len(slow_seconds), "steady_slow_at": slow_seconds,
        "errors": sum(errors.values()), "error_codes": errors, "first_errors": details, "timeouts": timeouts,
        "master_cpu_pct": round(100 * cpu / wall, 1),
        # of which its umbilical's front process (stram.master.umbilical.front; 0: served in the master's own)
        "front_cpu_pct": round(100 * front_cpu / wall, 1),
        # CPU per heartbeat answered: the master's, and the simulated agents' (the harness, apart)
        "master_ms_per_hb": round(1000 * cpu / answered, 3),
        "harness_cpu_pct": round(100 * harness_cpu / wall, 1),
        "harness_ms_per_hb": round(1000 * harness_cpu / answered, 3),
        "master_rss_mb": round(master.peak_rss / (1 << 20), 1),
        "plan_s": round(first.get("plan_seconds", mfig.get("plan_seconds", 0.0)), 2),
        "journal_writes": mfig.get("journal_writes", 0),
        "journal_ms_mean": round(mfig.get("journal_ms", {}).get("mean", 0.0), 2),
        "journal_ms_p99": round(mfig.get("journal_ms", {}).get("p99", 0.0), 2),
        "journal_ms_max": round(mfig.get("journal_ms", {}).get("max", 0.0), 2),
        "journal_kb": round(mfig.get("journal_bytes", 0) / 1024, 1),
        "journal_snapshots": mfig.get("journal_snapshots", 0), "journal_lines": mfig.get("journal_lines", 0),
        "journal_compactions": mfig.get("journal_compactions", 0),
        "batch_mean": round(mfig.get("batch_mean", 0.0), 1), "batch_max": mfig.get("batch_max", 0),
        "master_answer_ms_mean": round(mfig.get("answer_ms", {}).get("mean", 0.0), 2),
        "master_answer_ms_p99": round(mfig.get("answer_ms", {}).get("p99", 0.0), 2),
        "steady_master_answer_ms_p50": round(mfig.get("steady_answer_ms", {}).get("p50", 0.0), 2),
        "steady_master_answer_ms_p99": round(mfig.get("steady_answer_ms", {}).get("p99", 0.0), 2),
        "committed_ms_mean": round(mfig.get("committed_ms", {}).get("mean", 0.0), 3),
        "committed_ms_max": round(mfig.get("committed_ms", {}).get("max", 0.0), 3),
        "admin_operators_ms": round(statistics.median(admin_ms), 1) if admin_ms else None,
        **mfig.get("gc", {}),
        # from when planning began (the AppMaster's construction) until every operator is ACTIVE
        "deploy_s": _round(first.get("deploy_s")),
        "deploy_from_process_start_s": _round(first.get("since_process_start_s")),
        "list_operators_s": _round(cli[0] if cli else None), "list_operators_rows": cli[1] if cli else None,
    }
    if cli and cli[0] is None:
        print(f"stram list-operators failed:\n{cli[2]}", file=sys.stderr)
    if restart_at:  # the second attempt: from its process's start; what it launched until resumed
        result.update(restart_resume_s=_round(second.get("since_process_start_s")),
                      restart_serving_s=_round(second.get("serving_s")),
                      restart_restore_s=_round(second.get("restore_seconds"), 4),  # ms on small plans
                      relaunched=second.get("launched"), lost=second.get("lost"),
                      p99_after_restart_ms=round(pick(0.99, after), 2), heartbeats_after_restart=len(after))
    if profile:
        result["profile"] = os.path.join(app_dir, "master.prof")
    if keep or profile:
        result["app_dir"] = app_dir
    else:
        shutil.rmtree(home, ignore_errors=True)
    return result


def read_operators_page(url: str, token: str) -> int:
    """Read the admin API's ``operators`` page as a client on another machine would; its rows.

    The body is not parsed: parsing it here cost CPU on the cores the master and the simulated
    agents share, and heartbeats queued behind it (bench/README.md has the figures). A client of
    the console runs elsewhere."""
    import urllib.request
    req = urllib.request.Request(url.rstrip("/") + "/ws/v2/stram/operators",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as answer:
        body = answer.read()
    if not (body.startswith(b'{"operators":[') and body.rstrip().endswith(b"]}")):
        raise ValueError(f"not an operators page: {body[:200]!r}")
    return body.count(b'"current_window":')


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeats.bench_heartbeats",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, help="containers (default: 100, 500 and 2000 in turn)")
    parser.add_argument("--operators", type=int, default=10, help="operators per container (default 10)")
    parser.add_argument("--seconds", type=float, default=60, help="seconds of heartbeats per configuration")
    parser.add_argument("--procs", type=int, default=2, help="agent processes (default 2)")
    parser.add_argument("--interval-ms", type=int, default=1000, help="HEARTBEAT_INTERVAL_MILLIS (default 1000)")
    parser.add_argument("--max-interval-ms", type=int, metavar="MS",
                        help="HEARTBEAT_MAX_INTERVAL_MILLIS (default: the attribute's, a third of the timeout; "
                             "the --interval-ms value keeps the interval fixed)")
    parser.add_argument("--front-from", type=int, metavar="C",
                        help="UMBILICAL_PROCESS_MIN_CONTAINERS: the umbilical is served by a process of its own "
                             "from C containers on (default: the attribute's, 500)")
    parser.add_argument("--lose-every", type=float, default=0.0, metavar="S",
                        help="let a simulated container die every S seconds per agent process (default never)")
    parser.add_argument("--checkpoint-windows", type=int, default=10, metavar="N",
                        help="CHECKPOINT_WINDOW_COUNT (default 10: a checkpoint every 5 s)")
    parser.add_argument("--admin-every", type=float, default=5.0, metavar="S",
                        help="read the admin API's operators page every S seconds from the end of the deploy "
                             "(default 5; 0: never)")
    parser.add_argument("--profile", action="store_true", help="cProfile the master (prints the file)")
    parser.add_argument("--keep", action="store_true", help="keep the application directory")
    parser.add_argument("--restart-at", type=float, default=0.0, metavar="S",
                        help="after S seconds (once every operator is ACTIVE) SIGKILL the master and start "
                             "its next attempt from the journal")
    parser.add_argument("--adopt", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--master", metavar="APP_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--agents", metavar="APP_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--unary", action="store_true",
                        help="heartbeat with unary ProcessHeartbeat calls (default: HeartbeatStream, as agents do)")
    args = parser.parse_args()
    if args.master:
        return run_master(args.master, args.profile, args.adopt)
    if args.agents:
        asyncio.run(_agents(args.agents, args.index, args.procs, args.seconds, args.lose_every, args.seed,
                            args.unary))
        return 0
    for containers in ([args.containers] if args.containers else [100, 500, 2000]):
        heartbeat_report.report(measure(
            containers, args.operators, args.seconds, args.procs, args.interval_ms, args.lose_every, args.profile,
            args.keep, args.restart_at, args.unary, args.max_interval_ms, args.front_from, args.checkpoint_windows,
            args.admin_every))
    return 0


if __name__ == "__main__":
    sys.exit(main())
