"""Benchmark: records/s through KafkaInput → a trivial operator → KafkaOutput, on a real broker, beside Spark.

    python -m bench.kafka.bench_kafka [--records 200000] [--partitions 2] [--mode both]
                                      [--systems stram,spark] [--spark-cores 2] [--setup]

On a broker of its own (``./scripts/kafka start`` in a private state directory), the same
records go through stram per processing mode (KafkaInput -> Tag -> KafkaOutput, a real local
application) and through Spark Structured Streaming with Spark's Kafka source and sink
(:mod:`bench.kafka.spark_kafka`, in its own process); every output is checked, and the rates and
wall times are printed with their ratios stram / Spark. ``--setup`` only fetches Spark's Kafka
connector with Maven. How each side is measured, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from stram.operator import InputPort, Operator, OutputPort

#: The repository: where scripts/kafka lies, and the launches' working directory.
ROOT = str(pathlib.Path(__file__).resolve().parents[2])


class Tag(Operator):
    """Appends ``!`` to each string: the trivial operator between input and output."""

    input = InputPort()
    output = OutputPort()

    def process_input(self, tuple: Any) -> None:
        self.output.emit(tuple + "!")


def start_broker(state: str) -> str:
    env = dict(os.environ, STRAM_KAFKA_DIR=state)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "kafka"), "start"], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"./scripts/kafka start failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1].split("=", 1)[1]


def stop_broker(state: str) -> None:
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "kafka"), "stop"],
                   env=dict(os.environ, STRAM_KAFKA_DIR=state), capture_output=True, text=True)


def create_topic(ck: Any, servers: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": servers})  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    time.sleep(1.0)  # leaders elected


def produce(ck: Any, servers: str, topic: str, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": servers, "linger.ms": 20, "batch.size": 1 << 20})
    for i in range(n):
        while True:
            try:
                p.produce(topic, f"record {i:09d} of the kafka benchmark".encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def read_back(ck: Any, servers: str, topic: str) -> tuple[list[bytes], list[int]]:
    c = ck.Consumer({"bootstrap.servers": servers, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                     "isolation.level": "read_committed", "enable.partition.eof": True})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
    values, stamps, eof = [], [], set()
    while len(eof) < len(parts):
        for m in c.consume(5000, timeout=1.0):
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            values.append(m.value())
            stamps.append(m.timestamp()[1])
    c.close()
    return values, stamps


def run(ck: Any, servers: str, mode: str, n: int, partitions: int, in_topic: str) -> dict[str, Any]:
    out_topic = f"bench-out-{uuid.uuid4().hex[:6]}"
    create_topic(ck, servers, out_topic, 2)
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "bench.yaml")
        with open(spec, "w") as f:
            f.write(f"""
name: bench_kafka
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 200, CHECKPOINT_WINDOW_COUNT: 5, PROCESSING_MODE: {mode}}}
operators:
  reader: {{class: "stram.connectors.kafka:KafkaInput", partitions: {partitions},
           properties: {{bootstrap_servers: "{servers}", topics: "{in_topic}", stop_at: latest, value_format: str}}}}
  tag: {{class: "bench.kafka.bench_kafka:Tag"}}
  out: {{class: "stram.connectors.kafka:KafkaOutput",
        properties: {{bootstrap_servers: "{servers}", topic: "{out_topic}", value_format: str}}}}
streams:
  a: {{from: reader.output, to: [tag.input]}}
  b: {{from: tag.output, to: [out.input]}}
""")
        env = dict(os.environ, STRAM_HOME=os.path.join(tmp, "home"), PYTHONPATH=ROOT)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "stram.client.cli", "launch", spec], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"{mode}: stram launch failed:\n{proc.stderr[-3000:]}")
    values, stamps = read_back(ck, servers, out_topic)
    distinct = len(set(values))
    if distinct != n or (mode == "EXACTLY_ONCE" and len(values) != n):
        sys.exit(f"{mode}: {len(values)} records out ({distinct} distinct), expected {n}")
    span = (max(stamps) - min(stamps)) / 1000 if stamps else 0.0
    return {"mode": mode, "records": n, "out": len(values), "wall_s": wall, "span_s": span,
            "rate": n / span if span > 0 else float("inf")}


def run_spark(ck: Any, servers: str, n: int, in_topic: str, cores: int) -> dict[str, Any]:
    """The same pipeline in Spark Structured Streaming (:mod:`bench.kafka.spark_kafka`, in its own process)."""
    out_topic = f"bench-out-{uuid.uuid4().hex[:6]}"
    create_topic(ck, servers, out_topic, 2)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bench.kafka.spark_kafka", "--servers", servers, "--input", in_topic,
                           "--output", out_topic, "--cores", str(cores)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"spark: the Structured Streaming job failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    values, stamps = read_back(ck, servers, out_topic)
    want = {f"record {i:09d} of the kafka benchmark!".encode() for i in range(n)}
    if len(values) != n or set(values) != want:
        sys.exit(f"spark: {len(values)} records out ({len(set(values))} distinct, "
                 f"{len(set(values) - want)} unexpected), expected each of {n} exactly once")
    span = (max(stamps) - min(stamps)) / 1000 if stamps else 0.0
    return {"mode": "spark", "records": n, "out": len(values), "wall_s": wall, "span_s": span,
            "rate": n / span if span > 0 else float("inf"), **times}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.kafka.bench_kafka", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=2, help="KafkaInput partitions (default 2)")
    ap.add_argument("--mode", choices=["exactly_once", "at_least_once", "both"], default="both",
                    help="stram's processing mode(s) (default both)")
    ap.add_argument("--systems", default="stram,spark", help="which to run, comma-separated (default stram,spark)")
    ap.add_argument("--spark-cores", type=int, default=2, help="Spark's local[N] (default 2)")
    ap.add_argument("--setup", action="store_true", help="only fetch Spark's Kafka connector jars, then exit")
    args = ap.parse_args()
    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    if not systems or set(systems) - {"stram", "spark"}:
        ap.error(f"--systems takes stram and/or spark, not {args.systems!r}")
    if args.setup or "spark" in systems:
        from bench.kafka.spark_kafka import ensure_jars
        ensure_jars()
        if args.setup:
            return 0
    import confluent_kafka as ck
    state = tempfile.mkdtemp(prefix="bench-kafka-")
    servers = start_broker(state)
    try:
        in_topic = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topic(ck, servers, in_topic, 4)
        t = time.monotonic()
        produce(ck, servers, in_topic, args.records)
        print(f"produced {args.records} records to {in_topic} (4 partitions) in {time.monotonic() - t:.1f}s")
        results = []
        if "stram" in systems:
            modes = ["AT_LEAST_ONCE", "EXACTLY_ONCE"] if args.mode == "both" else [args.mode.upper()]
            for mode in modes:
                r = run(ck, servers, mode, args.records, args.partitions, in_topic)
                results.append(r)
                print(f"{r['mode']:>14}: {r['rate']:>9,.0f} records/s (first to last output record "
                      f"{r['span_s']:.1f}s; stram launch {r['wall_s']:.1f}s with start-up; {r['out']} records out)")
        if "spark" in systems:
            s = run_spark(ck, servers, args.records, in_topic, args.spark_cores)
            print(f"{'spark':>14}: {s['rate']:>9,.0f} records/s (first to last output record {s['span_s']:.1f}s; "
                  f"job {s['wall_s']:.1f}s with start-up: session {s['session_s']:.1f}s, availableNow query "
                  f"{s['query_s']:.1f}s; {s['out']} records out, each exactly once)")
            for r in results:
                print(f"{'stram/spark':>14}: {r['mode']}: rate x{r['rate'] / s['rate']:.2f}, "
                      f"wall time with start-up x{r['wall_s'] / s['wall_s']:.2f}")
        print("command: python -m bench.kafka.bench_kafka " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    finally:
        stop_broker(state)
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
