"""The admin API's HTTP server and request bodies (issue 14, item 4).

Bodies are checked per endpoint: ``[]``, ``null``, deep nesting, unknown
fields, wrong types (a count of ``1.9``, ``true`` or ``"2"``) and counts out of
range get 400 with a message, a body over 64 KiB gets 413, and nothing is done.
The server is Hypercorn on a real socket: slow clients do not grow the
master's threads, and it stops cleanly (the port is closed, its thread ended).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from test_admin_auth import TOKEN, master  # noqa: F401 - the fixture

from stram.master.admin.auth import AdminAuth
from stram.master.admin.bodies import MAX_BODY_BYTES, BadBody, Field, parse
from stram.master.admin.rest import AdminServer, create_app
from stram.master.core.scaling import MAX_PARTITIONS

SCALE = "/ws/v2/stram/operators/count/partitions"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize("raw, why", [
    (b"[]", "must be a JSON object"), (b"null", "must be a JSON object"), (b"3", "must be a JSON object"),
    (b'"count"', "must be a JSON object"), (b"{", "not JSON"), (b"\xff\xfe", "not JSON"),
    (b'{"count": 1.9}', "must be an integer"), (b'{"count": true}', "must be an integer"),
    (b'{"count": "2"}', "must be an integer"), (b'{"count": null}', "must be an integer"),
    (b'{"count": [2]}', "must be an integer"), (b'{"count": 0}', "at least 1"),
    (b'{"count": -4}', "at least 1"), (f'{{"count": {MAX_PARTITIONS + 1}}}'.encode(), f"at most {MAX_PARTITIONS}"),
    (b'{"count": 1e400}', "must be an integer"), (b"{}", "'count' is required"),
    (b'{"count": 2, "extra": 1}', "unknown field"),
    (b'{"count": 2, "a": {"b": {"c": {"d": {}}}}}', "deeper than"),
    (b"[" * 50000 + b"]" * 50000, "must be a JSON object|not JSON"),
    (b'{"count": 2, "a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "deeper than|not JSON"),
])
def test_scale_bodies_that_do_not_fit_get_400(master, raw, why):  # noqa: F811
    client = create_app(master, AdminAuth(TOKEN)).test_client()
    r = client.post(SCALE, data=raw, headers=dict(AUTH, **{"Content-Type": "application/json"}))
    if len(raw) > MAX_BODY_BYTES:
        assert r.status_code == 413
    else:
        assert r.status_code == 400, (raw[:40], r.status_code, r.data[:200])
        import re
        assert re.search(why, r.get_json()["error"]), r.get_json()
    assert master.recorder.calls == []


def test_good_bodies_are_taken(master):  # noqa: F811
    client = create_app(master, AdminAuth(TOKEN)).test_client()
    for count in (1, 5, MAX_PARTITIONS):
        assert client.post(SCALE, json={"count": count}, headers=AUTH).status_code == 200
    for path in ("/ws/v2/stram/shutdown", "/ws/v2/stram/kill"):
        assert client.post(path, headers=AUTH).status_code == 200                     # no body
        assert client.post(path, json={}, headers=AUTH).status_code == 200
        r = client.post(path, json={"now": True}, headers=AUTH)
        assert r.status_code == 400 and "unknown field" in r.get_json()["error"]
        assert client.post(path, json=[], headers=AUTH).status_code == 400
    assert master.recorder.calls == [("scale", "count", 1), ("scale", "count", 5), ("scale", "count", MAX_PARTITIONS),
                                     ("shutdown",), ("shutdown",), ("kill",), ("kill",)]


def test_parse_schema_types():
    schema = {"n": Field(int, low=0, high=9), "s": Field(str), "b": Field(bool), "f": Field(float)}
    assert parse(b' {"n": 3, "s": "x", "b": false, "f": 2} ', schema) == {"n": 3, "s": "x", "b": False, "f": 2}
    for bad in (b'{"s": 1}', b'{"b": 0}', b'{"f": "1"}', b'{"f": true}', b'{"n": 10}'):
        with pytest.raises(BadBody):
            parse(bad, schema)


@pytest.fixture
def served(master):  # noqa: F811
    server = AdminServer(create_app(master, AdminAuth(TOKEN)), "127.0.0.1", channel_timeout=30)
    yield server, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers=dict(AUTH, **{"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_real_server_refuses_big_and_bad_bodies(served, master):  # noqa: F811
    server, base = served
    status, text = _post(base + SCALE, b'{"count": 2, "pad": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}')
    assert status == 413
    # 50 MiB announced: refused from its Content-Length, before the body is read
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as s:
        s.sendall(f"POST {SCALE} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {50 << 20}\r\n\r\n".encode() + b"x" * 1000)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    status, text = _post(base + SCALE, b"null")
    assert status == 400 and "JSON object" in json.loads(text)["error"]
    status, text = _post(base + SCALE, b'{"count": 3}')
    assert status == 200 and json.loads(text) == {"to": 3}
    assert master.recorder.calls == [("scale", "count", 3)]


def _hung_up(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (a FIN, or a reset as it drops unread bytes) in time."""
    sock.settimeout(within)
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_slow_clients_do_not_grow_threads_and_the_server_stops_cleanly(master):  # noqa: F811
    before = threading.active_count()
    server = AdminServer(create_app(master, AdminAuth(TOKEN)), "127.0.0.1", threads=4, connection_limit=32,
                         channel_timeout=3)
    port = server.server_port
    slow = []
    try:
        for _ in range(300):  # each sends half a request and waits
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /ws/v2/stram/info HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        # the loop thread and at most the pool of 4, however many connections are held
        assert threading.active_count() <= before + 5
        # beyond the limit of 32 they are closed at once
        assert _hung_up(slow[-1], within=5)
        # the first ones time out and close, and then others get in
        time.sleep(4)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/ws/v2/stram/info", headers=AUTH)
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["id"] == "app-auth"
        # and the server hangs up on them once channel_timeout has passed
        assert _hung_up(slow[0], within=8)
    finally:
        for s in slow:
            s.close()
    server.shutdown()
    assert not server._thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert threading.active_count() <= before


def test_answers_are_encoded_fast_and_the_same_as_the_standard_encoder_would():
    """FastJSON (orjson) writes what json.dumps wrote (sorted keys, compact); what orjson refuses
    (an integer past 64 bits in a user's metric) is still answered, the standard way."""
    from flask import Flask
    from flask import jsonify as flask_jsonify

    from stram.master.admin.rest import FastJSON
    app = Flask("fast-json")
    app.json = FastJSON(app)
    doc = {"operators": [{"id": 3, "name": "wörds", "metrics": {"lag": 1.5, "n": None}, "window": (1 << 63) - 1,
                          "blocked": False, "tuples": [1, 2]}], "b": "x", "a": {"z": 1, "y": [{}]}}
    app.add_url_rule("/doc", "doc", lambda: flask_jsonify(doc))
    app.add_url_rule("/big", "big", lambda: flask_jsonify({"metrics": {"huge": 1 << 70}}))
    client = app.test_client()
    answer = client.get("/doc")
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    assert json.loads(answer.data) == doc
    assert answer.data.decode().rstrip("\n") == json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                                           ensure_ascii=False)
    big = client.get("/big")
    assert big.status_code == 200 and json.loads(big.data) == {"metrics": {"huge": 1 << 70}}


def test_the_operators_page_encoded_a_chunk_at_a_time_is_the_whole_page(master, monkeypatch):  # noqa: F811
    """The page is copied, turned into rows and encoded a few operators at a time (heartbeats go on
    between): together the chunks are the page the state's rows make, one chunk or many, and an
    operator whose metric orjson refuses is still answered."""
    from stram.master.core import reports
    app = create_app(master, AdminAuth(TOKEN))
    client = app.test_client()
    state = master.state
    some = next(iter(state.plan.operators.values()))
    state.window_history[some.id].append((7, 1, 2, 1000, 5, {"huge": 1 << 70}))
    whole = json.loads(client.get("/ws/v2/stram/operators", headers=AUTH).data)
    assert whole == {"operators": json.loads(json.dumps(state.operator_rows()))}
    assert len(whole["operators"]) >= 3 and whole["operators"][0]["metrics"] == {"huge": 1 << 70}
    monkeypatch.setattr(reports, "COPY_CHUNK", 2)
    chunked = client.get("/ws/v2/stram/operators", headers=AUTH)
    assert chunked.status_code == 200 and chunked.mimetype == "application/json"
    assert json.loads(chunked.data) == whole
    app.debug = True  # indented, in one piece, as every page is then
    indented = client.get("/ws/v2/stram/operators", headers=AUTH)
    assert json.loads(indented.data) == whole and b'\n  "operators"' in indented.data
    app.debug = False
    state.plan.operators.clear()
    assert json.loads(client.get("/ws/v2/stram/operators", headers=AUTH).data) == {"operators": []}


# ---------------------------------------------------------------- HTTPS (issue 14, item 2)

@pytest.fixture
def identity():
    from stram.common.tls import make_identity
    return make_identity("app-auth")


def test_with_tls_it_serves_https_only_and_clients_trust_only_the_applications_certificate(master, identity):  # noqa: F811
    from stram.client.adminhttp import request_json
    from stram.common.errors import AdminRequestError, ClusterUnreachable
    from stram.common.tls import make_identity

    server = AdminServer(create_app(master, AdminAuth(TOKEN, tls=True)), "127.0.0.1", tls=identity)
    base = f"https://127.0.0.1:{server.server_port}"
    try:
        assert server.scheme == "https" and server.proxy_port is None
        assert request_json(base, "info", token=TOKEN, ca=identity.cert_pem)["id"] == "app-auth"
        assert request_json(base, "operators/count/partitions", "POST", {"count": 2}, token=TOKEN,
                            ca=identity.cert_pem) == {"to": 2}
        with pytest.raises(AdminRequestError) as refused:  # TLS does not stand in for the token
            request_json(base, "info", ca=identity.cert_pem)
        assert refused.value.status == 401
        # another application's certificate, or none at all, is not trusted
        with pytest.raises(ClusterUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            request_json(base, "info", token=TOKEN, ca=make_identity("app-other").cert_pem)
        with pytest.raises(ClusterUnreachable, match="certificate"):
            request_json(base, "info", token=TOKEN)
        # a plain-text client gets no answer from the TLS port, and the token it sent stays unread
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as s:
            s.sendall(f"GET /ws/v2/stram/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
            answer = s.recv(4096)
        assert b"app-auth" not in answer and not answer.startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
    assert master.recorder.calls == [("scale", "count", 2)]


def test_the_plain_listener_for_the_yarn_proxy_takes_proxied_requests_and_no_token(master, identity):  # noqa: F811
    from stram.client.adminhttp import request_json
    from stram.common.errors import AdminRequestError

    auth = AdminAuth(TOKEN, yarn=True, proxies=["127.0.0.1:8088"], modify_users=["alice"], tls=True)
    server = AdminServer(create_app(master, auth), "127.0.0.1", tls=identity, proxy_host="127.0.0.1")
    plain = f"http://127.0.0.1:{server.proxy_port}"
    try:
        assert server.proxy_port and server.proxy_port != server.server_port
        # the caller is a proxy host (127.0.0.1 here): let in, as on the HTTPS port
        assert request_json(plain, "info")["id"] == "app-auth"
        # a token in plain text is refused even though it is right, and so is a login
        with pytest.raises(AdminRequestError) as refused:
            request_json(plain, "info", token=TOKEN)
        assert refused.value.status == 403 and "HTTPS only" in refused.value.detail
        with pytest.raises(urllib.error.HTTPError) as login:
            urllib.request.urlopen(f"{plain}/login?token={TOKEN}", timeout=10)
        assert login.value.code == 403
        # the HTTPS port takes the token
        assert request_json(f"https://127.0.0.1:{server.server_port}", "info", token=TOKEN,
                            ca=identity.cert_pem)["id"] == "app-auth"
    finally:
        server.shutdown()
