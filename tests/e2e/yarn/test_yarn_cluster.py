"""stram on a real YARN and HDFS: the session's mini Hadoop cluster (tests/kits/hadoop.py), end to end.

Everything is real: ``stram launch --yarn`` as a user types it, skein's Java
driver and application master, the ResourceManager and NodeManager (Hadoop
3.5.0's MiniYARNCluster), a NameNode and DataNode (MiniDFSCluster), and
pyarrow's HadoopFileSystem (libhdfs over JNI) in the master and in every
container. Inputs and outputs are on ``hdfs://localhost:<port>/...``; each
result is checked against a count made here, independently, from the input
file. Skipped (with the reason) where the cluster cannot be had; failed
instead under CI=true.
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from hadoop import aggregated_containers, stram

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
WORDS = ROOT / "specs" / "data" / "words.txt"


def app_path_of(stderr: str) -> str:
    match = re.search(r"^\s*app path: (\S+)$", stderr, re.M)
    assert match, stderr
    return match.group(1)


def test_wordcount_on_yarn_and_hdfs(on_minicluster, tmp_path):
    """``stram launch --yarn specs/wordcount.yaml`` with input and output on HDFS: exact counts, SUCCEEDED."""
    cluster = on_minicluster
    base = cluster.new_dir("wordcount")
    words = cluster.put(WORDS, f"{base}/words.txt")
    started = time.monotonic()
    proc = stram("launch", "--yarn", WORDCOUNT, "-D", f"operators.reader.path={words}",
                 "-D", f"operators.out.path={cluster.uri(base)}/out")
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    app_id = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"application_\d+_\d+", app_id), proc.stdout
    assert f"{app_id} SUCCEEDED" in proc.stderr
    print(f"wordcount on YARN: submit to SUCCEEDED in {elapsed:.1f}s (cluster started in "
          f"{cluster.start_seconds:.1f}s)")

    # YARN's own view: the application ended SUCCEEDED
    status = cluster.run("yarn", "application", "-status", app_id)
    assert re.search(r"Final-State\s*:\s*SUCCEEDED", status), status

    # APP_PATH is on the NameNode; the master wrote heartbeatUri there through libhdfs
    app_path = app_path_of(proc.stderr)
    assert app_path.startswith(cluster.fs + "/"), (app_path, cluster.fs)
    heartbeat = cluster.hdfs("-cat", f"{app_path}/heartbeatUri").strip()
    assert re.fullmatch(r"[\w.-]+:\d+", heartbeat), heartbeat
    # everything stram wrote there is its owner's only (umask 077 on HDFS as on a local disk),
    # each container's own credential included; no container was handed the application's token
    listing = [line.split() for line in cluster.hdfs("-ls", "-R", app_path).splitlines()
               if line.startswith(("-", "d"))]
    modes = {fields[-1][len(app_path):]: fields[0] for fields in listing}
    assert any(p.startswith("/credentials/container_") for p in modes), modes
    # TLS is on by default on YARN: the application's key and certificate are there, owner-only
    assert {"/tls/key.pem", "/tls/cert.pem"} <= set(modes), modes
    assert any(p.startswith("/checkpoints/") for p in modes) and "/journal/snapshot" in modes, modes
    wrong = {p: m for p, m in modes.items() if m.rstrip("+") not in ("-rw-------", "drwx------")}
    assert not wrong, wrong

    # the counts, read back from HDFS, equal a count of the input made here
    out = cluster.get(f"{base}/out", tmp_path / "out")
    truth = word_truth(WORDS)
    sums, maxima, rows = read_counts(out)
    assert rows
    assert sums == truth
    assert maxima == dict(truth)

    # the master and the stram containers were YARN containers: the NodeManager kept their logs
    containers = aggregated_containers(cluster, app_id, at_least=2)
    assert any(c.endswith("_000001") for c in containers), containers  # the application master
    assert len(containers) >= 2, containers

    # ... and `stram logs` reads them from there: the master's, and a container's by its stram id
    master_log = stram("logs", app_id)
    assert master_log.returncode == 0, master_log.stderr
    assert f"application {app_id} ended SUCCEEDED" in master_log.stdout
    container_id = re.search(r"launched (container_\d+)|requested (container_\d+)", master_log.stdout)
    assert container_id, master_log.stdout[:2000]
    cid = container_id.group(1) or container_id.group(2)
    container_log = stram("logs", app_id, cid, "--tail", "50")
    assert container_log.returncode == 0, container_log.stderr
    assert f"container {cid} started" in container_log.stdout
    assert len(container_log.stdout.splitlines()) <= 50
