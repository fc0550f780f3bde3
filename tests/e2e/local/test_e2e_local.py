"""End to end on the embedded default: real master, agents, buffer servers, processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import admin, app_processes, launch_detached, running_operators, wait_final, wait_until

from stram.client import cli
from stram.common import apps as stram_apps

WORDS = ROOT / "specs" / "data" / "words.txt"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"


@pytest.mark.parametrize("extra", [
    [],  # reader+split CONTAINER_LOCAL, count and out in their own containers
    ["-D", "streams.lines.locality=THREAD_LOCAL", "-D", "streams.counts.locality=THREAD_LOCAL"],
], ids=["container-local", "thread-local"])
def test_wordcount_exact_counts(tmp_path, capsys, extra):
    out = tmp_path / "out"
    code = cli.main(["launch", "specs/wordcount.yaml", "-D", f"operators.out.path={out}", *extra])
    assert code == 0, capsys.readouterr().err
    truth = word_truth(WORDS)
    sums, maxima, _ = read_counts(out)
    assert sums == truth
    assert maxima == dict(truth)
    # every output file is final: EXACTLY_ONCE leaves no temporary files behind
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".jsonl")]
    apps = stram_apps.local_apps()
    assert apps[0]["state"] == "SUCCEEDED"


def test_partitioned_across_containers(tmp_path):
    """split ×2 and count ×3 in separate containers: buffer servers, partition masks, a unifier."""
    out = tmp_path / "out"
    code = cli.main(["launch", "specs/wordcount.yaml", "-D", f"operators.out.path={out}",
                     "-D", "streams.lines.locality=null", "-D", "operators.split.partitions=2",
                     "-D", "operators.count.partitions=3"])
    assert code == 0
    app = stram_apps.local_apps()[0]
    truth = word_truth(WORDS)
    sums, maxima, _ = read_counts(out)
    assert sums == truth and maxima == dict(truth)
    logs = os.listdir(os.path.join(app["app_path"], "logs"))
    assert len([f for f in logs if f.startswith("container_")]) >= 6  # reader, 2 split, 3 count, out


def test_arrow_stream_across_containers_is_exact(tmp_path):
    """Record batches through a buffer server (codec arrow): sent as their own buffers, received
    in frames of over a megabyte into Arrow's memory; every row arrives once, unchanged."""
    import zlib

    total, width = 150_000, 60
    spec = tmp_path / "arrow.yaml"
    digest = tmp_path / "digest.json"
    spec.write_text(f"""
name: arrow-e2e
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 200, HEARTBEAT_INTERVAL_MILLIS: 300}}
operators:
  rows: {{class: "tests.kits.e2e_ops:ArrowRows", properties: {{total: {total}, rows: 1000, width: {width}}}}}
  digest: {{class: "tests.kits.e2e_ops:ArrowDigest", properties: {{path: "{digest}"}}}}
streams:
  s: {{from: rows.output, to: [digest.input], codec: arrow}}
""")
    assert cli.main(["launch", str(spec)]) == 0
    names = [f"n{i}".ljust(width, ".") for i in range(total)]
    assert json.loads(digest.read_text()) == {
        "rows": total, "ids": total * (total - 1) // 2, "chars": sum(map(len, names)),
        "crc": sum(zlib.crc32(n.encode()) for n in names)}
    logs = os.listdir(os.path.join(stram_apps.local_apps()[0]["app_path"], "logs"))
    assert len([f for f in logs if f.startswith("container_") and f.endswith(".log")]) == 2  # apart


def test_ctrl_c_stops_master_and_containers(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stram.client.cli", "launch", "specs/wordcount.yaml",
         "-D", f"operators.reader.path={MOBY}", "-D", "operators.reader.lines_per_window=5",
         "-D", f"operators.out.path={out}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        app_id = wait_until(lambda: stram_apps.local_apps() and stram_apps.local_apps()[0]["id"], what="the app")
        wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
        pids = [p.pid for p in app_processes(app_id)]
        assert len(pids) >= 4  # master and three containers
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    survivors = wait_until(lambda: not app_processes(app_id) or None, timeout=20, what="no process left") \
        if app_processes(app_id) else None
    assert not app_processes(app_id), survivors
    assert stram_apps.find_app(app_id)["state"] == "KILLED"


def test_detach_info_and_kill_app(tmp_path, capsys):
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.lines_per_window=5", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    capsys.readouterr()
    assert cli.main(["get-app-info", app_id, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["state"] == "RUNNING" and info["operators"] == 4 and info["containers"] == 3
    assert cli.main(["list-operators", app_id, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in rows) == ["count", "out", "reader", "split"]
    assert cli.main(["list-containers", app_id, "--json"]) == 0
    containers = json.loads(capsys.readouterr().out)
    assert all(c["buffer_server"].startswith("127.0.0.1:") for c in containers)
    assert cli.main(["list-apps", "--json"]) == 0
    assert any(a["id"] == app_id for a in json.loads(capsys.readouterr().out))
    assert cli.main(["kill-app", app_id]) == 0
    wait_until(lambda: not app_processes(app_id), timeout=20, what="processes gone")
    assert stram_apps.find_app(app_id)["state"] == "KILLED"
    assert cli.main(["wait", app_id, "--timeout", "5"]) == 1


def test_shutdown_app_ends_succeeded(tmp_path):
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.lines_per_window=5", "-D", f"operators.out.path={out}")
    wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
    assert cli.main(["shutdown-app", app_id]) == 0
    assert cli.main(["wait", app_id, "--timeout", "60"]) == 0
    # a graceful end: the totals written are exact for the prefix that was read
    sums, maxima, rows = read_counts(out)
    assert rows and all(maxima[k] == sums[k] for k in sums)


def test_user_mistakes_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\noperators:\n  a: {class: 'nosuch.module:Op'}\n")
    assert cli.main(["launch", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: operators.a.class:") and "Traceback" not in err
    assert cli.main(["get-app-info", "application_nope"]) == 1
    assert "no application 'application_nope'" in capsys.readouterr().err


def test_duration_shuts_down_gracefully(tmp_path, capsys):
    out = tmp_path / "out"
    started = time.monotonic()
    code = cli.main(["launch", "specs/wordcount.yaml", "--duration", "3", "-D", f"operators.reader.path={MOBY}",
                     "-D", "operators.reader.lines_per_window=5", "-D", f"operators.out.path={out}"])
    assert code == 0, capsys.readouterr().err
    assert "--duration 3s reached" in capsys.readouterr().err
    assert time.monotonic() - started < 60
    sums, maxima, rows = read_counts(out)
    assert rows and all(maxima[k] == sums[k] for k in sums)  # a clean prefix, exact totals


@pytest.mark.parametrize("lag_mb", [1, None])
def test_a_source_faster_than_its_downstream_waits_for_it_and_says_so(tmp_path, lag_mb):
    """Flow control between real containers: with BUFFER_LAG_MB the source's publisher waits for the
    slow digest (``throttled_millis`` in the containers API grows); without it, it never waits. Every
    row arrives once either way."""
    import zlib

    # 500 batches of about 200 KB, 100 MB: well past what the kernel's socket buffers take in flight
    # (a receive buffer grows to tcp_rmem's largest, 32 MB here) besides the 1 MB of lag
    total, width = 500_000, 200
    spec = tmp_path / "flow.yaml"
    digest = tmp_path / "digest.json"
    release = tmp_path / "release"
    spec.write_text(f"""
name: flow-e2e
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 200, HEARTBEAT_INTERVAL_MILLIS: 200, BUFFER_MEMORY_MB: 512,
             BUFFER_LAG_MB: {"null" if lag_mb is None else lag_mb}}}
operators:
  rows: {{class: "tests.kits.e2e_ops:ArrowRows", properties: {{total: {total}, rows: 1000, width: {width},
                                                        release_file: "{release}"}}}}
  digest: {{class: "tests.kits.e2e_ops:SlowArrowDigest", properties: {{path: "{digest}", seconds: 0.004}},
           attributes: {{QUEUE_CAPACITY: 2000}}}}
streams:
  s: {{from: rows.output, to: [digest.input], codec: arrow}}
""")
    app_id = launch_detached(str(spec))
    waited = [0]

    def ended() -> bool:  # meanwhile, the most the source's publisher has said it waited
        for row in (admin(app_id, "containers") or {}).get("containers", []):
            for stats in row["buffer_server_publishers"].values():
                waited[0] = max(waited[0], stats["throttled_millis"])
        return stram_apps.find_app(app_id).get("state") in stram_apps.TERMINAL

    try:  # the source starts once the digest is deployed (its subscriber connected)
        wait_until(lambda: running_operators(app_id) == 2, what="both operators running")
        release.touch()
        wait_until(ended, timeout=120, what="the application to end", interval=0.1)
    finally:
        if stram_apps.find_app(app_id).get("state") not in stram_apps.TERMINAL:
            cli.main(["kill-app", app_id])  # a failed wait leaves no application behind
        final = wait_final(app_id, timeout=120)
    assert final["state"] == "SUCCEEDED", final
    names = [f"n{i}".ljust(width, ".") for i in range(total)]
    assert json.loads(digest.read_text()) == {
        "rows": total, "ids": total * (total - 1) // 2, "chars": sum(map(len, names)),
        "crc": sum(zlib.crc32(n.encode()) for n in names)}
    print(f"BUFFER_LAG_MB {lag_mb}: the source waited {waited[0]} ms")
    if lag_mb is None:
        assert waited[0] == 0
    else:  # it held back for much of the digest's 2 s
        assert waited[0] > 300, waited[0]
