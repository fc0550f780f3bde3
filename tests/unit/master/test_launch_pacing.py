"""Local containers start a few at a time: a plan of hundreds of containers never forks them all at once.

Real processes (a sleeping interpreter in place of the agent), real start times.
"""

from __future__ import annotations

import sys

from stram.master.launch.local import ContainerRequest, LocalLauncher


def test_at_most_max_starting_processes_start_within_the_window(tmp_path):
    launcher = LocalLauncher(str(tmp_path / "logs"), cwd=str(tmp_path), app_id="app_pacing")
    launcher.command = (sys.executable, "-c", "import time; time.sleep(30)")
    launcher.max_starting, launcher.start_window_seconds = 3, 0.5
    try:
        started = [launcher.launch(ContainerRequest(f"container_{i:06d}", 256, 1, (), {}))[1] for i in range(8)]
        assert len(launcher.running()) == 8
        procs = dict(launcher.processes)
        # any max_starting + 1 consecutive starts span at least the window (create times: 10 ms ticks)
        spans = [started[i + 3] - started[i] for i in range(len(started) - 3)]
        assert min(spans) >= 0.5 - 0.02, (spans, started)
        # and the first max_starting went at once
        assert started[2] - started[0] < 0.4
    finally:
        launcher.stop_all(grace=1.0)
    assert len(procs) == 8 and [p.poll() for p in procs.values()].count(None) == 0  # nothing left running
