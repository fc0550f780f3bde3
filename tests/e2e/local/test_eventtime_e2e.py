"""Event-time windows end to end: the sessions example (JsonLinesReader -> WindowedAggregate with
two partitions -> JSON lines, late clicks on their own output), against an oracle computed here from
the data file; and the same under container kills in EXACTLY_ONCE mode."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest
from conftest import ROOT
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until

from scripts.summarize import read_jsonl

CLICKS = ROOT / "specs" / "data" / "clicks.jsonl"
GAP, BOUND = 30_000, 5_000


def oracle(records: list[dict], per_window: int, lateness: int = 0) -> tuple[list, list]:
    """(sessions, late clicks) by the rules of the YAML form, from the clicks in arrival order.

    A click is surely late when its session window ends (ts + gap, plus the allowed lateness) at or
    before the watermark the operator must already have: the largest timestamp of the clicks at least
    one streaming window (``per_window`` clicks) earlier, minus the bound; surely on time when its
    timestamp is at least the largest before it minus the bound. The data must hold only those two
    kinds (checked), so the answer does not depend on where windows fall.
    """
    late, on_time = [], []
    high = []  # largest ts among records[:i]
    top = None
    for r in records:
        high.append(top)
        top = r["ts"] if top is None else max(top, r["ts"])
    for i, r in enumerate(records):
        surely_low = high[i - per_window + 1] if i - per_window + 1 >= 0 else None
        if surely_low is not None and r["ts"] + GAP + lateness <= surely_low - BOUND:
            late.append(r)
        else:
            assert high[i] is None or r["ts"] >= high[i] - BOUND, f"record {i} neither surely late nor on time"
            on_time.append(r)
    sessions = []
    by_user = collections.defaultdict(list)
    for r in on_time:
        by_user[r["user"]].append(r["ts"])
    for user, times in by_user.items():
        times.sort()
        start = last = times[0]
        n = 1
        for t in times[1:]:
            if t - last < GAP:
                last, n = t, n + 1
            else:
                sessions.append({"key": user, "window_start": start, "window_end": last + GAP, "value": n})
                start = last = t
                n = 1
        sessions.append({"key": user, "window_start": start, "window_end": last + GAP, "value": n})
    return sorted(sessions, key=json.dumps), late


def records() -> list[dict]:
    return [json.loads(line) for line in CLICKS.read_text().splitlines()]


def launch_sessions(tmp_path, *extra: str) -> tuple[str, str, str]:
    out, late = tmp_path / "out", tmp_path / "late"
    app_id = launch_detached("specs/sessions.yaml", "-D", f"operators.out.path={out}",
                             "-D", f"operators.late.path={late}", *extra)
    return app_id, str(out), str(late)


def test_the_sessions_example_matches_the_oracle(tmp_path):
    sessions, late = oracle(records(), per_window=100)
    assert len(late) > 5 and len(sessions) > 100  # the data exercises both outputs
    env_out = tmp_path / "ex"
    run = subprocess.run(["./scripts/run-example", "sessions"], cwd=ROOT, capture_output=True, text=True,
                         env={**__import__("os").environ, "STRAM_NO_INSTALL": "1", "PYTHON": sys.executable,
                              "TMPDIR": str(env_out.parent)}, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = run.stdout
    clicks = sum(s["value"] for s in sessions)
    assert f"{clicks:,} clicks in {len(sessions):,} sessions" in summary, summary
    assert f"{len(late)} clicks arrived too late" in summary, summary
    out_dir = summary.strip().splitlines()[-1].split("output: ")[1].split(" ")[0]
    assert sorted(read_jsonl(out_dir), key=json.dumps) == sessions


@pytest.mark.parametrize("victim", ["sessions", "clicks"])
def test_session_windows_are_exact_once_across_a_container_kill(tmp_path, victim):
    per_window = 8  # a slow reader: the run lasts long enough for a kill in its middle
    sessions, late = oracle(records(), per_window=per_window)
    app_id, out, late_dir = launch_sessions(
        tmp_path, "-D", f"operators.clicks.records_per_window={per_window}",
        "-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=4",
        "-D", "HEARTBEAT_INTERVAL_MILLIS=300", "-D", f"operators.clicks.path={CLICKS}")
    # reader, 2 partitions, a unifier per output port, 2 outputs
    wait_until(lambda: running_operators(app_id) == 7, what="all operators running")
    wait_until(lambda: len(read_jsonl(out)) > len(sessions) // 5, timeout=120, what="some sessions out")
    kill_container_of(app_id, victim)
    final = wait_final(app_id, timeout=300)
    assert final["state"] == "SUCCEEDED", final
    got = sorted(read_jsonl(out), key=json.dumps)
    assert got == sessions  # exactly once: nothing missing, nothing twice
    assert sorted(read_jsonl(late_dir), key=json.dumps) == sorted(late, key=json.dumps)


def test_session_windows_repartition_with_stram_scale(tmp_path, capsys):
    """`stram scale` 2 -> 3 -> 1 mid-run: open sessions move to their keys' new partitions; the
    results still match the oracle exactly once."""
    from stram.client import cli
    per_window = 6
    sessions, late = oracle(records(), per_window=per_window)
    app_id, out, late_dir = launch_sessions(
        tmp_path, "-D", f"operators.clicks.records_per_window={per_window}",
        "-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=4",
        "-D", "HEARTBEAT_INTERVAL_MILLIS=300", "-D", f"operators.clicks.path={CLICKS}")

    def partitions() -> tuple[int, bool]:
        capsys.readouterr()
        if cli.main(["list-operators", app_id, "--json"]) != 0:
            return 0, False
        rows = [r for r in json.loads(capsys.readouterr().out) if r["name"] == "sessions"]
        return len(rows), all(r["state"] == "ACTIVE" for r in rows)

    def scale(n: int) -> None:
        def accepted() -> bool:
            capsys.readouterr()
            return cli.main(["scale", app_id, "sessions", str(n)]) == 0
        wait_until(accepted, timeout=60, interval=0.5, what=f"scale to {n} accepted")
        wait_until(lambda: partitions() == (n, True), timeout=120, what=f"{n} partitions running")

    wait_until(lambda: partitions() == (2, True), what="2 partitions running")
    wait_until(lambda: len(read_jsonl(out)) > len(sessions) // 6, timeout=120, what="some sessions out")
    scale(3)
    wait_until(lambda: len(read_jsonl(out)) > len(sessions) // 2, timeout=180, what="half the sessions out")
    scale(1)
    final = wait_final(app_id, timeout=300)
    assert final["state"] == "SUCCEEDED", final
    assert sorted(read_jsonl(out), key=json.dumps) == sessions
    assert sorted(read_jsonl(late_dir), key=json.dumps) == sorted(late, key=json.dumps)


def test_the_sessions_flow_gives_the_yaml_examples_answer(tmp_path):
    """specs/sessions_flow.py, the example written with the dataflow API, run with `stram launch app.py`."""
    sessions, late = oracle(records(), per_window=100)
    out, late_dir = tmp_path / "out", tmp_path / "late"
    app_id = launch_detached("specs/sessions_flow.py", "-D", f"operators.out.path={out}",
                             "-D", f"operators.late.path={late_dir}")
    final = wait_final(app_id, timeout=300)
    assert final["state"] == "SUCCEEDED", final
    assert sorted(read_jsonl(str(out)), key=json.dumps) == sessions
    assert sorted(read_jsonl(str(late_dir)), key=json.dumps) == sorted(late, key=json.dumps)
