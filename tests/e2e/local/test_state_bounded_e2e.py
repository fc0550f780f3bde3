"""State stays bounded on an endless keyed stream: a session-window count and an interval join over
generated records run for a while; the state they hold (their 'held' metric) stops growing while
the records they have taken in keep growing, and their containers' memory stays flat."""

from __future__ import annotations

import textwrap
import time

import psutil
from e2ekit import admin, app_processes, launch_detached, wait_until

from stram.client import cli

RATE, INTERVAL, DISORDER, GAP, LOWER, UPPER, WINDOW_MS = 8000, 1, 50, 200, -100, 100, 100



def sample(app_id: str) -> dict[str, tuple[int, int]]:
    """Per operator name: (held, tuples taken in so far)."""
    rows = (admin(app_id, "operators") or {}).get("operators", [])
    out = {}
    for r in rows:
        if r["name"] in ("sess", "ij") and "held" in (r.get("metrics") or {}):
            held, seen = out.get(r["name"], (0, 0))
            out[r["name"]] = (held + int(r["metrics"]["held"]), seen + int(r["tuples_in_total"]))
    return out


def rss(app_id: str) -> int:
    total = 0
    for p in app_processes(app_id):
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def test_session_window_and_interval_join_state_stay_bounded(tmp_path):
    app = tmp_path / "endless.py"
    app.write_text(textwrap.dedent(f"""
        from stram.flow import Flow, windows
        flow = Flow("endless", attributes={{"STREAMING_WINDOW_SIZE_MILLIS": {WINDOW_MS},
                                            "CHECKPOINT_WINDOW_COUNT": 10}})
        a = flow.generate(rate={RATE}, seed=1, keys=300, interval_ms={INTERVAL}, disorder_ms={DISORDER}, name="gen_a")
        b = flow.generate(rate={RATE}, seed=2, keys=300, interval_ms={INTERVAL}, disorder_ms={DISORDER}, name="gen_b")
        ka = a.key_by("key")
        ka.window(windows.session({GAP})).count(name="sess")
        ka.interval_join(b.key_by("key"), {LOWER}, {UPPER}, name="ij")
    """))
    app_id = launch_detached(str(app))
    try:
        wait_until(lambda: len(sample(app_id)) == 2 and all(s[1] > 0 for s in sample(app_id).values()),
                   timeout=90, what="both operators taking records in")
        time.sleep(5)  # warm up: the state fills to its steady size
        phases = []
        for seconds in (10, 20):
            first, highest = sample(app_id), {}
            for _ in range(seconds):
                time.sleep(1)
                for name, (held, _) in sample(app_id).items():
                    highest[name] = max(highest.get(name, 0), held)
            phases.append((first, highest, sample(app_id), rss(app_id)))
    finally:
        cli.main(["kill-app", app_id])
    (start1, high1, end1, rss1), (_, high2, end2, rss2) = phases
    for name in ("sess", "ij"):
        taken1, taken2 = end1[name][1] - start1[name][1], end2[name][1] - end1[name][1]
        assert taken1 > 0 and taken2 > taken1, (name, phases)  # twice as long, more records taken in
        # the state of the second, longer phase is no bigger than the first's: it does not grow with
        # the records taken in (which would reach about 3x the first phase's state by then)
        assert high2[name] <= high1[name] * 1.3 + 200, (name, high1, high2)
        assert high2[name] < taken2 / 10, (name, high2, taken2)  # a small part of what came in
    # memory flat: the processes' resident memory no more than the allocator's slack above the first phase's
    assert rss2 < rss1 * 1.2 + (30 << 20), (rss1, rss2)
