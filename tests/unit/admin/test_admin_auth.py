"""The admin API lets no one in who does not belong (issue 14, item 1).

Unit tests on the Flask application (every route the API has, found in its URL
map, so routes added later are covered too): without a token, with a wrong one,
with a foreign ``Origin``: refused, and nothing was done; with the token, the
``/login`` session cookie, or (on YARN) from the ResourceManager's web proxy
address: served. The end-to-end attack on a running application is in ``test_security_e2e.py``.
"""

from __future__ import annotations

import pytest

from stram.master.admin import auth as adminauth
from stram.master.admin.auth import AdminAuth
from stram.master.admin.rest import create_app
from stram.master.spec import AppSpec

TOKEN = "t0ken-for-tests"


class Recorder:
    """What the admin API asked the master to do."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []


@pytest.fixture
def master(tmp_path):
    from statekit import FakeLauncher, wordcount

    from stram.master.process import master as master_mod
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
        if rule.endpoint in ("static", "login", "console_index", "console_asset"):  # public: no data
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


def test_the_console_shell_is_public_and_holds_no_data(master):
    """``/`` and ``/console/<asset>`` are fixed files anyone may load (the page then asks for the token);
    everything under them that is not an asset, and every document, is refused without it."""
    client = create_app(master, AdminAuth(TOKEN)).test_client()
    page = client.get("/")
    assert page.status_code == 200 and b"app-auth" not in page.data
    assert client.get("/console/console.js").status_code == 200
    assert client.get("/console/x/../../ws/v2/stram/info").status_code in (401, 404)
    assert client.post("/", json={}).status_code in (401, 405)
    assert client.get("/ws/v2/stram/logicalPlan").status_code == 401
