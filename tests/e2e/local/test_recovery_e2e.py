"""Recovery end to end: containers and masters killed with SIGKILL, output still exact (random
kills in both modes: tests/e2e/local/test_chaos_e2e.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import agent_pid, launch_detached, running_operators, wait_until

from stram.client import cli
from stram.client import commands as stram_client
from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5"]


def test_master_killed_and_new_attempt_finishes(tmp_path):
    out = tmp_path / "out"
    truth = word_truth(MOBY)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stram.client.cli", "launch", "specs/wordcount.yaml", *FAST,
         "-D", f"operators.reader.path={MOBY}", "-D", "operators.reader.lines_per_window=150",
         # idle at the end of the file: late containers catch up on missed windows, and the run
         # must not end before the kill
         "-D", "operators.reader.class=tests.kits.e2e_ops:LinesThenIdle",
         "-D", "operators.count.partitions=2", "-D", f"operators.out.path={out}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        app_id = wait_until(lambda: stram_apps.local_apps() and stram_apps.local_apps()[0]["id"], what="the app")
        wait_until(lambda: running_operators(app_id) == 6, what="all operators running")
        time.sleep(3)
        app = stram_apps.find_app(app_id)
        admin = json.loads(open(os.path.join(app["app_path"], "admin.json")).read())
        os.kill(admin["pid"], signal.SIGKILL)
        wait_until(lambda: read_counts(out)[0] == truth, timeout=180, interval=1.0, what="the whole output")
        # through the master's next attempt (it may still be starting)
        wait_until(lambda: cli.main(["shutdown-app", app_id]) == 0, timeout=120, interval=1.0,
                   what="shutdown-app accepted")
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "attempt 2 starts" in err
    master_log = open(os.path.join(stram_apps.find_app(app_id)["app_path"], "logs", "master.log")).read()
    assert "master attempt 2 resumed from the journal" in master_log
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)


def test_buffers_purged_and_old_checkpoints_deleted(tmp_path):
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.lines_per_window=20", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    app = stram_apps.find_app(app_id)
    first = stram_client.admin(app, "info")["committed_window"]
    wait_until(lambda: stram_client.admin(app, "info")["committed_window"] > first + 20, timeout=60,
               what="the committed window to advance")
    committed = stram_client.admin(app, "info")["committed_window"]
    time.sleep(1.5)  # several heartbeats: the purge up to committed - 1 is carried out and reported
    publishers = {}
    for row in stram_client.admin(app, "containers")["containers"]:
        publishers.update(row["buffer_server_publishers"])
    assert publishers, "no buffer-server publishers reported"
    for name, stats in publishers.items():
        # every window <= committed - 1 is gone; the oldest one held is newer
        assert stats["windows"] == 0 or stats["first_window"] >= committed - 1, (name, stats, committed)
        assert stats["last_window"] > committed, (name, stats)  # windows after it are kept
        assert stats["throttled_millis"] >= 0, (name, stats)  # flow control's figure travels with them
    # checkpoints older than each operator's recovery checkpoint are deleted
    recovery = {str(r["id"]): r["recovery_checkpoint"] for r in stram_client.admin(app, "operators")["operators"]}
    time.sleep(1.5)
    ckpt_root = os.path.join(app["app_path"], "checkpoints")
    for op_dir, rec in recovery.items():
        windows = [int(w) for w in os.listdir(os.path.join(ckpt_root, op_dir)) if w.isdigit()]
        assert windows and min(windows) >= rec, (op_dir, sorted(windows), rec)
    assert cli.main(["kill-app", app_id]) == 0


def test_kill_container_command_recovers(tmp_path, capsys):
    """The reader idles at the end of its file (LinesThenIdle): containers that start late on a
    loaded machine catch up on the windows they missed, and the run must not end before the kill."""
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:LinesThenIdle",
                             "-D", "operators.reader.lines_per_window=300", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    victim = next(r["id"] for r in stram_client.admin(stram_apps.find_app(app_id), "containers")["containers"]
                  if "count" in r["operators"])
    assert cli.main(["kill-container", app_id, victim]) == 0
    truth = word_truth(MOBY)
    wait_until(lambda: read_counts(out)[0] == truth, timeout=180, interval=1.0, what="the whole output")
    assert cli.main(["shutdown-app", app_id]) == 0
    assert cli.main(["wait", app_id, "--timeout", "180"]) == 0
    capsys.readouterr()
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)
    status = json.loads(open(os.path.join(stram_apps.find_app(app_id)["app_path"], "status.json")).read())
    assert status["state"] == "SUCCEEDED"


def test_recovery_attempts_exhausted_fails_with_diagnostic(tmp_path, capsys):
    spec = tmp_path / "boom.yaml"
    spec.write_text(f"""
name: boom
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, RECOVERY_ATTEMPTS: 2,
             RETRY_DETERMINISTIC_FAILURES: true}}
operators:
  reader: {{class: "stram.operators.io:LineReader", properties: {{path: "{MOBY}", lines_per_window: 10}}}}
  boom: {{class: "tests.kits.e2e_ops:Boom", properties: {{after: 30}}}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{tmp_path / 'out'}"}}}}
streams:
  a: {{from: reader.output, to: [boom.input]}}
  b: {{from: boom.output, to: [out.input]}}
""")
    assert cli.main(["launch", str(spec)]) == 1
    app = stram_apps.local_apps()[0]
    assert app["state"] == "FAILED"
    assert "boom" in app["diagnostics"] and "RECOVERY_ATTEMPTS=2" in app["diagnostics"]
    assert "ValueError: boom after 30 tuples" in app["diagnostics"]


def test_fatal_error_fails_without_recovery(tmp_path):
    spec = tmp_path / "fatal.yaml"
    spec.write_text(f"""
name: fatal
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300}}
operators:
  reader: {{class: "stram.operators.io:LineReader", properties: {{path: "{MOBY}", lines_per_window: 10}}}}
  boom: {{class: "tests.kits.e2e_ops:Boom", properties: {{after: 5, fatal: true}}}}
streams:
  a: {{from: reader.output, to: [boom.input]}}
""")
    assert cli.main(["launch", str(spec)]) == 1
    app = stram_apps.local_apps()[0]
    assert app["state"] == "FAILED" and "failed fatally" in app["diagnostics"]
    assert "boom after 5 tuples (fatal)" in app["diagnostics"]


def test_upstream_moves_downstream_agents_reconnect_without_restart(tmp_path):
    """Connection refresh: the upstream's container dies and is replaced elsewhere;
    the downstream agents keep running (same processes) and subscribe to the new
    buffer server from the right window.

    The reader stays alive at the end of its file (LinesThenIdle): a fast run on a
    loaded machine (whose containers start late, then catch up on the windows
    missed) must not end before the kill; it is shut down once the output is whole."""
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:LinesThenIdle",
                             "-D", "operators.reader.lines_per_window=200", "-D", "operators.count.partitions=2",
                             "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 6, what="all operators running")
    app = stram_apps.find_app(app_id)
    before = {r["id"]: r for r in stram_client.admin(app, "containers")["containers"]}
    upstream = next(c for c in before.values() if "split" in c["operators"])
    downstream = {cid: c["process"] for cid, c in before.items() if cid != upstream["id"]}
    os.kill(agent_pid(app_id, upstream["id"]), signal.SIGKILL)
    wait_until(lambda: running_operators(app_id) == 6 and any(
        "split" in c["operators"] and c["id"] != upstream["id"]
        for c in stram_client.admin(app, "containers")["containers"]), timeout=60, what="split redeployed")
    after = {r["id"]: r for r in stram_client.admin(app, "containers")["containers"]}
    new_upstream = next(c for c in after.values() if "split" in c["operators"])
    assert new_upstream["buffer_server"] != upstream["buffer_server"]
    for cid, process in downstream.items():
        assert after[cid]["state"] == "RUNNING" and after[cid]["process"] == process, cid  # not restarted
    truth = word_truth(MOBY)
    wait_until(lambda: read_counts(out)[0] == truth, timeout=180, interval=1.0, what="the whole output")
    assert cli.main(["shutdown-app", app_id]) == 0
    assert cli.main(["wait", app_id, "--timeout", "180"]) == 0
    logs = "".join(open(os.path.join(app["app_path"], "logs", f"{cid}.log")).read() for cid in downstream)
    assert "undeployed operator" in logs  # the old subscriptions were closed ...
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)  # ... and the new ones started at the right window
