"""The umbilical's transport bench (``python -m bench.heartbeats.bench_umbilical``) runs briefly, so that it cannot rot.

Its figures are measured on demand, not asserted here: this checks that the real
server answers every heartbeat the simulated agents stream (the server's count of
heartbeats handed to its dispatcher equals the agents' count of answers) and
that the figures are reported.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT



@pytest.mark.slow
def test_every_streamed_heartbeat_is_answered_and_counted():
    proc = subprocess.run([sys.executable, "-m", "bench.heartbeats.bench_umbilical", "--streams", "30",
                           "--operators", "4", "--seconds", "2", "--interval-ms", "20", "--procs", "2"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    figures = dict(item.split("=", 1) for item in proc.stdout.strip().splitlines()[-1].split())
    assert figures["streams"] == "30" and figures["operators"] == "4", figures
    # every container heartbeated many times, and the server handed each to its dispatcher once
    assert int(figures["heartbeats"]) == int(figures["answered"]) > 30 * 5, figures
    assert float(figures["server_ms_per_hb"]) > 0 and float(figures["agents_ms_per_hb"]) > 0, figures
    assert float(figures["batch_mean"]) >= 1, figures


def test_bad_arguments_are_refused_with_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "bench.heartbeats.bench_umbilical", "--streams", "0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--streams" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
