"""``python -m bench.nexmark --latency``: stram's window latency when the events are replayed at a fixed rate.

``python -m stram.nexmark run --rate R --json`` replays the data set at ``R`` events per second of wall
time: each kind's source paces its share of ``R`` from the moment it emitted its first row, and the run's
summary lists those moments (``sources``: operator, file, rate, ``started``). A source's row ``j`` goes out
no earlier than ``started + j / rate`` (later only when the run falls behind, which then counts as latency).

*The watermark passing a window's end* ``E``: a source's watermark is the largest event time it emitted
minus its out-of-orderness bound ``b`` (:data:`stram.nexmark.queries.OUT_OF_ORDERNESS_MS`, 0: the
generator writes events in time order), and a window ``[start, E)`` fires once the watermark is ``>= E``,
so the watermark passes ``E`` when a source emits its first row with event time ``>= E + b`` (the ``b``
waited for is the query's definition, not latency); with several sources (q8) the latest of them. That
moment is taken from the schedule above. stram declares a source's watermark at the end of the streaming
window the row went out in, so the figures include that wait (up to one streaming window).

The output directory is polled every 20 ms. ``written``: the first time a row of the window was seen in a
file (EXACTLY_ONCE writes a window's rows into a temporary file at the window's end, renamed to
``*.jsonl`` once the window is committed); ``committed``: seen in a ``*.jsonl`` file, what a reader of
the results sees, which waits for the next checkpoint (``CHECKPOINT_WINDOW_COUNT``; ``-D`` changes it).
Windows closed only by the end of input are left out. Only windowed queries (q5, q7, q8, q11) have
windows; the runs have one partition.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.nexmark import runner

WINDOWED = ("q5", "q7", "q8", "q11")
POLL_S = 0.02
#: Result files: committed (``*.jsonl``) and written, not yet committed (EXACTLY_ONCE's ``*.tmp``).
COMMITTED, WRITTEN = ".jsonl", ".tmp"


def no_rate() -> str:
    proc = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", "--help"], cwd=runner.ROOT,
                          capture_output=True, text=True)
    if "--rate" in proc.stdout:
        return ""
    return "this checkout's 'python -m stram.nexmark run' has no --rate (a replay rate for its source)"


def out_of_orderness_ms() -> int:
    """The queries' out-of-orderness bound (0 in checkouts that do not name it)."""
    try:
        from stram.nexmark.queries import OUT_OF_ORDERNESS_MS
    except ImportError:
        return 0
    return OUT_OF_ORDERNESS_MS


def kind_times(path: str) -> np.ndarray:
    """The event times of a data set file, in file order (the order its source emits them)."""
    import pyarrow.parquet as pq
    return pq.read_table(path, columns=["dateTime"]).column(0).to_numpy()


def scan(out: str, read: dict, written: dict, committed: dict, now: float) -> None:
    """Read the new complete lines of the result files; note when each window_end was first seen."""
    for root, _, files in os.walk(out):
        for name in files:
            if name.startswith((".", "_")) or not name.endswith((COMMITTED, WRITTEN)):
                continue
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    f.seek(read.get(path, 0))
                    chunk = f.read()
            except FileNotFoundError:   # a temporary file renamed since the walk
                continue
            end = chunk.rfind(b"\n") + 1
            read[path] = read.get(path, 0) + end
            for line in chunk[:end].splitlines():
                if line.strip():
                    window_end = json.loads(line)["window_end"]
                    written.setdefault(window_end, now)
                    if name.endswith(COMMITTED):
                        committed.setdefault(window_end, now)


def percentiles(values: list[float]) -> str:
    a = np.array(values)
    return f"p50 {np.percentile(a, 50) * 1000:,.0f} ms, p99 {np.percentile(a, 99) * 1000:,.0f} ms"


def passing_moments(sources: list[dict], window_ends: list[int], bound: int) -> dict[int, float]:
    """Per window end, the wall time (epoch s) the watermark passed it by the sources' schedules; ends
    passed only by the end of input are left out."""
    times = {s["path"]: kind_times(s["path"]) for s in sources}
    passed = {}
    for end in window_ends:
        moments = []
        for s in sources:
            ts = times[s["path"]]
            j = int(np.searchsorted(ts, end + bound, side="left"))
            if j >= len(ts):
                break
            moments.append(s["started"] + j / s["rate"])
        else:
            if moments:
                passed[end] = max(moments)
    return passed


def measure(query: str, data: str, rate: int, defines: list[str]) -> str:
    """One latency run of ``query``: its line of figures."""
    out = tempfile.mkdtemp(prefix=f"stram-latency-{query}-")
    os.rmdir(out)
    cmd = [sys.executable, "-m", "stram.nexmark", "run", query, "--data", data, "--out", out, "--partitions", "1",
           "--json", "--rate", str(rate), *[a for d in defines for a in ("-D", d)]]
    proc = subprocess.Popen(cmd, cwd=runner.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    read: dict = {}
    written: dict = {}
    committed: dict = {}
    while proc.poll() is None:
        scan(out, read, written, committed, time.time())
        time.sleep(POLL_S)
    scan(out, read, written, committed, time.time())
    stdout, err = proc.communicate()
    if proc.returncode != 0:
        return f"{query}: FAILED (exit {proc.returncode}): {err.decode(errors='replace').strip().splitlines()[-1:]}"
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    passed = passing_moments(summary.get("sources") or [], list(written), out_of_orderness_ms())
    if not passed:
        return f"{query}: no window closed before the end of input"
    lat_written = [written[end] - at for end, at in passed.items()]
    lat_committed = [committed[end] - at for end, at in passed.items() if end in committed]
    line = f"{query}: {len(passed)} windows at {rate:,} events/s: written {percentiles(lat_written)}"
    if lat_committed:
        line += f"; committed {percentiles(lat_committed)}"
    return line + f" ({summary['state']}, {summary['seconds']:.1f} s)"


def main(queries: list[str], rate: int, seconds: float, seed: int, data: str | None,
         defines: list[str] = ()) -> int:
    why = runner.stram_unavailable() or no_rate()
    if why:
        print(f"latency: skipped ({why})")
        return 0
    data, events = runner.dataset(int(rate * seconds), seed, data)
    print(f"data: {data} ({events:,} events, replayed at {rate:,} events/s)")
    for query in queries:
        if query not in WINDOWED:
            print(f"{query}: no windows (latency is for {', '.join(WINDOWED)})")
            continue
        print(measure(query, data, rate, list(defines)), flush=True)
    return 0
