"""NEXMark on stram end to end: every query's output against the engine-free oracle
(stram.nexmark.oracle), as multisets of rows.

A small data set (20,000 events at 400 events/s of event time: 50 s, so several windows of every
kind) is generated once. All ten queries run in one application sharing its three sources, with one
and with two partitions; each query runs on its own as the benchmark runs it (its own sources, Arrow
batches where it takes them); `python -m stram.nexmark run` runs q9 and q1, and q5 replayed at a
fixed rate (--rate); q7 runs EXACTLY_ONCE with its per-window fold's container killed mid-run.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until

from scripts.summarize import read_jsonl
from stram.nexmark import oracle
from stram.nexmark.generator import write_dataset
from stram.nexmark.model import GeneratorConfig
from stram.nexmark.queries import QUERIES
from stram.nexmark.runner import run_query

EVENTS, RATE = 20_000, 400


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    where = str(tmp_path_factory.mktemp("nexmark") / "data")
    write_dataset(where, EVENTS, GeneratorConfig(seed=7, first_event_rate=RATE))
    return where


def as_multiset(rows: list[dict]) -> collections.Counter:
    return collections.Counter(json.dumps(r, sort_keys=True) for r in rows)


def check(query: str, data: str, out: str) -> None:
    """The query's rows under ``out`` are the oracle's, each exactly as often (floats compared exactly)."""
    want = oracle.answer(query, data)
    got = read_jsonl(out)
    assert want, f"{query}: the oracle's answer is empty; the data set tests nothing"
    assert as_multiset(got) == as_multiset(want), f"{query}: {len(got)} rows, the oracle {len(want)}"


def all_queries_app(tmp_path, data: str, partitions: int, attributes: dict) -> str:
    path = tmp_path / "nexmark_all.py"
    path.write_text(textwrap.dedent(f"""
        from stram.flow import Flow
        from stram.nexmark.queries import QUERIES, Sources, add_query

        flow = Flow("nexmark-all", attributes={attributes!r})
        sources = Sources(flow, {data!r}, {partitions}, shared=True)
        for query in QUERIES:
            add_query(query, flow, {data!r}, {str(tmp_path)!r} + "/" + query, {partitions}, sources)
    """))
    return str(path)


@pytest.mark.parametrize("partitions", [1, 2])
def test_every_query_in_one_application_matches_the_oracle(tmp_path, data, partitions):
    app = all_queries_app(tmp_path, data, partitions, {"STREAMING_WINDOW_SIZE_MILLIS": 200,
                                                       "PROCESSING_MODE": "EXACTLY_ONCE"})
    final = wait_final(launch_detached(app), timeout=600)
    assert final["state"] == "SUCCEEDED", final
    for query in QUERIES:
        check(query, data, str(tmp_path / query))


@pytest.mark.parametrize("query, partitions", [(q, 1) for q in QUERIES] + [("q3", 2), ("q5", 2), ("q7", 2), ("q11", 2)])
def test_each_query_on_its_own_matches_the_oracle(tmp_path, data, query, partitions):
    out = str(tmp_path / "out")
    summary = run_query(query, data, out, partitions, progress=False)
    assert summary["state"] == "SUCCEEDED", summary
    check(query, data, out)


@pytest.mark.parametrize("query, partitions", [("q9", 2), ("q1", 1)])
def test_the_run_command_runs_a_query_and_sums_it_up(tmp_path, data, query, partitions):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", query, "--data", data, "--out", str(out),
                           "--partitions", str(partitions), "--json"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["state"] == "SUCCEEDED"
    assert summary["events"] == EVENTS and summary["partitions"] == partitions
    check(query, data, str(out))
    assert summary["rows"] == len(read_jsonl(str(out)))


def test_q7_is_exact_once_across_a_container_kill(tmp_path, data):
    out = tmp_path / "out"
    app = tmp_path / "q7.py"
    # a slow source (bids a few hundred a window) so that the kill lands mid-run
    app.write_text(textwrap.dedent(f"""
        from stram.flow import Flow
        from stram.nexmark.queries import add_query

        flow = Flow("nexmark-q7", attributes={{"STREAMING_WINDOW_SIZE_MILLIS": 100, "CHECKPOINT_WINDOW_COUNT": 5,
                                                "HEARTBEAT_INTERVAL_MILLIS": 300, "PROCESSING_MODE": "EXACTLY_ONCE"}})
        add_query("q7", flow, {data!r}, {str(out)!r}, 2)
    """))
    app_id = launch_detached(str(app), "-D", "operators.bid.records_per_window=100", "-D",
                             "operators.bid.batch_rows=100")
    # 2 sources (each with its batches' highest bids in its thread), 2 folds per window (each with its
    # rows and writer in its thread)
    wait_until(lambda: running_operators(app_id) == 10, timeout=120, what="all operators running")
    wait_until(lambda: os.path.isdir(out) and any(True for _ in out.rglob("*.jsonl")), timeout=120,
               what="a window's result committed")
    kill_container_of(app_id, "q7_highest")
    final = wait_final(app_id, timeout=600)
    assert final["state"] == "SUCCEEDED", final
    check("q7", data, str(out))


def test_a_paced_run_matches_the_oracle_and_reports_its_sources_starts(tmp_path, data):
    out = tmp_path / "out"
    rate = 10_000     # the 20,000 events in about 2 s
    before = time.time()
    done = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", "q5", "--data", data, "--out", str(out),
                           "--partitions", "2", "--rate", str(rate), "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["state"] == "SUCCEEDED" and summary["rate"] == rate
    check("q5", data, str(out))
    # q5 reads bids only: one note per partition of its source, paced at the bids' share of the rate
    bids = sum(1 for n in range(EVENTS) if n % 50 >= 4)
    notes = summary["sources"]
    assert [(n["partition"], n["partitions"]) for n in notes] == [(0, 2), (1, 2)]
    assert all(n["path"].endswith("bid.parquet") and n["rate"] == rate * bids / EVENTS for n in notes)
    assert all(before <= n["started"] <= time.time() for n in notes)
