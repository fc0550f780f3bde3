"""A real local application under attack (issue 14): it lets no stranger in, keeps its secret out
of every process's environment, keeps its directory private, and still counts exactly.

While a word count runs, every admin endpoint is called over HTTP without the
token, with a wrong one, and (for calls that change something) with the token
but a foreign ``Origin``: all are refused and nothing happens. The environment
and command line of every process of the application (supervisor, master,
containers) are read from ``/proc``: no token. After it ends: its output equals
a count made here, and every directory under ``APP_PATH`` is ``0700``, every
file ``0600``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import stat
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import admin, app_processes, launch_detached, running_operators, wait_final, wait_until

from stram.common import apps as stram_apps

WORDS = ROOT / "specs" / "data" / "words.txt"

PATHS = [("GET", "/ws/v2/stram/info"), ("GET", "/ws/v2/stram/operators"), ("GET", "/ws/v2/stram/plan"),
         ("GET", "/ws/v2/stram/containers"), ("GET", "/ws/v2/stram/snapshot"), ("GET", "/metrics"),
         ("GET", "/ws/v2/stram/containers/c1/stackTrace"), ("DELETE", "/ws/v2/stram/containers/c1"),
         ("PUT", "/ws/v2/stram/containers/c1"), ("POST", "/ws/v2/stram/shutdown"), ("POST", "/ws/v2/stram/kill"),
         ("PUT", "/ws/v2/stram/kill"), ("POST", "/ws/v2/stram/operators/count/partitions")]


def http(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def secrets_in_processes(app_id: str, token: str) -> tuple[int, list[str]]:
    """(processes looked at, those whose /proc environ or command line hold ``token``)."""
    seen, leaks = 0, []
    for proc in app_processes(app_id):
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                environ = f.read()
            cmdline = " ".join(proc.cmdline())
        except (OSError, psutil.Error):
            continue
        seen += 1
        if token.encode() in environ or token in cmdline:
            leaks.append(f"{proc.pid} {cmdline[:80]}")
    return seen, leaks


@contextlib.contextmanager
def counted_exactly(tmp_path, lines_per_window: int, *args: str):
    """Launch the word count of WORDS (with ``args``); the block runs while it runs; then the
    application must end SUCCEEDED with counts equal to a count made here (killed if the block fails).

    The reader goes slowly (``lines_per_window``) until the block is done, then at full speed: the
    application outlives the block without the test waiting out a slow read of the rest."""
    out = tmp_path / "out"
    signal = tmp_path / "checked"
    app_id = launch_detached("specs/wordcount.yaml", *args, "-D", f"operators.reader.path={WORDS}",
                             "-D", "operators.reader.class=tests.kits.e2e_ops:SlowUntilSignal",
                             "-D", f"operators.reader.signal={signal}",
                             "-D", f"operators.reader.lines_per_window={lines_per_window}",
                             "-D", f"operators.out.path={out}")
    final = None
    try:
        yield app_id
        signal.touch()
        final = wait_final(app_id, timeout=180)
    finally:
        if final is None and (admin(app_id, "info") or {}).get("state") == "RUNNING":
            subprocess.run([sys.executable, "-m", "stram.client.cli", "kill-app", app_id], cwd=ROOT, timeout=60)
    assert final["state"] == "SUCCEEDED", final
    sums, maxima, _ = read_counts(out)
    truth = word_truth(WORDS)
    assert sums == truth and maxima == dict(truth)


def test_a_running_word_count_refuses_strangers_and_keeps_its_secrets(tmp_path):
    with counted_exactly(tmp_path, 10) as app_id:
        base = wait_until(lambda: stram_apps.find_app(app_id).get("admin_url"), what="admin URL")
        assert base.startswith("http://127.0.0.1:"), base                 # bound to the loopback only
        token = stram_apps.read_token(app_id)
        app_path = stram_apps.find_app(app_id)["app_path"]
        assert token and os.stat(stram_apps.token_path(app_id)).st_mode & 0o777 == 0o600
        wait_until(lambda: running_operators(app_id) >= 4, timeout=60, what="operators ACTIVE")
        for method, path in PATHS:
            body = b'{"count": 3}' if method != "GET" else None
            for headers in ({}, {"Authorization": "Bearer " + "0" * len(token)}):
                status, text = http(base + path, method, headers, body)
                assert status == 401, (method, path, headers, status, text[:200])
                assert "error" in json.loads(text)
            if method != "GET":
                status, _ = http(base + path, method, {"Authorization": f"Bearer {token}",
                                                       "Origin": "http://evil.example",
                                                       "Content-Type": "application/json"}, body)
                assert status == 403, (method, path, status)
        # the console's page is a fixed file anyone may load: no application data in it
        status, text = http(base + "/")
        assert status == 200 and app_id.encode() not in text and b"wordcount" not in text
        status, text = http(base + "/ws/v2/stram/info", headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(text)["state"] == "RUNNING"
        # no process of the application carries the token in its environment or command line
        seen, leaks = secrets_in_processes(app_id, token)
        assert seen >= 3 and not leaks, leaks                            # supervisor, master, containers
        # the admin API, the umbilical and the buffer servers listen on the loopback only
        listening = [(p.pid, c.laddr) for p in app_processes(app_id) for c in p.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        loopback = ("127.0.0.1", "::ffff:127.0.0.1", "::1")
        assert len(listening) >= 3 and all(addr.ip in loopback for _, addr in listening), listening
    # everything under APP_PATH is its owner's only
    modes = {}
    for root, dirs, files in os.walk(app_path):
        for name in dirs + files:
            path = os.path.join(root, name)
            modes[os.path.relpath(path, app_path)] = os.lstat(path).st_mode
    assert stat.S_IMODE(os.stat(app_path).st_mode) == 0o700
    assert any(p.startswith("checkpoints/") for p in modes) and "journal/snapshot" in modes
    wrong = {p: oct(stat.S_IMODE(m)) for p, m in modes.items()
             if stat.S_IMODE(m) != (0o700 if stat.S_ISDIR(m) else 0o600)}
    assert not wrong, wrong


#: The umbilical served in the master's process, or by its front process (stram.master.umbilical.front: on
#: from UMBILICAL_PROCESS_MIN_CONTAINERS containers, here from the first).
UMBILICAL = pytest.mark.parametrize("umbilical", [(), ("-D", "UMBILICAL_PROCESS_MIN_CONTAINERS=1")],
                                    ids=["in-process", "front-process"])


@UMBILICAL
def test_one_containers_credential_cannot_forge_another_or_read_its_streams(tmp_path, umbilical):
    """Issue 14: a single forged heartbeat with a real container id and no operators used to make
    the master remove that container's operators. Each container now holds a credential of its
    own: with container A's, a caller can neither speak for B to the master nor read B's streams
    from B's buffer server, and the application still counts exactly."""
    import grpc

    from stram import wire as proto
    from stram.agent.bufferserver import FIRST_WINDOW, BufferServerError, Subscriber
    from stram.common.secret import buffer_server_key

    with counted_exactly(tmp_path, 5, *umbilical) as app_id:
        wait_until(lambda: running_operators(app_id) >= 4, timeout=60, what="operators ACTIVE")
        token = stram_apps.read_token(app_id)
        app_path = stram_apps.find_app(app_id)["app_path"]
        containers = {c["id"]: c for c in admin(app_id, "containers")["containers"]}
        creds = {cid: (pathlib.Path(app_path) / "credentials" / cid) for cid in containers}
        assert len(creds) >= 2 and all(p.is_file() for p in creds.values()), creds
        values = {cid: p.read_text() for cid, p in creds.items()}
        assert len(set(values.values())) == len(values) and token not in values.values()
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in creds.values())
        for proc in app_processes(app_id):  # no container is told where the token is
            if proc.cmdline()[-2:] == ["-m", "stram.agent"]:
                assert "STRAM_TOKEN_FILE" not in proc.environ(), proc.pid
        a, b = sorted(values)[:2]
        with open(os.path.join(app_path, "heartbeatUri")) as f:
            channel = grpc.insecure_channel(f.read().strip())
        stub = proto.StreamingContainerUmbilicalStub(channel)
        forged = proto.ContainerHeartbeat(container_id=b)  # "no operators": would undeploy them all
        for metadata, code in ((((proto.TOKEN_METADATA_KEY, values[a]), (proto.CONTAINER_METADATA_KEY, a)),
                                grpc.StatusCode.PERMISSION_DENIED),
                               (((proto.TOKEN_METADATA_KEY, values[a]), (proto.CONTAINER_METADATA_KEY, b)),
                                grpc.StatusCode.UNAUTHENTICATED),
                               (((proto.TOKEN_METADATA_KEY, values[a]),), grpc.StatusCode.UNAUTHENTICATED)):
            with pytest.raises(grpc.RpcError) as err:
                stub.ProcessHeartbeat(forged, metadata=metadata, timeout=10)
            assert err.value.code() == code, (metadata, err.value)
        channel.close()
        # what A holds does not open B's buffer server: its credential, or the key of its own
        # buffer server (both derived for A alone)
        publishers = [(c["buffer_server"], p) for c in containers.values() if c["id"] != a
                      for p in c["buffer_server_publishers"]]
        assert publishers, containers
        address, publisher = publishers[0]
        host, port = address.rsplit(":", 1)
        for held in (values[a], buffer_server_key(token, a)):
            with pytest.raises(BufferServerError, match="wrong token in SUBSCRIBE"):
                next(Subscriber(host, int(port), held.encode(), publisher, FIRST_WINDOW).messages())
        assert running_operators(app_id) >= 4 or admin(app_id, "info")["state"] != "RUNNING"
    log = open(os.path.join(app_path, "logs", "master.log")).read()
    assert f"container {a!r}'s credential used for container {b!r}" in log
    # the credential check's refusals (a front process's too) are in the master's log
    assert f"wrong container {b!r}'s credential" in log and "wrong application token" in log
    if umbilical:
        assert "umbilical served by its front process" in log


@UMBILICAL
def test_with_tls_a_word_count_speaks_no_plain_text_and_counts_exactly(tmp_path, umbilical):
    """``TLS: true`` locally (on YARN it is the default): the master's umbilical and every buffer
    server speak TLS under the application's own certificate, and nothing in plain text."""
    import grpc

    from stram import wire as proto
    from stram.agent.bufferserver import FIRST_WINDOW, BufferServerError, Subscriber
    from stram.client.adminhttp import request_json
    from stram.common import tls
    from stram.common.errors import ClusterUnreachable
    from stram.common.secret import buffer_server_key, container_credential

    with counted_exactly(tmp_path, 5, "-D", "TLS=true", *umbilical) as app_id:
        wait_until(lambda: running_operators(app_id) >= 4, timeout=60, what="operators ACTIVE")
        token = stram_apps.read_token(app_id)
        app_path = stram_apps.find_app(app_id)["app_path"]
        cert = pathlib.Path(app_path, "tls", "cert.pem").read_bytes()
        assert stat.S_IMODE(pathlib.Path(app_path, "tls", "key.pem").stat().st_mode) == 0o600
        address = pathlib.Path(app_path, "heartbeatUri").read_text().strip()
        cid = sorted(c["id"] for c in admin(app_id, "containers")["containers"])[0]
        md = ((proto.TOKEN_METADATA_KEY, container_credential(token, cid)), (proto.CONTAINER_METADATA_KEY, cid))
        request = proto.InitContextRequest(container_id=cid)
        with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as err:
            proto.StreamingContainerUmbilicalStub(channel).GetInitContext(request, metadata=md, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.secure_channel(address, tls.grpc_channel_credentials(cert), options=tls.GRPC_CHANNEL_OPTIONS) as ch:
            ctx = proto.StreamingContainerUmbilicalStub(ch).GetInitContext(request, metadata=md, timeout=10)
        assert ctx.container_id == cid
        # a buffer server: its own key opens it over TLS, never in plain text
        servers = [c for c in admin(app_id, "containers")["containers"] if c["buffer_server_publishers"]]
        assert servers
        host, port = servers[0]["buffer_server"].rsplit(":", 1)
        key = buffer_server_key(token, servers[0]["id"]).encode()
        publisher = next(iter(servers[0]["buffer_server_publishers"]))
        with pytest.raises(BufferServerError):
            next(Subscriber(host, int(port), key, publisher, FIRST_WINDOW, reconnect=False).messages())
        sub = Subscriber(host, int(port), key, publisher, FIRST_WINDOW, reconnect=False,
                         ssl_context=tls.client_context(cert))
        try:
            assert sub.poll(5.0), "no message over TLS"
        finally:
            sub.close()
        # the admin API: HTTPS under the same certificate (the CLI's calls above went through it)
        url = stram_apps.find_app(app_id)["admin_url"]
        assert url.startswith("https://127.0.0.1:"), url
        assert request_json(url, "info", token=token, ca=cert)["id"] == app_id
        with pytest.raises(ClusterUnreachable):  # plain HTTP gets no answer
            request_json("http://" + url[len("https://"):], "info", token=token)
        with pytest.raises(ClusterUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            request_json(url, "info", token=token, ca=tls.make_identity("impostor").cert_pem)
