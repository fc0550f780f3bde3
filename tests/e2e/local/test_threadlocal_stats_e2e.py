"""Stats on THREAD_LOCAL streams (issue 18), on a real local application.

Every stream of a word count is THREAD_LOCAL: the four operators run on the
reader's thread, and tuples move by direct calls. The operators API must
still count every tuple (per batch) and show nonzero rates while it runs; the
counts must equal the lines and words counted here from the input file and
the rows found in the output files.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, word_truth
from e2ekit import admin, launch_detached, wait_final, wait_until
from test_admin_e2e import kill

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"


def spec(tmp_path) -> str:
    path = tmp_path / "thread-local-wordcount.yaml"
    path.write_text(f"""
name: thread-local-wordcount
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, CHECKPOINT_WINDOW_COUNT: 5,
             PROCESSING_MODE: AT_LEAST_ONCE}}
operators:
  reader: {{class: "tests.kits.e2e_ops:LinesThenIdle", properties: {{path: "{MOBY}", lines_per_window: 400}}}}
  split: {{class: "stram.operators.text:WordSplitter"}}
  count: {{class: "stram.operators.aggregate:KeyCounter"}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{tmp_path / 'out'}"}}}}
streams:
  lines: {{from: reader.output, to: [split.input], locality: THREAD_LOCAL}}
  words: {{from: split.output, to: [count.input], locality: THREAD_LOCAL}}
  counts: {{from: count.output, to: [out.input], locality: THREAD_LOCAL}}
""")
    return str(path)


def test_thread_local_streams_count_every_tuple_and_show_rates(tmp_path):
    lines = len(MOBY.read_text(encoding="utf-8", errors="replace").splitlines())
    words = sum(word_truth(MOBY).values())
    app_id = launch_detached(spec(tmp_path))
    try:
        rates: dict[str, float] = {}

        def by_name() -> dict[str, dict] | None:
            rows = (admin(app_id, "operators") or {}).get("operators", [])
            info = admin(app_id, "info") or {}
            for label, rate in info.get("throughput", {}).items():  # what the progress line shows
                rates[label] = max(rates.get(label, 0.0), rate)
            return {r["name"]: r for r in rows} or None

        def settled() -> dict | None:
            rows = by_name()
            if not rows or rows["reader"]["tuples_out_total"] != lines or rows["count"]["tuples_in_total"] != words:
                return None
            written = sum(1 for f in (tmp_path / "out").rglob("*.jsonl") for _ in f.open())
            return rows if rows["out"]["tuples_in_total"] == written else None
        rows = wait_until(settled, timeout=120, what="every line and word counted", interval=0.2)
        assert len({r["container"] for r in rows.values()}) == 1  # one thread, one container

        rows_out = [json.loads(line) for f in (tmp_path / "out").rglob("*.jsonl") for line in f.open()]
        assert rows["reader"]["tuples_processed_total"] == lines
        assert rows["split"]["tuples_processed_total"] == rows["split"]["tuples_in_total"] == lines
        assert rows["split"]["tuples_out_total"] == words
        assert rows["count"]["tuples_processed_total"] == words
        assert rows["count"]["tuples_out_total"] == rows["out"]["tuples_processed_total"] == len(rows_out)
        # the downstream operators of THREAD_LOCAL streams had real rates while the input was read
        assert rates.get("split", 0) > 0 and rates.get("count", 0) > 0 and rates.get("out", 0) > 0, rates
    finally:
        kill(app_id)
        wait_final(app_id, timeout=60)
