"""Dedup against a plain-Python oracle on random disordered streams with duplicates and late records."""

from __future__ import annotations

import random

import pytest
from eventtime import dedup_oracle, drive, late_ids, make, on_time, stream

from stram.common import pickled
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import FatalError
from stram.operators.dedup import Dedup

R, B = 16, 40
MODES = ("plain", "pickle", "split")


@pytest.mark.parametrize("within", [0, 25, 120])
def test_dedup_equals_the_oracle(within):
    for seed in range(20):
        mode = MODES[seed % 3]
        items = stream(seed, 400, keys=6, bound=B, advance=8, late=0.1, horizon=within, lookback=2 * R)
        props = {"within_ms": within, "key_field": "key", "timestamp_field": "ts"}
        if seed % 4 == 1:
            props = {"within_ms": within, "key_fn": pickled.dumps(lambda r: r["key"])}
        run = drive(Dedup, props, items, R, B, mode=mode, seed=seed)
        expected = dedup_oracle([r for _, r in on_time(items)], within)
        got = [r["id"] for r in run.results]
        assert (sorted(got) if mode == "split" else got) == (sorted(expected) if mode == "split" else expected)
        assert len(expected) < len(on_time(items))  # the streams do hold duplicates
        assert sorted(r["id"] for r in run.late) == late_ids(items)


def test_dedup_forgets_a_key_once_the_watermark_passes_it():
    within = 50
    rng = random.Random(9)
    op = make(Dedup, {"within_ms": within})
    out, late = [], []
    op.output.emit_batch = out.extend
    op.late.emit_batch = late.extend
    wm, fed = 0, []
    for w in range(60):
        batch = [{"key": rng.choice("ab"), "ts": wm + rng.randint(-60, 40), "id": (w, i)} for i in range(3)]
        op.process_input_batch(batch)
        fed += [(r, wm) for r in batch]
        wm += rng.randint(0, 20)
        op.on_watermark(wm)
        assert all(t + 2 * within >= wm for times in op.seen.values() for t in times)
    op.on_watermark(MAX_WATERMARK)
    assert op.seen == {}
    assert late == [r for r, at in fed if r["ts"] + within < at] and late
    kept = []  # by the definition, from the records that were not late
    for r, at in fed:
        if r["ts"] + within >= at and not any(k["key"] == r["key"] and abs(k["ts"] - r["ts"]) <= within
                                              for k in kept):
            kept.append(r)
    assert out == kept


def test_dedup_properties():
    with pytest.raises(FatalError, match="Dedup op: property 'within_ms'"):
        make(Dedup, {"within_ms": -1})
    assert Dedup.partition_key({"key_field": "user"}, "input") == "field:user"
    new = Dedup.split_state([{"seen": {"a": [1], "b": [2]}, "watermark": 5},
                             {"seen": {"c": [3]}, "watermark": 9}], 2, lambda k: "abc".index(k) % 2)
    assert [(s["seen"], s["watermark"]) for s in new] == [({"a": [1], "c": [3]}, 9), ({"b": [2]}, 9)]
