"""Event-time joins end to end, written with the dataflow API: two JSON-lines sources with their own
disorder, a windowed left outer join and an interval join, two partitions each, compared with the
kit's oracles; and the same with a join's container killed mid-run (EXACTLY_ONCE)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until
from eventtime import interval_join_oracle, on_time, stream, windowed_join_oracle

from scripts.summarize import read_jsonl

BOUND, WINDOW, LOWER, UPPER = 40, {"kind": "tumbling", "size_ms": 300}, -60, 120


def app(tmp_path, per_window: int) -> tuple[str, list]:
    items = stream(seed=31, n=1600, keys=7, bound=BOUND, advance=15, ports=("left", "right"))
    for side in ("left", "right"):
        with open(tmp_path / f"{side}.jsonl", "w") as f:
            for port, record, _ in items:
                if port == side:
                    f.write(json.dumps(record) + "\n")
    (tmp_path / "joins.py").write_text(textwrap.dedent(f"""
        from stram.flow import Flow, windows
        flow = Flow("joins", attributes={{"STREAMING_WINDOW_SIZE_MILLIS": 100, "CHECKPOINT_WINDOW_COUNT": 4,
                                          "HEARTBEAT_INTERVAL_MILLIS": 300, "PROCESSING_MODE": "EXACTLY_ONCE"}})
        left = flow.read_jsonl({str(tmp_path / "left.jsonl")!r}, timestamp_field="ts",
                               out_of_orderness_ms={BOUND}, records_per_window={per_window}, name="lefts")
        right = flow.read_jsonl({str(tmp_path / "right.jsonl")!r}, timestamp_field="ts",
                                out_of_orderness_ms={BOUND}, records_per_window={per_window}, name="rights")
        lk, rk = left.key_by("key"), right.key_by(lambda r: r["key"])
        lk.join(rk, windows.tumbling({WINDOW["size_ms"]}), how="left", name="wjoin", partitions=2) \\
            .write_jsonl({str(tmp_path / "wjoin")!r}, name="wout")
        lk.interval_join(rk, {LOWER}, {UPPER}, name="ijoin", partitions=2) \\
            .write_jsonl({str(tmp_path / "ijoin")!r}, name="iout")
    """))
    return str(tmp_path / "joins.py"), on_time(items)


def check(tmp_path, items: list) -> None:
    wrows = read_jsonl(str(tmp_path / "wjoin"))
    got = Counter((r["key"], r["window_start"], r["window_end"], r["left"]["id"],
                   r["right"]["id"] if r["right"] is not None else None) for r in wrows)
    assert got == windowed_join_oracle(WINDOW, items, "left")
    irows = read_jsonl(str(tmp_path / "ijoin"))
    got = Counter((r["key"], r["left"]["id"], r["right"]["id"]) for r in irows)
    assert got == interval_join_oracle(items, LOWER, UPPER, "inner")


def test_joins_match_the_oracles(tmp_path):
    path, items = app(tmp_path, per_window=200)
    final = wait_final(launch_detached(path), timeout=300)
    assert final["state"] == "SUCCEEDED", final
    check(tmp_path, items)


@pytest.mark.parametrize("victim", ["wjoin", "ijoin"])
def test_joins_are_exact_once_across_a_container_kill(tmp_path, victim):
    path, items = app(tmp_path, per_window=12)
    app_id = launch_detached(path)
    # 2 sources, 2 x 2 join partitions, a unifier before each output (late is unconnected), 2 outputs
    wait_until(lambda: running_operators(app_id) == 10, timeout=90, what="all operators running")
    out = tmp_path / ("wjoin" if victim == "wjoin" else "ijoin")
    wait_until(lambda: len(read_jsonl(str(out))) > 50, timeout=120, what="some joined pairs out")
    kill_container_of(app_id, victim)
    final = wait_final(app_id, timeout=300)
    assert final["state"] == "SUCCEEDED", final
    check(tmp_path, items)
