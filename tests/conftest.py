"""Shared fixtures: a private STRAM_HOME per test session, helpers to run apps.

The suite's layout: ``unit/<room>/`` (in-process, fast), ``e2e/<area>/`` (real
processes; everything there is marked ``slow``), ``kits/`` (helpers and
operators the tests share; on the import path by ``setup.cfg``'s pytest section).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
from collections import Counter

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Tests under this folder launch real processes: marked slow by where they live.
E2E = pathlib.Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if E2E in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _stram_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("stram-home")
    monkeypatch.setenv("STRAM_HOME", str(home))
    monkeypatch.chdir(ROOT)
    yield home
    if (home / "apps").is_dir():  # the test launched local applications: none may outlive it
        _stop_leftovers(str(home))


def _stop_leftovers(home: str) -> None:
    """SIGKILL every process of an application launched under STRAM_HOME ``home`` that still runs (a
    test that failed before its application ended), so that it cannot load or disturb the next tests."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            # stram's own processes only (session fixtures' brokers and clusters may carry a test's home)
            module = (proc.info["cmdline"] or [])[1:3]
            if module[:1] == ["-m"] and module[1:] in (["stram.master"], ["stram.master.process.supervise"], ["stram.agent"]) \
                    and proc.environ().get("STRAM_HOME") == home:
                left.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    if left:
        psutil.wait_procs(left, timeout=10)
        sys.stderr.write(f"stopped {len(left)} process(es) left running by the test under {home}\n")


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
from hadoop import minicluster, minicluster_driver, on_minicluster  # noqa: E402,F401
# ... and a cluster of three NodeManager processes, for the tests of many nodes
from hadoop import multinode, multinode_driver, on_multinode  # noqa: E402,F401
# the session's Kafka broker (./scripts/kafka), for the Kafka connector tests
from kafka_fixture import kafka, on_kafka  # noqa: E402,F401
# a headless Chromium (Debian's, through Playwright), for the console's browser tests
from browser import chromium  # noqa: E402,F401
