"""A short chaos soak (``python -m bench.recovery.chaos``): one seeded run per processing mode, output exact.

Each run is a partitioned word count whose containers (the output's and its
unifier's among them) are SIGKILLed at random times, one is SIGSTOPped past
the heartbeat timeout, and the master is SIGKILLed; it must end SUCCEEDED
with the output the mode promises. ``STRAM_CHAOS_SEED`` picks other seeds;
``STRAM_CHAOS_DISK=1`` adds the full-disk fault (root only).
"""

from __future__ import annotations

import os

import pytest

from bench.recovery.chaos import run_one

SEED = int(os.environ.get("STRAM_CHAOS_SEED", "2"))


@pytest.mark.parametrize("mode, seed", [("exactly_once", SEED), ("at_least_once", SEED + 1)])
def test_chaos_run(tmp_path, mode, seed):
    result = run_one(seed, mode, tmp_path, disk=os.environ.get("STRAM_CHAOS_DISK") == "1", timeout=150)
    assert result.result == "exact", f"{result.line()}\nreplay: python -m bench.recovery.chaos --runs 1 --seed {seed} --mode {mode}"
    kinds = {f.split("(")[0].split("@")[0] for f in result.faults}
    assert {"kill", "stop", "master"} <= kinds, result.faults  # every kind of fault landed
    assert any(f.startswith("kill(") and "out" in f for f in result.faults), result.faults
