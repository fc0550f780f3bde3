"""A cluster that refuses the application: ``stram launch --yarn`` ends at once with one ``error:`` line.

On the session's mini cluster (tests/kits/hadoop.py), as a user types it: a master
or a container bigger than one container may be (``yarn.scheduler.maximum-
allocation-mb``/``-vcores``, 8192 MB and 8 vcores there), a queue that does
not exist, the queue ``stopped`` (STOPPED) and the queue ``full`` (which takes
no more applications; both are configured in scripts/minicluster-jvm/MiniCluster.java).
Each must end within a minute with a non-zero exit, stderr exactly one line
starting with ``error:`` that says what to change, no traceback, and no
application of it left in YARN's NEW..RUNNING states.
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import ROOT
from hadoop import stram

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
ACTIVE = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"

CASES = {
    # refused before submitting: no node could hold it
    "master-memory": (["-D", "MASTER_MEMORY_MB=100000"],
                      ["application master asks for 100000 MB", "8192 MB", "-D MASTER_MEMORY_MB=8192"]),
    "container-memory": (["-D", "CONTAINER_MEMORY_MB=20000"],
                         ["operator container", "20000 MB", "-D CONTAINER_MEMORY_MB=8192"]),
    "master-vcores": (["-D", "MASTER_VCORES=64"], ["64 vcores", "-D MASTER_VCORES=8"]),
    # refused by the ResourceManager's scheduler
    "no-such-queue": (["-D", "QUEUE=nosuchqueue"], ["YARN refused", "'nosuchqueue' does not exist", "-D QUEUE="]),
    "stopped-queue": (["-D", "QUEUE=stopped"], ["YARN refused", "root.stopped is STOPPED", "-D QUEUE="]),
    "full-queue": (["-D", "QUEUE=full"], ["YARN refused", "root.full already has 0 applications"]),
}


def active_apps(cluster) -> set[str]:
    out = cluster.run("yarn", "application", "-list", "-appStates", ACTIVE)
    return set(re.findall(r"^(application_\d+_\d+)\s", out, re.M))


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_launch_is_one_error_line(on_minicluster, case):
    cluster = on_minicluster
    args, words = CASES[case]
    base = cluster.uri(f"/tests/refused-{case}")  # never read nor written: the launch is refused
    before = active_apps(cluster)
    started = time.monotonic()
    proc = stram("launch", "--yarn", WORDCOUNT, *args, "-D", f"operators.reader.path={base}/words.txt",
                 "-D", f"operators.out.path={base}/out", timeout=180)
    elapsed = time.monotonic() - started
    print(f"{case}: refused in {elapsed:.1f}s: {proc.stderr.strip()}")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "at org.apache" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert proc.stdout.strip() == "", proc.stdout  # no application id: nothing to follow
    assert elapsed < 60, f"{case}: refused only after {elapsed:.0f}s"
    left = active_apps(cluster) - before
    assert not left, f"{case}: applications left in YARN: {left}"
