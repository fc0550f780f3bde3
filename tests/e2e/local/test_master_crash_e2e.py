"""A master that keeps failing: attempts back off, end FAILED with the last reason, and can be killed.

A corrupt journal makes every master attempt fail at once. The supervisor must
not restart it in a tight loop: it waits longer before each short-lived attempt,
says so in ``status.json``, and after MASTER_ATTEMPTS ends FAILED with what the
last attempt said (the journal's file and what is wrong with it). ``stram
kill-app`` stops such an application through its supervisor, and an application
whose supervisor and master were both killed is not left RUNNING in its
``status.json`` (test_supervise_e2e.py checks that last part).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import psutil
from conftest import ROOT
from e2ekit import app_processes, launch_detached, running_operators, wait_final, wait_until

from stram.common import apppath
from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"


def launch_slow(tmp_path, attempts: int) -> tuple[str, str]:
    app_id = launch_detached("specs/wordcount.yaml", "-D", f"MASTER_ATTEMPTS={attempts}",
                             "-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.lines_per_window=2", "-D", f"operators.out.path={tmp_path / 'out'}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    app_dir = stram_apps.find_app(app_id)["app_path"]
    # the admin API answers (found through status.json) a moment before the master writes admin.json
    wait_until(lambda: os.path.isfile(os.path.join(app_dir, apppath.ADMIN)), 30, what="admin.json")
    return app_id, app_dir


def read(app_dir: str, name: str) -> dict:
    with open(os.path.join(app_dir, name)) as f:
        return json.load(f)


def corrupt_the_journal_under_a_held_supervisor(app_dir: str) -> str:
    """Hold the supervisor, kill the master, make the journal's snapshot garbage, let go: every
    attempt from now on fails reading it. The snapshot's path."""
    supervisor = psutil.Process(read(app_dir, apppath.SUPERVISOR)["pid"])
    supervisor.suspend()
    try:
        master = psutil.Process(read(app_dir, apppath.ADMIN)["pid"])
        master.kill()
        wait_until(lambda: not master.is_running() or master.status() == psutil.STATUS_ZOMBIE, 10,
                   what="the master to die")  # a zombie until its (held) supervisor reaps it
        snapshot = os.path.join(app_dir, apppath.JOURNAL, "snapshot")
        assert os.path.isfile(snapshot)
        with open(snapshot, "wb") as f:
            f.write(b"\x00garbage, not a journal")
    finally:
        supervisor.resume()
    return snapshot


def test_a_master_failing_at_every_start_backs_off_and_ends_failed_naming_the_journal(tmp_path):
    app_id, app_dir = launch_slow(tmp_path, attempts=4)
    snapshot = corrupt_the_journal_under_a_held_supervisor(app_dir)
    seen = []
    wait_until(lambda: seen.append(read(app_dir, apppath.STATUS).get("diagnostics") or "")
               or "attempt 3 starts in 2 s" in seen[-1], timeout=60, what="the wait before attempt 3 said")
    app = wait_final(app_id, timeout=60)
    assert app["state"] == "FAILED"
    diagnostics = app["diagnostics"]
    assert diagnostics.startswith("the application master exited without a final state in each of 4 attempts "
                                  "(last: exit code 1: ")
    assert snapshot in diagnostics and "not a stram journal" in diagnostics and "MASTER_ATTEMPTS=4" in diagnostics
    assert read(app_dir, apppath.STATUS)["state"] == "FAILED"
    # the attempts after the first were short-lived: 1 s, then 2 s, then 4 s apart (never a tight loop)
    log = open(os.path.join(app_dir, apppath.LOGS, "supervisor.log")).read()
    waits = [int(w) for w in re.findall(r"attempt \d+ starts in (\d+) s", log)]
    assert waits == [1, 2, 4], log
    starts = [float(m) for m in re.findall(r"^(\d+\.\d+) attempt", _attempt_times(app_dir), re.M)]
    assert len(starts) == 4 and all(b - a >= w - 0.05 for a, b, w in zip(starts[1:], starts[2:], (2, 4))), starts


def _attempt_times(app_dir: str) -> str:
    """When each master attempt started, from the master's log (its first line of each attempt)."""
    out = []
    for line in open(os.path.join(app_dir, apppath.LOGS, "master.log")):
        if "cannot run application" in line or "umbilical at" in line:
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            out.append(f"{stamp:.3f} attempt")
    return "\n".join(out)


def test_kill_app_stops_an_application_whose_master_is_down(tmp_path):
    app_id, app_dir = launch_slow(tmp_path, attempts=6)
    corrupt_the_journal_under_a_held_supervisor(app_dir)
    wait_until(lambda: "starts in" in (read(app_dir, apppath.STATUS).get("diagnostics") or ""), timeout=30,
               what="the supervisor between attempts")
    out = subprocess.run([sys.executable, "-m", "stram", "kill-app", app_id], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "the master does not answer" in out.stderr and "its supervisor stopped it" in out.stderr
    assert out.stdout.strip() == f"{app_id} KILLED"
    app = wait_final(app_id, timeout=30)
    assert app["state"] == "KILLED" and read(app_dir, apppath.STATUS)["state"] == "KILLED"
    assert not app_processes(app_id)
