"""Benchmark: the clickstream aggregation fed through stram versus a plain Spark file-source job.

    python -m bench.spark.bench_spark [--rates 2000,20000] [--seconds 30] [--warmup 30] [--only stram|plain]

Per offered rate, one after the other: ``specs/clickstream.yaml`` launched locally (the
generator, two parse/filter partitions, the SparkPipeline reading their buffer servers), and a
plain Structured Streaming job reading the same lines from files; both run the same aggregation
into a Parquet sink. It prints the sustained events/s and the latency of the windows' rows, and
the ratios stram / plain Spark: what feeding Spark through stram costs or gains. How both are
measured, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from specs.clickstream_ops import events, flush_line

#: The repository: the launches' working directory (specs/ lies there).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Lines in the logs: ``<ISO time> user=u00042 page=/p/007 action=view agent=Mozilla/5.0``.
LINE_PATTERN = r"^(\S+) user=(\S+) page=(\S+) action=(\S+) agent=(\S+)$"


# ---------------------------------------------------------------- measuring

def sink_rows(path: str):
    """Rows the file sink committed, each with the wall time its batch was committed."""
    import pyarrow.parquet as pq

    meta = os.path.join(path, "_spark_metadata")
    seen: dict[str, float] = {}
    logs = sorted((n for n in os.listdir(meta) if n.split(".")[0].isdigit()), key=lambda n: int(n.split(".")[0]))
    for name in logs:
        mtime = os.path.getmtime(os.path.join(meta, name))
        with open(os.path.join(meta, name)) as f:
            for line in f.read().splitlines()[1:]:
                entry = json.loads(line)
                seen.setdefault(entry["path"], mtime)
    rows = []
    for uri, visible in seen.items():
        local = uri[len("file:"):] if uri.startswith("file:") else uri
        local = "/" + local.lstrip("/")
        table = pq.read_table(local, columns=["window_end", "views"])
        for end, views in zip(table.column("window_end").to_pylist(), table.column("views").to_pylist()):
            rows.append((end.timestamp(), views, visible))
    return rows


def analyze(path: str, rate: float, warmup: float, watermark: float, stream_start: float,
            stream_end: float) -> dict:
    """Latency and sustained rate of the windows closed by regular data after the warmup.

    Parameters
    ----------
    path : str
        The sink's output directory.
    rate : float
        Offered events/s.
    warmup, watermark : float
        Seconds left out at the start; the aggregation's watermark delay.
    stream_start, stream_end : float
        Wall (= event) time of the first and the last regular event.
    """
    rows = sink_rows(path)
    windows: dict[float, float] = {}
    for end, _, visible in rows:
        windows[end] = min(visible, windows.get(end, visible))
    measured = sorted((end, vis) for end, vis in windows.items()
                      if stream_start + warmup <= end + watermark <= stream_end)
    if len(measured) < 3:
        return {"windows": len(measured)}
    latencies = sorted(vis - (end + watermark) for end, vis in measured)
    # least-squares slope of visibility over event time: 1 when keeping up, > 1 when falling behind
    ends = [e for e, _ in measured]
    vis = [v for _, v in measured]
    mean_e, mean_v = statistics.fmean(ends), statistics.fmean(vis)
    var = sum((e - mean_e) ** 2 for e in ends)
    slope = sum((e - mean_e) * (v - mean_v) for e, v in measured) / var if var else 1.0
    sustained = min(float(rate), rate / slope) if slope > 0 else float(rate)
    return {"windows": len(measured), "sustained": sustained, "p50": statistics.median(latencies),
            "p90": latencies[int(0.9 * (len(latencies) - 1))], "max": latencies[-1]}


# ---------------------------------------------------------------- (a) stram

def run_stram(rate: int, seconds: float, warmup: float, window: int, out: str) -> dict:
    total = int(rate * (warmup + seconds))
    options = json.dumps({"window": f"{window} seconds", "watermark": f"{window} seconds"})
    cmd = [sys.executable, "-m", "stram.client.cli", "launch", "specs/clickstream.yaml",
           "-D", f"operators.analytics.output_path={out}", "-D", f"operators.analytics.options={options}",
           "-D", f"operators.clicks.rate={rate}", "-D", f"operators.clicks.events={total}",
           "-D", "operators.clicks.start_time=null", "-D", "operators.clicks.lateness=0",
           "-D", "operators.clicks.speedup=1", "-D", "PROCESSING_MODE=AT_LEAST_ONCE"]
    started = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"stram run failed: {proc.stderr[-2000:]}")
    # the generator's clock starts with its first window: within the first output window
    first = min(end for end, _, _ in sink_rows(out)) - window
    return analyze(out, rate, warmup, window, first, first + total / rate - window) | {
        "elapsed": time.time() - started}


# ---------------------------------------------------------------- (b) plain Spark

def _write_files(directory: str, rate: int, total: int, start: float) -> None:
    """Writer process: every half second, that half second's lines as one new file."""
    staging = directory + ".staging"
    os.makedirs(staging, exist_ok=True)
    per = rate / 2
    k = 0
    emitted = 0
    while emitted < total:
        due = start + k * 0.5
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        n = min(int((k + 1) * per) - emitted, total - emitted)
        lines = events(42, emitted, emitted + n, rate=rate, start_time=start, lateness=0.0)
        emitted += n
        if emitted >= total:
            lines.append(flush_line(total, rate, start))
        tmp = os.path.join(staging, f"part-{k:06d}.txt")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(directory, f"part-{k:06d}.txt"))
        k += 1


def run_plain(rate: int, seconds: float, warmup: float, window: int, out: str, work: str) -> dict:
    from pyspark.sql import functions as F

    from specs.clickstream_pipeline import aggregate
    from stram.spark import get_session

    started = time.time()
    spark = get_session(app_name="bench-plain")
    in_dir = os.path.join(work, "in")
    os.makedirs(in_dir, exist_ok=True)
    total = int(rate * (warmup + seconds))
    start = time.time()
    writer = mp.get_context("spawn").Process(target=_write_files, args=(in_dir, rate, total, start))
    writer.start()
    fields = [F.regexp_extract("value", LINE_PATTERN, i) for i in range(1, 6)]
    lines = spark.readStream.format("text").load(in_dir)
    parsed = lines.select(F.to_timestamp(fields[0]).alias("event_time"), fields[1].alias("user"),
                          fields[2].alias("page"), fields[3].alias("action"), fields[4].alias("agent"))
    views = parsed.where(((F.col("action") == "view") & ~F.col("agent").startswith("bot"))
                         | (F.col("action") == "flush"))
    views = views.select("event_time",
                         F.when(F.col("action") == "flush", None).otherwise(F.col("user")).alias("user"),
                         F.when(F.col("action") == "flush", None).otherwise(F.col("page")).alias("page"))
    query = (aggregate(views, f"{window} seconds", f"{window} seconds").writeStream.format("parquet")
             .outputMode("append").option("path", out)
             .option("checkpointLocation", os.path.join(work, "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    writer.join()
    time.sleep(1.0)
    query.processAllAvailable()
    query.stop()
    return analyze(out, rate, warmup, window, start, start + total / rate) | {"elapsed": time.time() - started}


# ---------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark.bench_spark", description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="2000,20000", help="offered events/s, comma separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds left out at the start of a run")
    parser.add_argument("--window", type=int, default=2, help="aggregation window and watermark, seconds")
    parser.add_argument("--only", choices=["stram", "plain"], help="run one side only")
    args = parser.parse_args(argv)
    os.environ.setdefault("STRAM_HOME", tempfile.mkdtemp(prefix="bench-stram-home-"))
    os.chdir(ROOT)
    results = []
    for rate in [int(r) for r in args.rates.split(",") if r]:
        row = {"rate": rate}
        for side in ("stram", "plain"):
            if args.only and side != args.only:
                continue
            work = tempfile.mkdtemp(prefix=f"bench-spark-{side}-")
            out = os.path.join(work, "out")
            try:
                if side == "stram":
                    row[side] = run_stram(rate, args.seconds, args.warmup, args.window, out)
                else:
                    row[side] = run_plain(rate, args.seconds, args.warmup, args.window, out, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(f"rate {rate:>7,}/s {side:>6}: " + _fmt(row[side]), flush=True)
        results.append(row)
    print()
    print(f"{'offered':>9} | {'stram ev/s':>10} {'plain ev/s':>10} {'ratio':>6} | "
          f"{'stram p50':>9} {'plain p50':>9} {'ratio':>6} | {'stram p90':>9} {'plain p90':>9} {'ratio':>6}")
    for row in results:
        a, b = row.get("stram", {}), row.get("plain", {})
        print(f"{row['rate']:>9,} | {_num(a, 'sustained', '{:,.0f}'):>10} {_num(b, 'sustained', '{:,.0f}'):>10} "
              f"{_ratio(a, b, 'sustained'):>6} | {_num(a, 'p50', '{:.2f}s'):>9} {_num(b, 'p50', '{:.2f}s'):>9} "
              f"{_ratio(a, b, 'p50'):>6} | {_num(a, 'p90', '{:.2f}s'):>9} {_num(b, 'p90', '{:.2f}s'):>9} "
              f"{_ratio(a, b, 'p90'):>6}")
    return 0


def _fmt(r: dict) -> str:
    if "sustained" not in r:
        return f"too few windows measured ({r.get('windows', 0)})"
    return (f"{r['sustained']:,.0f} events/s sustained, latency p50 {r['p50']:.2f}s p90 {r['p90']:.2f}s "
            f"max {r['max']:.2f}s over {r['windows']} windows ({r['elapsed']:.0f}s run)")


def _num(r: dict, key: str, fmt: str) -> str:
    return fmt.format(r[key]) if key in r else "-"


def _ratio(a: dict, b: dict, key: str) -> str:
    if key not in a or key not in b or not b[key]:
        return "-"
    return f"{a[key] / b[key]:.2f}"


if __name__ == "__main__":
    sys.exit(main())
