"""Applications on a real YARN and HDFS (the session's mini cluster): Spark analytics, and receivers with a WAL.

- ``./scripts/run-example clickstream --yarn``, as a user types it after
  ``eval "$(./scripts/minicluster start)"``: the SparkPipeline runs Spark (local
  mode) inside a YARN container, its checkpoint under APP_PATH on HDFS and its
  Parquet output on HDFS; the output equals an aggregation made here with pandas
  from the generator's lines.
- A socket receiver with ``RECEIVER_WAL: true`` in EXACTLY_ONCE: its write-ahead
  log is on HDFS (under APP_PATH); its YARN container's process is killed
  twice mid-stream; every line the receiver acknowledged is in the
  output on HDFS exactly once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter

import pytest
from conftest import ROOT
from e2ekit import wait_until
from hadoop import collect_logs, stram, stram_json

pytestmark = pytest.mark.yarn


def _launched_id(stderr: str) -> str:
    match = re.search(r"submitted \S+ to YARN as (application_\d+_\d+)", stderr)
    assert match, stderr[-3000:]
    return match.group(1)


def test_clickstream_example_on_yarn(on_minicluster, tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    from test_spark_e2e import assert_output_equals_direct, direct_aggregation, generator_args

    cluster = on_minicluster
    gen = dict(seed=7, rate=1000, events=12000, users=300, pages=40, speedup=10)
    env = cluster.env()
    env.pop("CLASSPATH", None)  # what `eval "$(./scripts/minicluster start)"` gives: stram finds the jars
    env.pop("ARROW_LIBHDFS_DIR", None)
    env["STRAM_NO_INSTALL"] = "1"  # the suite's environment has stram installed already
    env["PYTHON"] = os.environ.get("PYTHON", "python")
    started = time.monotonic()
    proc = subprocess.run([str(ROOT / "scripts" / "run-example"), "clickstream", "--yarn", *generator_args(**gen)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - started
    app_id = _launched_id(proc.stderr)
    if proc.returncode != 0:
        print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"{app_id} SUCCEEDED" in proc.stderr
    print(f"clickstream on YARN: run-example to summary in {elapsed:.1f}s")

    # the output is on HDFS and equals the direct computation
    match = re.search(r"^output: (hdfs://\S+)$", proc.stdout, re.M)
    assert match, proc.stdout
    out = match.group(1)
    assert out.startswith(cluster.fs + "/")
    assert_output_equals_direct(out, gen)
    # the summary run-example printed counts what pandas counts
    want = direct_aggregation(gen)
    head = re.search(r"^([\d,]+) rows: ([\d,]+) windows .* ([\d,]+) page views$", proc.stdout, re.M)
    assert head, proc.stdout
    assert [int(g.replace(",", "")) for g in head.groups()] == [
        len(want), want["window_start"].nunique(), int(want["views"].sum())]

    # Spark's checkpoint is under APP_PATH on HDFS, with the query's commits
    path = re.search(r"^\s*app path: (\S+)$", proc.stderr, re.M)
    assert path, proc.stderr[-3000:]
    app_path = path.group(1)
    assert app_path.startswith(cluster.fs + "/")
    commits = cluster.hdfs("-ls", f"{app_path}/spark/analytics/commits")
    assert re.search(r"/commits/\d+$", commits, re.M), commits


def _receiver_spec(tmp_path, port: int, out: str) -> str:
    spec = {
        "name": "wal-on-hdfs",
        "attributes": {"PROCESSING_MODE": "EXACTLY_ONCE", "RECEIVER_WAL": True,
                       "STREAMING_WINDOW_SIZE_MILLIS": 200, "CHECKPOINT_WINDOW_COUNT": 5,
                       "HEARTBEAT_INTERVAL_MILLIS": 300},
        "operators": {
            "rx": {"class": "stram.receivers:SocketTextReceiver",
                   "properties": {"host": "127.0.0.1", "port": port, "ack": True}},
            "out": {"class": "stram.operators.io:JsonLinesOutput", "properties": {"path": out}},
        },
        "streams": {"lines": {"from": "rx.output", "to": ["out.input"]}},
    }
    path = tmp_path / "wal.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return str(path)


def _rx_container(app_id: str) -> dict | None:
    """The receiver's RUNNING container, or None (also while the application is still ACCEPTED)."""
    proc = stram("list-containers", app_id, "--json", timeout=120)
    if proc.returncode != 0:
        return None
    rows = json.loads(proc.stdout)
    return next((r for r in rows if "rx" in r["operators"] and r["state"] == "RUNNING" and r.get("process")), None)


def _launch_detached(spec: str) -> str:
    """``stram launch --yarn --detach SPEC``; the application id."""
    proc = stram("launch", "--yarn", "--detach", spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def _kill_receiver(app_id: str, source, rx: dict) -> None:
    """SIGKILL the receiver's container process ``rx`` (the node loses it) mid-stream, let a held
    source go on, and wait until the replacement acknowledges lines again."""
    acked = source.acked
    os.kill(int(rx["process"].split("@")[0]), signal.SIGKILL)
    source.hold = None
    assert acked < source.total, "the source was done before the kill"
    wait_until(lambda: source.acked >= min(acked + 100, source.total), 300,
               "acknowledgements after the recovery", interval=1)


def _report_receiver_app(cluster, app_id: str, source, tmp_path) -> None:
    """What a failed receiver test prints: the app, the source, the receivers, every thread, the logs."""
    print(stram("get-app-info", app_id).stdout)
    print(f"source: {source.connections} connections, {source.acked} lines acknowledged")
    try:
        print("receivers:", json.dumps(stram_json("get-app-info", app_id).get("receivers"), indent=1))
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        print("no receiver stats:", exc)
    try:  # where is each thread? (a receiver that took nothing after its recovery, seen once)
        for row in stram_json("list-containers", app_id):
            if row.get("state") == "RUNNING":
                print(f"stack of {row['id']} ({row.get('operators')}):", stram("stack", app_id, row["id"]).stdout)
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        print("no stacks:", exc)
    print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
    stram("kill-app", app_id)


def _lines_out(local) -> Counter:
    """Every line a JsonLinesOutput wrote (its files copied to the directory ``local``), with how often."""
    seen: Counter = Counter()
    for f in sorted(local.rglob("*.jsonl")):
        seen.update(json.loads(x) for x in f.read_text().splitlines() if x.strip())
    return seen


def test_receiver_wal_on_hdfs_survives_killed_containers(on_minicluster, tmp_path):
    from test_receivers_e2e import LineSource, check_socket_output

    cluster = on_minicluster
    base = cluster.new_dir("wal")
    source = LineSource(total=3000, rate=150)
    spec = _receiver_spec(tmp_path, source.port, f"{cluster.uri(base)}/out")
    started = time.monotonic()
    app_id = _launch_detached(spec)
    try:
        killed = []
        for threshold in (500, 1500):
            # the source holds 200 lines past the threshold until the kill, and the container is
            # found first: a stram command on YARN takes seconds (15 and more under load), in which
            # the source sent its last line before (loop round 51); the kill lands mid-stream
            source.hold = threshold + 200
            rx = wait_until(lambda: _rx_container(app_id), 300, "the receiver's container", interval=1)
            wait_until(lambda: source.acked >= threshold, 300, f"{threshold} lines acknowledged", interval=0.2)
            _kill_receiver(app_id, source, rx)
            killed.append(rx["id"])
        wait_until(lambda: source.acked == source.total, 300, "every line acknowledged", interval=1)
        info = stram_json("get-app-info", app_id)
        assert info["receivers"]["rx"]["wal"] is True
        wal = cluster.hdfs("-ls", f"{info['app_path']}/wal/1")
        assert re.search(r"/wal/1/windows$", wal, re.M), wal  # the log's window index, on HDFS
        assert stram("shutdown-app", app_id).returncode == 0
        done = stram("wait", app_id, "--timeout", "300")
        assert done.returncode == 0, done.stdout + done.stderr
    except BaseException:
        _report_receiver_app(cluster, app_id, source, tmp_path)
        raise
    finally:
        source.close()
    print(f"receiver WAL on HDFS: {len(killed)} kills, {source.connections} connections, "
          f"launch to SUCCEEDED in {time.monotonic() - started:.1f}s")
    assert len(set(killed)) == 2 and source.connections >= 3
    local = cluster.get(f"{base}/out", tmp_path / "out")
    check_socket_output(source, _lines_out(local))
    assert not [p for p in local.rglob("*") if p.is_file() and not p.name.endswith((".jsonl", ".crc"))]
