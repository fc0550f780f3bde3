"""The admin commands on YARN applications, typed as a user would, on the session's mini cluster.

``stram list-apps``, ``get-app-info``, ``list-containers``, ``list-operators``
and ``scale`` reach the master through the ResourceManager's web proxy (the
tracking URL); ``shutdown-app`` and ``kill-app`` end applications. Each result
is checked against YARN's own view (``yarn application -status``) or against
counts made here from the input.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until
from hadoop import launch_following, running_operators, stram, stram_json

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5"]
SMALL = ["-D", "MASTER_MEMORY_MB=512", "-D", "CONTAINER_MEMORY_MB=512"]


def yarn_final_state(cluster, app_id: str) -> str | None:
    """YARN's final state of an application once it finished (SUCCEEDED, FAILED, KILLED), else None."""
    status = cluster.run("yarn", "application", "-status", app_id)
    state = re.search(r"^\s*State : (\w+)", status, re.M).group(1)
    final = re.search(r"Final-State : (\w+)", status).group(1)
    return final if state in ("FINISHED", "FAILED", "KILLED") else None


def prefix_truth(path, words: int) -> Counter | None:
    """The word counts of the first lines of ``path`` that hold exactly ``words`` words (None: no such prefix)."""
    counts: Counter = Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if total == words:
                return counts
            found = re.findall(r"[a-z0-9]+", line.lower())
            counts.update(found)
            total += len(found)
            if total > words:
                return None
    return counts if total == words else None


def test_scale_through_the_master(on_minicluster, tmp_path):
    """``stram scale APP count 3`` mid-run (2 -> 3 partitions): the counts stay exact.

    The reader reads 200 lines a second (``SlowUntilSignal``), so that a loaded machine, whose
    containers start late and then catch up on the windows they missed, cannot end the input
    before the scale; once the three partitions run, it reads the rest at full speed and the
    end of its file ends the application."""
    cluster = on_minicluster
    base = cluster.new_dir("admin")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()
    signal_file = tmp_path / "scaled"
    proc, app_id = launch_following(WORDCOUNT, *FAST, "-D", "operators.reader.lines_per_window=20",
                                    "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", "operators.count.partitions=2", "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    try:
        rows = wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="operators ACTIVE")
        assert sorted(r["label"] for r in rows) == sorted(
            ["reader", "split", "count[0]", "count[1]", "count.output.unifier#6", "out"]), rows

        scaled = stram("scale", app_id, "count", "3")
        assert scaled.returncode == 0, scaled.stderr
        wait_until(lambda: (r := running_operators(app_id)) and {"count[0]", "count[1]", "count[2]"}
                   <= {x["label"] for x in r}, timeout=180, interval=2, what="three count partitions ACTIVE")
        signal_file.touch()  # the rest of the input at full speed; its end ends the application
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    print(f"scale on YARN: submit to SUCCEEDED in {time.monotonic() - started:.1f}s")
    assert yarn_final_state(cluster, app_id) == "SUCCEEDED"
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
    assert sums == truth and maxima == dict(truth)


def test_inspect_shutdown_and_kill(on_minicluster, tmp_path):
    """list-apps, get-app-info, list-containers, list-operators on two running applications; then
    shutdown-app ends one SUCCEEDED with the counts of a prefix of the input, kill-app the other KILLED
    (``stram wait`` and YARN's own report say so)."""
    cluster = on_minicluster
    base = cluster.new_dir("shutdown")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()
    slow = [*FAST, *SMALL, "-D", "operators.reader.lines_per_window=5", "-D", f"operators.reader.path={moby}"]
    ids = []
    for name in ("graceful", "killed"):
        proc = stram("launch", "--yarn", WORDCOUNT, *slow, "-D", f"operators.out.path={cluster.uri(base)}/{name}",
                     "--detach")
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip().splitlines()[-1])
    graceful, killed = ids
    for app_id in ids:
        rows = wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what=f"{app_id} ACTIVE")
    assert sorted(r["label"] for r in rows) == ["count", "out", "reader", "split"], rows

    # what the master says, through the ResourceManager's web proxy, matches YARN and itself
    listed = {a["id"]: a for a in stram_json("list-apps")}
    for app_id in ids:
        assert listed[app_id]["name"] == "wordcount" and listed[app_id]["state"] == "RUNNING", listed.get(app_id)
    info = stram_json("get-app-info", graceful)
    assert info["name"] == "wordcount" and info["state"] == "RUNNING", info
    assert info["operators"] == 4 and info["app_path"].startswith(cluster.fs + "/"), info
    containers = stram_json("list-containers", graceful)
    assert len(containers) == info["containers"] >= 2, containers
    operators = stram_json("list-operators", graceful)
    assert {op for c in containers for op in c["operators"]} == {r["label"] for r in operators}
    assert all(c["state"] == "RUNNING" and c["buffer_server"] for c in containers), containers
    assert {r["container"] for r in operators} == {c["id"] for c in containers}

    down = stram("shutdown-app", graceful)
    assert down.returncode == 0, down.stderr
    gone = stram("kill-app", killed)
    assert gone.returncode == 0 and f"{killed} KILLED" in gone.stdout, gone.stderr
    waited = stram("wait", graceful, "--timeout", "240")
    assert waited.returncode == 0 and waited.stdout.strip() == f"{graceful} SUCCEEDED", waited
    waited = stram("wait", killed, "--timeout", "60")
    assert waited.returncode == 1 and waited.stdout.strip() == f"{killed} KILLED", waited
    assert yarn_final_state(cluster, graceful) == "SUCCEEDED"
    assert yarn_final_state(cluster, killed) == "KILLED"
    print(f"shutdown-app/kill-app on YARN: both ended {time.monotonic() - started:.1f}s after the first submit")

    # the graceful shutdown ended the reader early: the output is exactly the counts of the lines
    # it had read, a prefix of the input, every word once
    sums, maxima, rows = read_counts(cluster.get(f"{base}/graceful", tmp_path / "graceful"))
    assert rows
    assert maxima == dict(sums)
    prefix = prefix_truth(MOBY, sum(sums.values()))
    assert prefix is not None and prefix == sums
    assert sum(sums.values()) < sum(word_truth(MOBY).values())  # it really stopped early


def test_admin_api_on_yarn_lets_in_the_token_and_the_proxy_only(on_minicluster, tmp_path):
    """On the mini cluster (TLS on, YARN's default): the master's own HTTPS admin address refuses a
    caller without the token (or with a foreign Origin) and serves one with it; the plain listener
    the ResourceManager's web proxy reaches lets the proxy in for reading and refuses a token sent
    to it in plain text; no process of the application has the token in its environment; the
    count is exact."""
    import http.client as http_client
    import socket
    import urllib.parse

    import psutil

    from stram.client import yarn
    from stram.client.adminhttp import pinned_context
    from stram.common.apps import read_token

    cert = None

    def http(url, method="GET", headers=None, body=None, source=None):
        """(status, body) of a request; ``source``: the local address the call comes from."""
        parts = urllib.parse.urlsplit(url)
        source_address = (source, 0) if source else None
        if parts.scheme == "https":  # trusting the application's certificate only
            conn = http_client.HTTPSConnection(parts.hostname, parts.port, timeout=30, source_address=source_address,
                                               context=pinned_context(cert))
        else:
            conn = http_client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=source_address)
        try:
            conn.request(method, parts.path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    # on a one-machine cluster the ResourceManager's web proxy is 127.0.0.1: a stranger is a caller
    # from another address of this machine
    stranger = next((a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                     if a.family == socket.AF_INET and not a.address.startswith("127.")), None)
    if stranger is None:
        pytest.skip("this machine has no address but the loopback: no caller can be told from the proxy")

    cluster = on_minicluster
    base = cluster.new_dir("auth")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    signal_file = tmp_path / "checked"
    proc, app_id = launch_following(WORDCOUNT, *FAST, *SMALL, "-D", "operators.reader.lines_per_window=20",
                                    "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out")
    try:
        wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="operators ACTIVE")
        token = read_token(app_id, yarn=True)
        assert token
        with yarn.connect() as client:
            # None until Skein's web UI lists the master's page (and while Skein's gRPC is busy)
            direct, cert = wait_until(lambda: (lambda d: d if d[0] else None)(yarn.client.direct_admin(app_id, client)),
                                      timeout=120, interval=2, what="the master's own admin URL")
            proxied = yarn.admin_url_for(app_id, client)
            page = client.connect(app_id, wait=False).ui.get_pages()["stram"].target
        assert direct.startswith("https://") and not direct.startswith("https://0.0.0.0"), direct
        assert cert and page.startswith("http://") and page != "http://" + direct[len("https://"):], (direct, page)
        # the plain listener behind the proxy: a stranger is refused with or without the (right) token
        assert http(page + "/ws/v2/stram/info", source=stranger)[0] == 401
        assert http(page + "/ws/v2/stram/info", headers={"Authorization": f"Bearer {token}"}, source=stranger)[0] == 403
        info = direct + "/ws/v2/stram/info"
        assert http(info, source=stranger)[0] == 401
        assert http(info, headers={"X-Forwarded-For": "127.0.0.1"}, source=stranger)[0] == 401
        assert http(info, headers={"Authorization": "Bearer " + "0" * len(token)}, source=stranger)[0] == 401
        status, text = http(info, headers={"Authorization": f"Bearer {token}"}, source=stranger)
        assert status == 200 and json.loads(text)["id"] == app_id
        for path in ("kill", "shutdown"):
            assert http(f"{direct}/ws/v2/stram/{path}", "POST", body=b"{}", source=stranger)[0] == 401
            assert http(f"{direct}/ws/v2/stram/{path}", "POST", body=b"{}", source=stranger,
                        headers={"Authorization": f"Bearer {token}", "Origin": "http://evil.example"})[0] == 403
        status, text = http(proxied + "/ws/v2/stram/info")              # through the RM's web proxy
        assert status == 200 and json.loads(text)["id"] == app_id, (status, text[:300])
        status, text = http(proxied + "/ws/v2/stram/kill", "PUT", body=b"{}",
                            headers={"Content-Type": "application/json"})
        # the proxy names its user (simple auth: dr.who), who is not in the modify ACL
        assert status == 403 and "may not modify" in json.loads(text)["error"], (status, text[:300])
        # no process of the application carries the token in its environment
        seen = 0
        for p in psutil.process_iter():
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if f"STRAM_APP_ID={app_id}".encode() in environ.split(b"\0"):
                seen += 1
                assert token.encode() not in environ, p.cmdline()
        assert seen >= 2, seen
        signal_file.touch()  # the rest of the input at full speed
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
    assert sums == truth and maxima == dict(truth)
