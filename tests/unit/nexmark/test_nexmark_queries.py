"""The NEXMark queries' flows: they compile, agree with the oracle's constants, give a source stream
one partition key only, and their folds pick what the oracle's rules pick."""

from __future__ import annotations

import random

import pytest

from stram.common.imports import load_class
from stram.flow import Flow
from stram.nexmark import oracle, queries
from stram.nexmark.runner import build


def test_the_constants_are_the_oracles():
    for name in ("Q5_SIZE_MS", "Q5_SLIDE_MS", "Q7_SIZE_MS", "Q8_SIZE_MS", "Q11_GAP_MS", "Q2_MODULUS", "Q3_CATEGORY",
                 "Q3_STATES", "Q1_RATE_NUM", "Q1_RATE_DEN", "BID_OUT", "AUCTION_FIELDS"):
        assert getattr(queries, name) == getattr(oracle, name), name
    assert set(queries.QUERIES) == set(oracle.QUERIES) - {"q6", "q10"}


def keys_per_stream(spec: dict) -> dict[str, set]:
    """Per stream, the partition keys its partitioned keyed readers ask for (a stateless one asks none)."""
    out: dict[str, set] = {}
    for name, stream in spec.get("streams", {}).items():
        for sink in stream["to"]:
            op, port = sink.split(".")
            entry = spec["operators"][op]
            if entry.get("partitions", 1) > 1 and stream.get("locality") is None:
                key = load_class(entry["class"]).partition_key(entry.get("properties", {}), port)
                if key is not None:
                    out.setdefault(name, set()).add(key)
    return out


@pytest.mark.parametrize("partitions", [1, 2, 3])
def test_every_query_compiles_with_a_key_per_source_stream(tmp_path, monkeypatch, partitions):
    monkeypatch.setattr(queries, "longest_auction_ms", lambda data_dir: 1000)
    for query in queries.QUERIES:
        spec = build(query, str(tmp_path), str(tmp_path / "out"), partitions).compile()
        assert len(spec.operators) >= 2
    flow = Flow("all")
    shared = queries.Sources(flow, str(tmp_path), partitions, shared=True)
    for query in queries.QUERIES:
        queries.add_query(query, flow, str(tmp_path), str(tmp_path / query), partitions, shared)
    spec = flow.to_spec()
    flow.compile()
    if partitions > 1:
        assert all(len(keys) == 1 for keys in keys_per_stream(spec).values()), keys_per_stream(spec)
        # bids are read by auction (q5, q7, q9), by bidder (q11) and as Arrow batches (q1, q2)
        assert {"bid", "bid_by_bidder", "bid_batches"} <= set(spec["operators"])


def test_an_unknown_query_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown query 'q6'"):
        queries.add_query("q6", Flow("x"), str(tmp_path), str(tmp_path))


def test_the_winner_fold_follows_the_oracles_tie_rules():
    rnd = random.Random(5)
    auction = {"id": 1, "reserve": 50, "expires": 100}
    pairs = [{"left": auction, "right": {"price": rnd.choice([60, 70]), "dateTime": rnd.randrange(3),
                                         "bidder": rnd.randrange(3), "extra": rnd.choice("ab")}} for _ in range(40)]
    want = sorted((p["right"] for p in pairs), key=lambda b: (-b["price"], b["dateTime"], b["bidder"], b["extra"]))[0]
    best = queries._no_winner()
    for p in pairs:
        best = queries._better(best, p)
    assert best["right"] == want
    half = len(pairs) // 2
    a, b = queries._no_winner(), queries._no_winner()
    for p in pairs[:half]:
        a = queries._better(a, p)
    for p in pairs[half:]:
        b = queries._better(b, p)
    assert queries._best(a, b)["right"] == want and queries._best(a, None) is a


def test_q1_prices_are_pythons_division():
    import pyarrow as pa
    prices = [100, 101, 999_999, 12_345_678, 99_999_999, 3, 7]
    batch = pa.RecordBatch.from_pylist([{"auction": 1, "bidder": 2, "price": p, "dateTime": 0, "extra": "x",
                                         "channel": "c"} for p in prices])
    rows = queries._to_euros(batch).to_pylist()
    assert [r["price"] for r in rows] == [p * 908 / 1000 for p in prices]
    assert list(rows[0]) == oracle.BID_OUT


def test_the_cli_names_the_oracles_queries_without_importing_it():
    from stram.nexmark.__main__ import ORACLE_QUERIES
    assert set(ORACLE_QUERIES) == set(oracle.QUERIES)
