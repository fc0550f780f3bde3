"""The Spark Structured Streaming side of :mod:`bench.kafka.bench_kafka`: Spark's Kafka source and sink, and their jars.

PySpark ships without the Kafka connector. :func:`ensure_jars` fetches it once
with Maven (``mvn dependency:copy-dependencies`` on
scripts/spark-kafka-jvm/pom.xml: spark-sql-kafka-0-10, spark-token-provider-kafka-0-10,
kafka-clients, commons-pool2) into ``$STRAM_CACHE/spark-kafka-<version>/jars``
(default ``~/.cache/stram``), keyed on the pom's hash, with progress on stderr.
Maven Central serves no spark-sql-kafka-0-10 for the installed PySpark 4.3.0; the
pom asks for 4.2.0, which runs on PySpark 4.3.0 for this job (source, sink,
``availableNow``).

Run as a program (by the bench, in its own process so that its wall time
includes the JVM's start-up)::

    python -m bench.kafka.spark_kafka --servers HOST:PORT --input TOPIC --output TOPIC [--cores 2]

it reads ``--input`` from the earliest offsets, appends ``!`` to each value,
writes ``--output`` with ``trigger(availableNow=True)`` and prints one JSON line:
the seconds taken by the session's start, and by the query.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

#: The repository: scripts/spark-kafka-jvm/pom.xml lists the connector's jars.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POM = os.path.join(ROOT, "scripts", "spark-kafka-jvm", "pom.xml")


def say(message: str) -> None:
    print(f"spark-kafka: {message}", file=sys.stderr, flush=True)


def connector_version() -> str:
    with open(POM) as f:
        match = re.search(r"<spark.kafka.version>([^<]+)</spark.kafka.version>", f.read())
    if not match:
        raise SystemExit(f"{POM} has no <spark.kafka.version>")
    return match.group(1).strip()


def jars_dir() -> str:
    cache = os.path.abspath(os.path.expanduser(os.environ.get("STRAM_CACHE") or "~/.cache/stram"))
    return os.path.join(cache, f"spark-kafka-{connector_version()}", "jars")


def ensure_jars() -> list[str]:
    """The connector's jars, fetched from Maven Central on first use (and whenever the pom changes)."""
    jars = jars_dir()
    stamp = os.path.join(jars, ".pom-sha256")
    with open(POM, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    try:
        with open(stamp) as f:
            if f.read().strip() == want:
                return sorted(glob.glob(os.path.join(jars, "*.jar")))
    except OSError:
        pass
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("Maven (mvn) is not on PATH; it fetches Spark's Kafka connector once: apt-get install maven")
    home = os.path.dirname(jars)
    os.makedirs(home, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="jars-", dir=home)
    say(f"fetching spark-sql-kafka-0-10 {connector_version()} and its dependencies from Maven Central "
        f"into {jars} (once; about 15 MB)")
    started = time.monotonic()
    proc = subprocess.Popen([mvn, "-B", "-f", POM, "dependency:copy-dependencies", f"-DoutputDirectory={tmp}",
                             "-DincludeScope=runtime"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=home)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-30:]
        match = re.search(r"Downloaded from \S+: (\S+)", line)
        if match:
            say(f"  ... {match.group(1).rsplit('/', 1)[-1]} ({time.monotonic() - started:.0f}s)")
    if proc.wait() != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit("fetching Spark's Kafka connector with Maven failed:\n  " + "\n  ".join(tail[-20:]))
    with open(os.path.join(tmp, ".pom-sha256"), "w") as f:
        f.write(want + "\n")
    shutil.rmtree(jars, ignore_errors=True)
    os.replace(tmp, jars)
    found = sorted(glob.glob(os.path.join(jars, "*.jar")))
    say(f"  {len(found)} jars ready in {time.monotonic() - started:.0f}s: "
        + ", ".join(os.path.basename(j) for j in found))
    return found


def run_job(servers: str, input_topic: str, output_topic: str, cores: int) -> dict[str, float]:
    """Input topic → value + "!" → output topic, in one availableNow query; seconds of start-up and query."""
    started = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.appName("bench_kafka")
             .master(f"local[{cores}]")
             .config("spark.jars", ",".join(ensure_jars()))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cores))
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    session_s = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="bench-spark-kafka-") as checkpoint:
        t = time.monotonic()
        source = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", servers)
                  .option("subscribe", input_topic)
                  .option("startingOffsets", "earliest")
                  .load())
        tagged = source.select(F.concat(F.col("value").cast("string"), F.lit("!")).alias("value"))
        query = (tagged.writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", servers)
                 .option("topic", output_topic)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True)
                 .start())
        query.awaitTermination()
        query_s = time.monotonic() - t
        if query.exception() is not None:
            raise SystemExit(f"the Spark query failed: {query.exception()}")
    spark.stop()
    return {"session_s": session_s, "query_s": query_s}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.kafka.spark_kafka", description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    args = ap.parse_args()
    print(json.dumps(run_job(args.servers, args.input, args.output, args.cores)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
