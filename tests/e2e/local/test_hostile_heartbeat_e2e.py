"""One empty heartbeat, sent with a container's own credential, no longer stalls an application.

What a buggy or compromised agent can do: ``ProcessHeartbeat`` with no operator
stats for its container. The master once removed the omitted operator and left
the application RUNNING with its committed window frozen, saying nothing. Now
the omission is a failure of the operator: its container is replaced, it resumes
from its checkpoint, the failure is counted and shown, and the output stays exact.
"""

from __future__ import annotations

from conftest import ROOT, read_counts, word_truth
from e2ekit import admin, launch_detached, running_operators, wait_final, wait_until

from stram import wire as proto
from stram.agent.umbilical import Umbilical
from stram.client import commands
from stram.common import apps
from stram.common.secret import container_credential

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"


def test_an_empty_heartbeat_is_a_failure_recovered_exactly_once(tmp_path):
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", "-D", "PROCESSING_MODE=EXACTLY_ONCE",
                             "-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=5",
                             "-D", f"operators.reader.path={MOBY}", "-D", "operators.reader.lines_per_window=100",
                             "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    app = apps.find_app(app_id)
    rows = admin(app_id, "operators")["operators"]
    cid = next(r["container"] for r in rows if r["name"] == "reader")
    umbilical = Umbilical(app["app_path"], container_credential(apps.read_token(app_id), cid), container_id=cid)
    umbilical.connect(wait=10)
    try:
        umbilical.call("ProcessHeartbeat", proto.ContainerHeartbeat(container_id=cid))  # no operators at all
    finally:
        umbilical.close()
    info = wait_until(lambda: (i := commands.app_info(apps.find_app(app_id))).get("failures", {}).get("reader") and i,
                      timeout=30, what="the reader's failure to show")
    assert "went missing from " + cid + "'s heartbeat" in info["failures"]["reader"]["error"]
    assert info["removed"] == []  # not removed from the plan: recovered
    final = wait_final(app_id, timeout=240)
    assert final["state"] == "SUCCEEDED", final
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)  # exactly once across the recovery
