"""The master keeps ``heartbeatUri`` and ``admin.json`` present: a replaced container finds it.

Deleting ``APP_PATH/heartbeatUri`` mid-run once stalled an application for
good: a container started after that never found its master. The master now
rewrites its address files when they go missing, and an agent that cannot find
its master says why in its log.
"""

from __future__ import annotations

import logging
import os

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until

from stram.agent import agent as agent_mod
from stram.client import cli
from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "PROCESSING_MODE=EXACTLY_ONCE"]


def test_agent_says_why_it_cannot_find_its_master(tmp_path, caplog):
    umbilical = agent_mod.Umbilical(f"file://{tmp_path}", "token")
    with caplog.at_level(logging.WARNING, logger="stram.agent.agent"):
        with pytest.raises(agent_mod.MasterGone):
            umbilical.connect(wait=0.6)
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"no heartbeatUri at file://{tmp_path}/heartbeatUri" in line for line in lines), lines
    assert len(lines) == 1, f"one reason, said once per {agent_mod.COMPLAIN_SECONDS}s: {lines}"


def test_status_json_is_written_before_admin_json(tmp_path, monkeypatch):
    """Whoever finds the admin API through admin.json finds the application RUNNING in list-apps.

    A prestarted container once failed 300 ms into the run, before the master's first status.json:
    the progress line showed the failure while ``stram list-apps`` still said STARTING."""
    from statekit import FakeLauncher, wordcount  # FakeLauncher starts no processes
    TOKEN = "scale-token"

    from stram.master.process import addressfiles
    from stram.master.process import master as master_mod
    from stram.master.spec import AppSpec
    seen: dict[str, object] = {}
    write_atomic = addressfiles.fs.write_atomic

    def watching(uri: str, data: bytes) -> None:
        if uri.endswith("/admin.json"):
            seen.setdefault("status", stram_apps.read_json(str(tmp_path / "status.json")))
        write_atomic(uri, data)
    monkeypatch.setattr(addressfiles.fs, "write_atomic", watching)
    m = master_mod.AppMaster(AppSpec.from_yaml(wordcount(1)), "app-order", f"file://{tmp_path}", TOKEN,
                             launcher := FakeLauncher())
    try:
        m.start()
    finally:
        m.stop()
    assert launcher.launched and "status" in seen, "no container launched, or admin.json never written"
    status = seen["status"]
    assert isinstance(status, dict) and status["state"] == "RUNNING" and status["admin_url"] == m.admin_url


def test_deleted_heartbeat_uri_is_rewritten_and_a_replacement_container_finds_the_master(tmp_path):
    out = tmp_path / "out"
    # the reader idles at the end of its file: containers that start late on a loaded machine
    # catch up on the windows they missed, and the run must not end before the kill
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:LinesThenIdle",
                             "-D", "operators.reader.lines_per_window=150", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    app_path = stram_apps.find_app(app_id)["app_path"]
    uri = os.path.join(app_path, "heartbeatUri")
    admin_json = os.path.join(app_path, "admin.json")
    os.remove(uri)
    kill_container_of(app_id, "count")  # its replacement must find the master
    os.remove(admin_json)
    wait_until(lambda: os.path.exists(uri) and os.path.exists(admin_json), timeout=10,
               what="the master to rewrite heartbeatUri and admin.json")
    truth = word_truth(MOBY)
    wait_until(lambda: read_counts(out)[0] == truth, timeout=180, interval=1.0, what="the whole output")
    assert cli.main(["shutdown-app", app_id]) == 0
    app = wait_final(app_id, timeout=180)
    assert app["state"] == "SUCCEEDED", app
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)
    master_log = open(os.path.join(app_path, "logs", "master.log")).read()
    assert "heartbeatUri was missing or stale; rewriting it" in master_log
