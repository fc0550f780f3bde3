"""The NEXMark queries on stram, written with the dataflow API (:mod:`stram.flow`) as a user would.

Each ``qN(flow, data_dir, out_dir, partitions)`` adds one query to ``flow``: it reads the data set's
``person``/``auction``/``bid.parquet`` (event time ``dateTime``; the generator's events are in time
order, so no out-of-orderness bound) and writes its results as JSON lines under ``out_dir``, with
the oracle's fields (:mod:`stram.nexmark.oracle` states each query's exact meaning). ``partitions``
> 1 partitions the sources and the keyed steps. Queries added to one flow with one :class:`Sources`
share its three sources (one application running several queries).

How each is built:

* q0, q1, q2: a source of Arrow batches and, for q1/q2, one step on them (pyarrow compute); the
  writer encodes each batch's rows as JSON lines column by column.
* q3: category-10 auctions and OR/ID/CA persons (selected on Arrow batches), an interval join by
  seller with bounds wider than any data set (an unwindowed join over bounded input).
* q9 (and q4): auctions interval-joined with their bids (0 .. the longest auction), filtered to
  bids by the auction's expiry at or above its reserve, then per auction a fold in a 1 ms window
  at ``expires`` (all pairs of an auction share that time, so it fires once the watermark passes
  the expiry) keeping the winner by the oracle's tie rules. q4 folds the winners per category in
  one window spanning all time: ``sum // count``. Not shared, the steps after the join run in its
  thread, partition by partition (q4's average, keyed otherwise, with one partition only).
* q5: a sliding count per auction on Arrow batches (split by auction, kept as columns per 2 s pane,
  each window's counts one table), of each table the rows with its top count, then per window
  (keyed by its start, timed at its end - 1 ms in a tumbling window of the slide) the auctions with
  the top count of all partitions.
* q7: per tumbling window the highest bids of each Arrow batch, then per window the highest of those
  (shared dict sources: per auction and window first).
* q8: auctions counted per seller in tumbling windows, joined in the same windows with persons.
* q11: sessions per bidder (each Arrow batch's bids of a bidder as its first bid, counting them, and
  its last): the oracle joins bids up to exactly the gap apart, the window operator
  those closer than its gap, so the gap is 10 s + 1 ms and the reported end 1 ms less.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from stram.flow import Flow, Stream, windows

__all__ = ["QUERIES", "Sources", "add_query", "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11",
           "longest_auction_ms", "scan_longest_auction"]

# The suite's constants, as the oracle has them (not imported from it: the containers that run these
# functions then need no pandas); tests/unit/nexmark checks that they agree.
Q5_SIZE_MS, Q5_SLIDE_MS = 10_000, 2_000
Q7_SIZE_MS = 10_000
Q8_SIZE_MS = 10_000
Q11_GAP_MS = 10_000
Q2_MODULUS = 123
Q3_CATEGORY, Q3_STATES = 10, ("OR", "ID", "CA")
Q1_RATE_NUM, Q1_RATE_DEN = 908, 1000
BID_OUT = ["auction", "bidder", "price", "dateTime", "extra"]
AUCTION_FIELDS = ["id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller",
                  "category", "extra"]

#: The event-time field of every NEXMark record.
TIME = "dateTime"
#: The sources' out-of-orderness bound: none, the generator writes events in time order. A window
#: ``[start, end)`` fires once a source has emitted an event at ``end`` + this bound or later.
OUT_OF_ORDERNESS_MS = 0
#: Interval-join bounds wider than any data set's time span: q3's join is not windowed.
UNBOUNDED_MS = 1 << 50
#: A tumbling window this long holds all of a data set (windows start at epoch 0): q4's one window.
ALL_TIME_MS = 1 << 52
#: Rows per source batch.
BATCH_ROWS = 4096
#: The alignment group of q4's, q8's and q9's sources: the auctions (and q8's persons), covering event
#: time faster than the bids, wait instead of filling the join's state. Drift: 10 s in one container,
#: which aligns its members at every call; 60 s across containers, aligned by the master at the
#: heartbeats' pace, where only q9 aligns (docs/nexmark.md, "Containers").
ALIGNMENT_GROUP = "nexmark"
MAX_DRIFT_MS, SPREAD_DRIFT_MS = 10_000, 60_000


class Sources:
    """The three sources of a flow, made on first use. ``shared``: one source per kind (reading every
    column) for several queries in one flow, else one per query reading only what it needs.

    A source's output stream is partitioned by one key for all its readers (the first partitioned
    reader's), so shared sources are shared only by readers keyed alike (``by``: the field a reader
    partitions by, None for a stateless one, which takes any).

    ``rate``: the data set is replayed at that many events per second of wall time, each kind's source
    pacing its share (its rows / all rows), so event ``i`` goes out about ``i / rate`` after the start;
    ``start_report``: the directory where the sources note when they started (ParquetInput's property).
    """

    def __init__(self, flow: Flow, data_dir: str, partitions: int = 1, shared: bool = False,
                 rate: float | None = None, start_report: str | None = None) -> None:
        self.flow = flow
        self.data_dir = data_dir
        self.partitions = partitions
        self.shared = shared
        self.rate = rate
        self.start_report = start_report
        #: (kind, arrow) -> [[key field or None, stream], ...] (shared); (kind, arrow, columns) -> stream.
        self.made: dict[tuple, Any] = {}
        #: Streams several queries derive alike (q4's and q9's winners), by name.
        self.derived: dict[str, Any] = {}

    def locality(self) -> str | None:
        """The locality of a stateless step reading a dict source: in its thread, unless the source is
        shared (a stream has one locality for all its readers, and keyed readers must not get it)."""
        return None if self.shared else "THREAD_LOCAL"

    def path(self, kind: str) -> str:
        return os.path.join(self.data_dir, f"{kind}.parquet")

    def read(self, kind: str, columns: list[str], arrow: bool = False, by: str | None = None,
             aligned: bool = False) -> Stream:
        """``kind``'s records (dicts, or Arrow batches) with at least ``columns`` (exactly them unless shared),
        for a reader partitioned by the field ``by`` (None: not partitioned by key)."""
        if not self.shared:
            key = (kind, arrow, tuple(columns))
            if key not in self.made:
                self.made[key] = self._source(kind, columns, arrow, f"{kind}_{len(self.made)}" if self.made else kind,
                                              aligned)
            return self.made[key]
        made = self.made.setdefault((kind, arrow), [])
        for entry in made:
            if by is None or entry[0] == by:
                return entry[1]
        for entry in made:
            if entry[0] is None:    # read by stateless steps only so far: this reader's key is its key
                entry[0] = by
                return entry[1]
        name = kind + ("_batches" if arrow else "") + (f"_by_{by}" if made else "")
        made.append([by, self._source(kind, None, arrow, name)])
        return made[-1][1]

    def kind_rate(self, kind: str) -> float | None:
        """``kind``'s share of the replay rate: rate * its rows / the data set's rows (None: no rate)."""
        if self.rate is None:
            return None
        import pyarrow.parquet as pq
        rows = {k: pq.ParquetFile(self.path(k)).metadata.num_rows for k in ("person", "auction", "bid")}
        return self.rate * rows[kind] / max(sum(rows.values()), 1) or None

    def _source(self, kind: str, columns: list[str] | None, arrow: bool, name: str, aligned: bool = False) -> Stream:
        timed = columns is None or TIME in columns
        return self.flow.read_parquet(self.path(kind), timestamp_field=TIME if timed else None,
                                      out_of_orderness_ms=OUT_OF_ORDERNESS_MS, columns=columns, batch_rows=BATCH_ROWS,
                                      arrow=arrow, partitions=self.partitions, name=name, rate=self.kind_rate(kind),
                                      start_report=self.start_report if self.rate is not None else None,
                                      align=ALIGNMENT_GROUP if aligned and timed else None,
                                      max_drift_ms=(MAX_DRIFT_MS if self.partitions == 1 else SPREAD_DRIFT_MS)
                                      if aligned and timed else None)


def _parts(partitions: int) -> int | None:
    return partitions if partitions > 1 else None


def _write(stream: Stream, out_dir: str, partitions: int, name: str) -> None:
    """Results as JSON lines under ``out_dir``, a writer per partition of the last step (in its thread)."""
    stream.write_jsonl(out_dir, name=name, partitions=_parts(partitions), locality="THREAD_LOCAL")


# ---------------------------------------------------------------- stateless: q0, q1, q2

def q0(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Every bid, as it is."""
    src = sources or Sources(flow, data_dir, partitions)
    if src.shared:
        bids = src.read("bid", BID_OUT).map(_project_bid, name="q0_project", partitions=_parts(partitions))
    else:  # the Arrow batches as they are read: the writer encodes them column by column
        bids = src.read("bid", BID_OUT, arrow=True)
    _write(bids, out_dir, partitions, "q0_out")


def _project_bid(bid: dict) -> dict:
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"], "dateTime": bid["dateTime"],
            "extra": bid["extra"]}


def q1(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Every bid with its price in euros: price * 908 / 1000 as a double (computed per Arrow batch)."""
    src = sources or Sources(flow, data_dir, partitions)
    bids = src.read("bid", BID_OUT, arrow=True)
    euros = bids.map(_to_euros, name="q1_euros", partitions=_parts(partitions), locality="THREAD_LOCAL")
    _write(euros, out_dir, partitions, "q1_out")


def _to_euros(batch: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc
    batch = batch.select(BID_OUT)
    # the integer product is exact in a double (prices < 2**53 / 908), so one rounding: Python's price * 908 / 1000
    price = pc.divide(pc.multiply(batch.column("price"), Q1_RATE_NUM).cast(pa.float64()), float(Q1_RATE_DEN))
    return batch.set_column(BID_OUT.index("price"), "price", price)


def q2(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Auction and price of the bids on every 123rd auction (filtered per Arrow batch)."""
    src = sources or Sources(flow, data_dir, partitions)
    bids = src.read("bid", ["auction", "price"], arrow=True)
    picked = bids.map(_selected, name="q2_select", partitions=_parts(partitions), locality="THREAD_LOCAL")
    _write(picked, out_dir, partitions, "q2_out")


def _selected(batch: Any) -> Any:
    import pyarrow.compute as pc
    batch = batch.select(["auction", "price"])
    return batch.filter(pc.equal(pc.modulo(batch.column("auction"), Q2_MODULUS), 0))


# ---------------------------------------------------------------- q3: an unwindowed join

def q3(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Category-10 auctions of sellers in OR, ID or CA: the seller's name, city, state and the auction's id."""
    src = sources or Sources(flow, data_dir, partitions)
    p = _parts(partitions)
    if src.shared:  # dict sources other queries read too
        auctions = src.read("auction", ["id", "seller", "category", TIME]) \
            .filter(_in_category, name="q3_category", partitions=p, locality=src.locality())
        persons = src.read("person", ["id", "name", "city", "state", TIME]) \
            .filter(_in_states, name="q3_states", partitions=p, locality=src.locality())
    else:  # the selections on Arrow batches: only the rows that can join become dicts
        auctions = src.read("auction", ["id", "seller", "category", TIME], arrow=True) \
            .flat_map(_category_rows, name="q3_category", partitions=p, locality="THREAD_LOCAL")
        persons = src.read("person", ["id", "name", "city", "state", TIME], arrow=True) \
            .flat_map(_state_rows, name="q3_states", partitions=p, locality="THREAD_LOCAL")
    pairs = auctions.key_by("seller").interval_join(persons.key_by("id"), -UNBOUNDED_MS, UNBOUNDED_MS, name="q3_join",
                                                    partitions=p)
    _write(pairs.map(_q3_row, name="q3_row", partitions=p, locality="THREAD_LOCAL"), out_dir, partitions, "q3_out")


def _category_rows(batch: Any) -> list[dict]:
    import pyarrow.compute as pc
    return batch.filter(pc.equal(batch.column("category"), Q3_CATEGORY)).to_pylist()


def _state_rows(batch: Any) -> list[dict]:
    import pyarrow as pa
    import pyarrow.compute as pc
    return batch.filter(pc.is_in(batch.column("state"), value_set=pa.array(Q3_STATES))).to_pylist()


def _in_category(auction: dict) -> bool:
    return auction["category"] == Q3_CATEGORY


def _in_states(person: dict) -> bool:
    return person["state"] in Q3_STATES


def _q3_row(pair: dict) -> dict:
    person = pair["right"]
    return {"name": person["name"], "city": person["city"], "state": person["state"], "id": pair["left"]["id"]}


# ---------------------------------------------------------------- q9 and q4: winning bids

def longest_auction_ms(data_dir: str) -> int:
    """The longest time an auction of the data set is open (expires - dateTime): q9's join bound.

    Computed in a child process: the process building the flow (``python -m stram.nexmark run``) then
    never imports pyarrow nor holds the column, and it lives as long as the query runs."""
    import subprocess
    import sys
    code = "import sys; from stram.nexmark.queries import scan_longest_auction as f; print(f(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, data_dir], capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"cannot read the auctions of {data_dir}: {done.stderr.strip()[-400:]}")
    return int(done.stdout)


def scan_longest_auction(data_dir: str) -> int:
    """:func:`longest_auction_ms` in this process, reading the two columns a batch at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    longest = 0
    for batch in pq.ParquetFile(os.path.join(data_dir, "auction.parquet")).iter_batches(columns=[TIME, "expires"]):
        high = pc.max(pc.subtract(batch.column("expires"), batch.column(TIME))).as_py()
        if high is not None:
            longest = max(longest, high)
    return int(longest)


def winning_bids(src: Sources, partitions: int, with_extra: bool) -> Stream:
    """Per auction with a winning bid, ``{"key": id, ..., "value": {"auction": a, "bid": b}}`` (the oracle's
    rule: auction.dateTime <= bid.dateTime <= expires, price >= reserve; ties by earliest bid, then lowest
    bidder, then smallest extra)."""
    name = "winners" if with_extra else "winners_no_extra"
    if name in src.derived:
        return src.derived[name]
    p = _parts(partitions)
    auction_cols = AUCTION_FIELDS if with_extra else ["id", "reserve", TIME, "expires", "category"]
    bid_cols = ["auction", "bidder", "price", TIME] + (["extra"] if with_extra else [])
    # the auctions wait for the bids rather than fill the join (SPREAD_DRIFT_MS: q4 only in one container)
    aligned = with_extra or partitions == 1
    auctions = src.read("auction", auction_cols, by="id", aligned=aligned)
    bids = src.read("bid", bid_cols, by="auction", aligned=aligned)
    tag = "q9" if with_extra else "q4"
    # a bid pairs with its auction when it comes at or after the auction's start and at most the longest
    # auction later: every possible winner. The sources are in time order, so no record is ever behind
    # the watermark: with no lateness allowed a bid is dropped once the watermark passes it (a later
    # auction cannot start before it), an auction once it passes the longest auction.
    pairs = auctions.key_by("id").interval_join(bids.key_by("auction"), 0, longest_auction_ms(src.data_dir),
                                                allowed_lateness_ms=OUT_OF_ORDERNESS_MS, name=f"{tag}_join",
                                                partitions=p)
    valid = pairs.filter(_can_win, name=f"{tag}_valid", partitions=p, locality="THREAD_LOCAL")
    winners = valid.key_by("key").window(windows.tumbling(1), timestamp=_expires) \
        .fold(_no_winner, _better, _best, name=f"{tag}_winner", partitions=p, locality=_chained(src, partitions))
    src.derived[name] = winners
    return winners


def _chained(src: Sources, partitions: int, same_key: bool = True) -> str | None:
    """The locality of a step after q4's and q9's join: in the thread of the step before it, partition
    by partition, when no other query reads the stream (a process less, and the pairs are never
    serialized), and when it is keyed like the join (``same_key``) or has one partition."""
    return "THREAD_LOCAL" if not src.shared and (same_key or partitions == 1) else None


def _can_win(pair: dict) -> bool:
    auction, bid = pair["left"], pair["right"]
    return bid[TIME] <= auction["expires"] and bid["price"] >= auction["reserve"]


def _expires(pair: dict) -> int:
    return pair["left"]["expires"]


def _no_winner() -> None:
    return None


def _rank(pair: dict) -> tuple:
    bid = pair["right"]
    return -bid["price"], bid[TIME], bid["bidder"], bid.get("extra", "")


def _better(best: dict | None, pair: dict) -> dict:
    if best is None:
        return pair
    price, best_price = pair["right"]["price"], best["right"]["price"]
    if price != best_price:  # most bids differ in price: the whole rank only for a tie
        return pair if price > best_price else best
    return pair if _rank(pair) < _rank(best) else best


def _best(a: dict | None, b: dict | None) -> dict | None:
    return a if b is None else _better(a, b)


def q9(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Every auction with a winning bid, the auction's fields then the bid's."""
    src = sources or Sources(flow, data_dir, partitions)
    # (not in the fold's thread: q4 reads the same stream keyed otherwise when the two share a flow)
    rows = winning_bids(src, partitions, True).map(_q9_row, name="q9_row", partitions=_parts(partitions),
                                                   locality=_chained(src, partitions))
    _write(rows, out_dir, partitions, "q9_out")


def _q9_row(result: dict) -> dict:
    auction, bid = result["value"]["left"], result["value"]["right"]
    row = {f: auction[f] for f in AUCTION_FIELDS}
    row.update(auction=bid["auction"], bidder=bid["bidder"], price=bid["price"], bid_dateTime=bid[TIME],
               bid_extra=bid["extra"])
    return row


def q4(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Per category, the integer average of its auctions' winning prices."""
    src = sources or Sources(flow, data_dir, partitions)
    winners = winning_bids(src, partitions, bool(src.shared))
    averages = winners.key_by(_category).window(windows.tumbling(ALL_TIME_MS), timestamp="window_start") \
        .fold(_zero, _add_price, _sum_pairs, _floor_mean, name="q4_average",
              locality=_chained(src, partitions, same_key=False))
    _write(averages.map(_q4_row, name="q4_row", locality="THREAD_LOCAL"), out_dir, 1, "q4_out")


def _category(result: dict) -> int:
    return result["value"]["left"]["category"]


def _zero() -> list:
    return [0, 0]


def _add_price(acc: list, result: dict) -> list:
    acc[0] += result["value"]["right"]["price"]
    acc[1] += 1
    return acc


def _sum_pairs(a: list, b: list) -> list:
    return [a[0] + b[0], a[1] + b[1]]


def _floor_mean(acc: list) -> int:
    return acc[0] // acc[1]


def _q4_row(result: dict) -> dict:
    return {"id": result["key"], "final": result["value"]}


# ---------------------------------------------------------------- windowed: q5, q7, q8, q11

def q5(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Per sliding window (10 s every 2 s), the auctions with the most bids."""
    src = sources or Sources(flow, data_dir, partitions)
    p = _parts(partitions)
    window = windows.sliding(Q5_SIZE_MS, Q5_SLIDE_MS)
    if src.shared:  # a dict source other queries read too: every bid counted on its own
        counts = src.read("bid", ["auction", TIME], by="auction").key_by("auction").window(window) \
            .count(name="q5_count", partitions=p)
    else:  # Arrow batches split by auction, counted as columns; each window's counts one table, and
        # of each table (a partition's auctions) the rows of the top count
        counts = src.read("bid", ["auction", TIME], arrow=True, by="auction").key_by("auction").window(window) \
            .count(name="q5_count", partitions=p, arrow=True) \
            .flat_map(_window_tops, name="q5_tops", partitions=p, locality="THREAD_LOCAL")
    # per window: its counts come out when the watermark passes its end, stamped 1 ms before it, into
    # the slide-long window that ends with it, which the same watermark fires
    hottest = counts.key_by("window_start").window(windows.tumbling(Q5_SLIDE_MS), timestamp=_last_ms) \
        .fold(_no_top, _add_count, _merge_tops, name="q5_hottest", partitions=p)
    _write(hottest.flat_map(_q5_rows, name="q5_rows", partitions=p, locality="THREAD_LOCAL"), out_dir, partitions,
           "q5_out")


def _window_tops(table: Any) -> list[dict]:
    """The rows of one window's counts (a table: key, window_start, window_end, value) with its top count."""
    import pyarrow.compute as pc
    top = pc.max(table.column("value"))
    return table.filter(pc.equal(table.column("value"), top)).to_pylist()


def _last_ms(result: dict) -> int:
    return result["window_end"] - 1


def _no_top() -> list:
    return [0, []]


def _add_count(top: list, result: dict) -> list:
    n = result["value"]
    if n > top[0]:
        top[0], top[1] = n, [result["key"]]
    elif n == top[0]:
        top[1].append(result["key"])
    return top


def _merge_tops(a: list, b: list) -> list:
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    return [a[0], a[1] + b[1]]


def _q5_rows(result: dict) -> list[dict]:
    num, auctions = result["value"]
    start = result["key"]
    return [{"auction": a, "num": num, "window_start": start, "window_end": start + Q5_SIZE_MS} for a in auctions]


def q7(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Per tumbling 10 s window, the bids at its highest price."""
    src = sources or Sources(flow, data_dir, partitions)
    p = _parts(partitions)
    if src.shared:  # a dict source other queries read too: the highest bids per auction first
        per_auction = src.read("bid", BID_OUT, by="auction").key_by("auction") \
            .window(windows.tumbling(Q7_SIZE_MS)).fold(_no_top, _add_bid, _merge_tops, name="q7_per_auction",
                                                       partitions=p)
        highest = per_auction.key_by("window_start").window(windows.tumbling(Q7_SIZE_MS), timestamp=_last_ms) \
            .fold(_no_top, _add_top, _merge_tops, name="q7_highest", partitions=p)
    else:  # the highest bids of each window within each Arrow batch, then the highest of those
        tops = src.read("bid", BID_OUT, arrow=True) \
            .flat_map(_batch_tops, name="q7_batch_tops", partitions=p, locality="THREAD_LOCAL")
        highest = tops.key_by("window_start").window(windows.tumbling(Q7_SIZE_MS), timestamp=_last_ms) \
            .fold(_no_top, _add_bid, _merge_tops, name="q7_highest", partitions=p)
    _write(highest.flat_map(_q7_rows, name="q7_rows", partitions=p, locality="THREAD_LOCAL"), out_dir, partitions,
           "q7_out")


def _add_bid(top: list, bid: dict) -> list:
    price = bid["price"]
    if price > top[0]:
        top[0], top[1] = price, [bid]
    elif price == top[0]:
        top[1].append(bid)
    return top


def _batch_tops(batch: Any) -> list[dict]:
    """Per tumbling window a batch's bids fall in (one or two), its bids at the highest price, with the
    window's ``window_start`` and ``window_end``: no other bid of the batch can be among the window's."""
    import numpy as np
    times, prices = batch.column(TIME).to_numpy(), batch.column("price").to_numpy()
    starts = times - times % Q7_SIZE_MS
    rows = []
    for start in np.unique(starts).tolist():
        mine = starts == start
        top = batch.filter(mine & (prices == prices[mine].max())).select(BID_OUT).to_pylist()
        for bid in top:
            bid["window_start"], bid["window_end"] = start, start + Q7_SIZE_MS
        rows += top
    return rows


def _add_top(top: list, result: dict) -> list:
    return _merge_tops(top, result["value"])


def _q7_rows(result: dict) -> list[dict]:
    start, end = result["window_start"], result["window_end"]
    return [{"auction": b["auction"], "bidder": b["bidder"], "price": b["price"], "dateTime": b[TIME],
             "extra": b["extra"], "window_start": start, "window_end": end} for b in result["value"][1]]


def q8(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Persons who opened an auction in the tumbling 10 s window they were created in."""
    src = sources or Sources(flow, data_dir, partitions)
    p = _parts(partitions)
    window = windows.tumbling(Q8_SIZE_MS)
    aligned = partitions == 1   # in one container (SPREAD_DRIFT_MS)
    sellers = src.read("auction", ["seller", TIME], by="seller", aligned=aligned).key_by("seller") \
        .window(window).count(name="q8_sellers", partitions=p)
    persons = src.read("person", ["id", "name", TIME], by="id", aligned=aligned).key_by("id")
    joined = persons.join(sellers.key_by("key"), window, other_timestamp="window_start", name="q8_join", partitions=p)
    _write(joined.map(_q8_row, name="q8_row", partitions=p, locality="THREAD_LOCAL"), out_dir, partitions, "q8_out")


def _q8_row(pair: dict) -> dict:
    person, start = pair["left"], pair["window_start"]
    return {"id": person["id"], "name": person["name"], "stime": start, "window_start": start,
            "window_end": pair["window_end"]}


def q11(flow: Flow, data_dir: str, out_dir: str, partitions: int = 1, sources: Sources | None = None) -> None:
    """Bids per bidder session (bids at most 10 s apart)."""
    src = sources or Sources(flow, data_dir, partitions)
    p = _parts(partitions)
    window = windows.session(Q11_GAP_MS + 1)
    if src.shared:  # a dict source other queries read too: every bid on its own
        sessions = src.read("bid", ["bidder", TIME], by="bidder").key_by("bidder").window(window) \
            .count(name="q11_sessions", partitions=p)
    else:  # each Arrow batch's bids per bidder as its first and last bid, those counts summed per session
        points = src.read("bid", ["bidder", TIME], arrow=True) \
            .flat_map(_session_points, name="q11_batch_points", partitions=p, locality="THREAD_LOCAL")
        sessions = points.key_by("bidder").window(window).sum("n", name="q11_sessions", partitions=p)
    _write(sessions.map(_q11_row, name="q11_row", partitions=p, locality="THREAD_LOCAL"), out_dir, partitions,
           "q11_out")


def _session_points(batch: Any) -> list[dict]:
    """A batch's bids as fewer points ``{"bidder", "dateTime", "n"}`` with the same sessions: a bidder's
    first bid in the batch carrying its count there and its last with 0, when the two are at most the gap
    apart (the bids between them change neither the session they fall in nor its bounds); a bidder whose
    bids in the batch spread wider keeps them all (n = 1)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    spans = pa.Table.from_batches([batch]).group_by("bidder").aggregate([(TIME, "min"), (TIME, "max"), ([], "count_all")])
    bidder, first, last, count = (spans.column(i).to_pylist() for i in range(4))
    points, spread = [], []
    for b, f, la, n in zip(bidder, first, last, count):
        if la - f > Q11_GAP_MS:
            spread.append(b)
            continue
        points.append({"bidder": b, TIME: f, "n": n})
        if la != f:
            points.append({"bidder": b, TIME: la, "n": 0})
    if spread:
        wide = batch.filter(pc.is_in(batch.column("bidder"), value_set=pa.array(spread))).select(["bidder", TIME])
        points += [{"bidder": b, TIME: t, "n": 1} for b, t in zip(*(c.to_pylist() for c in wide.columns))]
    return points


def _q11_row(session: dict) -> dict:
    start, end = session["window_start"], session["window_end"] - 1   # the window operator's gap is 1 ms longer
    return {"bidder": session["key"], "bid_count": session["value"], "starttime": start, "endtime": end,
            "window_start": start, "window_end": end}


QUERIES: dict[str, Callable[..., None]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8, "q9": q9, "q11": q11,
}


def add_query(query: str, flow: Flow, data_dir: str, out_dir: str, partitions: int = 1,
              sources: Sources | None = None) -> None:
    """Add ``query`` to ``flow`` (its results under ``out_dir``), in one container per partition unless
    ``sources`` are shared or ``flow`` already limits its containers (docs/nexmark.md, "Containers").

    Raises
    ------
    ValueError
        Not one of :data:`QUERIES`.
    """
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; stram runs {', '.join(QUERIES)}")
    if not (sources and sources.shared):
        flow.attributes.setdefault("CONTAINERS_MAX_COUNT", partitions)
    QUERIES[query](flow, data_dir, out_dir, partitions, sources)
