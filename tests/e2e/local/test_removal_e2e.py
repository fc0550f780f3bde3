"""Safe partition removal end to end: a source partition ends early, the rest go on."""

from __future__ import annotations

import time

import pytest
from conftest import read_counts
from e2ekit import launch_detached, wait_until

from stram.client import cli
from stram.client import commands as stram_client
from stram.common import apps as stram_apps
from stram.common.errors import StramError

SPEC = """
name: partition-ends
attributes:
  STREAMING_WINDOW_SIZE_MILLIS: 100
  HEARTBEAT_INTERVAL_MILLIS: 300
  CHECKPOINT_WINDOW_COUNT: 5
  PROCESSING_MODE: EXACTLY_ONCE
operators:
  source:
    class: tests.kits.e2e_ops:KeyedSource
    partitions: 3
    properties: {{per_window: 20, total: 1600, stop_partition: 1, stop_total: 300, keys: 7,
                  release_file: "{release}"}}
  count:
    class: stram.operators.aggregate:KeyCounter
    partitions: 2
  out:
    class: stram.operators.io:JsonLinesOutput
    properties: {{path: "{out}"}}
streams:
  keys: {{from: source.output, to: [count.input]}}
  counts: {{from: count.output, to: [out.input]}}
"""


def test_partition_removed_only_after_commit_and_output_exact(tmp_path):
    """The other partitions end only once the test saw source[1] removed (or gave up looking):
    containers that start late on a loaded machine run their missed windows back to back, and
    all three partitions had ended together before the removal (loop round 21, load 45)."""
    from e2e_ops import KeyedSource
    out = tmp_path / "out"
    release = tmp_path / "release"
    spec = tmp_path / "ends.yaml"
    spec.write_text(SPEC.format(out=out, release=release))
    app_id = launch_detached(str(spec))
    app = wait_until(lambda: stram_apps.find_app(app_id).get("admin_url") and stram_apps.find_app(app_id), what="master up")
    seen_parked = False
    removed_while_others_ran = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            snap = stram_client.admin(app, "snapshot")  # info and operators of one moment
        except StramError:
            break  # the application ended
        info, ops = snap["info"], snap["operators"]
        labels = {r["label"]: r for r in ops}
        if "source[1]" in labels and labels["source[1]"]["state"] == "SHUTDOWN":
            seen_parked = True
            # while it is listed, the committed window has not passed its removal condition
            assert any("source[1]" in ids for ids in info["shutdown_operators"].values()), info["shutdown_operators"]
        if "source[1]" not in labels and any(r["label"] == "source[1]" for r in info["removed"]):
            removed_while_others_ran = any(labels.get(f"source[{p}]", {}).get("state") == "ACTIVE" for p in (0, 2))
            entry = next(r for r in info["removed"] if r["label"] == "source[1]")
            assert entry["window"] is not None and entry["committed"] >= entry["window"], entry
            break
        time.sleep(0.1)
    release.touch()
    assert cli.main(["wait", app_id, "--timeout", "120"]) == 0
    master_log = open(f"{stram_apps.find_app(app_id)['app_path']}/logs/master.log").read()
    removal = [line for line in master_log.splitlines() if "removed operator source[1]" in line]
    assert removal, "source[1] was never removed"
    assert "shut down at window" in removal[0]
    assert seen_parked or "parked in shutdownOperators" in master_log
    assert removed_while_others_ran, "source[1] should leave while the other partitions still run"
    # removed only once committed reached its shutdown window (the master records both)
    status = stram_apps.find_app(app_id)
    assert status["state"] == "SUCCEEDED"
    truth = KeyedSource.truth(3, 1600, 1, 300, 7)
    sums, maxima, _ = read_counts(out)
    assert dict(sums) == truth and maxima == truth
