"""Wall time of the word count over Moby-Dick ×N, in one container and across containers (run on demand).

    python -m bench.peers.bench_wordcount [--repeat 20] [--runs 3] [--layouts one,split] [--compare DIR]

Launches ``specs/wordcount.yaml`` on Moby-Dick repeated ``--repeat`` times, checks the output
exact against a direct count, and prints the median wall time of the whole ``stram launch``
(start-up included) and the peaks of the summed RSS and PSS of the application's processes,
beside a plain Python loop (the floor); ``--compare DIR`` runs another checkout beside this one,
interleaved, to tell a change's effect under the same machine load. Layouts, memory figures and
the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import psutil

#: The repository: the launches' working directory, and where specs/ lies.
ROOT = pathlib.Path(__file__).resolve().parents[2]

LAYOUTS = {
    "one": ["-D", "streams.lines.locality=CONTAINER_LOCAL", "-D", "streams.words.locality=CONTAINER_LOCAL",
            "-D", "streams.counts.locality=CONTAINER_LOCAL"],
    "split": ["-D", "operators.count.partitions=2"],
}


def truth(path: str) -> Counter:
    counts: Counter = Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(re.findall(r"[a-z0-9]+", line.lower()))
    return counts


def read_sums(out: str) -> Counter:
    sums: Counter = Counter()
    for f in sorted(pathlib.Path(out).rglob("*.jsonl")):
        with open(f) as lines:
            for line in lines:
                row = json.loads(line)
                sums[row["key"]] += row["count"]
    return sums


def memory(procs: list) -> tuple[int, int]:
    """(summed RSS, summed PSS) of ``procs``: RSS counts a shared library once per process that
    maps it (grpc's in the master and the container), PSS shares it out."""
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
    return rss, pss


def sample_rss(home: str, stop: threading.Event, peak: list) -> None:
    """Peaks of the summed RSS and PSS (``peak[0]``, ``peak[1]``) of the processes that carry
    ``STRAM_HOME=home``."""
    while not stop.is_set():
        procs = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get("STRAM_HOME") == home:
                    procs.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        rss, pss = memory(procs)
        peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
        time.sleep(0.1)


def run_stram(layout: str, text: str, want: Counter, root: pathlib.Path = ROOT) -> tuple[float, int, int]:
    home = tempfile.mkdtemp(prefix="stram-bench-wc-")
    out = os.path.join(home, "out")
    env = dict(os.environ, STRAM_HOME=home, STRAM_LOG_LEVEL="WARNING")
    peak = [0, 0]
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(home, stop, peak), daemon=True)
    sampler.start()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", "specs/wordcount.yaml",
                           "-D", f"operators.reader.path={text}", "-D", "operators.reader.lines_per_window=null",
                           "-D", f"operators.out.path={out}", *LAYOUTS[layout]],
                          cwd=root, env=dict(env, PYTHONPATH=str(root)), capture_output=True, text=True)
    took = time.perf_counter() - started
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{layout}: launch failed:\n{proc.stderr[-2000:]}")
    got = read_sums(out)
    if got != want:
        raise RuntimeError(f"{layout}: wrong counts ({sum(got.values())} words, want {sum(want.values())})")
    return took, peak[0], peak[1]


def run_loop(text: str, want: Counter) -> tuple[float, int, int]:
    code = ("import re,sys,collections\nc=collections.Counter()\nf=re.compile(r'[a-z0-9]+').findall\n"
            "for line in open(sys.argv[1],encoding='utf-8',errors='replace'): c.update(f(line.lower()))\n"
            "print(sum(c.values()))")
    started = time.perf_counter()
    proc = psutil.Popen([sys.executable, "-c", code, text], stdout=subprocess.PIPE, text=True)
    peak = [0, 0]
    while proc.poll() is None:
        rss, pss = memory([proc])
        peak = [max(peak[0], rss), max(peak[1], pss)]
        time.sleep(0.05)
    out = proc.stdout.read()
    took = time.perf_counter() - started
    if int(out) != sum(want.values()):
        raise RuntimeError("plain loop: wrong count")
    return took, peak[0], peak[1]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.bench_wordcount", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="copies of Moby-Dick in the input")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per system (median printed)")
    parser.add_argument("--layouts", default="one,split", help="comma-separated: one, split")
    parser.add_argument("--compare", default="", help="another stram checkout to run beside this one")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="stram-bench-wc-")
    text = os.path.join(work, "moby.txt")
    with open(ROOT / "specs" / "data" / "moby-dick.txt", "rb") as f:
        data = f.read()
    with open(text, "wb") as f:
        f.write(data * args.repeat)
    want = truth(text)
    print(f"input: {os.path.getsize(text):,} bytes, {sum(want.values()):,} words, {len(want):,} distinct")
    layouts = [x for x in args.layouts.split(",") if x]
    systems = ["loop"] + [f"{x}@{c}" for x in layouts for c in (["compare", "this"] if args.compare else ["this"])]
    roots = {"this": ROOT, "compare": pathlib.Path(args.compare).resolve() if args.compare else ROOT}
    results: dict[str, list] = {s: [] for s in systems}
    for _ in range(args.runs):
        for system in systems:
            layout, _, which = system.partition("@")
            results[system].append(run_loop(text, want) if system == "loop"
                                   else run_stram(layout, text, want, roots[which]))
            took, rss, pss = results[system][-1]
            print(f"  run {len(results[system])}: {system:<16} {took:7.2f} s {rss / 2**20:6.0f} MB RSS "
                  f"{pss / 2**20:6.0f} MB PSS", flush=True)
    floor = statistics.median(r[0] for r in results["loop"])
    print(f"{'system':<38} {'wall s (median)':>16} {'runs':>24} {'x loop':>7} {'RSS MB':>7} {'PSS MB':>7}")
    for system in systems:
        times = [r[0] for r in results[system]]
        med = statistics.median(times)
        layout, _, which = system.partition("@")
        name = {"loop": "plain Python loop", "one": "stram one container",
                "split": "stram split/count x2"}[layout] + (f" ({which})" if args.compare else "")
        print(f"{name:<38} {med:>16.2f} {' '.join(f'{t:.2f}' for t in times):>24} {med / floor:>7.2f} "
              f"{max(r[1] for r in results[system]) / 2**20:>7.0f} {max(r[2] for r in results[system]) / 2**20:>7.0f}")


if __name__ == "__main__":
    main()
