"""WindowedAggregate fed Arrow batches (stram.operators.window_columns) against the plain-Python oracle.

The same disordered streams with late records as test_windows.py, each driver batch handed over as one
``pyarrow.RecordBatch``: count/sum/min/max in tumbling and sliding windows keep their windows as
columns; every other configuration reads the batches' rows as dicts. Results and late records must be
what the oracle says, in every mode (plain, state through pickle, split into two partitions).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from eventtime import drive, late_ids, make, on_time, rows, stream, window_oracle

from stram.common.watermarks import MAX_WATERMARK
from stram.operators.window import WindowedAggregate

R, B = 16, 40
SEEDS = range(9)
MODES = ("plain", "pickle", "split")
WINDOWS = {
    "tumbling": {"kind": "tumbling", "size_ms": 100},
    "tumbling-origin": {"kind": "tumbling", "size_ms": 70, "origin_ms": 33},
    "sliding-even": {"kind": "sliding", "size_ms": 90, "slide_ms": 45, "origin_ms": -5},
    "sliding-odd": {"kind": "sliding", "size_ms": 100, "slide_ms": 30},  # not a multiple: rows as dicts
    "session": {"kind": "session", "gap_ms": 40},
}
AGGREGATES = {
    "count": ({"aggregate": "count"}, len),
    "sum": ({"aggregate": "sum:v"}, lambda rs: sum(r["v"] for r in rs)),
    "min": ({"aggregate": "min:v"}, lambda rs: min(r["v"] for r in rs)),
    "max": ({"aggregate": "max:v"}, lambda rs: max(r["v"] for r in rs)),
    "collect": ({"aggregate": "collect:id"}, lambda rs: [r["id"] for r in rs]),
}


def horizon(window: dict, lateness: int) -> int:
    return window.get("size_ms", window.get("gap_ms", 0)) + lateness


@pytest.mark.parametrize("agg", sorted(AGGREGATES))
@pytest.mark.parametrize("wname", sorted(WINDOWS))
@pytest.mark.parametrize("arrow_results", [False, True])
def test_arrow_batches_give_the_oracles_results(wname, agg, arrow_results):
    window = WINDOWS[wname]
    props, fold = AGGREGATES[agg]
    for seed in SEEDS:
        lateness = (0, 150)[seed % 2]
        mode = MODES[seed % 3]
        items = stream(seed, 300, keys=4, bound=B, late=0.1, horizon=horizon(window, lateness), lookback=2 * R)
        run = drive(WindowedAggregate, dict(props, window=window, allowed_lateness_ms=lateness, key_field="key",
                                            timestamp_field="ts", arrow_results=arrow_results),
                    items, R, B, mode=mode, seed=seed, arrow=True)
        expected = window_oracle(window, [r for _, r in on_time(items)], fold)
        assert sorted(rows(run.results)) == sorted(expected), (seed, mode)
        assert sorted(r["id"] for r in run.late) == late_ids(items), (seed, mode)


def test_windows_are_kept_as_columns_and_fire_as_one_table_per_window():
    out, late = [], []
    op = make(WindowedAggregate, {"window": {"kind": "sliding", "size_ms": 20, "slide_ms": 10}, "aggregate": "sum:v",
                                  "key_field": "k", "timestamp_field": "t", "arrow_results": True})
    op.output.emit_batch, op.late.emit_batch = out.extend, late.extend
    op.begin_window(1)
    op.process_input_batch([pa.RecordBatch.from_pydict({"k": [1, 2, 1, 1], "t": [0, 5, 12, 31], "v": [1, 2, 3, 4]})])
    assert not op.columns and op.held() == 4  # queued until the window's end (or the next watermark)
    op.end_window()
    op.begin_window(2)
    assert op.columns and not op.panes and op.held() == 4  # (1, pane 0), (2, 0), (1, 10), (1, 30)
    op.on_watermark(20)  # closes [0, 20) and [-10, 10)
    assert [t.to_pylist() for t in out] == [
        [{"key": 1, "window_start": -10, "window_end": 10, "value": 1},
         {"key": 2, "window_start": -10, "window_end": 10, "value": 2}],
        [{"key": 1, "window_start": 0, "window_end": 20, "value": 4},
         {"key": 2, "window_start": 0, "window_end": 20, "value": 2}]]
    op.process_input_batch([pa.RecordBatch.from_pydict({"k": [3, 3], "t": [9, 15], "v": [7, 8]})])
    op.end_window()
    assert [b.to_pylist() for b in late] == [[{"k": 3, "t": 9, "v": 7}]]  # its last window [0, 20) fired
    out.clear()
    op.on_watermark(MAX_WATERMARK)
    assert [r for t in out for r in t.to_pylist()] == [
        {"key": 1, "window_start": 10, "window_end": 30, "value": 3},
        {"key": 3, "window_start": 10, "window_end": 30, "value": 8},
        {"key": 1, "window_start": 20, "window_end": 40, "value": 4},
        {"key": 1, "window_start": 30, "window_end": 50, "value": 4}]
    assert not op.columns and op.held() == 0


def test_null_fields_are_malformed_and_dicts_among_batches_join_the_columns():
    out = []
    metrics = {}
    op = make(WindowedAggregate, {"window": {"kind": "tumbling", "size_ms": 10}, "aggregate": "count",
                                  "key_field": "k", "timestamp_field": "t"}, metrics=metrics)
    op.output.emit_batch, op.late.emit_batch = out.extend, out.extend
    op.begin_window(1)
    op.process_input_batch([pa.RecordBatch.from_pydict({"k": [1, None, 1], "t": [1, 2, None]}), {"k": 1, "t": 3}])
    op.on_watermark(MAX_WATERMARK)
    op.end_window()
    assert out == [{"key": 1, "window_start": 0, "window_end": 10, "value": 2}]
    assert op.malformed == 2 and metrics["malformed"] == 2


@pytest.mark.parametrize("wname", ["tumbling", "sliding-even"])
def test_batches_aggregated_as_soon_as_enough_rows_wait_give_the_same_results(wname, monkeypatch):
    """PENDING_ROWS reached mid-window: the queue is aggregated then, under the watermark it came under."""
    from stram.operators import window_columns
    monkeypatch.setattr(window_columns, "PENDING_ROWS", 7)
    window = WINDOWS[wname]
    for seed in SEEDS:
        items = stream(seed, 300, keys=4, bound=B, late=0.1, horizon=horizon(window, 50), lookback=2 * R)
        run = drive(WindowedAggregate, {"aggregate": "sum:v", "window": window, "allowed_lateness_ms": 50,
                                        "key_field": "key", "timestamp_field": "ts"},
                    items, R, B, mode=MODES[seed % 3], seed=seed, arrow=True)
        assert sorted(rows(run.results)) == window_oracle(window, [r for _, r in on_time(items)],
                                                          lambda rs: sum(r["v"] for r in rs))
        assert sorted(r["id"] for r in run.late) == late_ids(items)
