"""A detached local application survives its master: the supervisor starts new attempts.

``stram launch --detach`` once left an application stranded when its master
was killed (containers running on, ``status.json`` RUNNING for good). The
supervisor (:mod:`stram.master.process.supervise`) restarts a dead master as YARN does,
up to ``MASTER_ATTEMPTS``, then ends the application FAILED with the reason;
the registry never shows RUNNING once nothing runs the application; and a new
attempt never takes over (or kills) a process that merely reuses a
container's pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import agent_pid, app_processes, launch_detached, running_operators, wait_final, wait_until

from stram.common import apps as stram_apps
from stram.master.journal import log as journallog

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "PROCESSING_MODE=EXACTLY_ONCE"]


def launch_wordcount(out, lines_per_window: int = 150) -> str:
    app_id = launch_detached("specs/wordcount.yaml", *FAST, "-D", f"operators.reader.path={MOBY}",
                             "-D", f"operators.reader.lines_per_window={lines_per_window}",
                             "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    return app_id


def app_dir(app_id: str) -> str:
    return stram_apps.find_app(app_id)["app_path"]


def read(app_id: str, name: str) -> dict:
    with open(os.path.join(app_dir(app_id), name)) as f:
        return json.load(f)


def master_pid(app_id: str) -> int:
    """The running master's pid (its admin API answers, through status.json, a moment before it
    writes admin.json: waits for the file)."""
    path = os.path.join(app_dir(app_id), "admin.json")
    wait_until(lambda: os.path.isfile(path), 30, what="admin.json")
    return read(app_id, "admin.json")["pid"]


def kill_master(app_id: str) -> int:
    pid = master_pid(app_id)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
               10, what="the master to die")
    return pid


def assert_exact(out) -> None:
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)


def test_killed_master_of_a_detached_application_is_restarted_and_the_output_is_exact(tmp_path):
    out = tmp_path / "out"
    app_id = launch_wordcount(out)
    time.sleep(2)
    first = kill_master(app_id)
    states = set()
    new_master = wait_until(lambda: states.add(stram_apps.find_app(app_id)["state"]) or (
        (pid := master_pid(app_id)) != first and psutil.pid_exists(pid) and pid), 30, what="attempt 2")
    assert psutil.Process(new_master).parent().pid == read(app_id, "supervisor.json")["pid"]
    assert "FAILED" not in states, "shown FAILED while the supervisor started a new attempt"
    app = wait_final(app_id, timeout=180)
    assert app["state"] == "SUCCEEDED", app
    assert_exact(out)
    logs = os.path.join(app_dir(app_id), "logs")
    assert "master attempt 2 resumed from the journal" in open(os.path.join(logs, "master.log")).read()
    assert "master attempt 1 of 2 exited (killed by SIGKILL) without a final state; attempt 2 starts" \
        in open(os.path.join(logs, "supervisor.log")).read()


def test_a_master_that_keeps_dying_ends_failed_with_the_reason(tmp_path):
    app_id = launch_wordcount(tmp_path / "out", lines_per_window=40)
    first = kill_master(app_id)
    wait_until(lambda: (pid := master_pid(app_id)) != first and psutil.pid_exists(pid), 30, what="attempt 2")
    kill_master(app_id)
    killed = time.monotonic()
    app = wait_final(app_id, timeout=30)  # the containers are stopped too
    assert time.monotonic() - killed < 30
    assert app["state"] == "FAILED"
    status = read(app_id, "status.json")  # the file itself, not only the registry's view
    assert status["state"] == "FAILED"
    assert "exited without a final state in each of 2 attempts" in status["diagnostics"]
    assert "SIGKILL" in status["diagnostics"] and "MASTER_ATTEMPTS=2" in status["diagnostics"]


def test_never_running_once_supervisor_and_master_are_gone(tmp_path):
    app_id = launch_wordcount(tmp_path / "out", lines_per_window=40)
    os.kill(read(app_id, "supervisor.json")["pid"], signal.SIGKILL)
    assert stram_apps.find_app(app_id)["state"] == "RUNNING"  # its master still runs it
    status_file = os.path.join(app_dir(app_id), "status.json")
    kill_master(app_id)
    try:
        with open(status_file) as f:  # read before anyone looks the application up
            assert json.load(f)["state"] == "RUNNING"  # what the dead master last wrote
        app = stram_apps.find_app(app_id)
        assert app["state"] == "FAILED" and "without a final state" in app["diagnostics"]
        # and the file no longer says RUNNING: the registry wrote what it found (nothing else is left to)
        status = read(app_id, "status.json")
        assert status["state"] == "FAILED" and "supervisor exited without a final state" in status["diagnostics"]
    finally:
        for proc in app_processes(app_id):
            proc.kill()


def test_restarted_master_leaves_processes_that_reuse_its_containers_pids_alone(tmp_path):
    """The journal's pids now belong to unrelated processes (as after pid reuse): the new
    attempt does not take them over or signal them; it redeploys and finishes exactly."""
    out = tmp_path / "out"
    app_id = launch_wordcount(out)
    time.sleep(2)
    supervisor = read(app_id, "supervisor.json")["pid"]
    os.kill(supervisor, signal.SIGSTOP)  # no new attempt until the journal is rewritten
    sleepers: list[subprocess.Popen] = []
    try:
        kill_master(app_id)
        journal_path = os.path.join(app_dir(app_id), "journal", "snapshot")
        doc = journallog.read_journal(app_dir(app_id))  # the snapshot with its log replayed
        containers = [c for c in doc["plan"]["containers"] if c["state"] in ("PENDING", "RUNNING")]
        assert containers and all(c["pid"] and c["process_started"] for c in containers), containers
        for c in containers:
            pid = agent_pid(app_id, c["id"])
            assert pid == c["pid"], (c["id"], pid, c["pid"])
            os.kill(pid, signal.SIGKILL)
            sleeper = subprocess.Popen(["sleep", "120"])
            sleepers.append(sleeper)
            c["pid"] = sleeper.pid  # the start time stays the container's: another process now
        with open(journal_path, "w") as f:  # the whole journal as one snapshot, without a log
            json.dump(doc, f)
        log = journallog.log_uri(app_dir(app_id), doc["log_generation"])
        if os.path.exists(log):
            os.remove(log)
        os.kill(supervisor, signal.SIGCONT)
        app = wait_final(app_id, timeout=180)
        assert app["state"] == "SUCCEEDED", app
        assert all(s.poll() is None for s in sleepers), "a stranger's process was killed"
        assert_exact(out)
        master_log = open(os.path.join(app_dir(app_id), "logs", "master.log")).read()
        assert master_log.count("not taking over") == len(containers)
        assert "adopted" not in master_log
    finally:
        os.kill(supervisor, signal.SIGCONT) if psutil.pid_exists(supervisor) else None
        for s in sleepers:
            s.kill()
            s.wait()
