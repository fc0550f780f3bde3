"""Where the time of a short ``stram launch`` goes, from the command to the last process gone (run on demand).

    python -m bench.startup.bench_startup [--runs 7] [--lines 2000] [--windows 10] [--compare DIR] [--no-compile]
    python -m bench.startup.bench_startup --layout split      # reader and probe in two containers

Launches a one-container application (a LineReader feeding :class:`bench.bench_ops.FirstWindowSink`,
this checkout's whichever stram runs it) and times each step from the moment ``stram launch``
starts, read from the master's and the containers' logs and the probe: the plan, the container
up, deployed, the first tuple and the first processed window, the last operator's end,
SUCCEEDED and the command's return. ``--compare DIR`` runs another checkout interleaved and
prints the ratio of each median. The steps, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

#: This checkout: its bench.bench_ops is the probe, whichever checkout's stram runs it.
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The source folders of a checkout (an older one may lack some: only those present are compiled).
PACKAGES = ("stram", "appmaster", "container", "proto", "scripts")
STEPS = ("plan", "container", "deployed", "first_tuple", "first_window", "last_end", "succeeded", "returned",
         "end_path")

SPEC = """name: startup
attributes:
  STREAMING_WINDOW_SIZE_MILLIS: 200
operators:
  reader:
    class: stram.operators.io:LineReader
    properties: {{path: {text}, lines_per_window: {per_window}}}
  probe:
    class: bench.bench_ops:FirstWindowSink
    properties: {{result: {probe}}}
streams:
  lines: {{from: reader.output, to: [probe.input]{locality}}}
"""
LOCALITY = {"one": ", locality: CONTAINER_LOCAL", "split": ""}


def _log_time(path: str, needle: str, last: bool = False) -> float:
    """The wall-clock time of the first (``last``: the last) line of log ``path`` that holds ``needle``."""
    found = [line for line in open(path, errors="replace") if needle in line]
    if not found:
        raise RuntimeError(f"no {needle!r} in {path}")
    return datetime.datetime.strptime(found[-1 if last else 0][:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def run_once(root: pathlib.Path, lines: int, windows: int, layout: str = "one") -> dict[str, float]:
    home = tempfile.mkdtemp(prefix="stram-bench-start-")
    try:
        text, probe, spec = (os.path.join(home, name) for name in ("in.txt", "probe.json", "app.yaml"))
        with open(text, "w") as f:
            f.writelines(f"line {i}\n" for i in range(lines))
        with open(spec, "w") as f:
            f.write(SPEC.format(text=text, probe=probe, per_window=max(1, lines // windows),
                                locality=LOCALITY[layout]))
        # the checkout's own packages first; this one's bench package after them (a checkout whose
        # bench/ has no __init__.py leaves ``bench`` to this one)
        env = dict(os.environ, STRAM_HOME=home, PYTHONPATH=f"{root}{os.pathsep}{ROOT}")
        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", spec], cwd=root, env=env,
                              capture_output=True, text=True)
        returned = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"{root}: launch failed:\n{proc.stderr[-2000:]}")
        logs = glob.glob(os.path.join(home, "apps", "*", "logs"))[0]
        containers = sorted(glob.glob(os.path.join(logs, "container_*.log")))
        if len(containers) != (2 if layout == "split" else 1):
            raise RuntimeError(f"{root}: {len(containers)} containers ran, not as --layout {layout} plans")
        seen = json.load(open(probe))
        if seen["tuples"] != lines:
            raise RuntimeError(f"{root}: the probe saw {seen['tuples']} lines, not {lines}")
        times = {"plan": _log_time(os.path.join(logs, "master.log"), "plan:"),
                 "container": max(_log_time(c, " started (pid") for c in containers),
                 "deployed": max(_log_time(c, "deployed ") for c in containers),
                 "first_tuple": seen["first_tuple"], "first_window": seen["first_window"],
                 "last_end": max(_log_time(c, ") shut down at window", last=True) for c in containers),
                 "succeeded": _log_time(os.path.join(logs, "master.log"), "finish: application SUCCEEDED"),
                 "returned": returned}
        times["end_path"] = returned - times["last_end"] + started
        return {step: times[step] - started for step in STEPS}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup.bench_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs per checkout (median printed)")
    parser.add_argument("--lines", type=int, default=2000, help="lines the application reads")
    parser.add_argument("--windows", type=int, default=10, help="windows the lines are spread over")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile the checkouts first")
    parser.add_argument("--compare", default="", help="another stram checkout to run beside this one")
    parser.add_argument("--layout", choices=sorted(LOCALITY), default="one",
                        help="one container (default), or reader and probe in two (a buffer-server stream)")
    args = parser.parse_args()
    roots = {"this": ROOT}
    if args.compare:
        roots["compare"] = pathlib.Path(args.compare).resolve()
    if not args.no_compile:
        for root in roots.values():
            present = [p for p in PACKAGES if (root / p).is_dir()]
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *present], cwd=root,
                           check=True, stdout=subprocess.DEVNULL)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    for i in range(args.runs):
        for name, root in roots.items():
            runs[name].append(run_once(root, args.lines, args.windows, args.layout))
            print(f"run {i + 1}/{args.runs} {name}: " + " ".join(f"{s}={runs[name][-1][s]:.3f}" for s in STEPS),
                  flush=True)
    medians = {name: {s: statistics.median(r[s] for r in rs) for s in STEPS} for name, rs in runs.items()}
    print(f"\nseconds after `stram launch` started, medians of {args.runs} runs:")
    print(f"{'step':14s}" + "".join(f"{name:>10s}" for name in roots) + ("     ratio" if args.compare else ""))
    for step in STEPS:
        row = f"{step:14s}" + "".join(f"{medians[name][step]:10.3f}" for name in roots)
        if args.compare:
            row += f"{medians['this'][step] / medians['compare'][step]:10.2f}"
        print(row)
    for name in roots:
        print(f"{name}: " + " ".join(f"{s}_s={medians[name][s]:.3f}" for s in STEPS))


if __name__ == "__main__":
    main()
