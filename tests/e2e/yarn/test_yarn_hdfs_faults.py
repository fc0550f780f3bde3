"""HDFS trouble on a real YARN: the NameNode restarts mid-run (down for some seconds).

``specs/wordcount.yaml`` (EXACTLY_ONCE) over Moby-Dick, with its input, its
output and ``APP_PATH`` (heartbeatUri, the journal, checkpoints) on the mini
cluster's HDFS, launched with ``stram launch --yarn`` as a user types it. Once
every operator runs and windows are committed, ``./scripts/minicluster
restart-namenode --down-seconds 5`` stops the NameNode, keeps it down, and
starts it again on the same port (it then spends a few seconds in safe mode). The master and the
containers ride it out (``stram.common.fs.hdfs_retry``): the application ends
SUCCEEDED and the output holds every word exactly once, counted here,
independently, from the input. The one other acceptable end is FAILED with a
diagnostic that names HDFS or the NameNode; SUCCEEDED with a wrong result never is.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until
from hadoop import collect_logs, launch_following, stram

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
#: windows of 100 ms, 20 lines each: reading Moby-Dick takes 110 s at least, so the outage is mid-run
#: even when deploying is slow on a busy machine; the test touches the reader's signal file once the
#: NameNode is back, and the rest is read at full speed (tests.kits.e2e_ops.SlowUntilSignal)
SLOW_READER = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
               "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "operators.reader.lines_per_window=20",
               "-D", "operators.count.partitions=2", "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal"]
DOWN_SECONDS = 5


def test_namenode_restart_mid_run(on_minicluster, tmp_path):
    cluster = on_minicluster
    base = cluster.new_dir("nnrestart")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {what}", flush=True)

    signal_file = tmp_path / "namenode-back"
    proc, app_id = launch_following(WORDCOUNT, *SLOW_READER, "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    step(f"submitted {app_id}")
    try:
        def committing() -> dict | None:  # every operator deployed, and windows committed
            proc_info = stram("get-app-info", app_id, "--json", timeout=120)
            if proc_info.returncode != 0:
                return None
            info = json.loads(proc_info.stdout)
            # before the master answers, get-app-info shows YARN's report only
            committed = info.get("committed_window_hex") or "ffffffff"
            done = info.get("state") == "RUNNING" and not committed.endswith("ffffffff")
            return info if done else None

        info = wait_until(committing, timeout=300, interval=2, what="the first committed window")
        step(f"committed {info['committed_window_hex']}: checkpoints, journal and output writes under way")
        report = cluster.restart_namenode(DOWN_SECONDS)
        step(f"NameNode restarted: {report.splitlines()[-1]}")
        assert proc.poll() is None, "the application ended before the NameNode came back: not mid-run"
        signal_file.touch()  # the rest of the input at full speed
        _, err = proc.communicate(timeout=600)
        step("launch ended")
    except BaseException:
        print(stram("get-app-info", app_id).stdout)
        print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    elapsed = time.monotonic() - started
    final = re.search(rf"^{app_id} (\w+)(.*)$", err, re.M)
    assert final, err[-4000:]
    state, diagnostics = final.group(1), final.group(2)
    print(f"NameNode restart on YARN: {app_id} {state} in {elapsed:.1f}s")
    if state != "SUCCEEDED":
        assert proc.returncode != 0
        assert re.search(r"HDFS|NameNode", diagnostics), f"{state} without naming HDFS: {err[-4000:]}"
        pytest.fail(f"the application did not ride out a {DOWN_SECONDS}s NameNode outage: {state}{diagnostics}")
    assert proc.returncode == 0, err[-4000:]

    truth = word_truth(MOBY)
    out = cluster.get(f"{base}/out", tmp_path / "out")
    sums, maxima, _ = read_counts(out)
    if sums != truth or maxima != dict(truth):
        wrong = sorted(k for k in set(truth) | set(sums) if sums.get(k) != truth.get(k))
        print(f"wrong counts for {len(wrong)} words, e.g. " + ", ".join(
            f"{k}: {sums.get(k)} (truth {truth.get(k)})" for k in wrong[:8]))
        print("output files:", len(list(out.rglob("*.jsonl"))), "under", out)
        (tmp_path / "yarn-logs.txt").write_text(cluster.run("yarn", "logs", "-applicationId", app_id, check=False))
        print("logs:", tmp_path / "yarn-logs.txt")
    assert maxima == dict(truth), "SUCCEEDED, but running totals differ from the input's counts"
    assert sums == truth, "SUCCEEDED, but EXACTLY_ONCE per-window counts differ from the input's counts"

    # the outage was felt, and ridden out: some HDFS call of the application waited for the NameNode
    logs = cluster.run("yarn", "logs", "-applicationId", app_id, check=False)
    assert "HDFS NameNode" in logs and "unavailable" in logs, "no HDFS call of the application waited"
