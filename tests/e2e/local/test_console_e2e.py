"""The web console (issue 15) in a real headless Chromium, against real running word counts.

The browser is Debian's ``chromium`` driven by Playwright for Python
(``executable_path``: nothing downloaded). What the page shows is compared
with the admin API's answers and, at the end, the application's output with
the words counted here from the input file. The second test opens the console
behind a prefix proxy like YARN's (``/proxy/<app>/pages/stram``, GET and PUT
only), with a token in the address, for an application named like a script. Without chromium or Playwright
the tests are skipped saying why; with ``CI=true`` they fail instead.

A screenshot of the console is written to ``$STRAM_TEST_ARTIFACTS`` (or the
test's tmp dir); ``STRAM_CONSOLE_SCREENSHOT=PATH`` writes another copy there
(how ``docs/console.png`` is made).
"""

from __future__ import annotations

import http.server
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import admin, launch_detached, wait_final, wait_until

from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
WORDS = ROOT / "specs" / "data" / "words.txt"
XSS_NAME = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture
def artifacts(tmp_path):
    where = os.environ.get("STRAM_TEST_ARTIFACTS")
    path = os.path.abspath(where) if where else str(tmp_path / "artifacts")
    os.makedirs(path, exist_ok=True)
    return path


class Page:
    """One console page, with the dialogs it opened and the errors its scripts raised."""

    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.dialogs: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("dialog", self._dialog)
        self.page.goto(url)
        self.page.wait_for_function("() => Number(document.body.dataset.polls || 0) >= 2", timeout=60_000)

    def _dialog(self, dialog) -> None:  # noqa: ANN001
        self.dialogs.append((dialog.type, dialog.message))
        if dialog.type == "confirm":
            dialog.accept()
        else:
            dialog.dismiss()

    def rows(self, table: str) -> dict[str, list[str]]:
        """The table's rows as shown: key (operator or container id) -> cell texts."""
        return self.page.eval_on_selector_all(
            f"#{table} tbody tr",
            "rows => Object.fromEntries(rows.map(r => [r.dataset.key, Array.from(r.cells, c => c.textContent)]))")

    def close(self) -> None:
        self.page.close()


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _spec(tmp_path, name: str, path, lines_per_window: int, signal: str = "") -> str:
    spec = tmp_path / "console-wordcount.yaml"
    spec.write_text(f"""
name: '{name.replace("'", "''")}'
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, CHECKPOINT_WINDOW_COUNT: 5,
             PROCESSING_MODE: EXACTLY_ONCE}}
operators:
  reader: {{class: "tests.kits.e2e_ops:LinesThenIdle", properties: {{path: "{path}", lines_per_window: {lines_per_window},
                                                            signal: "{signal}"}}}}
  split: {{class: "stram.operators.text:WordSplitter", partitions: 2}}
  count: {{class: "stram.operators.aggregate:KeyCounter"}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{tmp_path / 'out'}"}}}}
streams:
  lines: {{from: reader.output, to: [split.input]}}
  words: {{from: split.output, to: [count.input]}}
  counts: {{from: count.output, to: [out.input], locality: THREAD_LOCAL}}
""")
    return str(spec)


def _console_url(app_id: str) -> str:
    """The console of a local application, with its token in the address (the page keeps it)."""
    url = wait_until(lambda: stram_apps.find_app(app_id).get("admin_url"), timeout=60, what="the admin URL")
    return url + "/#token=" + urllib.parse.quote(stram_apps.read_token(app_id))


def _all_active(app_id: str) -> bool:
    rows = (admin(app_id, "operators") or {}).get("operators", [])
    return len(rows) == 6 and all(r["state"] == "ACTIVE" for r in rows)


def _running_count_container(app_id: str) -> str | None:
    for row in (admin(app_id, "containers") or {}).get("containers", []):
        if row["state"] == "RUNNING" and "count" in row["operators"]:
            return row["id"]
    return None


def test_console_follows_a_wordcount_and_kills_a_container_from_the_page(tmp_path, chromium, artifacts):
    lines = len(MOBY.read_text().splitlines())
    release = tmp_path / "release-reader"  # the rest of the input at full speed once the page has done its part
    app_id = launch_detached(_spec(tmp_path, "wordcount", MOBY, 30, str(release)))  # 71 s of input at least
    page = None
    try:
        wait_until(lambda: _all_active(app_id), timeout=60, what="every operator ACTIVE")
        page = Page(chromium, _console_url(app_id))
        p = page.page
        p.evaluate("window.__sameDocument = true")  # gone if the page reloaded

        # every physical operator and container the API knows is listed
        api_ops = admin(app_id, "operators")["operators"]
        api_containers = admin(app_id, "containers")["containers"]
        shown_ops = page.rows("operators")
        assert set(shown_ops) == {str(r["id"]) for r in api_ops}
        for r in api_ops:
            assert shown_ops[str(r["id"])][1] == r["label"] and shown_ops[str(r["id"])][2] == r["container"]
        shown_containers = page.rows("containers")
        assert set(shown_containers) == {c["id"] for c in api_containers}
        assert p.inner_text("#app-name") == "wordcount" and p.inner_text("#app-id") == app_id

        # counters rise between two reads, without a reload
        reader = next(str(r["id"]) for r in api_ops if r["name"] == "reader")
        count = next(str(r["id"]) for r in api_ops if r["name"] == "count")
        first = page.rows("operators")
        wait_until(lambda: _number(page.rows("operators")[reader][7]) > _number(first[reader][7])
                   and _number(page.rows("operators")[count][7]) > _number(first[count][7]),
                   timeout=30, what=f"the reader's and count's processed totals to rise on the page from {first}")
        assert p.evaluate("window.__sameDocument") is True
        assert _number(page.rows("operators")[reader][4]) > 0  # processed/s
        # window ids exactly (64 bits: the page must not round them)
        before = next(r for r in admin(app_id, "operators")["operators"] if str(r["id"]) == reader)
        # a page read newer than `before` (the reader's current window moved on), then the API again
        shown = wait_until(lambda: (cells := page.rows("operators")[reader])[10] != "–"
                           and int(cells[10], 16) > before["current_window"] and cells, timeout=30,
                           what="the page to show a newer window of the reader than the API did")
        after = next(r for r in admin(app_id, "operators")["operators"] if str(r["id"]) == reader)
        assert before["current_window"] <= int(shown[10], 16) <= after["current_window"]
        assert before["recovery_checkpoint"] <= int(shown[12], 16) <= after["recovery_checkpoint"]
        assert shown[9] == "–" and before["watermark"] is None  # no event time in a word count
        wait_until(lambda: p.eval_on_selector(f"#operators tr[data-key='{count}'] svg.spark",
                                              "s => Number(s.dataset.points)") >= 8,
                   timeout=30, what="count's throughput chart (8 points)")

        # the DAG shows every logical operator, with its partition count, and every stream
        dag = p.eval_on_selector_all("#dag a.dag-operator", "ns => ns.map(n => [n.dataset.operator, n.textContent])")
        assert sorted(name for name, _ in dag) == ["count", "out", "reader", "split"]
        assert dict(dag)["split"].endswith("2 partitions") and dict(dag)["count"].endswith("1 partition")
        streams = p.eval_on_selector_all("#dag g.stream", "gs => gs.map(g => g.textContent)")
        assert sorted(streams) == ["counts · THREAD_LOCAL", "lines", "words"]
        # an operator links to its partitions
        p.click("#dag a.dag-operator[data-operator=split]")
        wait_until(lambda: sorted(r[1] for r in page.rows("operators").values()) == ["split[0]", "split[1]"],
                   timeout=10, what="split's partitions listed")
        p.click("#op-filter-clear")
        wait_until(lambda: len(page.rows("operators")) == len(api_ops), timeout=10, what="every operator again")

        p.evaluate("window.scrollTo(0, 0)")
        p.screenshot(path=os.path.join(artifacts, "console.png"), full_page=True)
        if os.environ.get("STRAM_CONSOLE_SCREENSHOT"):
            p.screenshot(path=os.environ["STRAM_CONSOLE_SCREENSHOT"], full_page=False)

        # a container's stack and log, shown as text
        victim = wait_until(lambda: _running_count_container(app_id), timeout=30, what="count's container")
        p.click(f"#containers tr[data-key='{victim}'] button.stack")
        p.wait_for_function("() => document.getElementById('panel-title').textContent.includes(' at ')", timeout=30_000)
        stack = p.inner_text("#panel-text")
        assert "Thread MainThread" in stack and 'File "' in stack, stack
        p.click(f"#containers tr[data-key='{victim}'] button.log")
        p.wait_for_function("() => document.getElementById('panel-title').textContent.includes('last 500 lines')",
                            timeout=30_000)
        assert f"container {victim} started" in p.inner_text("#panel-text")

        # kill count's container from the page (confirming): a replacement is listed, output is exact
        assert not page.dialogs
        p.click(f"#containers tr[data-key='{victim}'] button.kill")
        assert page.dialogs == [("confirm", f"Kill container {victim}? The master recovers its operators "
                                            f"from their checkpoints.")]

        def replacement() -> str | None:
            rows = page.rows("containers")
            if rows.get(victim, [""] * 7)[6] == "RUNNING":
                return None
            return next((k for k, cells in rows.items() if k != victim and cells[6] == "RUNNING"
                         and "count" in cells[7].split(", ")), None)
        new = wait_until(replacement, timeout=90, what="a replacement container for count on the page")
        assert new == _running_count_container(app_id)
        assert p.evaluate("window.__sameDocument") is True
        release.touch()
        wait_until(lambda: sum(r["tuples_out_total"] for r in (admin(app_id, "operators") or {}).get("operators", [])
                               if r["name"] == "reader") >= lines, timeout=180, what="the whole file read")
        p.click("#shutdown-app")
        assert page.dialogs[-1][0] == "confirm" and page.dialogs[-1][1].startswith("Shut down wordcount?")
        app = wait_final(app_id, timeout=120)
        assert app["state"] == "SUCCEEDED", app
        assert not page.errors, page.errors
        truth = word_truth(MOBY)
        sums, maxima, _ = read_counts(tmp_path / "out")
        assert sums == truth and maxima == dict(truth)
    finally:
        if page is not None:
            page.close()
        if stram_apps.find_app(app_id).get("state") not in stram_apps.TERMINAL:
            from stram.client import cli
            cli.main(["kill-app", app_id])
            wait_final(app_id, timeout=60)


class PrefixProxy:
    """A reverse proxy serving ``target`` under ``/proxy/<app>/pages/stram/``, as YARN's RM proxy and
    Skein's web UI do (GET and PUT only, like YARN's): the console must work with relative URLs."""

    def __init__(self, target: str, prefix: str) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # noqa: ANN002
                pass

            def do_GET(self) -> None:  # noqa: N802
                self.forward()

            def do_PUT(self) -> None:  # noqa: N802
                self.forward()

            def forward(self) -> None:
                if not self.path.startswith(prefix):
                    self.send_error(404)
                    return
                outer.paths.append(self.path)
                outer.authorization[self.path] = self.headers.get("Authorization")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                req = urllib.request.Request(target + "/" + self.path[len(prefix):].lstrip("/"), data=body,
                                             method=self.command, headers=headers)
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
                except urllib.error.HTTPError as exc:
                    status, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.paths: list[str] = []
        #: path -> the Authorization header of its last request
        self.authorization: dict[str, str | None] = {}
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{prefix}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_behind_a_proxy_a_script_name_shows_as_text_and_scale_and_kill_work(tmp_path, chromium):
    app_id = launch_detached(_spec(tmp_path, XSS_NAME, WORDS, 100))
    page = proxy = None
    try:
        _console_url(app_id)  # the master is up
        proxy = PrefixProxy(stram_apps.find_app(app_id)["admin_url"], f"/proxy/{app_id}/pages/stram")
        # no trailing slash: the page adds it; the token is kept for the tab and leaves the address bar
        token = stram_apps.read_token(app_id)
        page = Page(chromium, proxy.url + "#token=" + urllib.parse.quote(token))
        p = page.page
        assert p.url == proxy.url + "/"
        assert p.evaluate("sessionStorage.stramToken") == token
        api_calls = {path: auth for path, auth in proxy.authorization.items() if "/ws/v2/stram/" in path}
        assert any(path.endswith("/pages/stram/ws/v2/stram/snapshot") for path in api_calls)
        assert set(api_calls.values()) == {f"Bearer {token}"}
        wait_until(lambda: p.inner_text("#app-name") == XSS_NAME, timeout=30, what="the name shown as text")
        assert p.title() == f"{XSS_NAME} · stram"
        assert p.evaluate("document.querySelectorAll('img').length") == 0
        assert p.evaluate("document.querySelectorAll('script').length") == 2  # the page's own two
        time.sleep(1.5)  # more polls: nothing the name could run shows up later either
        assert page.dialogs == [] and page.errors == []
        # scale from the page (a PUT through the proxy): the DAG and the table follow
        wait_until(lambda: _all_active(app_id), timeout=60, what="every operator ACTIVE (scale refuses before)")
        p.select_option("#scale-operator", "split")
        p.fill("#scale-count", "3")
        p.click("#scale-form button[type=submit]")
        assert page.dialogs == [("confirm", "Give split 3 partitions?")]
        said = wait_until(lambda: p.inner_text("#message"), timeout=90, what="the scale's answer")
        assert said == "split: 2 → 3 partitions", said
        wait_until(lambda: p.eval_on_selector("#dag a.dag-operator[data-operator=split]", "n => n.textContent")
                   .endswith("3 partitions"), timeout=30, what="the DAG to show split's 3 partitions")
        splits = {str(r["id"]) for r in admin(app_id, "operators")["operators"] if r["name"] == "split"}
        assert len(splits) == 3
        wait_until(lambda: {k for k, cells in page.rows("operators").items() if cells[1].startswith("split[")}
                   == splits, timeout=30, what="the table to list split's 3 partitions")
        # the kill action names it as text in its confirmation
        p.click("#kill-app")
        assert page.dialogs[-1] == ("confirm", f"Kill {XSS_NAME}? Every container is stopped now.")
        assert wait_final(app_id, timeout=60)["state"] == "KILLED"
        assert any(path.endswith("/pages/stram/ws/v2/stram/kill") for path in proxy.paths)
    finally:
        if page is not None:
            page.close()
        if proxy is not None:
            proxy.close()
        if stram_apps.find_app(app_id).get("state") not in stram_apps.TERMINAL:
            from stram.client import cli
            cli.main(["kill-app", app_id])
            wait_final(app_id, timeout=60)
