"""The umbilical's own cost per heartbeat: the master's gRPC server with no state behind it.

    python -m bench.heartbeats.bench_umbilical --streams 2000 --seconds 20 --interval-ms 1000
    python -m bench.heartbeats.bench_umbilical --streams 200 --interval-ms 0     # as fast as it answers

The master's real server (``stram.master.umbilical.server``) in a process of its own, with a
dispatcher that answers every heartbeat at once, under simulated containers streaming
heartbeats over ``HeartbeatStream``: what a heartbeat costs the master before its state sees
it. With :mod:`bench.heartbeats.profile_heartbeats` (the state's share) and
:mod:`bench.heartbeats.bench_heartbeats` (the whole master) it tells where a heartbeat's CPU
goes. CPU time, not wall time. What it prints, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import queue
import sys
import time
from typing import Any

from bench.heartbeats.heartbeat_master import own_cpu_seconds

TOKEN = "bench-umbilical-" + "0" * 16
#: The application's windows: ids as the master numbers them (seconds << 32 | index).
WINDOW_MS = 500


def serve(out: Any, stop: Any) -> None:
    """Process: the umbilical server, answering every heartbeat with one fixed response."""
    from stram import wire as proto
    from stram.master.umbilical.server import UmbilicalServicer, create_server

    response = proto.ContainerHeartbeatResponse(heartbeat_interval_millis=1000, committed_window_id=1)
    counted = {"heartbeats": 0, "batches": 0}

    def answer_all(events: list) -> list:
        counted["heartbeats"] += len(events)
        counted["batches"] += 1
        return [response] * len(events)

    servicer = UmbilicalServicer(lambda event: response, TOKEN, dispatch_many=answer_all)
    server, port = create_server(servicer, host="127.0.0.1", port=0)
    began = own_cpu_seconds()  # the imports and the server's start are not the heartbeats' cost
    out.put(("port", port))
    stop.wait()
    out.put(("server", {**counted, "cpu_s": own_cpu_seconds() - began}))
    server.stop(0)


def agents(index: int, port: int, streams: int, operators: int, windows: int, interval: float,
           seconds: float, out: Any) -> None:
    """Process: ``streams`` simulated containers, each on its own HeartbeatStream call."""
    import grpc

    from bench.heartbeats.heartbeat_wire import SimContainer
    from stram import wire as proto
    from stram.common.secret import container_credential

    start_ms = int(time.time() * 1000) - 3_600_000
    ctx = proto.StreamingContainerContext(streaming_window_size_millis=WINDOW_MS, start_window_millis=start_ms,
                                          checkpoint_window_count=60)
    base = (start_ms // 1000) << 32

    async def run() -> int:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        stub = proto.StreamingContainerUmbilicalStub(channel)
        end = time.monotonic() + seconds
        answered = 0

        async def container(n: int) -> None:
            nonlocal answered
            c = SimContainer(f"container_{index}_{n:06d}", os.getpid())
            c.ops = {n * operators + k: 0 for k in range(operators)}
            metadata = ((proto.TOKEN_METADATA_KEY, container_credential(TOKEN, c.id)),
                        (proto.CONTAINER_METADATA_KEY, c.id))
            call = stub.HeartbeatStream(metadata=metadata)
            await asyncio.sleep(interval * n / streams)  # spread over the interval, as agents start
            while time.monotonic() < end:
                now = int(time.time() * 1000)
                current = base | (now - start_ms) // WINDOW_MS
                for op in c.ops:  # each operator reports the last ``windows`` windows
                    c.ops[op] = current - windows
                await call.write(c.heartbeat(proto, ctx, now))
                if await call.read() is grpc.aio.EOF:
                    raise RuntimeError(f"{c.id}: the server ended the call")
                answered += 1
                if interval:
                    await asyncio.sleep(interval)
            await call.done_writing()

        await asyncio.gather(*(container(n) for n in range(streams)))
        await channel.close()
        return answered

    began = own_cpu_seconds()
    answered = asyncio.run(run())
    out.put(("agents", {"answered": answered, "cpu_s": own_cpu_seconds() - began}))


def _take(out: Any, procs: list, timeout: float) -> tuple[str, Any]:
    """The next report on ``out``; a clear error when one of ``procs`` died first or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited with code {dead[0].exitcode} (its traceback is above)")
    raise RuntimeError(f"no report within {timeout:.0f} s")


def measure(streams: int, operators: int, windows: int, interval_ms: int, seconds: float, procs: int) -> dict:
    spawn = mp.get_context("spawn")
    out, stop = spawn.Queue(), spawn.Event()
    server = spawn.Process(target=serve, args=(out, stop), name="the umbilical server")
    server.start()
    _, port = _take(out, [server], 60)
    shares = [streams // procs + (1 if i < streams % procs else 0) for i in range(procs)]
    clients = [spawn.Process(target=agents, args=(i, port, n, operators, windows, interval_ms / 1000,
                                                  seconds, out), name=f"agent process {i}")
               for i, n in enumerate(shares) if n]
    t0 = time.monotonic()
    for c in clients:
        c.start()
    got: dict[str, Any] = {"answered": 0, "agents_cpu_s": 0.0}
    for _ in clients:
        _, figures = _take(out, [server, *clients], seconds + 120)
        got["answered"] += figures["answered"]
        got["agents_cpu_s"] += figures["cpu_s"]
    wall = time.monotonic() - t0
    stop.set()
    _, served = _take(out, [server], 60)
    for p in (*clients, server):
        p.join(30)
    beats = max(served["heartbeats"], 1)
    return {"streams": streams, "operators": operators, "windows": windows, "interval_ms": interval_ms,
            "seconds": round(wall, 1), "heartbeats": served["heartbeats"], "answered": got["answered"],
            "heartbeats_per_s": round(served["heartbeats"] / wall, 1),
            "server_cpu_pct": round(100 * served["cpu_s"] / wall, 1),
            "server_ms_per_hb": round(1000 * served["cpu_s"] / beats, 3),
            "agents_ms_per_hb": round(1000 * got["agents_cpu_s"] / beats, 3),
            "batch_mean": round(served["heartbeats"] / max(served["batches"], 1), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeats.bench_umbilical",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000, help="simulated containers (default 2000)")
    parser.add_argument("--operators", type=int, default=10, help="operators per container (default 10)")
    parser.add_argument("--windows", type=int, default=2,
                        help="windows each operator reports per heartbeat (default 2: 500 ms windows, 1 s apart)")
    parser.add_argument("--interval-ms", type=int, default=1000,
                        help="each container's heartbeat interval (default 1000; 0: at once after the answer)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of heartbeats (default 20)")
    parser.add_argument("--procs", type=int, default=2, help="agent processes (default 2)")
    args = parser.parse_args()
    if args.streams < 1 or args.procs < 1 or args.operators < 1 or args.windows < 0 or args.seconds <= 0:
        parser.error("--streams, --procs and --operators must be at least 1, --windows at least 0, "
                     "--seconds more than 0")
    try:
        r = measure(args.streams, args.operators, args.windows, args.interval_ms, args.seconds, args.procs)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{r['streams']} streams x {r['operators']} operators x {r['windows']} windows, {r['seconds']} s: "
          f"{r['heartbeats_per_s']} heartbeats/s answered by the umbilical alone; "
          f"its CPU {r['server_ms_per_hb']} ms a heartbeat ({r['server_cpu_pct']}% of a core), "
          f"the agents' {r['agents_ms_per_hb']} ms; {r['batch_mean']} heartbeats a batch")
    print(" ".join(f"{k}={v}" for k, v in r.items()))
    return 0 if r["heartbeats"] == r["answered"] else 1


if __name__ == "__main__":
    sys.exit(main())
