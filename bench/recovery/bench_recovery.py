"""Recovery time and checkpoint overhead for the word-count DAG (run on demand).

    python -m bench.recovery.bench_recovery [--kills 3] [--repeats 2]

Recovery: a running word count's KeyCounter container is SIGKILLed, and the time runs until the
redeployed operators report a window after their recovery checkpoint. Checkpoint overhead: the
same DAG reading Moby-Dick as fast as it can, checkpointing every window, every 60 (the
default) and never, alternated, throughput measured at the sink: what fault tolerance costs
when nothing fails. How both are measured, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

#: The repository: the launches' working directory, and where specs/ lies.
ROOT = pathlib.Path(__file__).resolve().parents[2]

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"

THROUGHPUT_SPEC = """
name: bench-checkpoint-{count}
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, CHECKPOINT_WINDOW_COUNT: {count}, PROCESSING_MODE: EXACTLY_ONCE}}
operators:
  reader: {{class: "bench.bench_ops:TimedLineReader", properties: {{path: "{moby}", started_file: "{started}"}}}}
  split: {{class: "stram.operators.text:WordSplitter"}}
  count: {{class: "stram.operators.aggregate:KeyCounter"}}
  sink: {{class: "bench.bench_ops:CountSink", properties: {{result: "{result}"}}}}
streams:
  lines: {{from: reader.output, to: [split.input], locality: CONTAINER_LOCAL}}
  words: {{from: split.output, to: [count.input]}}
  counts: {{from: count.output, to: [sink.input]}}
"""


def cli(home: str, *args: str, check: bool = True) -> str:
    env = dict(os.environ, STRAM_HOME=home, STRAM_LOG_LEVEL="WARNING")
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return proc.stdout


def recovery_times(kills: int) -> list[float]:
    import psutil
    os.environ["STRAM_HOME"] = home = tempfile.mkdtemp(prefix="stram-bench-rec-")
    from stram.client import commands as stram_client
    from stram.common import apps as stram_apps
    app_id = cli(home, "launch", "specs/wordcount.yaml", "--detach", "-D", f"operators.reader.path={MOBY}",
                 "-D", "operators.reader.lines_per_window=20", "-D", "STREAMING_WINDOW_SIZE_MILLIS=100",
                 "-D", "HEARTBEAT_INTERVAL_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=10",
                 "-D", "operators.out.path=" + os.path.join(home, "out")).strip().splitlines()[-1]
    app = None
    while app is None or not app.get("admin_url"):
        time.sleep(0.2)
        app = stram_apps.find_app(app_id)
    times = []
    for _ in range(kills):
        while True:
            ops = stram_client.admin(app, "operators")["operators"]
            if len(ops) == 4 and all(o["state"] == "ACTIVE" for o in ops):
                break
            time.sleep(0.1)
        time.sleep(2.0)
        target = next(c for c in stram_client.admin(app, "containers")["containers"]
                      if c["state"] == "RUNNING" and "count" in c["operators"])
        pid = int(target["process"].split("@")[0])
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        # wait for the master to redeploy, then for a window after the recovery checkpoint
        while True:
            ops = {o["name"]: o for o in stram_client.admin(app, "operators")["operators"]}
            count = ops.get("count")
            if count and count["container"] != target["id"] and count["state"] == "ACTIVE" \
                    and count["current_window"] > count["recovery_checkpoint"]:
                times.append(time.monotonic() - t0)
                break
            time.sleep(0.02)
        psutil.Process(pid) if psutil.pid_exists(pid) else None
    stram_client.admin(app, "kill", "POST", {})
    return times


WORDS = 214_620  # words in Moby-Dick as WordSplitter counts them


def throughput(count: int) -> float:
    """Input words per second: the whole book, from the reader's first read to the sink's last tuple."""
    home = tempfile.mkdtemp(prefix="stram-bench-ckpt-")
    result = os.path.join(home, "result.json")
    spec = os.path.join(home, "spec.yaml")
    with open(spec, "w") as f:
        f.write(THROUGHPUT_SPEC.format(count=count, moby=MOBY, result=result,
                                       started=os.path.join(home, "started")))
    cli(home, "launch", spec)
    with open(result) as f:
        r = json.load(f)
    with open(os.path.join(home, "started")) as f:
        started = float(f.read())
    return WORDS / (r["last_wall"] - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery.bench_recovery",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    times = recovery_times(args.kills) if args.kills else [0.0]
    print("recovery (kill -> first new window reported): " + ", ".join(f"{t:.2f}s" for t in times)
          + f"; median {statistics.median(times):.2f}s")
    runs: dict[int, list[float]] = {1: [], 60: [], 10**9: []}
    for _ in range(args.repeats):
        for count in runs:  # alternated, so drift on a noisy machine hits all three alike
            runs[count].append(throughput(count))
    every, default, never = (statistics.median(runs[c]) for c in (1, 60, 10**9))
    print(f"words/s, whole book: checkpoint every window {every:,.0f}; every 60 windows (default) "
          f"{default:,.0f}; never (only the final one) {never:,.0f}")
    print(f"overhead at the default interval: {100 * (1 - default / never):.1f}% "
          f"(ratio {default / never:.3f}); every window: {100 * (1 - every / never):.1f}%")

if __name__ == "__main__":
    main()
