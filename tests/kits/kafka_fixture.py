"""The Kafka broker of the test session (``./scripts/kafka``) and helpers to use it.

``kafka`` (session scope) starts one KRaft broker, in a private state directory,
for the tests that ask for it, and stops it at the end of the session, checking
that its JVM is gone. ``on_kafka`` (per test) puts ``KAFKA_BOOTSTRAP_SERVERS`` in
the test's environment, as ``eval "$(./scripts/kafka start)"`` would.

Without Java, Maven, confluent-kafka or the jars the Kafka tests are skipped
saying why; with ``CI=true`` they fail with it instead.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any, Iterator

import pytest
from needs import missing

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kafka"
START_TIMEOUT = float(os.environ.get("STRAM_TEST_KAFKA_TIMEOUT", "300"))


class Broker:
    """The session's broker: its address, topics, producing and reading records, restarts."""

    def __init__(self, state: pathlib.Path, servers: str) -> None:
        import confluent_kafka
        import confluent_kafka.admin
        self.ck = confluent_kafka
        self.state = state
        self.servers = servers
        self.admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})

    def script(self, *args: str, timeout: float = 300) -> str:
        env = dict(os.environ, STRAM_KAFKA_DIR=str(self.state))
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"./scripts/kafka {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc.stdout + proc.stderr

    def restart(self, down_seconds: float = 0.0) -> str:
        return self.script("restart", "--down-seconds", str(down_seconds))

    def new_topic(self, prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        futures = self.admin.create_topics([self.ck.admin.NewTopic(name, partitions, 1)])
        futures[name].result(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the metadata shows every partition with a leader
            md = self.admin.list_topics(name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and all(
                    p.leader >= 0 for p in md.partitions.values()):
                return name
            time.sleep(0.2)
        raise AssertionError(f"topic {name} has no leaders after 60s")

    def produce(self, topic: str, values: list[bytes | str], partition: int | None = None,
                keys: list[Any] | None = None) -> None:
        producer = self.ck.Producer({"bootstrap.servers": self.servers, "linger.ms": 20,
                                     "enable.idempotence": True})
        for i, value in enumerate(values):
            kw: dict[str, Any] = {}
            if partition is not None:
                kw["partition"] = partition
            if keys is not None:
                kw["key"] = keys[i]
            while True:
                try:
                    producer.produce(topic, value, **kw)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(120) == 0, "records not delivered"

    def read_all(self, topic: str, committed_only: bool = True, idle_seconds: float = 3.0) -> list[Any]:
        """Every record of ``topic`` (read_committed by default), as confluent-kafka messages."""
        consumer = self.ck.Consumer({"bootstrap.servers": self.servers, "group.id": f"check-{uuid.uuid4().hex}",
                                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                     "isolation.level": "read_committed" if committed_only else "read_uncommitted",
                                     "enable.partition.eof": True})
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [self.ck.TopicPartition(topic, p, self.ck.OFFSET_BEGINNING) for p in md.partitions]
        consumer.assign(parts)
        out: list[Any] = []
        eof: set[int] = set()
        last = time.monotonic()
        try:
            while len(eof) < len(parts) or time.monotonic() - last < 0.5:
                msgs = consumer.consume(1000, timeout=0.5)
                for msg in msgs:
                    if msg.error():
                        if msg.error().code() == self.ck.KafkaError._PARTITION_EOF:
                            eof.add(msg.partition())
                        continue
                    eof.discard(msg.partition())
                    out.append(msg)
                    last = time.monotonic()
                if not msgs and time.monotonic() - last > idle_seconds + 60:
                    raise AssertionError(f"reading {topic} stalled")
        finally:
            consumer.close()
        return out


def word_counts_from(messages: list[Any]) -> Counter:
    """The sum of ``count`` per ``key`` over KeyCounter rows written as JSON records."""
    import json
    sums: Counter = Counter()
    for m in messages:
        row = json.loads(m.value())
        sums[row["key"]] += row["count"]
    return sums


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> Iterator[Broker]:
    """A KRaft broker for the whole session (started on first use), stopped at its end."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        missing("a Kafka broker", "the confluent-kafka package is not installed: pip install -e '.[test]'")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        missing("a Kafka broker",
                "Java is not installed (the broker is a JVM): apt-get install openjdk-17-jdk-headless")
    state = tmp_path_factory.mktemp("kafka")
    env = dict(os.environ, STRAM_KAFKA_DIR=str(state))
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), "start", "--timeout", str(START_TIMEOUT)],
                              env=env, capture_output=True, text=True, timeout=START_TIMEOUT + 600)
    except subprocess.TimeoutExpired as exc:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        missing("a Kafka broker", f"./scripts/kafka start did not finish: {exc}")
    if proc.returncode != 0:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        missing("a Kafka broker", f"./scripts/kafka start failed:\n{proc.stderr.strip()[-3000:]}")
    sys.stderr.write(proc.stderr)
    servers = proc.stdout.strip().splitlines()[-1].split("=", 1)[1]
    broker = None
    try:
        broker = Broker(state, servers)
        yield broker
    finally:
        if broker is not None:
            broker.admin = None  # its client would go on reconnecting to the stopped broker
        pid_file = state / "pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        stop = subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert stop.returncode == 0, stop.stderr
        if pid is not None:
            try:
                os.kill(pid, 0)
                alive = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            except (ProcessLookupError, OSError):
                alive = False
            assert not alive, f"the broker's JVM {pid} still runs after ./scripts/kafka stop"


@pytest.fixture
def on_kafka(kafka, monkeypatch) -> Broker:
    """The test runs as a user after ``eval "$(./scripts/kafka start)"``."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka.servers)
    return kafka
