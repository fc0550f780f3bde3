"""The admin API lets no one in who does not belong (issue 14, item 1).

Unit tests on the Flask application (every route the API has, found in its URL
map, so routes added later are covered too): without a token, with a wrong one,
with a foreign ``Origin``: refused, and nothing was done; with the token, the
``/login`` session cookie, or (on YARN) from the ResourceManager's web proxy
address: served. End to end: a real local word count is attacked through every
endpoint while it runs; it is not disturbed, and its output is still exact.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from appmaster import adminauth
from appmaster.admin import create_app
from appmaster.adminauth import AdminAuth
from appmaster.spec import AppSpec
from conftest import ROOT, read_counts, word_truth

TOKEN = "t0ken-for-tests"
WORDS = ROOT / "specs" / "data" / "words.txt"


class Recorder:
    """What the admin API asked the master to do."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []


@pytest.fixture
def master(tmp_path):
    from appmaster import master as master_mod
    from test_scale import FakeLauncher, wordcount
    m = master_mod.AppMaster(AppSpec.from_yaml(wordcount(2)), "app-auth", f"file://{tmp_path}", TOKEN,
                             FakeLauncher())
    rec = Recorder()
    m.request_kill = lambda: rec.calls.append(("kill",))
    m.request_shutdown = lambda: rec.calls.append(("shutdown",))
    m.scale = lambda name, count, **kw: rec.calls.append(("scale", name, count)) or {"to": count}
    m.dispatch = lambda event: rec.calls.append(("dispatch", type(event).__name__))
    m.recorder = rec
    return m


def routes(app):
    """(method, URL) of every endpoint of ``app`` but /login and static files."""
    out = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("static", "login"):
            continue
        url = rule.rule
        for arg in rule.arguments:
            url = url.replace(f"<{arg}>", "x").replace(f"<path:{arg}>", "x").replace(f"<string:{arg}>", "x")
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            out.append((method, url))
    assert len(out) >= 14, out
    return out


def call(client, method, url, **kw):
    if method in adminauth.MUTATING and "json" not in kw and "data" not in kw:
        kw["json"] = {"count": 2} if url.endswith("/partitions") else {}
    return client.open(url, method=method, **kw)


def test_every_endpoint_refuses_no_token_and_a_wrong_one(master):
    app = create_app(master, AdminAuth(TOKEN))
    client = app.test_client()
    for method, url in routes(app):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                        {"Authorization": f"Bearer {TOKEN}x"}, {"Cookie": f"{adminauth.SESSION_COOKIE}=nope"}):
            r = call(client, method, url, headers=headers)
            assert r.status_code == 401, (method, url, headers, r.status_code)
            assert "token" in r.get_json()["error"]
    assert master.recorder.calls == []


def test_with_the_token_every_endpoint_answers(master):
    app = create_app(master, AdminAuth(TOKEN))
    client = app.test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for method, url in routes(app):
        r = call(client, method, url, headers=auth, query_string={"timeout": "0.01"})
        assert r.status_code not in (401, 403), (method, url, r.status_code, r.data[:200])
    assert ("kill",) in master.recorder.calls and ("shutdown",) in master.recorder.calls
    assert ("scale", "x", 2) in master.recorder.calls
    r = client.get("/ws/v2/stram/info", headers=auth)
    assert r.status_code == 200 and r.get_json()["id"] == "app-auth"


def test_a_foreign_origin_is_refused_even_with_the_session_cookie(master):
    app = create_app(master, AdminAuth(TOKEN))
    client = app.test_client()
    # the browser's way in: /login sets an HttpOnly, SameSite=Strict cookie and goes to the console
    r = client.get(f"/login?token={TOKEN}")
    assert r.status_code == 303 and r.headers["Location"] == "./"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    assert client.get("/ws/v2/stram/info").status_code == 200          # the cookie is enough for a page
    assert client.get("/login?token=wrong").status_code == 401
    for method, url in routes(app):
        if method not in adminauth.MUTATING:
            continue
        for origin in ("http://evil.example", "null", "http://localhost:1"):
            r = call(client, method, url, headers={"Origin": origin})
            assert r.status_code == 403, (method, url, origin, r.status_code)
            assert "cross-site" in r.get_json()["error"]
            # the token does not make a foreign page's request acceptable either
            r = call(client, method, url, headers={"Origin": origin, "Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 403
    assert master.recorder.calls == []
    # the same origin (the console's own page) may
    r = client.post("/ws/v2/stram/shutdown", json={}, headers={"Origin": "http://localhost"})
    assert r.status_code == 200 and master.recorder.calls == [("shutdown",)]


def test_yarn_proxy_hosts_are_let_in_and_the_modify_acl_holds(master):
    auth = AdminAuth(TOKEN, yarn=True, proxies=["10.1.2.3:8088"], local=["127.0.0.1"], modify_users=["alice"])
    app = create_app(master, auth)
    client = app.test_client()
    rm = {"REMOTE_ADDR": "10.1.2.3"}
    other = {"REMOTE_ADDR": "10.9.9.9"}
    assert client.get("/ws/v2/stram/info", environ_base=rm).status_code == 200
    assert client.get("/ws/v2/stram/info", environ_base=other).status_code == 401
    # this node's Skein web UI forwarding a request of the proxy (its own AmIpFilter let it in)
    via_skein = {"REMOTE_ADDR": "127.0.0.1"}
    assert client.get("/ws/v2/stram/info", environ_base=via_skein,
                      headers={"X-Forwarded-For": "10.1.2.3"}).status_code == 200
    assert client.get("/ws/v2/stram/info", environ_base=via_skein,
                      headers={"X-Forwarded-For": "10.9.9.9"}).status_code == 401
    # a caller elsewhere cannot claim the proxy's address
    assert client.get("/ws/v2/stram/info", environ_base=other,
                      headers={"X-Forwarded-For": "10.1.2.3"}).status_code == 401
    # changes: only for a proxied user in the modify ACL
    r = client.post("/ws/v2/stram/kill", json={}, environ_base=rm)
    assert r.status_code == 403 and "may not modify" in r.get_json()["error"]
    client.set_cookie("proxy-user", "mallory")
    assert client.post("/ws/v2/stram/kill", json={}, environ_base=rm).status_code == 403
    assert master.recorder.calls == []
    client.set_cookie("proxy-user", "alice")
    assert client.post("/ws/v2/stram/kill", json={}, environ_base=rm).status_code == 200
    assert master.recorder.calls == [("kill",)]
    # off YARN, the proxy's address is nobody special
    local = create_app(master, AdminAuth(TOKEN, yarn=False, proxies=["10.1.2.3:8088"])).test_client()
    assert local.get("/ws/v2/stram/info", environ_base=rm).status_code == 401


def test_proxy_hosts_from_yarn_site():
    assert adminauth.proxy_hosts({"yarn.web-proxy.address": "proxy.example:9046"}) == ["proxy.example:9046"]
    assert adminauth.proxy_hosts({"yarn.resourcemanager.hostname": "rm.example"}) == [
        "rm.example:8088", "rm.example:8090"]
    ha = adminauth.proxy_hosts({"yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
                                "yarn.resourcemanager.webapp.address.rm1": "a.example:8088",
                                "yarn.resourcemanager.webapp.address.rm2": "b.example:8088"})
    assert "a.example:8088" in ha and "b.example:8088" in ha


# ================================================================ end to end

def _http(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.slow
def test_a_running_word_count_refuses_strangers_and_stays_exact(tmp_path):
    from appmaster import apps as stram_apps
    from e2ekit import admin, launch_detached, wait_final, wait_until
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", "-D", f"operators.reader.path={WORDS}",
                             "-D", "operators.reader.lines_per_window=5", "-D", f"operators.out.path={out}")
    try:
        base = wait_until(lambda: stram_apps.find_app(app_id).get("admin_url"), what="admin URL")
        assert base.startswith("http://127.0.0.1:"), base                 # bound to the loopback only
        token = stram_apps.read_token(app_id)
        assert token
        wait_until(lambda: admin(app_id, "info"), what="the admin API")
        paths = [("GET", "/ws/v2/stram/info"), ("GET", "/ws/v2/stram/operators"), ("GET", "/ws/v2/stram/plan"),
                 ("GET", "/ws/v2/stram/containers"), ("GET", "/ws/v2/stram/snapshot"), ("GET", "/metrics"),
                 ("GET", "/"), ("GET", "/ws/v2/stram/containers/c1/stackTrace"),
                 ("DELETE", "/ws/v2/stram/containers/c1"), ("PUT", "/ws/v2/stram/containers/c1"),
                 ("POST", "/ws/v2/stram/shutdown"), ("POST", "/ws/v2/stram/kill"), ("PUT", "/ws/v2/stram/kill"),
                 ("POST", "/ws/v2/stram/operators/count/partitions")]
        for method, path in paths:
            body = b'{"count": 3}' if method != "GET" else None
            for headers in ({}, {"Authorization": "Bearer " + "0" * len(token)}):
                status, text = _http(base + path, method, headers, body)
                assert status == 401, (method, path, headers, status, text[:200])
                assert "error" in json.loads(text)
            if method != "GET":
                status, text = _http(base + path, method, {"Authorization": f"Bearer {token}",
                                                           "Origin": "http://evil.example",
                                                           "Content-Type": "application/json"}, body)
                assert status == 403, (method, path, status)
        # the token works
        status, text = _http(base + "/ws/v2/stram/info", headers={"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(text)["id"] == app_id
        final = wait_final(app_id, timeout=120)
    finally:
        if stram_apps.find_app(app_id).get("state") not in stram_apps.TERMINAL:
            import subprocess
            import sys
            subprocess.run([sys.executable, "-m", "scripts.cli", "kill-app", app_id], cwd=ROOT, timeout=60)
    assert final["state"] == "SUCCEEDED", final
    sums, maxima, _ = read_counts(out)
    truth = word_truth(WORDS)
    assert sums == truth and maxima == dict(truth)
