"""The admin API's operators page and snapshot show each operator's watermark and its lag.

A real AppMaster (no processes) is driven with hand-written heartbeats carrying watermarks;
the pages are read over the Flask app. Expected: the newest watermark each operator reported,
as :func:`stram.common.watermarks.describe` words it, and ``watermark_lag_millis`` between the
clock before and after the read minus it. ``stram list-operators`` shows the same in UTC.
"""

from __future__ import annotations

import collections
import datetime
import time

from statekit import StateRun
from test_admin_auth import TOKEN, master  # noqa: F401 - the fixture

from stram.client.cli import watermark_text
from stram.common.watermarks import IDLE, MAX_WATERMARK, describe
from stram.master.admin.auth import AdminAuth
from stram.master.admin.rest import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _shown(watermark: int | None) -> int | str | None:
    """What the page shows of a watermark: describe()'s word, or its millis as a number."""
    text = describe(watermark)
    return {"none": None, "idle": "idle", "end": "end"}[text] if text in ("none", "idle", "end") else int(text)


def _report(run: StateRun, label: str, window: int, watermark: int | None):
    ohb = run.report(label, window)
    ws = ohb.window_stats.add(window_id=run.w(window), tuples_in=1, tuples_out=1, end_window_millis=run.now)
    if watermark is not None:
        ws.watermark, ws.has_watermark = watermark, True
    return ohb


def test_operators_and_snapshot_show_the_watermark_and_its_lag(master):  # noqa: F811
    run = StateRun.around(master.state)
    run.deploy()
    client = create_app(master, AdminAuth(TOKEN)).test_client()
    t0 = int(time.time() * 1000) - 90_000
    marks = {"reader": t0, "split": t0 - 250, "count[0]": IDLE, "count[1]": None, "out": MAX_WATERMARK}
    by_container = collections.defaultdict(list)  # a container reports all its operators at once
    for label, wm in marks.items():
        by_container[run.cid(label)].append(_report(run, label, 3, wm))
    for cid, reports in by_container.items():
        run.heartbeat(cid, *reports)
    for page in ("operators", "snapshot"):
        before = int(time.time() * 1000)
        r = client.get(f"/ws/v2/stram/{page}", headers=AUTH)
        after = int(time.time() * 1000)
        assert r.status_code == 200
        rows = {row["label"]: row for row in r.get_json()["operators"]}
        assert set(rows) >= set(marks)
        for label, wm in marks.items():
            want = _shown(wm)
            row = rows[label]
            assert row["watermark"] == want, (page, label, row)
            if isinstance(want, int):
                assert before - want <= row["watermark_lag_millis"] <= after - want, (page, label, row)
            else:
                assert row["watermark_lag_millis"] is None, (page, label, row)


def test_list_operators_shows_the_watermark_in_utc_and_its_lag_in_seconds():
    for ms in (0, -5, 1_795_472_418_379, 1_700_000_000_999):
        when, lag = watermark_text(ms, 1_234)
        parsed = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        assert parsed.utcoffset() == datetime.timedelta(0)
        assert round(parsed.timestamp() * 1000) == ms, when
        assert float(lag.rstrip("s")) == 1.2
    assert watermark_text("idle", None) == ("idle", "")
    assert watermark_text("end", None) == ("end", "")
    assert watermark_text(None, None) == ("", "")
    assert watermark_text(1 << 62, 5) == (str(1 << 62), "0.0s")  # past the calendar: its millis
