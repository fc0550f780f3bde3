"""The word count on stram beside its peers, on the same machine (run on demand).

    python -m bench.peers.bench_peers --setup            # once: Bytewax, PySpark and PyFlink in their own venvs
    python -m bench.peers.bench_peers [--repeat 20] [--runs 3] [--systems loop,one,split,bytewax,spark,flink]

The word count of :mod:`bench.peers.bench_wordcount` (whose code runs the ``loop``, ``one`` and
``split`` rows) on Bytewax, PySpark Structured Streaming and Flink SQL, every output checked
exact, runs interleaved, medians of the wall time (start-up included) and peaks of the summed
RSS and PSS printed with the ratio to stram in one container. The peers are not stram
dependencies: ``--setup`` installs each into its own virtual environment under
``$STRAM_BENCH_VENVS``; a system whose venv is missing is skipped. Each system's program, and
the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

import psutil

from bench.peers import bench_wordcount as wc

#: Where --setup puts the peers' virtual environments.
VENVS = pathlib.Path(os.environ.get("STRAM_BENCH_VENVS", pathlib.Path.home() / ".cache" / "stram-bench" / "venvs"))
#: pip requirement per peer.
PEERS = {"bytewax": "bytewax>=0.21,<0.22", "spark": "pyspark>=3.5,<5", "flink": "apache-flink>=2.0,<3"}

BYTEWAX = r"""
import json, re, sys
import bytewax.operators as op
from bytewax.connectors.files import FileSource
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, run_main
find = re.compile(r"[a-z0-9]+").findall
out = []
flow = Dataflow("wordcount")
lines = op.input("lines", flow, FileSource(sys.argv[1]))
words = op.flat_map("split", lines, lambda line: find(line.lower()))
counts = op.count_final("count", words, lambda word: word)
op.output("out", counts, TestingSink(out))
run_main(flow)
json.dump(dict(out), open(sys.argv[2], "w"))
"""

SPARK = r"""
import json, os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("wordcount")
         .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false").getOrCreate())
lines = spark.readStream.text(os.path.dirname(sys.argv[1]))
words = lines.selectExpr("explode(regexp_extract_all(lower(value), '[a-z0-9]+', 0)) AS word")
query = (words.groupBy("word").count().writeStream.outputMode("complete").format("memory")
         .queryName("counts").trigger(availableNow=True).start())
query.awaitTermination()
json.dump({r["word"]: r["count"] for r in spark.sql("SELECT * FROM counts").collect()}, open(sys.argv[2], "w"))
spark.stop()
"""

FLINK = r"""
import json, sys
from pyflink.common.types import RowKind
from pyflink.table import EnvironmentSettings, TableEnvironment
env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
env.get_config().set("parallelism.default", "2")
path = sys.argv[1].replace("'", "''")
env.execute_sql(f"CREATE TABLE lines (line STRING) WITH "
                f"('connector' = 'filesystem', 'path' = '{path}', 'format' = 'raw')")
counts = env.sql_query("SELECT word, COUNT(*) FROM lines CROSS JOIN "
                       "UNNEST(REGEXP_EXTRACT_ALL(LOWER(line), '[a-z0-9]+', 0)) AS t (word) GROUP BY word")
final = {}
with counts.execute().collect() as rows:
    for row in rows:
        if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            final[row[0]] = row[1]
        else:
            final.pop(row[0], None)
json.dump(final, open(sys.argv[2], "w"))
"""


def venv_python(name: str) -> pathlib.Path:
    return VENVS / name / "bin" / "python"


def setup(names: list[str]) -> None:
    """Create each peer's venv and install it there (not into stram's environment)."""
    for name in names:
        python = venv_python(name)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENVS / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", PEERS[name]], check=True)
        print(f"{name}: installed {PEERS[name]} into {VENVS / name}")


def run_peer(name: str, text: str, want: Counter) -> tuple[float, int, int]:
    """One run of a peer's program; (wall seconds, peaks of its process tree's summed RSS and PSS)."""
    out = tempfile.mktemp(prefix=f"stram-bench-{name}-", suffix=".json")
    code = {"bytewax": BYTEWAX, "spark": SPARK, "flink": FLINK}[name]
    started = time.perf_counter()
    # isolated (-I), elsewhere: this checkout's packages (its ``proto``) must not shadow the peer's
    proc = psutil.Popen([str(venv_python(name)), "-I", "-c", code, text, out], cwd=tempfile.gettempdir(),
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0, 0]
    while proc.poll() is None:
        try:
            rss, pss = wc.memory([proc] + proc.children(recursive=True))
            peak = [max(peak[0], rss), max(peak[1], pss)]
        except psutil.Error:
            pass
        time.sleep(0.05)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr.read().decode()[-2000:]}")
    with open(out) as f:
        got = Counter(json.load(f))
    os.unlink(out)
    if got != want:
        raise RuntimeError(f"{name}: wrong counts ({sum(got.values())} words, want {sum(want.values())})")
    return took, peak[0], peak[1]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.bench_peers", description=__doc__.splitlines()[0])
    parser.add_argument("--setup", action="store_true", help="install the peers into their own venvs and exit")
    parser.add_argument("--repeat", type=int, default=20, help="copies of Moby-Dick in the input")
    parser.add_argument("--runs", type=int, default=3, help="interleaved rounds (medians printed)")
    known = ["loop", *wc.LAYOUTS, *PEERS]
    parser.add_argument("--systems", default="loop,one,split,bytewax,spark,flink",
                        help=f"comma-separated, from: {','.join(known)}")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in known]
    if unknown:
        parser.error(f"unknown system(s) {','.join(unknown)}; choose from {','.join(known)}")
    if args.setup:
        setup([s for s in systems if s in PEERS])
        return
    for name in [s for s in systems if s in PEERS and not venv_python(s).exists()]:
        print(f"{name}: skipped (no venv at {VENVS / name}; run with --setup)")
        systems.remove(name)
    work = tempfile.mkdtemp(prefix="stram-bench-peers-")
    text = os.path.join(work, "in", "moby.txt")  # alone in its directory: Spark streams the directory
    os.makedirs(os.path.dirname(text))
    with open(wc.ROOT / "specs" / "data" / "moby-dick.txt", "rb") as f:
        data = f.read()
    with open(text, "wb") as f:
        f.write(data * args.repeat)
    want = wc.truth(text)
    print(f"input: {os.path.getsize(text):,} bytes, {sum(want.values()):,} words, {len(want):,} distinct")
    results: dict[str, list] = {s: [] for s in systems}
    for _ in range(args.runs):
        for s in systems:
            if s == "loop":
                results[s].append(wc.run_loop(text, want))
            elif s in wc.LAYOUTS:
                results[s].append(wc.run_stram(s, text, want))
            else:
                results[s].append(run_peer(s, text, want))
    names = {"loop": "plain Python loop", "one": "stram, one container", "split": "stram, split/count x2",
             "bytewax": "Bytewax, 1 worker", "spark": "Spark Structured Streaming",
             "flink": "Flink SQL (batch, 2 slots)"}
    ref = statistics.median(r[0] for r in results["one"]) if "one" in results else None
    print(f"{'system':<30} {'wall s':>8} {'runs':>22} {'vs stram one':>13} {'RSS MB':>7} {'PSS MB':>7}")
    for s in systems:
        times = [r[0] for r in results[s]]
        med = statistics.median(times)
        ratio = f"{med / ref:12.2f}x" if ref else ""
        print(f"{names.get(s, s):<30} {med:>8.2f} {' '.join(f'{t:.2f}' for t in times):>22} {ratio:>13} "
              f"{max(r[1] for r in results[s]) / 2**20:>7.0f} {max(r[2] for r in results[s]) / 2**20:>7.0f}")


if __name__ == "__main__":
    main()
