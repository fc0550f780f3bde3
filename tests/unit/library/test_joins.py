"""WindowedJoin and IntervalJoin against plain-Python oracles on random disordered two-sided streams."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from eventtime import drive, interval_join_oracle, late_ids, make, on_time, stream, windowed_join_oracle

from stram.common import pickled
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import FatalError
from stram.operators.join import IntervalJoin, WindowedJoin

R, B = 16, 40
SEEDS = range(20)
MODES = ("plain", "pickle", "split")
SIDES = ("left", "right")

WINDOWS = {
    "tumbling": {"kind": "tumbling", "size_ms": 100},
    "sliding": {"kind": "sliding", "size_ms": 100, "slide_ms": 40, "origin_ms": 7},
    "session": {"kind": "session", "gap_ms": 30},
}


def fields(seed: int) -> dict:
    """Key and time from fields, or (every third seed) from functions for the right side."""
    props = {"left_key_field": "key", "left_timestamp_field": "ts", "right_key_field": "key",
             "right_timestamp_field": "ts"}
    if seed % 3 == 2:
        props.update(right_key_field=None, right_key_fn=pickled.dumps(lambda r: r["key"]),
                     right_timestamp_field=None, right_timestamp_fn=pickled.dumps(lambda r: r["ts"]))
    return props


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("wname", sorted(WINDOWS))
def test_windowed_join_equals_the_oracle(wname, how):
    window = WINDOWS[wname]
    for seed in SEEDS:
        lateness = (0, 120)[seed % 2]
        reach = window.get("size_ms", window.get("gap_ms")) + lateness
        items = stream(seed, 300, keys=4, bound=B, late=0.1, horizon=reach, lookback=2 * R, ports=SIDES)
        run = drive(WindowedJoin, dict(fields(seed), window=window, how=how, allowed_lateness_ms=lateness),
                    items, R, B, mode=MODES[seed % 3], seed=seed)
        got = Counter((r["key"], r["window_start"], r["window_end"], r["left"]["id"],
                       r["right"]["id"] if r["right"] is not None else None) for r in run.results)
        assert got == windowed_join_oracle(window, on_time(items), how), (seed, MODES[seed % 3])
        assert sorted(r["id"] for r in run.late) == late_ids(items)


def test_windowed_join_pairs_come_in_left_then_right_arrival_order():
    window = WINDOWS["tumbling"]
    for seed in SEEDS:
        items = stream(seed, 200, keys=2, bound=B, ports=SIDES)
        run = drive(WindowedJoin, dict(fields(0), window=window), items, R, B, seed=seed)
        by_window = {}
        for r in run.results:
            by_window.setdefault((r["key"], r["window_start"]), []).append((r["left"]["id"], r["right"]["id"]))
        for pairs in by_window.values():
            assert pairs == sorted(pairs)  # ids are arrival positions


@pytest.mark.parametrize("lateness", [None, 0, 25])
@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("lower, upper", [(0, 60), (-50, 50), (-80, 0), (-20, 150)])
def test_interval_join_equals_the_oracle(lower, upper, how, lateness):
    # on-time records are never behind the watermark, late ones far behind: every lateness joins the same
    extra = {} if lateness is None else {"allowed_lateness_ms": lateness}
    for seed in SEEDS:
        items = stream(seed, 300, keys=4, bound=B, late=0.1, horizon=max(upper, -lower), lookback=2 * R,
                       ports=SIDES)
        run = drive(IntervalJoin, dict(fields(seed), lower_ms=lower, upper_ms=upper, how=how, **extra), items, R, B,
                    mode=MODES[seed % 3], seed=seed)
        got = Counter((r["key"], r["left"]["id"], r["right"]["id"] if r["right"] is not None else None)
                      for r in run.results)
        assert got == interval_join_oracle(on_time(items), lower, upper, how), (seed, MODES[seed % 3])
        assert sorted(r["id"] for r in run.late) == late_ids(items)


def test_interval_join_emits_a_pair_when_its_second_record_arrives():
    op = make(IntervalJoin, dict(fields(0), lower_ms=-10, upper_ms=10))
    out = []
    op.output.emit_batch = out.extend
    rng = random.Random(2)
    seen = []
    for i in range(200):
        side = rng.choice(SIDES)
        rec = {"key": rng.choice("ab"), "ts": rng.randrange(300), "id": i}
        before = len(out)
        getattr(op, f"process_{side}_batch")([rec])
        expected = sorted((o["id"], rec["id"]) if side == "right" else (rec["id"], o["id"]) for s, o in seen
                          if s != side and o["key"] == rec["key"]
                          and -10 <= (rec["ts"] - o["ts"]) * (1 if side == "right" else -1) <= 10)
        assert sorted((r["left"]["id"], r["right"]["id"]) for r in out[before:]) == expected
        seen.append((side, rec))


def test_interval_join_state_stays_bounded():
    """A left record is held while ts >= watermark - (upper - lower), a right one too (lower <= 0 <=
    upper); the watermark trails the records of the last two driver windows by at most B, and ts_i
    lies in [i*step, i*step + B): each side holds at most 2R + 1 + (upper - lower + 2B) / step."""
    step, lower, upper, n = 2, -30, 90, 200_000
    rng = random.Random(4)
    items = [(rng.choice(SIDES), {"key": f"k{rng.randrange(500)}", "ts": i * step + rng.randrange(B), "id": i}, False)
             for i in range(n)]
    bound = 2 * (2 * R + 1 + (upper - lower + 2 * B) // step)

    def held(op):
        in_state = sum(len(d) for d in op.lefts.values()) + sum(len(d) for d in op.rights.values())
        assert op.held() == in_state    # the metric, from the expiry entries
        return in_state
    run = drive(IntervalJoin, dict(fields(0), lower_ms=lower, upper_ms=upper, how="left"), items, R, B, size=held)
    assert run.max_size <= bound
    got = Counter((r["key"], r["left"]["id"], r["right"]["id"] if r["right"] is not None else None)
                  for r in run.results)
    assert len(got) > n // 4


def test_interval_join_with_no_lateness_drops_a_right_record_once_the_watermark_passes_it():
    """lower 0, allowed lateness 0: a right record can only meet left records at or before its ts, which
    come before the watermark passes it; so the right side holds the records of the last few driver
    windows (2R + 1 + 2B / step), where without the bound it holds those of the last upper ms too."""
    step, upper, n = 2, 400, 20_000
    rng = random.Random(5)
    items = [(rng.choice(SIDES), {"key": f"k{rng.randrange(50)}", "ts": i * step + rng.randrange(B), "id": i}, False)
             for i in range(n)]

    def rights(op):
        return sum(len(d) for d in op.rights.values())

    held = {}
    for lateness in (None, 0):
        extra = {} if lateness is None else {"allowed_lateness_ms": lateness}
        run = drive(IntervalJoin, dict(fields(0), lower_ms=0, upper_ms=upper, **extra), items, R, B, size=rights)
        held[lateness] = run.max_size
        got = Counter((r["left"]["id"], r["right"]["id"]) for r in run.results)
        assert got == Counter((a, b) for k, a, b in interval_join_oracle(on_time(items), 0, upper, "inner"))
    # about half the records are right ones
    assert held[0] <= 2 * R + 1 + 2 * B // step < upper // (2 * step) <= held[None]


@pytest.mark.parametrize("ahead", ["left", "right"])
def test_interval_join_with_a_lateness_goes_by_each_inputs_own_watermark(ahead):
    """One input runs 200 ms ahead of the other (as a source with fewer rows does): with allowed lateness 0
    the pairs are the oracle's, the lagging side's records are never held (the leading input's watermark
    is past them on arrival), and a record behind its own input's watermark is late."""
    rng = random.Random(11)
    lower, upper = 0, 50
    op = make(IntervalJoin, dict(fields(0), lower_ms=lower, upper_ms=upper, how="left", allowed_lateness_ms=0))
    out, late = [], []
    op.output.emit_batch, op.late.emit_batch = out.extend, late.extend
    streams = {side: sorted(({"key": f"k{rng.randrange(5)}", "ts": rng.randrange(3000), "id": f"{side}{i}"}
                             for i in range(400)), key=lambda r: r["ts"]) for side in SIDES}
    lag = {"left": 0, "right": 0, ahead: 200}
    marks = {side: -1 for side in SIDES}
    held = []
    for now in range(0, 3400, 40):
        for side in SIDES:
            batch = [r for r in streams[side] if marks[side] < r["ts"] <= now + lag[side]]
            if batch:
                getattr(op, f"process_{side}_batch")(batch)
                marks[side] = batch[-1]["ts"]
        op.on_input_watermarks(dict(marks))
        op.on_watermark(min(marks.values()))
        behind = "right" if ahead == "left" else "left"
        if now + lag[ahead] < marks[ahead] + upper and now + lag[ahead] < 2900:   # the leader is ahead still
            held.append(sum(len(d) for d in (op.rights if behind == "right" else op.lefts).values()))
    op.on_input_watermarks({"left": MAX_WATERMARK, "right": MAX_WATERMARK})
    op.on_watermark(MAX_WATERMARK)
    items = [(side, r) for side in SIDES for r in streams[side]]
    got = Counter((r["key"], r["left"]["id"], r["right"]["id"] if r["right"] is not None else None) for r in out)
    assert got == interval_join_oracle(items, lower, upper, "left")
    assert len(held) > 40 and max(held) == 0 and not late
    op.process_left_batch([{"key": "k0", "ts": 10, "id": "behind"}])   # far behind the left input's watermark
    assert [r["id"] for r in late] == ["behind"]


def test_join_properties_and_partition_keys():
    with pytest.raises(FatalError, match="IntervalJoin op: property 'lower_ms'"):
        make(IntervalJoin, dict(fields(0), lower_ms=5, upper_ms=1))
    with pytest.raises(FatalError, match="IntervalJoin op: property 'allowed_lateness_ms'"):
        make(IntervalJoin, dict(fields(0), lower_ms=0, upper_ms=1, allowed_lateness_ms=-1))
    with pytest.raises(FatalError, match="WindowedJoin op: property 'how'"):
        make(WindowedJoin, dict(fields(0), window=WINDOWS["tumbling"], how="outer"))
    with pytest.raises(FatalError, match="WindowedJoin op: property 'window'"):
        make(WindowedJoin, fields(0))
    fn = pickled.dumps(lambda r: r["k"])
    props = {"left_key_field": "a", "right_key_fn": fn}
    assert WindowedJoin.partition_key(props, "left") == "field:a"
    assert IntervalJoin.partition_key(props, "right") == fn
    assert IntervalJoin.partition_key({}, "left") is None


def test_join_split_state_deals_keys_and_takes_the_highest_watermark():
    states = []
    for wm, keys in ((10, "ab"), (30, "cd")):
        op = make(IntervalJoin, dict(fields(0), lower_ms=-5, upper_ms=5))
        op.on_watermark(wm)
        op.process_left_batch([{"key": k, "ts": 100} for k in keys])
        op.process_right_batch([{"key": k, "ts": 101} for k in keys])
        states.append(op.get_state())
    new = IntervalJoin.split_state(states, 2, lambda k: "abcd".index(k) % 2)
    assert [s["watermark"] for s in new] == [30, 30]
    assert [sorted(s["lefts"]) for s in new] == [["a", "c"], ["b", "d"]]
    assert [sorted(s["rights"]) for s in new] == [["a", "c"], ["b", "d"]]
    op = make(IntervalJoin, dict(fields(0), lower_ms=-5, upper_ms=5, how="left"), state=new[0])
    out = []
    op.output.emit_batch = out.extend
    op.on_watermark(MAX_WATERMARK)
    assert out == []  # every left matched before the split


@pytest.mark.parametrize("lower, upper", [(0, 40), (-30, 30), (10, 50), (-50, -10)])
def test_interval_join_records_behind_the_watermark(lower, upper):
    """Records arrive up to 60 ms behind the watermark: those the late rule lets in get every match
    among the records let in, and a left record goes out unmatched only when no later one can match."""
    for seed in range(10):
        rng = random.Random(seed)
        op = make(IntervalJoin, dict(fields(0), lower_ms=lower, upper_ms=upper, how="left"))
        out, late = [], []
        op.output.emit_batch = out.extend
        op.late.emit_batch = late.extend
        wm, accepted, fed = 1000, [], []
        op.on_watermark(wm)
        for w in range(50):
            for i in range(rng.randint(1, 5)):
                side = rng.choice(SIDES)
                rec = {"key": rng.choice("ab"), "ts": wm + rng.randint(-60, 30), "id": (w, i), "side": side}
                getattr(op, f"process_{side}_batch")([rec])
                fed.append(rec)
                if (rec["ts"] + upper if side == "left" else rec["ts"] - lower) >= wm:
                    accepted.append(rec)
            wm += rng.randint(0, 25)
            op.on_watermark(wm)
        op.on_watermark(MAX_WATERMARK)
        assert late == [r for r in fed if r not in accepted]
        lefts = [r for r in accepted if r["side"] == "left"]
        rights = [r for r in accepted if r["side"] == "right"]
        expected = Counter()
        for left in lefts:
            hits = [r for r in rights if r["key"] == left["key"] and lower <= r["ts"] - left["ts"] <= upper]
            expected.update((left["id"], r["id"]) for r in hits)
            if not hits:
                expected[(left["id"], None)] += 1
        assert Counter((r["left"]["id"], r["right"] and r["right"]["id"]) for r in out) == expected
