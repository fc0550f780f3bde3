"""The oracle's answers equal a second, naive computation (plain loops) of each query's stated meaning.

Two data sets: a tiny hand-made one whose rows sit on the edges the semantics decide (a bid at an
auction's start and at its expiry, under the reserve, price ties, a bid at exactly a window's end,
session gaps of exactly 10 s and 10 s + 1 ms), and a generated one at a low rate (many windows).
"""

from __future__ import annotations

import json
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stram.nexmark import generator, oracle
from stram.nexmark.__main__ import main
from stram.nexmark.model import SCHEMAS, GeneratorConfig

B = 1_700_000_000_000   # a multiple of 10 s


def person(id, name, state, t, city="Town"):
    return {"id": id, "name": name, "emailAddress": "x@y.com", "creditCard": "0000 0000 0000 0000", "city": city,
            "state": state, "dateTime": B + t, "extra": ""}


def auction(id, seller, category, t, expires, reserve):
    return {"id": id, "itemName": f"item{id}", "description": "d", "initialBid": 1, "reserve": reserve,
            "dateTime": B + t, "expires": B + expires, "seller": seller, "category": category, "extra": f"e{id}"}


def bid(auction, bidder, price, t, extra=""):
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google", "url": "u", "dateTime": B + t,
            "extra": extra or f"b{auction}-{bidder}-{t}"}


PERSONS = [person(1000, "Alice", "OR", 0), person(1001, "Bob", "CA", 5000), person(1002, "Carl", "WA", 12000),
           person(1003, "Dana", "ID", 9999, city="Boise")]
AUCTIONS = [auction(2000, 1000, 10, 1000, 6000, 100), auction(2001, 1001, 10, 10000, 20000, 500),
            auction(2002, 1002, 10, 13000, 14000, 50), auction(2003, 1003, 11, 9999, 30000, 1000),
            auction(2004, 1000, 10, 2000, 3000, 10 ** 6)]
BIDS = sorted([
    bid(2000, 1001, 300, 1000), bid(2000, 1002, 300, 900), bid(2000, 1003, 300, 6000), bid(2000, 1001, 99, 2000),
    bid(2000, 1002, 5000, 9999), bid(2004, 1000, 5000, 2500),
    bid(2001, 1003, 700, 15000), bid(2001, 1000, 700, 15000), bid(2001, 1002, 800, 20001),
    bid(2002, 1001, 60, 14000), bid(2003, 1001, 5000, 10000), bid(2091, 1001, 42, 25000),
    bid(2003, 1004, 1000, 30000), bid(2003, 1004, 1000, 40000), bid(2003, 1004, 7, 50001),
], key=lambda b: b["dateTime"])


def write(dir, persons, auctions, bids):
    dir.mkdir()
    for kind, rows in (("person", persons), ("auction", auctions), ("bid", bids)):
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[kind]), dir / f"{kind}.parquet")
    return dir


# ---- the naive second computation -------------------------------------------------------------------

def winners(auctions, bids):
    by_auction = defaultdict(list)
    for b in bids:
        by_auction[b["auction"]].append(b)
    out = {}
    for a in auctions:
        ok = [b for b in by_auction[a["id"]]
              if a["dateTime"] <= b["dateTime"] <= a["expires"] and b["price"] >= a["reserve"]]
        if ok:
            out[a["id"]] = min(ok, key=lambda b: (-b["price"], b["dateTime"], b["bidder"], b["extra"]))
    return out


def naive(query, persons, auctions, bids):
    cols = ["auction", "bidder", "price", "dateTime", "extra"]
    if query == "q0":
        return [{k: b[k] for k in cols} for b in bids]
    if query == "q1":
        return [{**{k: b[k] for k in cols}, "price": b["price"] * 908 / 1000} for b in bids]
    if query == "q2":
        return [{"auction": b["auction"], "price": b["price"]} for b in bids if b["auction"] % 123 == 0]
    if query == "q3":
        rows = [{"name": p["name"], "city": p["city"], "state": p["state"], "id": a["id"]}
                for a in auctions for p in persons
                if a["seller"] == p["id"] and a["category"] == 10 and p["state"] in ("OR", "ID", "CA")]
        return sorted(rows, key=lambda r: r["id"])
    if query == "q4":
        cat = {a["id"]: a["category"] for a in auctions}
        finals = defaultdict(list)
        for aid, b in winners(auctions, bids).items():
            finals[cat[aid]].append(b["price"])
        return [{"id": c, "final": sum(v) // len(v)} for c, v in sorted(finals.items())]
    if query == "q5":
        counts = defaultdict(lambda: defaultdict(int))
        for b in bids:
            t = b["dateTime"]
            for start in range(t - t % 2000 - 8000, t + 1, 2000):
                if start <= t < start + 10000:
                    counts[start][b["auction"]] += 1
        rows = []
        for start in sorted(counts):
            top = max(counts[start].values())
            rows += [{"auction": a, "num": n, "window_start": start, "window_end": start + 10000}
                     for a, n in sorted(counts[start].items()) if n == top]
        return rows
    if query == "q7":
        top = defaultdict(int)
        for b in bids:
            top[b["dateTime"] // 10000] = max(top[b["dateTime"] // 10000], b["price"])
        rows = [{**{k: b[k] for k in cols}, "window_start": b["dateTime"] // 10000 * 10000,
                 "window_end": b["dateTime"] // 10000 * 10000 + 10000}
                for b in bids if b["price"] == top[b["dateTime"] // 10000]]
        return sorted(rows, key=lambda r: (r["window_start"], r["dateTime"], r["auction"], r["bidder"]))
    if query == "q8":
        rows = []
        for p in persons:
            w = p["dateTime"] - p["dateTime"] % 10000
            if any(a["seller"] == p["id"] and w <= a["dateTime"] < w + 10000 for a in auctions):
                rows.append({"id": p["id"], "name": p["name"], "stime": w, "window_start": w, "window_end": w + 10000})
        return sorted(rows, key=lambda r: (r["window_start"], r["id"]))
    if query == "q9":
        win = winners(auctions, bids)
        return [{**a, "auction": win[a["id"]]["auction"], "bidder": win[a["id"]]["bidder"],
                 "price": win[a["id"]]["price"], "bid_dateTime": win[a["id"]]["dateTime"],
                 "bid_extra": win[a["id"]]["extra"]} for a in sorted(auctions, key=lambda a: a["id"]) if a["id"] in win]
    if query == "q11":
        times = defaultdict(list)
        for b in bids:
            times[b["bidder"]].append(b["dateTime"])
        rows = []
        for bidder, ts in times.items():
            ts.sort()
            first = prev = ts[0]
            count = 0
            for t in ts + [None]:
                if t is None or t - prev > 10000:
                    rows.append({"bidder": bidder, "bid_count": count, "starttime": first, "endtime": prev + 10000,
                                 "window_start": first, "window_end": prev + 10000})
                    first, count = t, 0
                count += 1
                prev = t
        return sorted(rows, key=lambda r: (r["window_start"], r["bidder"]))
    raise AssertionError(query)


QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write(tmp_path_factory.mktemp("tiny") / "data", PERSONS, AUCTIONS, BIDS)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "data"
    generator.write_dataset(str(out), 30_000, GeneratorConfig(seed=21, first_event_rate=200))
    tables = {k: pq.read_table(out / f"{k}.parquet").to_pylist() for k in ("person", "auction", "bid")}
    return out, tables


@pytest.mark.parametrize("query", QUERIES)
def test_tiny_data_set(tiny, query):
    got = oracle.answer(query, str(tiny))
    assert got == naive(query, PERSONS, AUCTIONS, BIDS)
    assert got, f"{query}: the hand-made data set should give rows"


@pytest.mark.parametrize("query", QUERIES)
def test_generated_data_set(generated, query):
    out, t = generated
    got = oracle.answer(query, str(out))
    want = naive(query, t["person"], t["auction"], t["bid"])
    if query in ("q0", "q1", "q2"):   # event order
        assert got == want
    else:
        key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key)
    assert len(got) > (0 if query in ("q4", "q7") else 10)


def test_edges_of_the_tiny_data_set_are_exercised(tiny):
    """The hand-made rows really sit on the edges (so the comparisons above decide them)."""
    q9 = {r["id"]: r for r in oracle.answer("q9", str(tiny))}
    assert set(q9) == {2000, 2001, 2002, 2003}                  # 2004: every bid under the reserve
    assert q9[2002]["bid_dateTime"] == AUCTIONS[2]["expires"]  # a bid at expiry counts
    sessions = [r for r in oracle.answer("q11", str(tiny)) if r["bidder"] == 1004]
    assert [r["bid_count"] for r in sessions] == [2, 1]       # 10 s apart: one session; 10 s + 1 ms: two


def test_oracle_cli_writes_json_lines(generated, tmp_path):
    out, _ = generated
    target = tmp_path / "q5.jsonl"
    assert main(["oracle", "q5", "--data", str(out), "--out", str(target)]) == 0
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert rows == oracle.answer("q5", str(out))


def test_oracle_refuses_unknown_queries_and_missing_data(tmp_path):
    with pytest.raises(ValueError, match="unknown query"):
        oracle.answer("q6", str(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["oracle", "q2", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "x.jsonl")])
    assert "no data set directory" in str(e.value)
