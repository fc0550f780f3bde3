"""stram.common.liveness: a process that has begun to exit is not alive."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from stram.common import apps, liveness


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_running_process_is_not_ended(sleeper):
    proc = psutil.Process(sleeper.pid)
    assert liveness.stat_flags(sleeper.pid) & liveness.PF_EXITING == 0
    assert not liveness.ended(proc)
    assert apps.process_alive({"pid": sleeper.pid, "started": proc.create_time()}) is True


def test_a_killed_process_is_ended_as_a_zombie_and_once_reaped(sleeper):
    proc = psutil.Process(sleeper.pid)
    sleeper.send_signal(signal.SIGKILL)
    while proc.status() != psutil.STATUS_ZOMBIE:  # not reaped yet: a zombie of ours
        pass
    assert liveness.ended(proc)
    sleeper.wait()
    assert liveness.ended(proc)
    assert apps.process_alive({"pid": sleeper.pid, "started": proc.create_time()}) is False


def test_a_process_flagged_exiting_is_ended_though_its_status_says_running(sleeper, monkeypatch):
    """What a SIGKILLed supervisor looked like under load for seconds: status 'running',
    memory gone, PF_EXITING set. The registry must not count it as running the application."""
    proc = psutil.Process(sleeper.pid)
    flags = liveness.stat_flags(sleeper.pid)
    monkeypatch.setattr(liveness, "stat_flags", lambda pid: flags | liveness.PF_EXITING)
    assert proc.status() != psutil.STATUS_ZOMBIE
    assert liveness.ended(proc)
    assert apps.process_alive({"pid": sleeper.pid, "started": proc.create_time()}) is False


def test_stat_flags_reads_past_a_command_name_with_spaces_and_parentheses(tmp_path):
    exe = tmp_path / "a b) c"
    exe.symlink_to(sys.executable)
    proc = subprocess.Popen([str(exe), "-c", "import time; time.sleep(60)"])
    try:
        assert psutil.Process(proc.pid).name() == "a b) c"
        assert liveness.stat_flags(proc.pid) is not None
        assert not liveness.ended(psutil.Process(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_process_has_no_flags():
    assert liveness.stat_flags(2**22 + 12345) is None
