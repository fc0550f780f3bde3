"""One NEXMark query as a Bytewax dataflow, run in Bytewax's own venv (``python -I bytewax_job.py QUERY DATA OUT``).

One worker. The source reads the data set's Parquet files with pyarrow (only the columns the query
needs) and replays the events in event order, persons before auctions before bids within a millisecond
(the order the generator made them in, up to the lead of a few ids), as ``(kind, record)`` pairs; a
sink writes the result as JSON lines under OUT (``part-<worker>.jsonl``).

Event time is each record's ``dateTime`` through an EventClock whose system clock stands still, so a
key's watermark is the newest event time it has seen less 4 s (no system-time drift: replaying a file is
far faster than the events' own pace, and Bytewax's clocks are per key; the 4 s, the suite's watermark
delay, covers the streams split from one source batch reaching a join in either order), and every window
closes at the end of input at the latest. The queries, with stram.nexmark.oracle's semantics:

- q0-q2: map and filter; q3: ``join`` (product, emitted at the end) of category-10 auctions by seller with
  OR/ID/CA persons by id;
- q4/q9: ``fold_final`` per auction of its auction record and its best candidate bid (dateTime within
  [auction dateTime, expires], price >= reserve; highest price, then earliest, lowest bidder, smallest
  extra); q4 then averages per category with another ``fold_final``;
- q5: ``fold_window`` over SlidingWindower(10 s, 2 s) of bid counts per auction, the top ones kept;
  q7: ``fold_window`` over TumblingWindower(10 s) keeping the bids at the window's top price;
- q8: ``join_window`` over TumblingWindower(10 s) of persons by id with auctions by seller;
- q11: ``fold_window`` over SessionWindower(10 s) per bidder (count, first and last time).

Window bounds come from the window ids (Bytewax's sliding and tumbling windows open at
``align_to + offset * id``; align_to is the epoch). This file imports nothing from stram.
"""

import argparse
import json
import os
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
KINDS = ("person", "auction", "bid")
BATCH = 10_000
BID5 = ["auction", "bidder", "price", "dateTime", "extra"]
AUCTION = ["id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller",
           "category", "extra"]
#: the columns each query reads
NEEDS = {
    "q0": {"bid": BID5}, "q1": {"bid": BID5}, "q2": {"bid": ["auction", "price", "dateTime"]},
    "q3": {"person": ["id", "name", "city", "state", "dateTime"], "auction": ["id", "seller", "category", "dateTime"]},
    "q4": {"auction": ["id", "reserve", "dateTime", "expires", "category"], "bid": ["auction", "bidder", "price",
                                                                                  "dateTime"]},
    "q5": {"bid": ["auction", "dateTime"]}, "q7": {"bid": BID5},
    "q8": {"person": ["id", "name", "dateTime"], "auction": ["seller", "dateTime"]},
    "q9": {"auction": AUCTION, "bid": BID5}, "q11": {"bid": ["bidder", "dateTime"]},
}
SECOND_MS = 1000
#: the clocks' wait (the suite's watermark delay): the streams split from one source batch (BATCH events,
#: a second of event time at the suite's rate) may reach a join in either order
OUT_OF_ORDERNESS = timedelta(seconds=4)


def merged_order(tables: dict) -> tuple:
    """(kind index, row) of every record of ``tables`` in event order (time, then person/auction/bid)."""
    times, ranks, rows = [], [], []
    for rank, kind in enumerate(KINDS):
        if kind in tables:
            t = tables[kind].column("dateTime").to_numpy()
            times.append(t)
            ranks.append(np.full(len(t), rank, dtype=np.int8))
            rows.append(np.arange(len(t), dtype=np.int64))
    time_, rank_, row_ = (np.concatenate(x) for x in (times, ranks, rows))
    order = np.lexsort((rank_, time_))
    return rank_[order], row_[order]


def event_batches(data: str, needs: dict):
    """Lists of (kind, record dict) in event order, BATCH at a time."""
    tables = {kind: pq.read_table(os.path.join(data, f"{kind}.parquet"), columns=cols) for kind, cols in needs.items()}
    if len(tables) == 1:
        kind, table = next(iter(tables.items()))
        for batch in table.to_batches(BATCH):
            yield [(kind, rec) for rec in batch.to_pylist()]
        return
    ranks, rows = merged_order(tables)
    for first in range(0, len(ranks), BATCH):
        r, w = ranks[first:first + BATCH], rows[first:first + BATCH]
        out = [None] * len(r)
        for rank, kind in enumerate(KINDS):
            at = np.flatnonzero(r == rank)
            if len(at):
                recs = tables[kind].take(pa.array(w[at])).to_pylist()
                for pos, rec in zip(at.tolist(), recs):
                    out[pos] = (kind, rec)
        yield out


def build_flow(query: str, data: str, out: str):
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.operators import windowing as win
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class EventsPartition(StatelessSourcePartition):
        def __init__(self, batches):
            self.batches = batches

        def next_batch(self):
            return next(self.batches)      # StopIteration at the end: the source is done

    class EventsSource(DynamicSource):
        def build(self, step_id, worker_index, worker_count):
            return EventsPartition(event_batches(data, NEEDS[query]) if worker_index == 0 else iter(()))

    class JsonPartition(StatelessSinkPartition):
        def __init__(self, path):
            self.file = open(path, "w")

        def write_batch(self, items):
            self.file.write("".join(json.dumps(item) + "\n" for item in items))

        def close(self):
            self.file.close()

    class JsonLinesSink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return JsonPartition(os.path.join(out, f"part-{worker_index}.jsonl"))

    frozen = EPOCH
    clock = win.EventClock(lambda rec: EPOCH + timedelta(milliseconds=rec["dateTime"]), OUT_OF_ORDERNESS,
                           now_getter=lambda: frozen, to_system_utc=lambda _: None)

    def window_ms(seconds):
        return timedelta(seconds=seconds), seconds * SECOND_MS

    flow = Dataflow(f"nexmark-{query}")
    events = op.input("events", flow, EventsSource())

    def kind(name):
        return op.map(f"{name}-record", op.filter(f"{name}-only", events, lambda e: e[0] == name), lambda e: e[1])

    if query == "q0":
        rows = kind("bid")
    elif query == "q1":
        rows = op.map("euro", kind("bid"), lambda b: {**b, "price": b["price"] * 908 / 1000})
    elif query == "q2":
        picked = op.filter("mod", kind("bid"), lambda b: b["auction"] % 123 == 0)
        rows = op.map("fields", picked, lambda b: {"auction": b["auction"], "price": b["price"]})
    elif query == "q3":
        people = op.filter("state", kind("person"), lambda p: p["state"] in ("OR", "ID", "CA"))
        sales = op.filter("category", kind("auction"), lambda a: a["category"] == 10)
        joined = op.join("join", op.key_on("pkey", people, lambda p: str(p["id"])),
                         op.key_on("akey", sales, lambda a: str(a["seller"])), insert_mode="product", emit_mode="final")
        both = op.filter("inner", joined, lambda kv: kv[1][0] is not None and kv[1][1] is not None)
        rows = op.map("fields", both, lambda kv: {"name": kv[1][0]["name"], "city": kv[1][0]["city"],
                                                  "state": kv[1][0]["state"], "id": kv[1][1]["id"]})
    elif query in ("q4", "q9"):
        by_auction = op.key_on("by-auction", op.filter("ab", events, lambda e: e[0] != "person"),
                               lambda e: str(e[1]["id"] if e[0] == "auction" else e[1]["auction"]))

        def fold(state, event):
            name, rec = event
            if name == "auction":
                state[0] = rec
                return state
            a = state[0]
            if a is not None and a["dateTime"] <= rec["dateTime"] <= a["expires"] and rec["price"] >= a["reserve"]:
                rank = (-rec["price"], rec["dateTime"], rec["bidder"], rec.get("extra", ""))
                if state[1] is None or rank < state[1][0]:
                    state[1] = (rank, rec)
            return state

        won = op.filter("won", op.fold_final("winning", by_auction, lambda: [None, None], fold),
                        lambda kv: kv[1][1] is not None)
        if query == "q9":
            rows = op.map("fields", won, lambda kv: {**kv[1][0], "auction": kv[1][1][1]["auction"],
                                                     "bidder": kv[1][1][1]["bidder"], "price": kv[1][1][1]["price"],
                                                     "bid_dateTime": kv[1][1][1]["dateTime"],
                                                     "bid_extra": kv[1][1][1]["extra"]})
        else:
            prices = op.map("price", won, lambda kv: (kv[1][0]["category"], kv[1][1][1]["price"]))
            by_cat = op.key_on("by-category", prices, lambda cp: str(cp[0]))
            sums = op.fold_final("average", by_cat, lambda: [0, 0],
                                 lambda s, cp: [s[0] + cp[1], s[1] + 1])
            rows = op.map("fields", sums, lambda kv: {"id": int(kv[0]), "final": kv[1][0] // kv[1][1]})
    elif query == "q5":
        size, size_ms = window_ms(10)
        slide, slide_ms = window_ms(2)

        def count(acc, bid):
            acc[bid["auction"]] = acc.get(bid["auction"], 0) + 1
            return acc

        def merge(a, b):
            for k, v in b.items():
                a[k] = a.get(k, 0) + v
            return a

        counted = win.fold_window("counts", op.key_on("all", kind("bid"), lambda _: "all"), clock,
                                  win.SlidingWindower(size, slide, EPOCH), dict, count, merge)

        def hot(kv):
            wid, counts = kv[1]
            top = max(counts.values())
            return [{"auction": a, "num": n, "window_start": wid * slide_ms, "window_end": wid * slide_ms + size_ms}
                    for a, n in counts.items() if n == top]

        rows = op.flat_map("hot", counted.down, hot)
    elif query == "q7":
        size, size_ms = window_ms(10)

        def keep_top(acc, bid):
            if bid["price"] > acc[0]:
                acc[0], acc[1] = bid["price"], [bid]
            elif bid["price"] == acc[0]:
                acc[1].append(bid)
            return acc

        def merge_top(a, b):
            return a if a[0] > b[0] else b if b[0] > a[0] else [a[0], a[1] + b[1]]

        tops = win.fold_window("top", op.key_on("all", kind("bid"), lambda _: "all"), clock,
                               win.TumblingWindower(size, EPOCH), lambda: [-1, []], keep_top, merge_top)
        rows = op.flat_map("bids", tops.down, lambda kv: [
            {**b, "window_start": kv[1][0] * size_ms, "window_end": kv[1][0] * size_ms + size_ms} for b in kv[1][1][1]])
    elif query == "q8":
        size, size_ms = window_ms(10)
        joined = win.join_window("join", clock, win.TumblingWindower(size, EPOCH),
                                 op.key_on("pkey", kind("person"), lambda p: str(p["id"])),
                                 op.key_on("akey", kind("auction"), lambda a: str(a["seller"])),
                                 insert_mode="last", emit_mode="final")
        both = op.filter("inner", joined.down, lambda kv: kv[1][1][0] is not None and kv[1][1][1] is not None)
        rows = op.map("fields", both, lambda kv: {
            "id": kv[1][1][0]["id"], "name": kv[1][1][0]["name"], "stime": kv[1][0] * size_ms,
            "window_start": kv[1][0] * size_ms, "window_end": kv[1][0] * size_ms + size_ms})
    elif query == "q11":
        gap, gap_ms = window_ms(10)

        def add(acc, bid):
            t = bid["dateTime"]
            return [acc[0] + 1, min(acc[1], t), max(acc[2], t)]

        def merge_sessions(a, b):
            return [a[0] + b[0], min(a[1], b[1]), max(a[2], b[2])]

        sessions = win.fold_window("sessions", op.key_on("bidder", kind("bid"), lambda b: str(b["bidder"])), clock,
                                   win.SessionWindower(gap), lambda: [0, 2 ** 62, -2 ** 62], add, merge_sessions)
        rows = op.map("fields", sessions.down, lambda kv: {
            "bidder": int(kv[0]), "bid_count": kv[1][1][0], "starttime": kv[1][1][1], "endtime": kv[1][1][2] + gap_ms,
            "window_start": kv[1][1][1], "window_end": kv[1][1][2] + gap_ms})
    else:
        raise SystemExit(f"unknown query {query}")
    op.output("out", rows, JsonLinesSink())
    return flow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query", choices=sorted(NEEDS))
    parser.add_argument("data")
    parser.add_argument("out")
    args = parser.parse_args()
    from bytewax.testing import run_main
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    run_main(build_flow(args.query, args.data, args.out))
    print(f"bytewax {args.query}: {time.time() - started:.2f} s")


if __name__ == "__main__":
    main()
