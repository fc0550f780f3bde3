"""Faults on a real YARN, on the session's mini cluster: containers lost mid-run, the master lost.

The application is ``specs/wordcount.yaml`` (EXACTLY_ONCE) over Moby-Dick on
HDFS, launched with ``stram launch --yarn`` as a user types it. Two containers are
killed from outside stram, one right after the other: one by the NodeManager (``yarn container -signal
... FORCEFUL_SHUTDOWN``, as an administrator would), one by skein's
``kill_container`` (a YARN client releasing the container). The master must
notice, redeploy from checkpoints, and the output on HDFS must still hold
every word exactly once: the counts equal a count made here from the input.

The master's process is killed too: YARN starts the application's second
attempt, whose master resumes from the journal on HDFS and replaces the
containers; the output is again exact.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until
from hadoop import collect_logs, launch_following, running_operators, stram, stram_json, yarn_container_id

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
#: windows of 100 ms, 20 lines each: reading Moby-Dick takes 110 s at least, until the test touches
#: the reader's signal file once the fault is behind it (tests.kits.e2e_ops.SlowUntilSignal)
SLOW_READER = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
               "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "operators.reader.lines_per_window=20",
               "-D", "operators.count.partitions=2", "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal"]
OPERATORS = 6  # reader, split, count[0], count[1], the unifier, out


#: A YARN client of its own (a new process: skein reads SKEIN_CONFIG once, when it is imported)
#: releases a container through skein's application master.
_SKEIN_KILL = """
import sys
from stram.client import yarn
app_id, target = sys.argv[1:]
with yarn.connect() as client:
    app = client.connect(app_id, wait=False)
    skein_id = next(c.id for c in app.get_containers(services=["container"]) if c.yarn_container_id == target)
    app.kill_container(skein_id)
print(skein_id)
"""


def skein_kill_container(app_id: str, yarn_container: str) -> str:
    proc = subprocess.run([sys.executable, "-c", _SKEIN_KILL, app_id, yarn_container], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def containers_of(app_id: str, *labels: str) -> list[dict]:
    """The running containers of these operators (one ``stram list-containers`` call)."""
    rows = stram_json("list-containers", app_id)
    return [next(r for r in rows if label in r["operators"] and r["state"] == "RUNNING") for label in labels]


def restarts(app_id: str) -> dict[str, int]:
    return stram_json("get-app-info", app_id).get("restarts") or {}


def test_containers_lost_through_yarn_exactly_once(on_minicluster, tmp_path):
    cluster = on_minicluster
    base = cluster.new_dir("faults")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {what}", flush=True)

    signal_file = tmp_path / "faults-done"
    proc, app_id = launch_following(WORDCOUNT, *SLOW_READER, "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    step(f"submitted {app_id}")
    try:
        wait_until(lambda: (rows := running_operators(app_id)) and len(rows) == OPERATORS,
                   timeout=240, interval=2, what="every operator ACTIVE")

        step("every operator ACTIVE")
        reader, count = containers_of(app_id, "reader", "count[1]")

        # 1. the NodeManager kills the reader's container (SIGKILL), as `yarn container -signal` asks
        out = cluster.run("yarn", "container", "-signal", yarn_container_id(reader["process"]),
                          "FORCEFUL_SHUTDOWN")
        assert "Signalling container" in out
        step(f"the NodeManager killed {reader['id']} (reader)")

        # 2. a YARN client (skein's kill_container) releases a counting partition's container
        skein_kill_container(app_id, yarn_container_id(count["process"]))
        step(f"skein's kill_container released {count['id']} (count[1])")

        def both_redeployed() -> dict[str, int] | None:
            seen = restarts(app_id)
            return seen if seen.get("reader", 0) >= 1 and seen.get("count[1]", 0) >= 1 else None

        seen = wait_until(both_redeployed, timeout=180, interval=2, what="the reader and count[1] redeployed")
        step(f"recovered: restarts {seen}")
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
    assert proc.returncode == 0, err[-4000:]
    assert f"{app_id} SUCCEEDED" in err
    assert seen.get("reader", 0) >= 1 and seen.get("count[1]", 0) >= 1, seen
    print(f"container loss on YARN: submit to SUCCEEDED in {elapsed:.1f}s, restarts {seen}")

    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
    assert maxima == dict(truth), "running totals differ from the input's counts"
    assert sums == truth, "EXACTLY_ONCE: per-window counts differ from the input's counts"


def test_master_lost_second_attempt_resumes(on_minicluster, tmp_path):
    cluster = on_minicluster
    base = cluster.new_dir("master")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()
    signal_file = tmp_path / "resumed"
    proc, app_id = launch_following(WORDCOUNT, *SLOW_READER, "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    try:
        wait_until(lambda: (rows := running_operators(app_id)) and len(rows) == OPERATORS,
                   timeout=240, interval=2, what="every operator ACTIVE")
        app_path = stram_json("get-app-info", app_id)["app_path"]
        time.sleep(3)  # a few checkpoints and journal writes
        master = json.loads(cluster.hdfs("-cat", f"{app_path}/admin.json"))
        os.kill(int(master["pid"]), signal.SIGKILL)  # the master's Python process, in the AM container
        killed_at = time.monotonic() - started

        # only the second attempt can answer now (the first one's process is gone)
        wait_until(lambda: running_operators(app_id), timeout=300, interval=2,
                   what="the second attempt's operators ACTIVE")
        signal_file.touch()  # the rest of the input at full speed
        _, err = proc.communicate(timeout=600)
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, err[-4000:]
        assert f"{app_id} SUCCEEDED" in err
        print(f"master loss on YARN: killed at {killed_at:.1f}s, submit to SUCCEEDED in {elapsed:.1f}s")

        attempts = re.findall(r"appattempt_\d+_\d+_\d+", cluster.run("yarn", "applicationattempt", "-list", app_id))
        assert len(set(attempts)) == 2, attempts
        # `stram logs` shows both attempts' master.log, the first one's first
        logs = stram("logs", app_id)
        assert logs.returncode == 0, logs.stderr
        heads = re.findall(r"^==> (container_\d+_\d+_(\d+)_000001)/master\.log <==$", logs.stdout, re.M)
        assert [attempt for _, attempt in heads] == ["01", "02"], logs.stdout[:2000]
        second = logs.stdout.split(f"==> {heads[1][0]}/master.log <==")[1]
        assert "master attempt 2 resumed from the journal" in second  # not started over
        truth = word_truth(MOBY)
        sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
        assert maxima == dict(truth), "running totals differ from the input's counts"
        assert sums == truth, "EXACTLY_ONCE: per-window counts differ from the input's counts"
    except BaseException:
        print(stram("get-app-info", app_id).stdout)
        print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


_REPLACE_ON_HDFS = """
import json, sys
import pyarrow.fs as pafs
from stram.common import fs
fs.hadoop_client_env()
uri = sys.argv[1] + "/journal/snapshot"
filesystem, path = fs.resolve(uri)
fs.replace_file(uri, b"one")
fs.replace_file(uri, b"two")
seen = [fs.read_replaced(uri)]
filesystem.move(path, path + ".next")  # a writer killed between its move's delete and rename
seen.append(fs.read_replaced(uri))
fs.replace_file(uri, b"three")  # the next writer finishes that replacement, then makes its own
seen.append(fs.read_replaced(uri))
names = sorted(i.base_name for i in filesystem.get_file_info(pafs.FileSelector(path.rsplit("/", 1)[0])))
print(json.dumps({"seen": [s.decode() for s in seen], "names": names,
                  "type": type(filesystem).__name__}))
"""


def test_the_journal_is_replaced_on_hdfs_without_a_gap(on_minicluster):
    """replace_file and read_replaced against the NameNode (tests/unit/common/test_replace_file.py kills the
    writer at each step on a file system that moves as this one does)."""
    cluster = on_minicluster
    base = cluster.uri(cluster.new_dir("replace"))
    proc = subprocess.run([sys.executable, "-c", _REPLACE_ON_HDFS, base], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env=cluster.env({**os.environ, "PYTHONPATH": str(ROOT)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"seen": ["two", "two", "three"], "names": ["snapshot"], "type": "HadoopFileSystem"}
