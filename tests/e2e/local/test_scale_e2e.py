"""Live repartitioning end to end: `stram scale` and the stats listener on a running word count, output exact."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import launch_detached, wait_until

from stram.client import cli

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"

FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=5",
        "-D", "HEARTBEAT_INTERVAL_MILLIS=300"]


def _count_partitions(app_id: str, capsys) -> tuple[int, bool]:
    """(count partitions listed by list-operators, all of them ACTIVE)."""
    capsys.readouterr()
    if cli.main(["list-operators", app_id, "--json"]) != 0:  # the master is still starting
        return 0, False
    rows = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "count"]
    return len(rows), all(r["state"] == "ACTIVE" for r in rows)


def _scale(app_id: str, n: int, capsys, timeout: float = 30.0) -> dict:
    """``stram scale APP count n``, retried while the master says to try again."""
    deadline = time.monotonic() + timeout
    while True:
        capsys.readouterr()
        code = cli.main(["scale", app_id, "count", str(n)])
        out, err = capsys.readouterr()
        if code == 0:
            return json.loads(out)
        assert "try again" in err and time.monotonic() < deadline, err
        time.sleep(0.5)


def test_scale_wordcount_while_it_runs(tmp_path, capsys):
    """The reader idles at the end of its file (LinesThenIdle): containers that start late on a
    loaded machine catch up on the windows they missed, and the run must not end before the
    second scale (loop round 21: it had SUCCEEDED when scaled down)."""
    from stram.common import apps as stram_apps
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:LinesThenIdle",
                             "-D", "operators.reader.lines_per_window=60", "-D", "PROCESSING_MODE=EXACTLY_ONCE",
                             "-D", "operators.count.partitions=3", "-D", f"operators.out.path={out}")
    wait_until(lambda: _count_partitions(app_id, capsys) == (3, True), what="3 count partitions running")
    time.sleep(3)
    up = _scale(app_id, 5, capsys)
    assert (up["from"], up["to"], len(up["added"]), len(up["containers_launched"])) == (3, 5, 5, 5)
    assert up["upstream_redeployed"] == []
    wait_until(lambda: _count_partitions(app_id, capsys) == (5, True), what="5 count partitions running")
    time.sleep(4)
    down = _scale(app_id, 2, capsys)
    assert (down["from"], down["to"]) == (5, 2) and down["window"] >= up["window"]
    capsys.readouterr()
    assert cli.main(["get-app-info", app_id, "--json"]) == 0
    events = [e["text"] for e in json.loads(capsys.readouterr().out)["events"] if e["kind"] == "scale"]
    assert any("count: 3 → 5 partitions" in t for t in events) and any("count: 5 → 2" in t for t in events)
    wait_until(lambda: _count_partitions(app_id, capsys) == (2, True), what="2 count partitions running")
    truth = word_truth(MOBY)
    wait_until(lambda: read_counts(out)[0] == truth, timeout=180, interval=1.0, what="the whole output")
    assert cli.main(["shutdown-app", app_id]) == 0
    assert cli.main(["wait", app_id, "--timeout", "120"]) == 0
    sums, maxima, _ = read_counts(out)
    assert sums == truth
    assert maxima == dict(truth)
    master_log = open(os.path.join(stram_apps.find_app(app_id)["app_path"], "logs", "master.log")).read()
    assert "count: 5 → 2 partitions from window" in master_log


def test_stats_listener_scales_wordcount(tmp_path, capsys, monkeypatch):
    """specs/autoscale_wordcount.yaml: count starts with 1 partition; the listener adds more."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("STRAM_AUTOSCALE_WORDS_PER_PARTITION", "1000")
    monkeypatch.setenv("STRAM_AUTOSCALE_MAX_PARTITIONS", "3")
    out = tmp_path / "out"
    app_id = launch_detached("specs/autoscale_wordcount.yaml", "-D", f"operators.reader.path={MOBY}",
                             "-D", f"operators.out.path={out}")
    wait_until(lambda: _count_partitions(app_id, capsys)[0] == 3, timeout=60,
               what="the stats listener to scale count to 3")
    capsys.readouterr()
    assert cli.main(["get-app-info", app_id, "--json"]) == 0
    events = [e["text"] for e in json.loads(capsys.readouterr().out)["events"] if e["kind"] == "scale"]
    assert any("count: 1 → 3 partitions" in t and "stats listener" in t for t in events), events
    assert any("upstream split redeployed" in t for t in events), events
    assert cli.main(["wait", app_id, "--timeout", "120"]) == 0
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)
