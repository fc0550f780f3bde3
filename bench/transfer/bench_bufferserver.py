"""Benchmark of the buffer server: publisher process -> buffer server -> subscriber process.

    python -m bench.transfer.bench_bufferserver [--seconds 3] [--case pickle-64B ...] [--mode inproc tcp]

The buffer server alone, without master or agents: a publisher encodes and publishes windows
(``inproc``: through the server in its own process, as an agent publishes; ``tcp``: to a server
process with :class:`RemotePublisher`), a subscriber process reads them over TCP, decodes every
batch and purges each finished window. Prints tuples/s, MB/s of tuple data and on the wire,
and every process's peak RSS, beside Apache Apex's buffer server (:data:`APEX_REFERENCE`).
Latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import sys
import threading
import time
from dataclasses import dataclass

import psutil

from stram.agent.bufferserver import BufferServer, MessageType, RemotePublisher, Subscriber, purge
from stram.agent.engine.codec import get_codec

TOKEN = b"bench-token"
PUBLISHER_ID = "1.output"
#: Tuples/s of 64-byte tuples through Apache Apex's buffer server: the reference printed beside.
APEX_REFERENCE = 830_000


@dataclass(frozen=True)
class Case:
    """One workload: tuples of ``tuple_bytes`` bytes, ``batch`` per frame."""

    name: str
    codec: str
    tuple_bytes: int
    batch: int
    batches_per_window: int


CASES = {
    "pickle-64B": Case("pickle-64B", "pickle", 64, 1000, 100),
    "pickle-4KiB": Case("pickle-4KiB", "pickle", 4096, 1000, 4),
    "arrow-64B": Case("arrow-64B", "arrow", 64, 10_000, 20),
}


class PeakRss:
    """Samples this process's RSS every 5 ms in a daemon thread."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        return max(self.peak, self.proc.memory_info().rss)


def make_batch(case: Case) -> list:
    """One batch of tuples of exactly ``case.tuple_bytes`` bytes of data each."""
    if case.codec == "arrow":
        import pyarrow as pa
        n = case.batch
        # int64 + float64 + 48-byte string = 64 bytes per row
        return [pa.record_batch({
            "id": pa.array(range(n), pa.int64()),
            "value": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            "name": pa.array([f"{i:048d}" for i in range(n)], pa.string()),
        })]
    return [f"{i:0{case.tuple_bytes}d}" for i in range(case.batch)]


def tuples_in(decoded: list, codec: str) -> int:
    return sum(b.num_rows for b in decoded) if codec == "arrow" else len(decoded)


def run_server(addr_q, stop_evt) -> None:
    """Process: a stand-alone buffer server (mode ``tcp``)."""
    rss = PeakRss()
    srv = BufferServer(TOKEN, memory_limit_mb=64)
    addr_q.put(srv.start())
    stop_evt.wait()
    srv.stop()
    addr_q.put(("server", rss.stop()))


def run_publisher(case: Case, seconds: float, mode: str, addr, addr_q, sub_ready, sub_done, out_q) -> None:
    """Process: encodes and publishes windows of the case for ``seconds``."""
    rss = PeakRss()
    codec = get_codec(case.codec)
    batch = make_batch(case)
    srv = None
    if mode == "inproc":
        srv = BufferServer(TOKEN, memory_limit_mb=64)
        addr_q.put(srv.start())
    sub_ready.wait()
    t0 = time.monotonic()
    if srv is not None:
        pub = srv.publisher(PUBLISHER_ID, 0)
    else:
        pub = RemotePublisher(addr[0], addr[1], TOKEN, PUBLISHER_ID, 0)
    w = 0
    while time.monotonic() - t0 < seconds:
        w += 1
        pub.begin_window(w)
        for i in range(case.batches_per_window):
            pub.payload(i, codec.encode_parts(batch))  # as a PublisherSink does
        pub.end_window(w)
    pub.end_stream()
    pub.close()
    out_q.put(("publisher", {"t0": t0, "tuples": w * case.batches_per_window * case.batch}))
    if srv is not None:
        sub_done.wait()          # keep serving until the subscriber has everything
        srv.stop()
    out_q.put(("publisher-rss", rss.stop()))


def run_subscriber(case: Case, addr, sub_ready, sub_done, out_q) -> None:
    """Process: subscribes over TCP, decodes every batch, purges finished windows."""
    rss = PeakRss()
    codec = get_codec(case.codec)
    host, port = addr
    sub = Subscriber(host, port, TOKEN, PUBLISHER_ID, 0, subscriber_id="bench", alloc=codec.receive_buffer)
    first = sub.poll(0.01)            # connected and subscribed before the publisher starts
    sub_ready.set()
    tuples = 0
    for mtype, value in itertools.chain(first, sub.messages()):
        if mtype == MessageType.PAYLOAD:
            tuples += tuples_in(codec.decode(value[1]), case.codec)
        elif mtype == MessageType.END_WINDOW:
            purge(host, port, TOKEN, PUBLISHER_ID, value)
    t_end = time.monotonic()
    sub_done.set()
    out_q.put(("subscriber", {"tuples": tuples, "t_end": t_end, "wire": sub.bytes_received,
                              "rss": rss.stop()}))


def run_case(case: Case, mode: str, seconds: float) -> dict:
    ctx = mp.get_context("spawn")

    addr_q, out_q = ctx.Queue(), ctx.Queue()
    sub_ready, sub_done, stop_evt = ctx.Event(), ctx.Event(), ctx.Event()
    procs = []
    addr = None
    if mode == "tcp":
        server = ctx.Process(target=run_server, args=(addr_q, stop_evt))
        server.start()
        procs.append(server)
        addr = addr_q.get(timeout=30)
    publisher = ctx.Process(target=run_publisher, args=(case, seconds, mode, addr, addr_q, sub_ready, sub_done, out_q))
    publisher.start()
    procs.append(publisher)
    if mode == "inproc":
        addr = addr_q.get(timeout=30)
    subscriber = ctx.Process(target=run_subscriber, args=(case, addr, sub_ready, sub_done, out_q))
    subscriber.start()
    procs.append(subscriber)
    results: dict = {}
    while not {"publisher", "subscriber", "publisher-rss"} <= results.keys():
        kind, value = out_q.get(timeout=600)
        results[kind] = value
    stop_evt.set()
    if mode == "tcp":
        kind, value = addr_q.get(timeout=30)
        results[kind] = value
    for p in procs:
        p.join(30)
    sub, pub = results["subscriber"], results["publisher"]
    elapsed = sub["t_end"] - pub["t0"]
    assert sub["tuples"] == pub["tuples"], ("tuples lost or duplicated", sub["tuples"], pub["tuples"])
    return {
        "case": case.name, "mode": mode, "tuples": sub["tuples"], "seconds": elapsed,
        "tuples_per_s": sub["tuples"] / elapsed,
        "data_mb_per_s": sub["tuples"] * case.tuple_bytes / elapsed / 1e6,
        "wire_mb_per_s": sub["wire"] / elapsed / 1e6,
        "rss_publisher": results["publisher-rss"], "rss_subscriber": sub["rss"],
        "rss_server": results.get("server"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.transfer.bench_bufferserver",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="target duration of each run")
    parser.add_argument("--case", nargs="*", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--mode", nargs="*", choices=["inproc", "tcp"], default=["inproc", "tcp"])
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; prints each run")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"buffer server benchmark: {os.cpu_count()} CPUs (load {load:.1f}), Python {sys.version.split()[0]}; "
          f"Apex reference {APEX_REFERENCE / 1e6:.2f}M tuples/s (64-byte tuples)")
    header = (f"{'case':<12} {'mode':<7} {'tuples':>11} {'sec':>6} {'tuples/s':>12} {'data MB/s':>10} "
              f"{'wire MB/s':>10} {'RSS pub':>8} {'RSS srv':>8} {'RSS sub':>8}")
    print(header)
    print("-" * len(header))
    mib = 1 << 20
    runs = [(mode, name) for mode in args.mode for name in args.case for _ in range(args.repeat)]
    for mode, name in runs:
        r = run_case(CASES[name], mode, args.seconds)
        srv = f"{r['rss_server'] / mib:7.0f}M" if r["rss_server"] else "  (pub)"
        print(f"{r['case']:<12} {r['mode']:<7} {r['tuples']:>11,} {r['seconds']:>6.2f} "
              f"{r['tuples_per_s']:>12,.0f} {r['data_mb_per_s']:>10.1f} {r['wire_mb_per_s']:>10.1f} "
              f"{r['rss_publisher'] / mib:7.0f}M {srv:>8} {r['rss_subscriber'] / mib:7.0f}M", flush=True)


if __name__ == "__main__":
    main()
