"""``python -m bench.nexmark --latency``: stram's window latency when the events are replayed at a fixed rate.

The source replays the data set at ``--rate`` events per second of wall time (``stram.nexmark run
--rate``), so event ``i`` (in event order) is emitted ``i / rate`` seconds after the source starts, and the
watermark passes a window's end when the first event at or after that end is emitted. The output
directory is polled every 20 ms; a window's latency is the time its first result row was seen written
minus that moment. The source's start is not reported by the run, so the moment is counted from the
process's start: every figure includes the run's start-up (the same for all windows); ``min`` estimates
it, and the p50/p99 above it are printed too. Only windowed queries (q5, q7, q8, q11) have windows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.nexmark import check, runner

WINDOWED = ("q5", "q7", "q8", "q11")
POLL_S = 0.02


def no_rate() -> str:
    proc = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", "--help"], cwd=runner.ROOT,
                          capture_output=True, text=True)
    if "--rate" in proc.stdout:
        return ""
    return "this checkout's 'python -m stram.nexmark run' has no --rate (a replay rate for its source)"


def event_times(data: str) -> np.ndarray:
    import pyarrow.parquet as pq
    parts = [pq.read_table(os.path.join(data, f"{k}.parquet"), columns=["dateTime"]).column(0).to_numpy()
             for k in ("person", "auction", "bid")]
    return np.sort(np.concatenate(parts), kind="stable")


def scan(out: str, read: dict, seen: dict, now: float) -> None:
    """Read the new complete lines of the result files; note when each window_end was first seen."""
    for path in check.result_files(out, ".jsonl") if os.path.isdir(out) else []:
        with open(path, "rb") as f:
            f.seek(read.get(path, 0))
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        read[path] = read.get(path, 0) + end
        for line in chunk[:end].splitlines():
            if line.strip():
                seen.setdefault(json.loads(line)["window_end"], now)


def percentiles(values: list[float]) -> str:
    a = np.array(values)
    return f"p50 {np.percentile(a, 50) * 1000:,.0f} ms, p99 {np.percentile(a, 99) * 1000:,.0f} ms"


def main(queries: list[str], rate: int, seconds: float, seed: int, data: str | None) -> int:
    why = runner.stram_unavailable() or no_rate()
    if why:
        print(f"latency: skipped ({why})")
        return 0
    data, events = runner.dataset(int(rate * seconds), seed, data)
    times = event_times(data)
    for query in queries:
        if query not in WINDOWED:
            print(f"{query}: no windows (latency is for {', '.join(WINDOWED)})")
            continue
        out = tempfile.mkdtemp(prefix=f"stram-latency-{query}-")
        os.rmdir(out)
        cmd = [sys.executable, "-m", "stram.nexmark", "run", query, "--data", data, "--out", out, "--partitions", "1",
               "--json", "--rate", str(rate)]
        start = time.time()
        proc = subprocess.Popen(cmd, cwd=runner.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        read: dict = {}
        seen: dict = {}
        while proc.poll() is None:
            scan(out, read, seen, time.time())
            time.sleep(POLL_S)
        scan(out, read, seen, time.time())
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode != 0:
            print(f"{query}: FAILED (exit {proc.returncode}): {err.strip().splitlines()[-1:] }")
            continue
        # windows closed only by the end of input have no event past them: left out
        passed = {end: start + np.searchsorted(times, end) / rate for end in seen if end <= times[-1]}
        lat = [seen[end] - at for end, at in passed.items()]
        if not lat:
            print(f"{query}: no window closed before the end of input")
            continue
        floor = min(lat)
        print(f"{query}: {len(lat)} windows at {rate:,} events/s: {percentiles(lat)} (from the process's start; "
              f"min {floor * 1000:,.0f} ms); above the min: {percentiles([x - floor for x in lat])}")
    return 0
