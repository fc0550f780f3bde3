"""The first thing a Hadoop admin clicks: the application's tracking URL, on the session's mini cluster.

The test does what the admin does. It reads the tracking URL from ``yarn application
-status`` (the own address of Skein's web UI) and opens it where the ResourceManager
links it, through its web proxy (``http://<rm>/proxy/<application id>/``, the
``trackingUrl`` of the RM's report). There Skein's web UI answers with its overview page,
whose menu of service pages links to stram's console. The test follows that link, first
as a plain GET, then in a headless Chromium that clicks it, and compares the operators the
console lists with ``stram list-operators``. On Java 17 (the mini cluster's JVM here) the
overview used to be an HTTP 500 (a ``MustacheException``: the page could not read the
list of service pages by reflection).

Then the application is shut down gracefully. The master's log must end saying that the
application ended SUCCEEDED and the master is stopping, not that it is killing the
application (Skein stops the master with SIGTERM once the final state was reported). An
application a failure left running is killed (``yarn application -kill``).
"""

from __future__ import annotations

import html
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import ROOT
from e2ekit import wait_until
from hadoop import running_operators, stram, stram_json

pytestmark = pytest.mark.yarn

WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
#: 5 lines a 100 ms window: Moby Dick lasts minutes, the test ends it with shutdown-app
SLOW = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "MASTER_MEMORY_MB=512", "-D", "CONTAINER_MEMORY_MB=512",
        "-D", "operators.reader.lines_per_window=5"]


def get(url: str) -> tuple[int, str, str]:
    """(status, body, final URL) of a GET, redirects followed; an HTTP error's status and body too."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode(errors="replace"), resp.geturl()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace"), url


def overview_with_pages(url: str) -> tuple[int, str, str] | None:
    """The overview once it can list stram's page: None while it answers 200 without it (the
    master has not registered its console yet); else (status, body, final URL), errors included."""
    status, body, final = get(url)
    if status == 200 and "pages/stram" not in body:
        return None
    return status, body, final


def test_tracking_url_leads_to_the_console(on_minicluster, chromium):
    cluster = on_minicluster
    base = cluster.new_dir("tracking")
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    started = time.monotonic()
    proc = stram("launch", "--yarn", WORDCOUNT, *SLOW, "-D", f"operators.reader.path={moby}",
                 "-D", f"operators.out.path={cluster.uri(base)}/out", "--detach")
    assert proc.returncode == 0, proc.stderr[-4000:]
    app_id = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"application_\d+_\d+", app_id), proc.stdout
    page = None
    timings = {}
    try:
        rows = wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="operators ACTIVE")
        timings["running"] = time.monotonic() - started

        # 1. the tracking URL as `yarn application -status` shows it (the own address of Skein's web UI, which
        # the ResourceManager's web proxy fronts), and the RM's link to it: its proxy
        status = cluster.run("yarn", "application", "-status", app_id)
        tracking = re.search(r"Tracking-URL : (http\S+)", status)
        assert tracking, status
        tracking_url = tracking.group(1)
        proxy_url = f"{cluster.rm_web}/proxy/{app_id}/"
        code, report, _ = get(f"{cluster.rm_web}/ws/v1/cluster/apps/{app_id}")
        assert code == 200 and json.loads(report)["app"]["trackingUrl"] == proxy_url, report[:2000]

        # 2. through the proxy: Skein's overview, 200, no error page, a link to stram's console
        code, body, final = wait_until(lambda: overview_with_pages(proxy_url), timeout=120, interval=2,
                                       what="the overview to list stram's page (or to fail)")
        assert code == 200, f"{proxy_url} answered {code}:\n{body[:2000]}"
        assert "HTTP ERROR" not in body and "MustacheException" not in body, body[:2000]
        assert app_id in body
        links = {html.unescape(text).strip(): html.unescape(href)
                 for href, text in re.findall(r'<a class="dropdown-item" href="([^"]+)">([^<]+)</a>', body)}
        assert "stram" in links, body[:4000]
        console_url = urllib.parse.urljoin(final, links["stram"])
        assert console_url.startswith(proxy_url), (console_url, proxy_url)
        # the tracking URL YARN shows answers too (it is the page the proxy forwards to)
        code, body, _ = get(tracking_url)
        assert code == 200 and "pages/stram" in body, (tracking_url, code, body[:2000])
        code, console_html, _ = get(console_url)
        assert code == 200 and "<title>stram</title>" in console_html, console_html[:2000]

        # 3. in a browser: open the tracking URL, pick stram among the service pages, see every operator
        page = chromium.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        response = page.goto(proxy_url)
        assert response is not None and response.status == 200, response and response.status
        page.click("#servicePages")
        page.click("a.dropdown-item:text-is('stram')")
        page.wait_for_url(re.compile(re.escape(proxy_url) + r"pages/stram/?$"), timeout=30_000)
        page.wait_for_function("() => Number(document.body.dataset.polls || 0) >= 2", timeout=60_000)
        assert page.inner_text("#app-id") == app_id and page.inner_text("#app-name") == "wordcount"
        listed = {str(r["id"]): r for r in stram_json("list-operators", app_id)}
        assert sorted(r["label"] for r in listed.values()) == sorted(r["label"] for r in rows)

        def shown() -> dict[str, list[str]]:
            return page.eval_on_selector_all(
                "#operators tbody tr",
                "rs => Object.fromEntries(rs.map(r => [r.dataset.key, Array.from(r.cells, c => c.textContent)]))")
        cells = wait_until(lambda: (s := shown()) and set(s) == set(listed) and s, timeout=30,
                           what=f"the console to list the operators {sorted(listed)}")
        for op_id, row in listed.items():
            assert cells[op_id][1] == row["label"] and cells[op_id][2] == row["container"], (cells[op_id], row)
        assert not errors, errors
        timings["console"] = time.monotonic() - started
        page.close()
        page = None

        # 4. a graceful end: SUCCEEDED, and the master's last lines say so, not that it kills anything
        down = stram("shutdown-app", app_id)
        assert down.returncode == 0, down.stderr
        waited = stram("wait", app_id, "--timeout", "240")
        assert waited.stdout.strip() == f"{app_id} SUCCEEDED", (waited.stdout, waited.stderr[-2000:])
        timings["succeeded"] = time.monotonic() - started

        def master_log() -> str | None:
            out = stram("logs", app_id)
            return out.stdout if out.returncode == 0 and f"application {app_id} ended" in out.stdout else None
        log = wait_until(master_log, timeout=90, interval=2, what="the master's log with its end")
        said = [line.split(" stram.master: ", 1)[1] for line in log.splitlines() if " stram.master: " in line]
        assert said[-2:] == [f"application {app_id} ended SUCCEEDED",
                             "signal 15 after the application ended SUCCEEDED: the master is stopping"], said[-5:]
        assert "killing the application" not in log, [line for line in log.splitlines() if "killing" in line]
    finally:
        if page is not None:
            page.close()
        state = cluster.run("yarn", "application", "-status", app_id, check=False)
        if not re.search(r"^\s*State : (FINISHED|FAILED|KILLED)", state, re.M):
            cluster.run("yarn", "application", "-kill", app_id, check=False)
    print(f"tracking URL on YARN: operators ACTIVE {timings.get('running', 0):.1f}s, console checked "
          f"{timings.get('console', 0):.1f}s, SUCCEEDED {timings.get('succeeded', 0):.1f}s after submit; "
          f"{time.monotonic() - started:.1f}s in all")
