"""Operators packed into fewer containers (CONTAINERS_MAX_COUNT) end to end: exact answers.

Packing puts partitions of one stage beside partitions of the next: containers feed each other both
ways, and keyed streams run between partitions in one container (through its own buffer server).
The word count (split x2, count x3) packed into one and two containers, once with a packed container
killed mid-run; NEXMark q9 (two partitions) run by `python -m stram.nexmark` in two containers.
Each answer against an independent one: a direct count of the words, the NEXMark oracle.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until

from scripts.summarize import read_jsonl
from stram.nexmark import oracle
from stram.nexmark.generator import write_dataset
from stram.nexmark.model import GeneratorConfig

WORDS = ROOT / "specs" / "data" / "words.txt"
#: reader, split x2, count x3, the unifier, out
OPERATORS = 8


def launch_packed(out, containers: int, *extra: str) -> str:
    return launch_detached("specs/wordcount.yaml", "-D", f"operators.out.path={out}",
                           "-D", "streams.lines.locality=null", "-D", "operators.split.partitions=2",
                           "-D", "operators.count.partitions=3", "-D", f"CONTAINERS_MAX_COUNT={containers}", *extra)


def containers_of(app: dict) -> set[str]:
    logs = ROOT / app["app_path"].removeprefix("file://") / "logs"
    return {p.name.split(".")[0] for p in logs.iterdir() if p.name.startswith("container_")}


@pytest.mark.parametrize("containers", [1, 2])
def test_packed_word_count_is_exact(tmp_path, containers):
    out = tmp_path / "out"
    final = wait_final(launch_packed(out, containers), timeout=180)
    assert final["state"] == "SUCCEEDED", final.get("diagnostics")
    sums, maxima, _ = read_counts(out)
    truth = word_truth(WORDS)
    assert sums == truth and maxima == dict(truth)
    assert len(containers_of(final)) == containers


def test_packed_word_count_is_exact_across_a_container_kill(tmp_path):
    out = tmp_path / "out"
    app_id = launch_packed(out, 2, "-D", "operators.reader.lines_per_window=20")
    try:
        wait_until(lambda: running_operators(app_id) == OPERATORS, timeout=120, what="all operators running")
        wait_until(lambda: out.exists() and any(out.rglob("*.jsonl")), timeout=120, what="committed output")
        kill_container_of(app_id, "count")
    finally:
        final = wait_final(app_id, timeout=240)
    assert final["state"] == "SUCCEEDED", final.get("diagnostics")
    sums, maxima, _ = read_counts(out)
    truth = word_truth(WORDS)
    assert sums == truth and maxima == dict(truth)
    assert len(containers_of(final)) == 3  # the two, and the killed one's replacement


def test_nexmark_q9_in_two_containers_matches_the_oracle(tmp_path):
    data, out = str(tmp_path / "data"), tmp_path / "out"
    write_dataset(data, 20_000, GeneratorConfig(seed=7, first_event_rate=400))
    done = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", "q9", "--data", data, "--out", str(out),
                           "--partitions", "2", "-D", "CONTAINERS_MAX_COUNT=2", "--json", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["state"] == "SUCCEEDED"
    want = oracle.answer("q9", data)
    got = read_jsonl(str(out))
    assert want, "the oracle's answer is empty; the data set tests nothing"
    as_multiset = lambda rows: collections.Counter(json.dumps(r, sort_keys=True) for r in rows)  # noqa: E731
    assert as_multiset(got) == as_multiset(want), f"{len(got)} rows, the oracle {len(want)}"
