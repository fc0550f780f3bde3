"""Benchmark: records/s from a local TCP source through a SocketTextReceiver, with and without the WAL.

    python -m bench.transfer.bench_receiver [--lines 1000000] [--line-bytes 40]

Each configuration launches a real local application: ``rx`` (SocketTextReceiver) -> ``count``
(CountingSink, in another container). A TCP server sends ``--lines`` lines as fast as the
receiver takes them; the rate is lines / (time the count reached ``--lines`` - time the source
accepted the connection), so start-up is not counted. It tells what the receiver's write-ahead
log costs. Latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

from stram.operator import InputPort, Operator

#: The repository: the applications are launched from it (their sink is this module's CountingSink).
ROOT = str(pathlib.Path(__file__).resolve().parents[2])


class CountingSink(Operator):
    """Counts tuples; metric ``count`` with the wall time it first reached ``expect``."""

    input = InputPort()
    expect: int = 0
    transient = ("_context",)

    def __init__(self) -> None:
        self.count = 0
        self.done_at: Optional[float] = None
        self._context: Any = None

    def setup(self, context: Any) -> None:
        self._context = context

    def process_input(self, tuple: Any) -> None:
        self.count += 1

    def end_window(self) -> None:
        if self.done_at is None and self.expect and self.count >= self.expect:
            self.done_at = time.time()
        self._context.set_metric("count", {"count": self.count, "done_at": self.done_at})


class BlastSource:
    """Sends ``lines`` numbered lines to the first connection as fast as it takes them."""

    def __init__(self, lines: int, line_bytes: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        pad = "x" * max(line_bytes - 12, 0)
        self.chunks = []
        step = 10_000
        for start in range(0, lines, step):
            self.chunks.append("".join(f"{i:010d} {pad}\n" for i in range(start, min(start + step, lines)))
                               .encode())
        self.accepted_at: Optional[float] = None
        self.sent_at: Optional[float] = None
        self._conn: Optional[socket.socket] = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        self._conn = conn
        self.accepted_at = time.time()
        for chunk in self.chunks:
            conn.sendall(chunk)
        self.sent_at = time.time()  # kept open: an end of stream would make the receiver reconnect

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self.server.close()


def run(label: str, lines: int, line_bytes: int, wal: bool, tmp: str) -> dict[str, Any]:
    from stram.client import commands as stram_client
    from stram.common import apps as stram_apps
    from stram.common.errors import StramError
    source = BlastSource(lines, line_bytes)
    spec = {
        "name": f"bench-receiver-{label}",
        "attributes": {"RECEIVER_WAL": wal, "STREAMING_WINDOW_SIZE_MILLIS": 200,
                       "CHECKPOINT_WINDOW_COUNT": 10, "HEARTBEAT_INTERVAL_MILLIS": 300},
        "operators": {
            "rx": {"class": "stram.receivers:SocketTextReceiver",
                   "properties": {"host": "127.0.0.1", "port": source.port}},
            "count": {"class": "bench.transfer.bench_receiver:CountingSink", "properties": {"expect": lines}},
        },
        "streams": {"lines": {"from": "rx.output", "to": ["count.input"]}},
    }
    path = os.path.join(tmp, f"{label}.yaml")
    with open(path, "w") as f:
        json.dump(spec, f)
    out = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", path, "--detach"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    app_id = out.stdout.strip().splitlines()[-1]
    try:
        deadline = time.monotonic() + 300
        result: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                rows = stram_client.admin(stram_apps.find_app(app_id), "operators")["operators"]
            except StramError:
                rows = []
            metrics = {r["name"]: r.get("metrics") or {} for r in rows}
            done = (metrics.get("count", {}).get("count") or {}).get("done_at")
            if "receiver" in metrics.get("rx", {}):
                result["receiver"] = metrics["rx"]["receiver"]
            if done:
                seconds = done - (source.accepted_at or done)
                result.update(label=label, lines=lines, seconds=seconds,
                              records_per_sec=lines / seconds if seconds > 0 else float("inf"))
                return result
            time.sleep(0.2)
        raise SystemExit(f"{label}: the count did not reach {lines} lines in 300 s (app {app_id})")
    finally:
        source.close()
        subprocess.run([sys.executable, "-m", "stram.client.cli", "kill-app", app_id],
                       capture_output=True, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transfer.bench_receiver", description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--line-bytes", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-receiver-") as tmp:
        os.environ.setdefault("STRAM_HOME", os.path.join(tmp, "stram-home"))
        results = [run("no-wal", args.lines, args.line_bytes, False, tmp),
                   run("wal", args.lines, args.line_bytes, True, tmp)]
    print(f"{args.lines} lines of {args.line_bytes} bytes, SocketTextReceiver -> CountingSink "
          f"(another container)")
    for r in results:
        rx = r.get("receiver", {})
        print(f"  {r['label']:>7}: {r['records_per_sec']:>12,.0f} records/s  ({r['seconds']:.2f} s; "
              f"{rx.get('blocks', '?')} blocks)")
    print(f"  WAL / no WAL: {results[1]['records_per_sec'] / results[0]['records_per_sec']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
