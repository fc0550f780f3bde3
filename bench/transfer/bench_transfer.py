"""Tuples per second between two operators over each stream path (run on demand).

    python -m bench.transfer.bench_transfer [--tuples N] [--only TEXT]
    python -m bench.transfer.bench_transfer --tls [--repeat R]   # buffer-server paths, TLS off and on

Launches real local applications, a BlastSource feeding a count sink over THREAD_LOCAL,
CONTAINER_LOCAL and buffer-server streams (per-tuple and batch operators, strings and Arrow
batches), and prints tuples/s at the sink and the containers' peak RSS; the bytes paths also
in MB/s beside loopback TCP measured in the same run, since that bounds them, and beside
plain file writes where the buffer server spills. What each case and option is, and the
latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from stram.common.attributes import default as attribute_default

#: The repository: the applications are launched from it (their operators are ``bench.bench_ops``).
ROOT = pathlib.Path(__file__).resolve().parents[2]

SPEC = """
name: bench-{name}
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 200, HEARTBEAT_INTERVAL_MILLIS: 500, CHECKPOINT_WINDOW_COUNT: {checkpoint},
             BUFFER_MEMORY_MB: {memory_mb}, BUFFER_LAG_MB: {lag_mb}, TLS: {tls}}}
operators:
  source: {{class: "bench.bench_ops:BlastSource", properties: {{count: {count}, size: {size}, arrow: {arrow}, batch: {batch}, batched: {batched}, ring: {ring}}}}}
  sink: {{class: "bench.bench_ops:{sink}", properties: {{result: "{result}"}}}}
streams:
  s: {{from: source.output, to: [sink.input]{locality}{codec}}}
"""


#: The spec's BUFFER_MEMORY_MB in bytes by default: a publisher spills what it keeps beyond it.
SPILL_ABOVE = 512 << 20
#: CHECKPOINT_WINDOW_COUNT by default: 200 s of windows, longer than any run (nothing is committed).
NO_CHECKPOINT = 1000
#: BUFFER_LAG_MB of the applications unless --lag-mb says otherwise: the attribute's default.
LAG_MB = attribute_default("BUFFER_LAG_MB")


def peak_rss(app_home: str, stop: threading.Event, out: dict) -> None:
    """Sample the RSS of this benchmark's container processes until ``stop``."""
    while not stop.is_set():
        for proc in psutil.process_iter(["pid"]):
            try:
                env = proc.environ()
                if env.get("STRAM_HOME") == app_home and env.get("STRAM_CONTAINER_ID"):
                    cid = env["STRAM_CONTAINER_ID"]
                    out[cid] = max(out.get(cid, 0), proc.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)


def run(name: str, count: int, size: int, locality: str | None, arrow: bool = False,
        batched: bool = False, rows: int = 1000, ring: int = 0, tls: bool = False, checkpoint: int = NO_CHECKPOINT,
        memory: int = SPILL_ABOVE, lag_mb: int | None = LAG_MB) -> dict:
    """One application moving ``count`` tuples of ``size`` bytes (Arrow: ``rows`` to a record batch;
    ``ring``: the source cycles through that many distinct batches, else it makes each anew)."""
    home = tempfile.mkdtemp(prefix="stram-bench-")
    result = os.path.join(home, "result.json")
    spec = os.path.join(home, "spec.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(name=name, memory_mb=memory >> 20, lag_mb="null" if lag_mb is None else lag_mb,
                            count=count, size=size, checkpoint=checkpoint,
                            arrow=str(arrow).lower(),
                            batch=rows if arrow else 4096, result=result, batched=str(batched).lower(), ring=ring,
                            sink="RowCountSink" if arrow else "BatchCountSink" if batched else "CountSink",
                            locality=f", locality: {locality}" if locality else "",
                            codec=", codec: arrow" if arrow else "", tls=str(tls).lower()))
    env = dict(os.environ, STRAM_HOME=home, STRAM_LOG_LEVEL="WARNING")
    rss: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=peak_rss, args=(home, stop, rss), daemon=True)
    sampler.start()
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", spec], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: launch failed:\n{proc.stderr[-2000:]}")
    with open(result) as f:
        measured = json.load(f)
    return {"name": name, "tuples": measured["tuples"], "rate": measured["tuples"] / measured["seconds"],
            "peak_rss_mb": {k: round(v / 2**20) for k, v in sorted(rss.items())}}


_RECEIVER = """
import socket, sys
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
view = memoryview(bytearray(int(sys.argv[1])))
total = 0
while n := conn.recv_into(view):
    total += n
print(total, flush=True)
"""


def loopback_rate(total: int = 2 << 30) -> float:
    """Bytes/s of plain TCP on 127.0.0.1 between two Python processes, sending and receiving in
    the sizes a buffer server and its subscriber do (a subscriber's batch, ``recv_into`` a reused
    buffer of the subscriber's size): the ceiling a buffer-server stream is measured against."""
    import socket

    from stram.agent.bufferserver.connection import _RECV_SIZE
    from stram.agent.bufferserver.store import _SEND_BUDGET as chunk

    proc = subprocess.Popen([sys.executable, "-c", _RECEIVER, str(_RECV_SIZE)], stdout=subprocess.PIPE,
                            text=True)
    port = int(proc.stdout.readline())
    data = b"x" * chunk
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        for _ in range(total // chunk):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = int(proc.stdout.readline())
        took = time.perf_counter() - started
    proc.wait()
    return received / took


def disk_write_rate(total: int = 1 << 30, chunk: int = 1 << 20) -> float:
    """Bytes/s of plain 1 MB writes (no fsync, as a spill writes) of ``total`` bytes to a new file
    where the applications' spill files go (this benchmark's STRAM_HOME, under the temp directory)."""
    data = b"x" * chunk
    with tempfile.NamedTemporaryFile(prefix="stram-bench-disk-") as f:
        started = time.perf_counter()
        for _ in range(total // chunk):
            f.write(data)
        f.flush()
        took = time.perf_counter() - started
    return total / took


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.transfer.bench_transfer",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=3_000_000, help="64-byte tuples per run")
    parser.add_argument("--tls", action="store_true", help="buffer-server paths only, TLS off and on side by side")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of --tls (default 3)")
    parser.add_argument("--only", default="", help="run only the paths whose names contain this text")
    parser.add_argument("--checkpoint-windows", type=int, default=NO_CHECKPOINT, metavar="N",
                        help="checkpoint every N windows of 200 ms, committing windows during the run "
                             f"(default {NO_CHECKPOINT}: none committed)")
    parser.add_argument("--buffer-memory-mb", type=int, default=SPILL_ABOVE >> 20, metavar="MB",
                        help=f"BUFFER_MEMORY_MB of the applications (default {SPILL_ABOVE >> 20})")
    parser.add_argument("--lag-mb", type=int, default=LAG_MB, metavar="MB",
                        help=f"BUFFER_LAG_MB, the buffer server's flow control (default {LAG_MB}; 0: none, the "
                             "publisher runs ahead of its subscriber as far as memory and disk go)")
    args = parser.parse_args()
    n = args.tuples
    memory = args.buffer_memory_mb << 20
    if args.tls:
        compare_tls(n, args.repeat)
        return
    cases = [
        ("THREAD_LOCAL 64B", n, 64, "THREAD_LOCAL", False),
        ("CONTAINER_LOCAL 64B", n, 64, "CONTAINER_LOCAL", False),
        ("buffer server 64B", n, 64, None, False),
        ("THREAD_LOCAL 4KiB", n // 10, 4096, "THREAD_LOCAL", False),
        ("CONTAINER_LOCAL 4KiB", n // 10, 4096, "CONTAINER_LOCAL", False),
        ("buffer server 4KiB", n // 10, 4096, None, False),
        ("buffer server Arrow 64B rows", n * 4, 64, None, True),
        # Spark's default Arrow batch (spark.sql.execution.arrow.maxRecordsPerBatch)
        ("buffer server Arrow 10k rows", n * 4, 64, None, True, False, 10_000),
        # the transfer path alone: 64 distinct batches (41 MB, more than the caches) sent in turn,
        # so the source allocates no new pages (a fresh batch each time costs it most of its thread)
        ("buffer server Arrow 10k rows, ring", n * 4, 64, None, True, False, 10_000, 64),
        # batch operators at both ends (emit_batch, process_batch)
        ("THREAD_LOCAL 64B batch ops", n * 4, 64, "THREAD_LOCAL", False, True),
        ("CONTAINER_LOCAL 64B batch ops", n * 4, 64, "CONTAINER_LOCAL", False, True),
        ("buffer server 64B batch ops", n, 64, None, False, True),
        ("buffer server 4KiB batch ops", n // 10, 4096, None, False, True),
    ]
    apex = {"THREAD_LOCAL 64B": 39.9e6, "CONTAINER_LOCAL 64B": 4.29e6, "buffer server 64B": 0.83e6}
    print(f"{'path':<30} {'tuples':>11} {'tuples/s':>13} {'vs Apex':>9}  peak RSS per container (MB)")
    loopback = disk = 0.0
    for case in cases:
        if args.only not in case[0]:
            continue
        r = run(*case, checkpoint=args.checkpoint_windows, memory=memory, lag_mb=args.lag_mb or None)
        ref = apex.get(r["name"])
        ratio = f"{r['rate'] / ref:8.2f}x" if ref else ""
        print(f"{r['name']:<30} {r['tuples']:>11,} {r['rate']:>13,.0f} {ratio:>9}  {r['peak_rss_mb']}", flush=True)
        if case[2] == 4096 or case[4]:  # bytes/s beside plain loopback TCP, measured now
            loopback = loopback or loopback_rate()
            per_tuple = case[2] + 4 if case[4] else case[2]  # Arrow: a 4-byte offset per row
            moved = r["rate"] * per_tuple
            print(f"{'':<30} {moved / 1e6:>11,.0f} MB/s = {moved / loopback:.0%} of loopback TCP "
                  f"({loopback / 1e6:,.0f} MB/s)", flush=True)
            retained = r["tuples"] * per_tuple
            if case[3] is None and retained > memory and args.checkpoint_windows == NO_CHECKPOINT:
                # no window is committed during a run: the publisher keeps every byte, and what does
                # not fit BUFFER_MEMORY_MB is written to its spill files on the way
                disk = disk or disk_write_rate()
                print(f"{'':<30} {(retained - memory) / 1e6:>11,.0f} MB or more spilled of "
                      f"{retained / 1e6:,.0f} MB kept; plain file writes here: {disk / 1e6:,.0f} MB/s", flush=True)


def compare_tls(n: int, rounds: int) -> None:
    """Each buffer-server path with TLS off, then on, ``rounds`` times; medians and their ratio."""
    import statistics

    cases = [("buffer server 64B batch ops", n, 64, None, False, True),
             ("buffer server 4KiB batch ops", n // 10, 4096, None, False, True),
             ("buffer server Arrow 64B rows", n * 4, 64, None, True, False)]
    print(f"{'path':<30} {'plain tuples/s':>15} {'TLS tuples/s':>13} {'TLS/plain':>10}  {'TLS MB/s':>9}")
    for name, count, size, locality, arrow, batched in cases:
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for tls in (False, True):
                rates[tls].append(run(name, count, size, locality, arrow, batched, tls=tls)["rate"])
        plain, secure = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"{name:<30} {plain:>15,.0f} {secure:>13,.0f} {secure / plain:>10.2f}  "
              f"{secure * size / 1e6:>9,.0f}", flush=True)


if __name__ == "__main__":
    main()
