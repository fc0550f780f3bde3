"""SUCCEEDED means final: when an application is reported SUCCEEDED, every output window is final."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from conftest import ROOT, read_counts, word_truth
from e2e_ops import KeyedSource
from e2ekit import app_processes, launch_detached

from stram.client import cli
from stram.common import apps as stram_apps

WORDS = ROOT / "specs" / "data" / "words.txt"


def test_succeeded_only_once_every_output_window_is_final(tmp_path):
    """An output whose finalization is slow (12 s) in a container released early: SUCCEEDED waits for it.

    Two branches: the word count ends first; its output's container is released
    (empty) while the keyed branch still runs, and is still making its last
    window final when the keyed branch ends and the application is done. Read
    right after ``stram wait`` returns, both outputs are complete, and no
    container process is left that could still be writing.
    """
    out, keyed = tmp_path / "out", tmp_path / "keyed"
    spec = {
        "name": "slow-final",
        "attributes": {"STREAMING_WINDOW_SIZE_MILLIS": 100, "CHECKPOINT_WINDOW_COUNT": 5,
                       "HEARTBEAT_INTERVAL_MILLIS": 300, "PROCESSING_MODE": "EXACTLY_ONCE"},
        "operators": {
            "reader": {"class": "stram.operators.io:LineReader", "properties": {"path": str(WORDS)}},
            "split": {"class": "stram.operators.text:WordSplitter"},
            "count": {"class": "stram.operators.aggregate:KeyCounter"},
            "out": {"class": "tests.kits.e2e_ops:SlowFinalOutput", "properties": {"path": str(out), "delay": 12.0}},
            "keys": {"class": "tests.kits.e2e_ops:KeyedSource", "properties": {"per_window": 20, "total": 800}},
            "kcount": {"class": "stram.operators.aggregate:KeyCounter"},
            "kout": {"class": "stram.operators.io:JsonLinesOutput", "properties": {"path": str(keyed)}},
        },
        "streams": {"lines": {"from": "reader.output", "to": ["split.input"]},
                    "words": {"from": "split.output", "to": ["count.input"]},
                    "counts": {"from": "count.output", "to": ["out.input"]},
                    "k": {"from": "keys.output", "to": ["kcount.input"]},
                    "kc": {"from": "kcount.output", "to": ["kout.input"]}},
    }
    path = tmp_path / "slow.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    app_id = launch_detached(str(path))
    assert cli.main(["wait", app_id, "--timeout", "180"]) == 0
    agents = [p for p in app_processes(app_id) if p.cmdline()[-2:] == ["-m", "stram.agent"]]
    assert agents == [], "SUCCEEDED while container processes still ran"
    truth = word_truth(WORDS)
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)
    ksums, _, _ = read_counts(keyed)
    assert dict(ksums) == KeyedSource.truth(1, 800, -1, 0, 7)
    assert not [f for f in out.rglob("*") if f.is_file() and not f.name.endswith(".jsonl")]


def late_final_spec(tmp_path, **out_properties) -> str:
    """Word count whose output makes its committed windows final only in its teardown."""
    spec = {
        "name": "late-final",
        "attributes": {"STREAMING_WINDOW_SIZE_MILLIS": 100, "CHECKPOINT_WINDOW_COUNT": 5,
                       "HEARTBEAT_INTERVAL_MILLIS": 300, "HEARTBEAT_TIMEOUT_MILLIS": 6000,
                       "PROCESSING_MODE": "EXACTLY_ONCE", **out_properties.pop("attributes", {})},
        "operators": {
            "reader": {"class": "stram.operators.io:LineReader", "properties": {"path": str(WORDS)}},
            "split": {"class": "stram.operators.text:WordSplitter"},
            "count": {"class": "stram.operators.aggregate:KeyCounter"},
            "out": {"class": "tests.kits.e2e_ops:LateFinalOutput",
                    "properties": {"path": str(tmp_path / "out"), **out_properties}},
        },
        "streams": {"lines": {"from": "reader.output", "to": ["split.input"]},
                    "words": {"from": "split.output", "to": ["count.input"]},
                    "counts": {"from": "count.output", "to": ["out.input"]}},
    }
    path = tmp_path / "late.yaml"
    path.write_text(json.dumps(spec))
    return str(path)


def test_a_container_still_ending_its_output_is_waited_for_past_the_heartbeat_timeout(tmp_path):
    """The output's teardown takes 15 s, more than HEARTBEAT_TIMEOUT_MILLIS (6 s), the master's grace for a
    container to exit after the end: its heartbeats say it is still ending, so the master waits, and
    SUCCEEDED comes with the whole output."""
    app_id = launch_detached(late_final_spec(tmp_path, delay=15.0))
    assert cli.main(["wait", app_id, "--timeout", "180"]) == 0
    assert not [p for p in app_processes(app_id) if p.cmdline()[-2:] == ["-m", "stram.agent"]]
    sums, maxima, _ = read_counts(tmp_path / "out")
    truth = word_truth(WORDS)
    assert sums == truth and maxima == dict(truth)
    app = stram_apps.find_app(app_id)
    master = (pathlib.Path(app["app_path"]) / "logs" / "master.log").read_text()
    assert re.search(r"ending: container\S* still ends out \(\d+\)", master), master[-3000:]


def test_a_container_stopped_while_still_ending_fails_the_application(tmp_path):
    """END_TIMEOUT_SECS (5 s) passes while the output still ends: stopped, and FAILED, naming it."""
    app_id = launch_detached(late_final_spec(tmp_path, delay=120.0, attributes={"END_TIMEOUT_SECS": 5}))
    assert cli.main(["wait", app_id, "--timeout", "120"]) == 1
    app = stram_apps.find_app(app_id)
    assert app["state"] == "FAILED"
    assert re.match(r"the application ended, but container \S+ was stopped while still ending out \(\d+\) "
                    r"\(END_TIMEOUT_SECS=5\)", app["diagnostics"]), app["diagnostics"]
    assert not [p for p in app_processes(app_id) if p.cmdline()[-2:] == ["-m", "stram.agent"]]


def test_an_output_failing_in_its_teardown_after_the_end_fails_the_application(tmp_path):
    """The output cannot make its last windows final: FAILED (not SUCCEEDED with a partial output)."""
    app_id = launch_detached(late_final_spec(tmp_path, fail=True))
    assert cli.main(["wait", app_id, "--timeout", "120"]) == 1
    app = stram_apps.find_app(app_id)
    assert app["state"] == "FAILED"
    assert re.match(r"the application ended, but out in \S+ failed while ending, so its output may be "
                    r"incomplete: teardown of out failed: OSError: the sink refused the last windows",
                    app["diagnostics"]), app["diagnostics"]
