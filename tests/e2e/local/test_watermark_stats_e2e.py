"""Each operator's event-time watermark in the operators API and ``stram list-operators`` (issue 49).

A real local application, one container per operator: ``src`` (EventTimeSource) emits record i
with ts = ORIGIN + i * STEP and declares max ts - BOUND each window; ``relay`` passes the records
on to ``out``. What every operator must show is computed here from its own counters, on every
read of the API: after k records (the source's tuples out, the others' tuples in, counted up to
the window the watermark is of) the watermark is ORIGIN + (k - 1) * STEP - BOUND, none before the
first record, "end" once the source has emitted its last record and declared the end of input.
The source holds after HOLD records until the test releases it: then all three show that
watermark, with a lag that is the master's clock minus it. The console's Watermark column shows
the same (a browser test, as tests/e2e/local/test_console_e2e.py's).
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.parse

from e2ekit import admin, launch_detached, wait_final, wait_until
from test_admin_e2e import cli, kill
from test_console_e2e import Page

from stram.common import apps as stram_apps

TOTAL, PER_WINDOW, STEP, BOUND, HOLD = 40, 2, 250, 1000, 15
NAMES = ("src", "relay", "out")


def now_ms() -> int:
    return int(time.time() * 1000)


def spec(tmp_path, origin: int, release) -> str:
    path = tmp_path / "watermarks.yaml"
    path.write_text(f"""
name: watermarks
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, CHECKPOINT_WINDOW_COUNT: 5}}
operators:
  src: {{class: "tests.kits.e2e_ops:EventTimeSource",
        properties: {{total: {TOTAL}, per_window: {PER_WINDOW}, origin_ms: {origin}, step_ms: {STEP},
                     bound_ms: {BOUND}, hold_after: {HOLD}, release_file: "{release}"}}}}
  relay: {{class: "tests.kits.e2e_ops:PassThrough"}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{tmp_path / 'out'}"}}}}
streams:
  events: {{from: src.output, to: [relay.input]}}
  relayed: {{from: relay.output, to: [out.input]}}
""")
    return str(path)


def test_the_operators_api_shows_each_operators_watermark_and_its_lag(tmp_path):
    origin = now_ms() - 3_600_000  # event time an hour behind the wall clock

    def expected(k: int) -> int | None:
        return None if k == 0 else origin + (k - 1) * STEP - BOUND

    release = tmp_path / "release"
    app_id = launch_detached(spec(tmp_path, origin, release))
    seen: dict[str, set] = {name: set() for name in NAMES}

    def read() -> dict[str, dict] | None:
        """The operators page, each row checked against its own counters."""
        before = now_ms()
        doc = admin(app_id, "operators")
        after = now_ms()
        rows = {r["name"]: r for r in (doc or {}).get("operators", [])}
        if set(rows) != set(NAMES):
            return None
        for name, r in rows.items():
            k = r["tuples_out_total"] if name == "src" else r["tuples_in_total"]
            wm, lag = r["watermark"], r["watermark_lag_millis"]
            if wm == "end":
                assert k == TOTAL and lag is None, (name, r)
            else:
                assert wm == expected(k), (name, k, expected(k), r)
                if wm is None:
                    assert lag is None, (name, r)
                else:
                    assert isinstance(lag, int) and before - wm <= lag <= after - wm, (name, before, after, r)
            seen[name].add(wm)
        return rows

    def counted(rows: dict[str, dict]) -> list[int]:
        return [rows["src"]["tuples_out_total"], rows["relay"]["tuples_in_total"], rows["out"]["tuples_in_total"]]

    try:
        held = wait_until(lambda: (rows := read()) and counted(rows) == [HOLD] * 3 and rows, timeout=90,
                          what=f"every operator to have {HOLD} records", interval=0.2)
        want = expected(HOLD)
        assert [held[name]["watermark"] for name in NAMES] == [want] * 3
        assert all(held[name]["watermark_lag_millis"] > 3_000_000 for name in NAMES), held
        # list-operators shows it too: the UTC time, as computed here
        listed = cli("list-operators", app_id)
        assert listed.returncode == 0, listed.stderr
        when = datetime.datetime.fromtimestamp(want / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
        lines = [line for line in listed.stdout.splitlines() if when.replace("+00:00", "Z") in line]
        assert len(lines) == 3, listed.stdout
        assert "WATERMARK" in listed.stdout.splitlines()[0]

        release.touch()
        ended = wait_until(lambda: (rows := read()) and all(rows[n]["watermark"] == "end" for n in NAMES) and rows,
                           timeout=90, what="every operator's watermark at the end", interval=0.2)
        assert counted(ended) == [TOTAL] * 3
        assert all(ended[name]["watermark_lag_millis"] is None for name in NAMES)
        for name in NAMES:  # what each showed was the source's watermarks, in the order declared
            assert {want, "end"} <= seen[name], (name, seen[name])

        shut = cli("shutdown-app", app_id)
        assert shut.returncode == 0, shut.stderr
        assert wait_final(app_id, timeout=90)["state"] == "SUCCEEDED"
        written = sorted((json.loads(line) for f in (tmp_path / "out").rglob("*.jsonl") for line in f.open()),
                         key=lambda r: r["i"])
        assert written == [{"i": i, "ts": origin + i * STEP} for i in range(TOTAL)]
    finally:
        kill(app_id)


def console_url(app_id: str) -> str:
    """The console of a local application, its token in the address."""
    url = wait_until(lambda: stram_apps.find_app(app_id).get("admin_url"), timeout=60, what="the admin URL")
    return url + "/#token=" + urllib.parse.quote(stram_apps.read_token(app_id))


def test_the_console_shows_each_operators_watermark_and_its_lag(tmp_path, chromium):
    # two hours back: the lag shown is then over an hour however fast the records come (with an hour
    # it was 59m 59s once, the held watermark being 2.5 s past the origin)
    origin = now_ms() - 7_200_000
    release = tmp_path / "release"
    app_id = launch_detached(spec(tmp_path, origin, release))
    page = None
    try:
        def held() -> dict | None:
            rows = {r["name"]: r for r in (admin(app_id, "operators") or {}).get("operators", [])}
            return rows if len(rows) == 3 and all(r["watermark"] is not None for r in rows.values()) \
                and rows["out"]["tuples_in_total"] == HOLD and rows else None
        rows = wait_until(held, timeout=90, what=f"every operator to have {HOLD} records", interval=0.2)
        want = origin + (HOLD - 1) * STEP - BOUND
        when = datetime.datetime.fromtimestamp(want / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        when += f".{want % 1000:03d} UTC (lag "
        page = Page(chromium, console_url(app_id))
        ids = {str(r["id"]): name for name, r in rows.items()}
        shown = wait_until(lambda: (cells := page.rows("operators")) and set(cells) == set(ids)
                           and all(c[9].startswith(when) for c in cells.values()) and cells, timeout=30,
                           what=f"the watermark {when} on the page")
        for cells in shown.values():  # the lag in hours: about two behind
            assert cells[9].endswith(")") and "h " in cells[9][len(when):], cells[9]
        release.touch()
        wait_until(lambda: all(c[9] == "end" for c in page.rows("operators").values()), timeout=60,
                   what="every operator's watermark at the end on the page")
        assert not page.errors, page.errors
    finally:
        if page is not None:
            page.close()
        kill(app_id)
