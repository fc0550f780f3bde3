"""The console's server side (issue 15), without a browser: its documents and routes.

The state is a real MasterState driven with hand-written heartbeats
(``tests/kits/statekit.py``); the routes are called through Flask's test client on
the admin server's real app. The browser tests are in ``test_console_e2e.py``.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest


from statekit import START_MILLIS, StateRun  # noqa: E402

from stram import wire as proto  # noqa: E402
from stram.master.admin import console  # noqa: E402
from stram.master.admin.rest import create_app  # noqa: E402

#   src ──▶ up (2 partitions) ══▶ out          (up ══▶ out is THREAD_LOCAL: up's unifier sits with out)
DAG = """
name: console-dag
attributes: {STREAMING_WINDOW_SIZE_MILLIS: 250, PROCESSING_MODE: EXACTLY_ONCE, QUEUE: streaming}
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper, partitions: 2}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [out.input], locality: NODE_LOCAL}
"""


def master(run: StateRun, launcher=None) -> SimpleNamespace:  # noqa: ANN001
    return SimpleNamespace(lock=threading.RLock(), state=run.state, launcher=launcher or SimpleNamespace(),
                           token=TOKEN, host="127.0.0.1")


#: The application token the test clients send (the admin API refuses calls without it).
TOKEN = "console-test-token"


def authorized(app):  # noqa: ANN001, ANN201
    """A test client of ``app`` that sends the application's token."""
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return client


def test_the_logical_plan_has_every_operator_with_its_live_partitions_and_every_stream():
    run = StateRun(DAG)
    plan = console.logical_plan(run.state)
    assert plan["name"] == "console-dag"
    assert plan["operators"] == [
        {"name": "src", "class": "spec_fixture_ops:Source", "partitions": 1},
        {"name": "up", "class": "spec_fixture_ops:Upper", "partitions": 2},  # the unifier is not counted
        {"name": "out", "class": "spec_fixture_ops:Sink", "partitions": 1}]
    assert plan["streams"] == [
        {"name": "a", "from": "src.output", "to": ["up.input"], "locality": None},
        {"name": "b", "from": "up.output", "to": ["out.input"], "locality": "NODE_LOCAL"}]
    attrs = plan["attributes"]
    assert (attrs["queue"], attrs["processing_mode"], attrs["window_millis"]) == ("streaming", "EXACTLY_ONCE", 250)
    assert attrs["user"]


def test_latency_is_how_long_after_its_end_a_window_reached_the_operator():
    run = StateRun(DAG)
    run.deploy()
    size = 250
    # window w(5) has index 4: it ends 5 windows after the start; "src" reports it 40 ms later
    window_end = START_MILLIS - START_MILLIS % 1000 + 5 * size
    ohb = run.report("src", 5, 4)
    ws = ohb.window_stats.add(window_id=run.w(5), cpu_time_used=0)
    ws.output_ports.add(id="output", tuple_count=3, end_window_timestamp=window_end + 40)
    run.heartbeat(run.cid("src"), ohb)
    report = console.window_report(run.state, now_millis=window_end + 2_000)
    src = report["operators"][str(run.id("src"))]
    assert src["latency_millis"] == 40 and src["checkpoint"] == run.w(4)
    # ids as hex too: exactly, where a browser's numbers would round them
    assert int(src["checkpoint_hex"], 16) == run.w(4) and int(src["current_window_hex"], 16) == run.w(5)
    assert int(src["recovery_checkpoint_hex"], 16) == run.op("src").recovery_checkpoint
    out = report["operators"][str(run.id("out"))]
    assert (out["checkpoint"], out["checkpoint_hex"], out["latency_millis"]) == (None, None, None)
    # the committed window's end in wall-clock time, and how far it lags
    committed_end = START_MILLIS - START_MILLIS % 1000 + (run.state.committed - run.base) * size  # w(k) ends k windows in
    assert report["committed_millis"] == committed_end
    assert report["committed_lag_seconds"] == pytest.approx((window_end + 2_000 - committed_end) / 1000)


@pytest.fixture
def client(tmp_path):
    run = StateRun(DAG)
    run.deploy()
    logs = tmp_path / "logs"
    logs.mkdir()
    cid = run.cid("src")
    (logs / f"{cid}.log.2").write_text("".join(f"line {i}\n" for i in range(1, 201)))  # rotated, oldest
    (logs / f"{cid}.log.1").write_text("".join(f"line {i}\n" for i in range(201, 401)))
    (logs / f"{cid}.log").write_text("".join(f"line {i}\n" for i in range(401, 801)))
    app = create_app(master(run, SimpleNamespace(log_dir=str(logs))))
    return authorized(app), run


def test_the_page_and_its_two_assets_are_served_and_nothing_else(client):
    http, _ = client
    page = http.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    # relative URLs only: it must work behind YARN's proxy at /proxy/<app>/pages/stram/
    assert 'src="console/console.js"' in html and 'href="console/console.css"' in html
    assert not re.search(r'(src|href)="/', html) and "http" not in html.replace("http://www.w3.org", "")
    assert http.get("/console/console.js").status_code == 200
    assert http.get("/console/console.css").mimetype == "text/css"
    for path in ("/console/index.html", "/console/..%2Fconsole.py", "/console/nope.js"):
        answer = http.get(path)
        assert answer.status_code == 404 and "error" in answer.get_json(), path


def test_the_script_inserts_no_html_and_calls_only_relative_urls():
    script = (console.STATIC_DIR / "console.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
    assert re.findall(r"fetch\(([^,]+),", script) == ["'ws/v2/stram/' + path"]
    assert "credentials: 'same-origin'" in script and "'Bearer ' + token" in script


def test_a_containers_log_tail(client):
    http, run = client
    cid = run.cid("src")
    answer = http.get(f"/ws/v2/stram/containers/{cid}/log?tail=3")
    assert answer.status_code == 200 and answer.mimetype == "text/plain"
    assert answer.get_data(as_text=True) == "line 798\nline 799\nline 800\n"
    doc = http.get(f"/ws/v2/stram/containers/{cid}/log?format=json").get_json()
    assert doc["tail"] == console.LOG_TAIL_DEFAULT and doc["text"].startswith("line 301\n")
    for bad in ("0", "x", str(console.LOG_TAIL_MAX + 1)):
        answer = http.get(f"/ws/v2/stram/containers/{cid}/log?tail={bad}")
        assert answer.status_code == 400 and "tail must be a count of lines" in answer.get_json()["error"]
    answer = http.get("/ws/v2/stram/containers/container_999/log")
    assert answer.status_code == 404 and answer.get_json()["error"] == "unknown container 'container_999'"
    answer = http.get(f"/ws/v2/stram/containers/{run.cid('out')}/log")  # known, but it wrote no log
    assert answer.status_code == 404 and "no log for" in answer.get_json()["error"]


def test_on_yarn_the_log_is_where_the_nodemanager_shows_it():
    run = StateRun(DAG)
    run.deploy()
    cid = run.cid("src")
    pages = {cid: "http://nm1:8042/node/containerlogs/container_e01_0001_01_000002/alice"}
    http = authorized(create_app(master(run, SimpleNamespace(log_page=pages.get))))
    assert http.get(f"/ws/v2/stram/containers/{cid}/log").get_json() == {"container": cid, "url": pages[cid]}
    answer = http.get(f"/ws/v2/stram/containers/{run.cid('out')}/log")
    assert answer.status_code == 404 and "YARN does not know where" in answer.get_json()["error"]


def test_the_documents_through_the_admin_app(client):
    http, run = client
    plan = http.get("/ws/v2/stram/logicalPlan").get_json()
    assert [o["name"] for o in plan["operators"]] == ["src", "up", "out"]
    windows = http.get("/ws/v2/stram/windows").get_json()
    assert set(windows["operators"]) == {str(i) for i in run.state.plan.operators}
    assert windows["window_millis"] == 250 and windows["committed_window"] == run.state.committed
    assert proto  # the generated code imports (statekit's heartbeats need it)


def test_the_yarn_launcher_links_a_live_container_to_its_nodemanager_page(monkeypatch):
    import skein

    from stram.master.launch.yarn import YarnLauncher

    class Client:
        """The part of a skein.ApplicationClient that launch and log_page use."""

        def __init__(self) -> None:
            self.added = 0

        def add_container(self, service, env=None):  # noqa: ANN001
            self.added += 1
            return skein.model.Container(service, self.added - 1, "REQUESTED", "", "", None, None, "")

        def get_containers(self, services=None, states=None):  # noqa: ANN001
            return [skein.model.Container("container", 0, "RUNNING", "container_e7_0001_01_000002",
                                          "nm1:8042", None, None, ""),
                    skein.model.Container("container", 1, "REQUESTED", "", "", None, None, "")]

    monkeypatch.setenv("USER", "alice")
    launcher = YarnLauncher(Client(), {"container": (1024, 1)})
    from stram.master.launch.local import ContainerRequest
    launcher.launch(ContainerRequest("container_000001", 1024, 1, (), {}))
    launcher.launch(ContainerRequest("container_000002", 1024, 1, (), {}))
    assert launcher.log_page("container_000001") == \
        "http://nm1:8042/node/containerlogs/container_e7_0001_01_000002/alice"
    assert launcher.log_page("container_000002") is None  # requested, not placed yet
    assert launcher.log_page("container_000099") is None


def test_every_answer_forbids_framing_sniffing_and_foreign_scripts(client):
    """The console is never framed (frame-ancestors 'none', X-Frame-Options), content types are
    never sniffed, no referrer leaves it, and its page runs only its own scripts: the one inline
    script it has is allowed by its hash, and nothing else inline."""
    import base64
    import hashlib
    http, _ = client
    for path in ("/", "/console/console.js", "/ws/v2/stram/info", "/console/nope.js"):
        headers = http.get(path).headers
        assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff", path
        assert headers["Referrer-Policy"] == "no-referrer", path
        csp = dict(part.strip().split(" ", 1) for part in headers["Content-Security-Policy"].split(";"))
        assert csp["frame-ancestors"] == "'none'" and csp["default-src"] == "'self'" and csp["object-src"] == "'none'"
    html = http.get("/").get_data(as_text=True)
    inline = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    assert len(inline) == 1
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert csp["script-src"] == f"'self' 'sha256-{digest}'" and "unsafe-inline" not in csp["style-src"]
