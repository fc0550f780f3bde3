"""WindowedAggregate against a plain-Python oracle on random disordered streams with late records."""

from __future__ import annotations

import logging
import pickle
import random
from collections import Counter

import pytest
from eventtime import (FakeClock, drive, late_ids, make, on_time, rows, sessions, stream, window_bounds, window_groups,
                       window_oracle)

from stram.common import pickled
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import FatalError
from stram.operators.window import WindowedAggregate

R, B = 16, 40
SEEDS = range(20)
MODES = ("plain", "pickle", "split")

WINDOWS = {
    "tumbling": {"kind": "tumbling", "size_ms": 100},
    "tumbling-origin": {"kind": "tumbling", "size_ms": 70, "origin_ms": 33},
    "sliding": {"kind": "sliding", "size_ms": 100, "slide_ms": 30},
    "sliding-even": {"kind": "sliding", "size_ms": 90, "slide_ms": 45, "origin_ms": -5},
    "session": {"kind": "session", "gap_ms": 40},
}


class SquaresFold:
    """A custom fold: (sum of v*v, count)."""

    def create(self):
        return (0, 0)

    def add(self, acc, record):
        return (acc[0] + record["v"] * record["v"], acc[1] + 1)

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def result(self, acc):
        return list(acc)


def vals(rs):
    return [r["v"] for r in rs]


#: aggregate properties -> the oracle's fold of a group's records (arrival order)
AGGREGATES = {
    "count": ({"aggregate": "count"}, len),
    "sum": ({"aggregate": "sum:v"}, lambda rs: sum(vals(rs))),
    "min": ({"aggregate": "min:v"}, lambda rs: min(vals(rs))),
    "max": ({"aggregate": "max:v"}, lambda rs: max(vals(rs))),
    "mean": ({"aggregate": "mean:v"}, lambda rs: sum(vals(rs)) / len(rs)),
    "collect": ({"aggregate": "collect"}, lambda rs: rs),
    "collect-field": ({"aggregate": "collect:v"}, vals),
    "topk": ({"aggregate": "topk:3:v"}, lambda rs: sorted(vals(rs), reverse=True)[:3]),
    "custom": ({"aggregator": pickled.dumps(SquaresFold())}, lambda rs: [sum(v * v for v in vals(rs)), len(rs)]),
    "value_fn": ({"aggregate": "sum", "value_fn": pickled.dumps(lambda r: 2 * r["v"] + 1)},
                 lambda rs: sum(2 * v + 1 for v in vals(rs))),
}

FAST_FIELDS = {"key_field": "key", "timestamp_field": "ts"}
FN_FIELDS = {"key_fn": pickled.dumps(lambda r: r["key"]), "timestamp_fn": pickled.dumps(lambda r: r["ts"] + 0.25)}


def horizon(window: dict, lateness: int) -> int:
    """How far past a record's time its last window (and its allowed lateness) reaches."""
    return window.get("size_ms", window.get("gap_ms", 0)) + lateness


def check_order(window: dict, run, records) -> None:
    """Within each driver window's results: by (end, start), then keys in first-arrival order."""
    first = {}
    for r in records:
        for s, e in window_bounds(window, r["ts"]):
            first.setdefault((r["key"], s, e), r["id"])
    by_chunk = {}
    for chunk, row in run.output:
        by_chunk.setdefault(chunk, []).append(row)
    for chunk_rows in by_chunk.values():
        order = [(r["window_end"], r["window_start"], first[(r["key"], r["window_start"], r["window_end"])])
                 for r in chunk_rows]
        assert order == sorted(order)


@pytest.mark.parametrize("agg", sorted(AGGREGATES))
@pytest.mark.parametrize("wname", sorted(WINDOWS))
def test_results_equal_the_oracle(wname, agg):
    window = WINDOWS[wname]
    props, fold = AGGREGATES[agg]
    for seed in SEEDS:
        lateness = (0, 150)[seed % 2]
        mode = MODES[seed % 3]
        fields = FN_FIELDS if seed % 4 == 3 else FAST_FIELDS
        items = stream(seed, 300, keys=4, bound=B, late=0.1, horizon=horizon(window, lateness), lookback=2 * R)
        run = drive(WindowedAggregate, dict(props, window=window, allowed_lateness_ms=lateness, **fields),
                    items, R, B, mode=mode, seed=seed)
        good = [r for _, r in on_time(items)]
        assert rows(run.results) == window_oracle(window, good, fold), (seed, mode)
        assert sorted(r["id"] for r in run.late) == late_ids(items), (seed, mode)
        if mode != "split" and window["kind"] != "session":
            check_order(window, run, good)


@pytest.mark.parametrize("wname", ["tumbling", "sliding", "session"])
def test_every_record_is_in_each_of_its_windows_or_late_exactly_once(wname):
    window = WINDOWS[wname]
    for seed in SEEDS:
        items = stream(seed, 400, keys=3, bound=B, late=0.2, horizon=horizon(window, 60), lookback=2 * R)
        run = drive(WindowedAggregate, {"window": window, "aggregate": "collect:id", "allowed_lateness_ms": 60},
                    items, R, B, mode=MODES[seed % 3], seed=seed)
        seen = Counter(i for row in run.results for i in row["value"])
        late = Counter(r["id"] for r in run.late)
        assert not (set(seen) & set(late))
        for _, r, is_late in items:
            if is_late:
                assert late[r["id"]] == 1
            elif window["kind"] == "session":
                assert seen[r["id"]] == 1
            else:
                assert seen[r["id"]] == len(window_bounds(window, r["ts"]))


def panes_by_window(results):
    out = {}
    for r in results:
        out.setdefault((r["key"], r["window_start"], r["window_end"]), []).append(r)
    return out


@pytest.mark.parametrize("wname", ["tumbling", "sliding", "session"])
@pytest.mark.parametrize("agg", ["count", "sum", "collect"])
def test_accumulating_trigger_last_pane_is_the_result(wname, agg):
    window = WINDOWS[wname]
    props, fold = AGGREGATES[agg]
    for seed in SEEDS:
        lateness = (0, 100)[seed % 2]
        items = stream(seed, 300, keys=3, bound=B, late=0.1, horizon=horizon(window, lateness), lookback=2 * R)
        trigger = {"early_ms": (0, 30)[seed % 2], "mode": "accumulating"}
        run = drive(WindowedAggregate, dict(props, window=window, allowed_lateness_ms=lateness, trigger=trigger),
                    items, R, B, mode=MODES[seed % 3], seed=seed, clock=FakeClock())
        expected = window_oracle(window, [r for _, r in on_time(items)], fold)
        panes = panes_by_window(run.results)
        for k, s, e, value in expected:
            kinds = [p["pane"] for p in panes[(k, s, e)]]
            assert kinds.count("ON_TIME") == 1 and "LATE" not in kinds, kinds
            if window["kind"] != "session":  # a session's early panes may name a window that later grew
                assert kinds[-1] == "ON_TIME" and set(kinds[:-1]) <= {"EARLY"}, kinds
            assert panes[(k, s, e)][-1]["value"] == value
        on_time_windows = {w for w, ps in panes.items() if any(p["pane"] == "ON_TIME" for p in ps)}
        assert on_time_windows == {(k, s, e) for k, s, e, _ in expected}
        assert sorted(r["id"] for r in run.late) == late_ids(items)


@pytest.mark.parametrize("wname", ["tumbling", "sliding"])
@pytest.mark.parametrize("agg", ["count", "sum", "collect"])
def test_discarding_trigger_panes_add_up_to_the_result(wname, agg):
    window = WINDOWS[wname]
    props, fold = AGGREGATES[agg]
    for seed in SEEDS:
        items = stream(seed, 300, keys=3, bound=B, late=0.1, horizon=horizon(window, 50), lookback=2 * R)
        trigger = {"early_ms": 0, "mode": "discarding"}
        run = drive(WindowedAggregate, dict(props, window=window, allowed_lateness_ms=50, trigger=trigger),
                    items, R, B, mode=MODES[seed % 3], seed=seed, clock=FakeClock())
        combined = []
        for (k, s, e), ps in panes_by_window(run.results).items():
            assert ps[-1]["pane"] == "ON_TIME"
            parts = [p["value"] for p in ps]
            combined.append((k, s, e, sum(parts, []) if agg == "collect" else sum(parts)))
        expected = window_oracle(window, [r for _, r in on_time(items)], fold)
        assert sorted(combined) == expected


@pytest.mark.parametrize("mode", ["accumulating", "discarding"])
def test_allowed_late_records_make_late_panes_then_the_window_goes(mode):
    window = {"kind": "tumbling", "size_ms": 100}
    out, late = [], []
    op = make(WindowedAggregate, {"window": window, "aggregate": "collect:id", "allowed_lateness_ms": 100,
                                  "trigger": {"mode": mode}}, clock=FakeClock())
    op.output.emit_batch = out.extend
    op.late.emit_batch = late.extend
    accepted = []
    steps = [([10, 20, 130], 100), ([50, 60], 150), ([70], 200), ([80, 210], MAX_WATERMARK)]
    for i, (times, wm) in enumerate(steps):
        op.begin_window(i)
        recs = [{"key": "a", "ts": t, "id": (i, t)} for t in times]
        op.process_input_batch(recs)
        accepted += [r for r in recs if r["ts"] // 100 * 100 + 200 > op.watermark]
        op.on_watermark(wm)
        op.end_window()
    fed = [{"key": "a", "ts": t, "id": (i, t)} for i, (times, _) in enumerate(steps) for t in times]
    assert late == [r for r in fed if r not in accepted] and late
    panes = panes_by_window(out)
    expected = window_oracle(window, accepted, lambda rs: [r["id"] for r in rs])
    for k, s, e, value in expected:
        kinds = [p["pane"] for p in panes[(k, s, e)]]
        assert kinds[0] == "ON_TIME" and set(kinds[1:]) <= {"LATE"}
        values = [p["value"] for p in panes[(k, s, e)]]
        assert (values[-1] if mode == "accumulating" else sum(values, [])) == value
    assert "LATE" in [p["pane"] for p in out]
    assert op.panes == {} and op.fired == set()


def test_processing_time_windows_fire_by_the_wall_clock():
    clock = FakeClock(10_000)
    op = make(WindowedAggregate, {"window": {"kind": "tumbling", "size_ms": 100, "time": "processing"},
                                  "aggregate": "collect:id"}, clock=clock)
    out = []
    op.output.emit_batch = out.extend
    rng = random.Random(5)
    arrivals = []
    for w in range(30):
        op.begin_window(w)
        for i in range(rng.randint(0, 4)):
            rec = {"key": rng.choice("ab"), "ts": 0, "id": (w, i)}  # ts is ignored
            op.process_input_batch([rec])
            arrivals.append(dict(rec, ts=clock.ms))
        clock.ms += rng.randint(0, 70)
        before = len(out)
        op.end_window()
        assert all(r["window_end"] <= clock.ms for r in out[before:])
    op.begin_window(99)
    op.on_watermark(MAX_WATERMARK)
    op.end_window()
    assert rows(out) == window_oracle({"kind": "tumbling", "size_ms": 100}, arrivals, lambda rs: [r["id"] for r in rs])


def test_session_state_stays_bounded():
    """Held sessions: each holds a record with ts >= end - gap > watermark - lateness - gap; with
    ts_i in [i*step, i*step + B) that is at most 2R + 1 + (gap + lateness + 2B) / step records."""
    step, gap, lateness, n = 3, 50, 20, 200_000
    rng = random.Random(1)
    items = [("input", {"key": f"k{rng.randrange(1000)}", "ts": i * step + rng.randrange(B), "id": i}, False)
             for i in range(n)]
    bound = 2 * R + 1 + (gap + lateness + 2 * B) // step
    run = drive(WindowedAggregate, {"window": {"kind": "session", "gap_ms": gap}, "allowed_lateness_ms": lateness,
                                    "key_field": "key", "timestamp_field": "ts"}, items, R, B,
                size=lambda op: max(sum(len(v) for v in op.sessions.values()), len(op._heap)))
    assert run.max_size <= bound
    assert sum(r["value"] for r in run.results) == n
    assert rows(run.results) == window_oracle({"kind": "session", "gap_ms": gap}, [r for _, r, _ in items], len)


def test_malformed_records_are_dropped_counted_and_logged_once(caplog):
    for fields in (FAST_FIELDS, {}):
        metrics = {}
        caplog.clear()
        op = make(WindowedAggregate, dict(fields, window={"kind": "tumbling", "size_ms": 10}, aggregate="sum:v"),
                  metrics=metrics)
        out = []
        op.output.emit_batch = out.extend
        bad = [{"ts": 1, "v": 1}, {"key": "a", "v": 1}, {"key": "a", "ts": "x", "v": 1}, {"key": "a", "ts": 2},
               {"key": "a", "ts": 3, "v": "x"}, {"key": "b", "ts": 4}, "junk"]
        with caplog.at_level(logging.WARNING, logger="stram.operators"):
            op.begin_window(1)
            op.process_input_batch(bad + [{"key": "a", "ts": 5, "v": 7}])
            op.on_watermark(MAX_WATERMARK)
            op.end_window()
        assert metrics["malformed"] == len(bad)
        assert [(r["key"], r["value"]) for r in out] == [("a", 7)]
        kinds = [m for m in caplog.messages if "cannot be read" in m]
        assert len(kinds) == 3 and all("op" in m for m in kinds)  # key, timestamp, value: once each


@pytest.mark.parametrize("props, prop", [
    ({}, "window"),
    ({"window": {"kind": "hopping", "size_ms": 5}}, "window"),
    ({"window": {"kind": "tumbling", "size_ms": 0}}, "window.size_ms"),
    ({"window": {"kind": "tumbling"}}, "window"),
    ({"window": {"kind": "tumbling", "size": 5}}, "window"),
    ({"window": {"kind": "sliding", "size_ms": 10, "slide_ms": 20}}, "window.slide_ms"),
    ({"window": {"kind": "session", "gap_ms": -1}}, "window.gap_ms"),
    ({"window": {"kind": "tumbling", "size_ms": 5, "time": "wall"}}, "window.time"),
    ({"aggregate": "median:v"}, "aggregate"),
    ({"aggregate": "sum"}, "aggregate"),
    ({"aggregate": "topk:x:v"}, "aggregate"),
    ({"aggregate": "count:v"}, "aggregate"),
    ({"allowed_lateness_ms": -5}, "allowed_lateness_ms"),
    ({"trigger": {"mode": "replace"}}, "trigger.mode"),
    ({"trigger": {"early": 5}}, "trigger"),
    ({"window": {"kind": "session", "gap_ms": 5}, "aggregator": pickled.dumps(type("NoMerge", (), {
        "create": lambda self: 0, "add": lambda self, a, r: a, "result": lambda self, a: a,
        "merge": None})())}, "aggregator"),
])
def test_bad_properties_are_fatal_naming_operator_and_property(props, prop):
    props = dict({"window": {"kind": "tumbling", "size_ms": 10}}, **props)
    if props == {"window": {"kind": "tumbling", "size_ms": 10}}:
        props = {}
    with pytest.raises(FatalError) as exc:
        make(WindowedAggregate, props)
    assert "WindowedAggregate op" in str(exc.value) and f"'{prop}'" in str(exc.value)


def test_partition_key_and_split_state_take_the_highest_watermark():
    assert WindowedAggregate.partition_key({"key_field": "user"}, "input") == "field:user"
    fn = pickled.dumps(lambda r: r["u"])
    assert WindowedAggregate.partition_key({"key_fn": fn}, "input") == fn
    assert WindowedAggregate.partition_key({}, "input") is None
    props = {"window": {"kind": "tumbling", "size_ms": 10}, "key_field": "key", "timestamp_field": "ts"}
    states = []
    for wm, keys in ((50, "ab"), (70, "cd")):
        op = make(WindowedAggregate, props)
        op.on_watermark(wm)
        op.process_input_batch([{"key": k, "ts": 100 + i} for i, k in enumerate(keys)])
        states.append(pickle.loads(pickle.dumps(op.get_state())))
    new = WindowedAggregate.split_state(states, 3, lambda k: "abcd".index(k) % 3)
    assert [s["watermark"] for s in new] == [70, 70, 70]
    assert [sorted(k for d in s["panes"].values() for k in d) for s in new] == [["a", "d"], ["b"], ["c"]]


def test_sessions_oracle_agrees_with_the_gap_rule():
    """The oracle's sessions: two records share one iff a chain of records each less than gap apart joins them."""
    rng = random.Random(3)
    recs = [{"key": "a", "ts": rng.randrange(1000), "id": i} for i in range(60)]
    for s, e, members in sessions(recs, 25):
        ts = sorted(r["ts"] for r in members)
        assert s == ts[0] and e == ts[-1] + 25 and all(b - a < 25 for a, b in zip(ts, ts[1:]))
    assert sum(len(m) for m in window_groups({"kind": "session", "gap_ms": 25}, recs).values()) == 60


@pytest.mark.parametrize("fields", [FAST_FIELDS, FN_FIELDS], ids=["fields", "functions"])
@pytest.mark.parametrize("wname", ["tumbling", "sliding-even", "sliding"])
def test_records_at_the_lateness_boundary(wname, fields):
    """Records around window_end + lateness == watermark: a window takes a record while its end +
    lateness is above the watermark; a record none of whose windows does goes to late."""
    window, lateness = WINDOWS[wname], 30
    for seed in range(10):
        rng = random.Random(seed)
        op = make(WindowedAggregate, dict(fields, window=window, aggregate="count", allowed_lateness_ms=lateness))
        out, late = [], []
        op.output.emit_batch = out.extend
        op.late.emit_batch = late.extend
        wm, expected, expected_late = 1000, Counter(), []
        op.on_watermark(wm)
        for w in range(40):
            op.begin_window(w)
            batch = [{"key": rng.choice("ab"), "ts": wm - rng.randint(-5, 140)} for _ in range(rng.randint(1, 6))]
            op.process_input_batch(batch)
            for r in batch:
                open_windows = [(s, e) for s, e in window_bounds(window, r["ts"]) if e + lateness > wm]
                expected.update((r["key"], s, e) for s, e in open_windows)
                if not open_windows:
                    expected_late.append(r)
            wm += rng.randint(0, 30)
            op.on_watermark(wm)
            op.end_window()
        op.on_watermark(MAX_WATERMARK)
        assert late == expected_late and late
        assert rows(out) == sorted((k, s, e, n) for (k, s, e), n in expected.items())
