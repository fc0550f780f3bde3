"""Shared fixtures: a private STRAM_HOME per test session, helpers to run apps."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
from collections import Counter

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


@pytest.fixture(autouse=True)
def _stram_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("stram-home")
    monkeypatch.setenv("STRAM_HOME", str(home))
    monkeypatch.chdir(ROOT)
    yield home


def word_truth(path: pathlib.Path | str) -> Counter:
    """The independent answer: a direct count of ``[a-z0-9]+`` in the lower-cased text."""
    counts: Counter = Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(re.findall(r"[a-z0-9]+", line.lower()))
    return counts


def read_counts(out_dir: pathlib.Path | str) -> tuple[Counter, dict[str, int], list[dict]]:
    """(sum of count per key, max total per key, rows) from every *.jsonl under out_dir."""
    sums: Counter = Counter()
    maxima: dict[str, int] = {}
    rows = []
    for f in sorted(pathlib.Path(out_dir).rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows.append(row)
                sums[row["key"]] += row["count"]
                maxima[row["key"]] = max(maxima.get(row["key"], 0), row["total"])
    return sums, maxima, rows


# the session's mini Hadoop cluster (./scripts/minicluster), for the tests that need YARN or HDFS
from hadoop import minicluster, on_minicluster  # noqa: E402,F401

# the session's Kafka broker (./scripts/kafka), for the Kafka connector tests
from kafka_fixture import kafka, on_kafka  # noqa: E402,F401
