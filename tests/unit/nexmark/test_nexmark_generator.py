"""The NEXMark generator keeps the suite's rules: proportions, ids, times, skew, schema, determinism.

Each rule is checked against a reconstruction in plain Python loops over the events in order
(which person/auction exists when), not against the generator's own helpers.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest

from stram.nexmark import generator
from stram.nexmark.__main__ import main
from stram.nexmark.model import GeneratorConfig

# the interface's fields, in order, with their types
FIELDS = {
    "person": [("id", "int64"), ("name", "string"), ("emailAddress", "string"), ("creditCard", "string"),
               ("city", "string"), ("state", "string"), ("dateTime", "int64"), ("extra", "string")],
    "auction": [("id", "int64"), ("itemName", "string"), ("description", "string"), ("initialBid", "int64"),
                ("reserve", "int64"), ("dateTime", "int64"), ("expires", "int64"), ("seller", "int64"),
                ("category", "int64"), ("extra", "string")],
    "bid": [("auction", "int64"), ("bidder", "int64"), ("price", "int64"), ("channel", "string"),
            ("url", "string"), ("dateTime", "int64"), ("extra", "string")],
}


def in_order(tables: dict, start: int, stop: int, total: int = 50, persons: int = 1, auctions: int = 3):
    """[(event number, kind, record)] by merging the tables by the 1:3:46 pattern, computed here."""
    rows = {k: iter(t.to_pylist()) for k, t in tables.items()}
    out = []
    for n in range(start, stop):
        r = n % total
        kind = "person" if r < persons else "auction" if r < persons + auctions else "bid"
        out.append((n, kind, next(rows[kind])))
    for it in rows.values():
        assert next(it, None) is None
    return out


@pytest.mark.parametrize("start", [0, 17])
def test_exactly_1_3_46_per_50_events(start):
    cfg = GeneratorConfig(seed=3)
    stop = start + 50 * 40
    tables = generator.generate(cfg, start, stop)
    assert {k: t.num_rows for k, t in tables.items()} == {"person": 40, "auction": 120, "bid": 1840}
    events = in_order(tables, start, stop)
    for block in range(-(-start // 50) * 50, stop - 49, 50):
        kinds = [kind for n, kind, _ in events if block <= n < block + 50]
        assert kinds == ["person"] + ["auction"] * 3 + ["bid"] * 46
    assert generator.count_kinds(cfg, start, stop) == {"person": 40, "auction": 120, "bid": 1840}


def test_other_proportions():
    cfg = GeneratorConfig(person_proportion=2, auction_proportion=5, bid_proportion=13)
    tables = generator.generate(cfg, 0, 400)
    assert {k: t.num_rows for k, t in tables.items()} == {"person": 40, "auction": 100, "bid": 260}
    assert tables["person"].column("id").to_pylist() == list(range(1000, 1040))
    assert tables["auction"].column("id").to_pylist() == list(range(1000, 1100))


def test_same_seed_same_data_other_seed_other_data():
    a = generator.generate(GeneratorConfig(seed=7), 0, 3000)
    b = generator.generate(GeneratorConfig(seed=7), 0, 3000)
    c = generator.generate(GeneratorConfig(seed=8), 0, 3000)
    for kind in a:
        assert a[kind].equals(b[kind])
        assert not a[kind].equals(c[kind])


@pytest.mark.parametrize("first,end", [(0, 1), (1, 4), (49, 51), (1234, 2345), (4999, 5000), (3000, 3000)])
def test_any_range_equals_the_slice_of_a_full_run(first, end):
    cfg = GeneratorConfig(seed=11)
    full = in_order(generator.generate(cfg, 0, 5000), 0, 5000)
    part = in_order(generator.generate(cfg, first, end), first, end)
    assert part == full[first:end]


def test_iter_events_from_any_index_and_batches_agree():
    cfg = GeneratorConfig(seed=5)
    full = in_order(generator.generate(cfg, 0, 2000), 0, 2000)
    assert list(generator.iter_events(cfg, 777, 2000, batch_events=97)) == full[777:]
    stream = generator.iter_events(cfg, 1500, None, batch_events=64)
    assert [next(stream) for _ in range(500)] == full[1500:]
    glued = []
    for first, end, tables in generator.batches(cfg, 0, 2000, batch_events=333):
        glued += in_order(tables, first, end)
    assert glued == full


def _existence_check(cfg: GeneratorConfig, events: list) -> dict:
    """Replays the events in order; returns how far past the newest existing id each reference reached."""
    newest_person = newest_auction = None
    ahead = Counter()
    for n, kind, rec in events:
        if kind == "person":
            assert rec["id"] == (newest_person or 999) + 1
            newest_person = rec["id"]
        elif kind == "auction":
            assert rec["id"] == (newest_auction or 999) + 1
            newest_auction = rec["id"]
            ahead["seller"] = max(ahead["seller"], rec["seller"] - newest_person)
            assert rec["seller"] >= 1000
        else:
            ahead["auction"] = max(ahead["auction"], rec["auction"] - newest_auction)
            ahead["bidder"] = max(ahead["bidder"], rec["bidder"] - newest_person)
            assert 1000 <= rec["auction"] and 1000 <= rec["bidder"]
            # a bid names an auction among the newest num_in_flight (or a hot one: the first of its block of 100)
            hot = (newest_auction - 1000) // 100 * 100 + 1000
            assert rec["auction"] == hot or rec["auction"] >= newest_auction - cfg.num_in_flight_auctions
    return ahead


def test_references_exist_at_the_event_without_leads():
    cfg = GeneratorConfig(seed=2, person_id_lead=0, auction_id_lead=0)
    ahead = _existence_check(cfg, in_order(generator.generate(cfg, 0, 60_000), 0, 60_000))
    assert ahead["auction"] <= 0 and ahead["seller"] <= 0
    # the hot bidder is the second person of the newest block of 100: one ahead just after a block starts
    assert ahead["bidder"] <= 1


def test_references_reach_at_most_the_lead_ahead():
    cfg = GeneratorConfig(seed=2)
    ahead = _existence_check(cfg, in_order(generator.generate(cfg, 0, 60_000), 0, 60_000))
    assert 0 < ahead["auction"] <= cfg.auction_id_lead
    assert 0 < ahead["seller"] <= cfg.person_id_lead
    assert 0 < ahead["bidder"] <= cfg.person_id_lead


def test_auction_ids_refer_to_auctions_of_the_data_set():
    cfg = GeneratorConfig(seed=4)
    tables = generator.generate(cfg, 0, 20_000)
    auctions = set(tables["auction"].column("id").to_pylist())
    persons = set(tables["person"].column("id").to_pylist())
    # all but the last few lead ids (not generated yet when the data set ends) exist
    assert {a for a in tables["bid"].column("auction").to_pylist() if a not in auctions} <= \
        set(range(max(auctions) + 1, max(auctions) + 1 + cfg.auction_id_lead))
    assert {p for p in tables["auction"].column("seller").to_pylist() if p not in persons} <= \
        set(range(max(persons) + 1, max(persons) + 1 + cfg.person_id_lead))


@pytest.mark.parametrize("rate", [10_000, 1000, 2500])
def test_timestamps_follow_the_rate(rate):
    cfg = GeneratorConfig(seed=1, first_event_rate=rate, base_time_ms=5_000_000)
    events = in_order(generator.generate(cfg, 0, 7000), 0, 7000)
    times = [rec["dateTime"] for _, _, rec in events]
    assert times == [5_000_000 + n * 1_000_000 // rate // 1000 for n in range(7000)]
    assert all(a <= b for a, b in zip(times, times[1:]))
    for _, kind, rec in events:
        if kind == "auction":
            assert rec["expires"] > rec["dateTime"]


def test_hot_keys_are_skewed():
    cfg = GeneratorConfig(seed=9)
    tables = generator.generate(cfg, 0, 100_000)
    bids = tables["bid"].to_pydict()
    auctions = tables["auction"].to_pydict()
    share = lambda values, pred: sum(1 for v in values if pred(v)) / len(values)  # noqa: E731
    # hot auctions/sellers: first of a block of 100; hot bidders: second. P(hot) = 1 - 1/ratio, plus chance
    assert share(bids["auction"], lambda a: (a - 1000) % 100 == 0) > 0.45
    assert share(bids["bidder"], lambda b: (b - 1000) % 100 == 1) > 0.7
    assert share(auctions["seller"], lambda s: (s - 1000) % 100 == 0) > 0.7
    top_auction, top_count = Counter(bids["auction"]).most_common(1)[0]
    assert top_count > 50 * len(bids["auction"]) / len(set(bids["auction"]))
    assert share(bids["channel"], lambda c: c in ("Google", "Facebook", "Baidu", "Apple")) > 0.45


def test_values_sizes_and_lists():
    cfg = GeneratorConfig(seed=6)
    t = {k: v.to_pydict() for k, v in generator.generate(cfg, 0, 50_000).items()}
    assert set(t["auction"]["category"]) == {10, 11, 12, 13, 14}
    assert set(t["person"]["state"]) <= {"AZ", "CA", "ID", "OR", "WA", "WY"}
    prices = t["bid"]["price"] + t["auction"]["initialBid"]
    assert min(prices) >= 100 and max(prices) <= 100_000_000
    assert all(r > i for r, i in zip(t["auction"]["reserve"], t["auction"]["initialBid"]))
    for email in t["person"]["emailAddress"]:
        assert email.endswith(".com") and email.count("@") == 1
    assert all(len(c) == 19 and c.replace(" ", "").isdigit() for c in t["person"]["creditCard"])
    # padding brings the records to the configured average sizes (ints count 8 bytes)
    bid_size = np.mean([32 + len(e) for e in t["bid"]["extra"]])
    assert abs(bid_size - 100) < 3
    auction_size = np.mean([48 + len(a) + len(b) + len(e) for a, b, e in
                            zip(t["auction"]["itemName"], t["auction"]["description"], t["auction"]["extra"])])
    assert abs(auction_size - 500) < 10
    person = t["person"]
    person_size = np.mean([8 + sum(len(person[f][i]) for f in ("name", "emailAddress", "creditCard", "city",
                                                                "state", "extra")) for i in range(len(person["id"]))])
    assert abs(person_size - 200) < 8


def test_dataset_files_schema_and_meta(tmp_path):
    out = tmp_path / "data"
    assert main(["generate", "--events", "5000", "--seed", "12", "--out", str(out), "--rate", "1000",
                 "--base-time", "0"]) == 0
    expect = generator.generate(GeneratorConfig(seed=12, first_event_rate=1000, base_time_ms=0), 0, 5000)
    for kind, fields in FIELDS.items():
        table = pq.read_table(out / f"{kind}.parquet")
        assert [(f.name, str(f.type)) for f in table.schema] == fields
        assert table.equals(expect[kind])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["events"] == 5000 and meta["seed"] == 12 and meta["rate"] == 1000 and meta["base_time_ms"] == 0
    assert meta["counts"] == {"person": 100, "auction": 300, "bid": 4600}
    assert sorted(p.name for p in out.iterdir()) == ["auction.parquet", "bid.parquet", "meta.json", "person.parquet"]


def test_generate_refuses_a_non_empty_directory_unless_forced(tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(SystemExit) as e:
        main(["generate", "--events", "100", "--out", str(out)])
    assert "not empty" in str(e.value) and "--force" in str(e.value)
    assert main(["generate", "--events", "100", "--out", str(out), "--force"]) == 0
    assert (out / "keep.txt").exists() and pq.read_table(out / "bid.parquet").num_rows == 92


def test_run_refuses_a_directory_without_a_data_set(tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["run", "q5", "--data", str(tmp_path), "--out", str(tmp_path / "o")])
    assert "holds no person.parquet" in str(e.value)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="first_event_rate"):
        GeneratorConfig(first_event_rate=0)
    with pytest.raises(SystemExit):
        main(["generate", "--events", "-5", "--out", "/nonexistent/x"])


def test_an_interrupted_write_leaves_no_files(tmp_path):
    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generator.write_dataset(str(tmp_path / "d"), 2000, GeneratorConfig(), progress=interrupt, batch_events=500)
    assert list((tmp_path / "d").iterdir()) == []


@pytest.mark.parametrize("define, says", [("NOPE", "expected KEY=VALUE"),
                                          ("STREAMING_WINDOW_SIZE_MILLIS=abc", "expected an integer > 0")])
def test_run_says_why_stram_launch_refused_the_query(tmp_path, monkeypatch, define, says):
    """The runner launches in its own process: launch's refusal comes back as its message, nothing launched."""
    monkeypatch.setenv("STRAM_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    generator.write_dataset(str(data), 200, GeneratorConfig())
    with pytest.raises(SystemExit) as e:
        main(["run", "q2", "--data", str(data), "--out", str(tmp_path / "o"), "-D", define])
    assert "stram launch refused the query" in str(e.value) and says in str(e.value)
    assert not (tmp_path / "home" / "apps").exists() or not list((tmp_path / "home" / "apps").iterdir())
