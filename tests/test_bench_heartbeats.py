"""The heartbeat load harness (bench/bench_heartbeats.py) runs briefly, so that it cannot rot.

The figures themselves are measured by the bench on demand, not asserted here;
this checks that a small configuration plans, deploys, heartbeats over real
gRPC and reports what it must, with every simulated container served; and
that ``stram list-operators`` answers on it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(*args: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_heartbeats.py"), *args],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(item.split("=", 1) for item in proc.stdout.strip().splitlines()[-1].split())


@pytest.mark.slow
def test_harness_runs_a_small_configuration():
    figures = _run("--containers", "50", "--operators", "5", "--seconds", "8", "--interval-ms", "500")
    assert figures["containers"] == "50" and figures["operators"] == "250"
    for key in ("p50_ms", "p99_ms", "timeouts", "master_rss_mb", "journal_writes", "committed_ms_mean"):
        assert key in figures, figures
    # every simulated container heartbeated several times; the master planned all of them
    assert int(figures["heartbeats"]) > 50 * 3, figures
    assert int(figures["errors"]) == 0 and int(figures["timeouts"]) == 0, figures
    assert float(figures["master_rss_mb"]) > 0 and int(figures["journal_writes"]) > 0, figures
    # every operator became ACTIVE, and the CLI listed them all
    assert 0 < float(figures["deploy_s"]) < float(figures["deploy_from_process_start_s"]), figures
    assert float(figures["list_operators_s"]) > 0 and figures["list_operators_rows"] == "250", figures

