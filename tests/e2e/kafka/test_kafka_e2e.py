"""Kafka in, word count, Kafka out, EXACTLY_ONCE, end to end on a real broker (./scripts/kafka).

200,000 lines on a 4-partition topic go through specs/kafka_wordcount.yaml
(KafkaInput partitioned 2, ``stop_at: latest``) while containers are killed
three times, or while the broker is restarted; a ``read_committed`` consumer of
the output topic must see the exact counts of an independently computed
Counter, each window's row once.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter

import pytest
from e2ekit import admin, kill_container_of, launch_detached, running_operators, wait_final, wait_until

from stram.client import cli
from stram.common import apps as stram_apps

RECORDS = 200_000
VOCABULARY = [f"w{i}" for i in range(400)] + ["kafka", "stram", "window", "exactly", "once"]
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5"]


def make_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 6))) + f" Line{i % 97}"
            for i in range(n)]


def truth_of(lines: list[str]) -> Counter:
    """The independent answer: ``[a-z0-9]+`` of the lower-cased lines, counted directly."""
    counts: Counter = Counter()
    for line in lines:
        counts.update(re.findall(r"[a-z0-9]+", line.lower()))
    return counts


def produce_evenly(kafka, topic: str, lines: list[str], partitions: int = 4) -> None:
    """Line i to partition i % partitions: every reader partition gets its share (not the sticky
    partitioner's few large batches), so none ends long before the others."""
    for p in range(partitions):
        kafka.produce(topic, lines[p::partitions], partition=p)


def check_output(kafka, topic: str, truth: Counter) -> None:
    rows = [json.loads(m.value()) for m in kafka.read_all(topic)]
    sums: Counter = Counter()
    totals: dict[str, list[int]] = {}
    for row in rows:
        sums[row["key"]] += row["count"]
        totals.setdefault(row["key"], []).append(row["total"])
    assert sums == truth
    for key, seen in totals.items():  # every row once: the running totals of a key never repeat
        assert len(seen) == len(set(seen)), f"duplicate rows for {key!r}"
        assert max(seen) == truth[key]


def launch(kafka, in_topic: str, out_topic: str, per_window: int, *more: str) -> str:
    return launch_detached("specs/kafka_wordcount.yaml", *FAST, *more,
                           "-D", f"operators.reader.bootstrap_servers={kafka.servers}",
                           "-D", f"operators.out.bootstrap_servers={kafka.servers}",
                           "-D", f"operators.reader.topics={in_topic}", "-D", "operators.reader.stop_at=latest",
                           "-D", f"operators.reader.max_records_per_window={per_window}",
                           "-D", f"operators.out.topic={out_topic}")


def committed_window(app_id: str) -> int:
    return (admin(app_id, "info") or {}).get("committed_window", -1)


def test_exactly_once_with_containers_killed_three_times(on_kafka):
    kafka = on_kafka
    in_topic, out_topic = kafka.new_topic("lines", 4), kafka.new_topic("counts", 2)
    lines = make_lines(RECORDS, seed=17)
    produce_evenly(kafka, in_topic, lines)
    app_id = launch(kafka, in_topic, out_topic, per_window=400)
    wait_until(lambda: running_operators(app_id) >= 5, timeout=120, what="all operators running")
    for victim in ("count", "reader", "out"):
        before = committed_window(app_id)
        wait_until(lambda: committed_window(app_id) > before + 10, timeout=120,
                   what="the committed window to advance")
        kill_container_of(app_id, victim)
    app = wait_final(app_id, timeout=400)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
    assert log.count("recover") >= 3 or "redeploy" in log
    check_output(kafka, out_topic, truth_of(lines))


def test_exactly_once_across_a_broker_restart(on_kafka, tmp_path):
    kafka = on_kafka
    in_topic, out_topic = kafka.new_topic("lines", 4), kafka.new_topic("counts", 2)
    lines = make_lines(RECORDS // 2, seed=23)
    produce_evenly(kafka, in_topic, lines)
    # 25,000 lines per reader at 50 a window: 500 windows (50 s) of reading at least, so that the
    # restart (the broker takes up to a minute to start again on a busy machine) is mid-run; once the
    # broker is back, the rest is read at full speed
    signal_file = tmp_path / "broker-back"
    app_id = launch(kafka, in_topic, out_topic, 50, "-D", "operators.reader.class=tests.kits.e2e_ops:KafkaUntilSignal",
                    "-D", f"operators.reader.signal={signal_file}")
    wait_until(lambda: running_operators(app_id) >= 5, timeout=120, what="all operators running")
    before = committed_window(app_id)
    wait_until(lambda: committed_window(app_id) > before + 5, timeout=120, what="the committed window to advance")
    kafka.restart(down_seconds=5)
    assert (admin(app_id, "info") or {}).get("state") == "RUNNING", "the input ended before the broker was back"
    signal_file.touch()
    app = wait_final(app_id, timeout=400)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    logs = ""
    for name in os.listdir(os.path.join(app["app_path"], "logs")):
        logs += open(os.path.join(app["app_path"], "logs", name), errors="replace").read()
    assert "waiting for the Kafka broker at" in logs
    # "answers again" is not asserted: librdkafka prefetches records, so a reader may notice the
    # outage only at its end-of-run offset commit and end before the broker is back in sight
    master = open(os.path.join(app["app_path"], "logs", "master.log")).read()
    assert "blocked:" not in master  # the operators waited; none was taken for blocked and restarted
    check_output(kafka, out_topic, truth_of(lines))


def test_missing_topic_fails_the_application_saying_why(on_kafka, capsys):
    kafka = on_kafka
    out_topic = kafka.new_topic("counts")
    assert cli.main(["launch", "specs/kafka_wordcount.yaml", *FAST,
                     "-D", "operators.reader.topics=no-such-lines", "-D", f"operators.out.topic={out_topic}"]) == 1
    app = stram_apps.local_apps()[0]
    assert app["state"] == "FAILED"
    assert "the topic 'no-such-lines' cannot be read from" in app["diagnostics"]
    capsys.readouterr()


def test_scaling_the_input_deals_the_kafka_partitions_out_again(on_kafka, capsys):
    kafka = on_kafka
    in_topic, out_topic = kafka.new_topic("lines", 4), kafka.new_topic("counts", 2)
    lines = make_lines(RECORDS // 4, seed=29)
    produce_evenly(kafka, in_topic, lines)
    app_id = launch(kafka, in_topic, out_topic, per_window=60)
    wait_until(lambda: running_operators(app_id) >= 5, timeout=120, what="all operators running")
    before = committed_window(app_id)
    wait_until(lambda: committed_window(app_id) > before + 10, timeout=120, what="the committed window to advance")

    def scale() -> dict | None:
        capsys.readouterr()
        code = cli.main(["scale", app_id, "reader", "3"])
        out, err = capsys.readouterr()
        assert code == 0 or "try again" in err, err
        return json.loads(out) if code == 0 else None
    result = wait_until(scale, timeout=60, interval=0.5, what="stram scale reader 3")
    assert (result["from"], result["to"]) == (2, 3)
    app = wait_final(app_id, timeout=400)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    logs = ""
    for name in os.listdir(os.path.join(app["app_path"], "logs")):
        logs += open(os.path.join(app["app_path"], "logs", name), errors="replace").read()
    assert re.search(r"KafkaInput reader\[2\] reads lines-\w+:\d@\d+", logs)  # a third reader took partitions
    check_output(kafka, out_topic, truth_of(lines))
