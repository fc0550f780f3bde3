"""The NEXMark queries' answers computed with pandas over a whole data set, independent of any engine.

The queries follow the suite's Flink SQL (nexmark-flink's queries/q*.sql) and its output field names;
a windowed result also carries ``window_start``/``window_end`` (epoch ms; windows aligned to epoch 0,
[start, end) half open). Each answer is the final result over the complete, bounded input (what a
streaming run emits once the watermark passes every window). Where the SQL leaves room, this is the
exact meaning chosen, for stram's and peers' implementations to match:

q0  passthrough: every bid as {auction, bidder, price, dateTime, extra}; event order.
q1  currency: like q0 with price = price * 0.908. The suite's type is DECIMAL(23, 3), the exact value
    price * 908 / 1000; written as the nearest double (Python ``price * 908 / 1000``). Event order.
q2  selection: {auction, price} of bids with auction % 123 == 0; event order.
q3  local item suggestion: {name, city, state, id} for each auction of category 10 whose seller is a
    person with state OR, ID or CA (a plain, unwindowed inner join); sorted by id (the auction's).
q4  average price per category: {id (the category), final}. An auction's winning bid is its highest
    bid with auction.dateTime <= bid.dateTime <= auction.expires (SQL BETWEEN, both ends included)
    and price >= auction.reserve (the suite's winning-bid rule; the Flink SQL omits the reserve).
    final = the integer average of the winning prices over the category's auctions that have one,
    sum // count (the suite's AVG over BIGINT). Sorted by id.
q5  hot items: sliding windows of 10 s every 2 s; per window the auctions with the most bids, ties all
    kept: {auction, num, window_start, window_end}; only windows holding bids. Sorted by window, auction.
q7  highest bid: tumbling 10 s windows; every bid whose price equals its window's highest price (ties
    all kept): {auction, bidder, price, dateTime, extra, window_start, window_end}. Deviations from the
    SQL: a bid belongs to its own half-open window only (the SQL's BETWEEN also matches a bid at exactly
    window_end of the previous window), and bidder/price are the bid's (the SQL inserts them swapped
    by position). Sorted by window_start, dateTime, auction, bidder.
q8  monitor new users: tumbling 10 s windows; persons who were created in a window and created an
    auction in the same window: {id, name, stime, window_start, window_end}, stime = window_start (the
    suite's name), once per (person, window). Sorted by window_start, id.
q9  winning bids: every auction with a winning bid (q4's rule), the auction's fields then the bid's:
    {id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
    auction, bidder, price, bid_dateTime, bid_extra}. Ties: highest price, then earliest dateTime (the
    SQL's ORDER BY), then lowest bidder, then smallest extra (so the answer is unique). Sorted by id.
q11 user sessions: session windows per bidder with a 10 s gap: bids of one bidder whose times differ
    by at most 10 s (<= gap, as Flink merges touching session windows) are one session; {bidder,
    bid_count, starttime, endtime, window_start, window_end}, starttime = window_start = the first
    bid's time, endtime = window_end = the last bid's time + 10 s. Sorted by window_start, bidder.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: the queries' windows (ms), as in the suite's SQL
Q5_SIZE_MS, Q5_SLIDE_MS = 10_000, 2_000
Q7_SIZE_MS = 10_000
Q8_SIZE_MS = 10_000
Q11_GAP_MS = 10_000
Q2_MODULUS = 123
Q3_CATEGORY, Q3_STATES = 10, ("OR", "ID", "CA")
#: q1's dollar-to-euro rate as an exact fraction (0.908)
Q1_RATE_NUM, Q1_RATE_DEN = 908, 1000

Frames = dict  # kind -> pandas.DataFrame ("person", "auction", "bid")

BID_OUT = ["auction", "bidder", "price", "dateTime", "extra"]
AUCTION_FIELDS = ["id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller",
                  "category", "extra"]


def q0(t: Frames) -> pd.DataFrame:
    return t["bid"][BID_OUT]


def q1(t: Frames) -> pd.DataFrame:
    bid = t["bid"][BID_OUT].copy()
    bid["price"] = (bid["price"] * Q1_RATE_NUM) / Q1_RATE_DEN   # int64 * 908 is exact, one rounded division
    return bid


def q2(t: Frames) -> pd.DataFrame:
    bid = t["bid"]
    return bid.loc[bid["auction"] % Q2_MODULUS == 0, ["auction", "price"]]


def q3(t: Frames) -> pd.DataFrame:
    a = t["auction"]
    p = t["person"]
    a = a.loc[a["category"] == Q3_CATEGORY, ["id", "seller"]]
    p = p.loc[p["state"].isin(Q3_STATES), ["id", "name", "city", "state"]].rename(columns={"id": "seller"})
    out = a.merge(p, on="seller").sort_values("id", kind="stable")
    return out[["name", "city", "state", "id"]]


def winning_bids(t: Frames) -> pd.DataFrame:
    """One row per auction with a winning bid: the auction's fields plus bidder, price, bid_dateTime and
    (when the bids have it) bid_extra; q4's rule, q9's tie order."""
    a = t["auction"][[c for c in AUCTION_FIELDS if c in t["auction"].columns]]
    bids = t["bid"]
    # each bid's auction by a sorted-id lookup (a merge would copy every bid with the auction's columns)
    order = np.argsort(a["id"].to_numpy(), kind="stable")
    ids = a["id"].to_numpy()[order]
    wanted = bids["auction"].to_numpy()
    pos = np.clip(np.searchsorted(ids, wanted), 0, max(len(ids) - 1, 0))
    found = ids[pos] == wanted if len(ids) else np.zeros(len(wanted), dtype=bool)
    at = order[pos]
    price, when = bids["price"].to_numpy(), bids["dateTime"].to_numpy()
    ok = found & (when >= a["dateTime"].to_numpy()[at]) & (when <= a["expires"].to_numpy()[at]) \
        & (price >= a["reserve"].to_numpy()[at])
    rows = np.flatnonzero(ok)
    m = pd.DataFrame({"id": wanted[rows], "auction": wanted[rows], "bidder": bids["bidder"].to_numpy()[rows],
                      "price": price[rows], "bid_dateTime": when[rows], "row": rows})
    m = m[m["price"] == m.groupby("id")["price"].transform("max")]      # few rows left: the top price's bids
    keys = ["id", "price", "bid_dateTime", "bidder"]
    extra = bids["extra"] if "extra" in bids.columns else t.get("bid_extra")   # the latter: an Arrow column
    if extra is not None:
        rows = m["row"].to_numpy()
        m = m.assign(bid_extra=extra.to_numpy()[rows] if isinstance(extra, pd.Series)
                     else extra.take(pa.array(rows, type=pa.int64())).to_pylist())
        keys.append("bid_extra")
    m = m.sort_values(keys, ascending=[True, False, True, True, True][:len(keys)], kind="stable")
    m = m.drop_duplicates("id", keep="first").drop(columns=["row"])
    return a.merge(m, on="id")


def q4(t: Frames) -> pd.DataFrame:
    win = winning_bids(t)
    g = win.groupby("category")["price"].agg(["sum", "count"]).reset_index()
    g["final"] = g["sum"] // g["count"]
    return g.rename(columns={"category": "id"})[["id", "final"]].sort_values("id")


def q5(t: Frames) -> pd.DataFrame:
    if Q5_SIZE_MS % Q5_SLIDE_MS:
        raise ValueError("q5's window size must be a multiple of its slide")
    bid = t["bid"]
    # bids per (slide bucket, auction); a window starting at bucket s holds buckets s .. s + size/slide - 1
    per = bid.assign(bucket=bid["dateTime"] // Q5_SLIDE_MS).groupby(["bucket", "auction"]).size().rename("num")
    per = per.reset_index()
    spread = pd.concat([per.assign(bucket=per["bucket"] - k) for k in range(Q5_SIZE_MS // Q5_SLIDE_MS)])
    counts = spread.groupby(["bucket", "auction"])["num"].sum().reset_index()
    top = counts.groupby("bucket")["num"].transform("max")
    hot = counts[counts["num"] >= top].copy()
    hot["window_start"] = hot["bucket"] * Q5_SLIDE_MS
    hot["window_end"] = hot["window_start"] + Q5_SIZE_MS
    hot = hot.sort_values(["window_start", "auction"])
    return hot[["auction", "num", "window_start", "window_end"]]


def q7(t: Frames) -> pd.DataFrame:
    bid = t["bid"][BID_OUT]
    bid = bid.assign(window_start=bid["dateTime"] // Q7_SIZE_MS * Q7_SIZE_MS)
    top = bid.groupby("window_start")["price"].transform("max")
    out = bid[bid["price"] == top].assign(window_end=lambda d: d["window_start"] + Q7_SIZE_MS)
    out = out.sort_values(["window_start", "dateTime", "auction", "bidder"], kind="stable")
    return out[BID_OUT + ["window_start", "window_end"]]


def q8(t: Frames) -> pd.DataFrame:
    p = t["person"][["id", "name", "dateTime"]]
    a = t["auction"][["seller", "dateTime"]]
    p = p.assign(window_start=p["dateTime"] // Q8_SIZE_MS * Q8_SIZE_MS).drop(columns="dateTime")
    a = a.assign(window_start=a["dateTime"] // Q8_SIZE_MS * Q8_SIZE_MS).drop(columns="dateTime")
    a = a.drop_duplicates().rename(columns={"seller": "id"})
    out = p.drop_duplicates(["id", "name", "window_start"]).merge(a, on=["id", "window_start"])
    out = out.assign(stime=out["window_start"], window_end=out["window_start"] + Q8_SIZE_MS)
    out = out.sort_values(["window_start", "id"], kind="stable")
    return out[["id", "name", "stime", "window_start", "window_end"]]


def q9(t: Frames) -> pd.DataFrame:
    win = winning_bids(t).sort_values("id")
    return win[AUCTION_FIELDS + ["auction", "bidder", "price", "bid_dateTime", "bid_extra"]]


def q11(t: Frames) -> pd.DataFrame:
    bid = t["bid"][["bidder", "dateTime"]].sort_values(["bidder", "dateTime"], kind="stable")
    new = (bid["bidder"].diff() != 0) | (bid["dateTime"].diff() > Q11_GAP_MS)
    bid = bid.assign(session=new.cumsum())
    g = bid.groupby("session").agg(bidder=("bidder", "first"), bid_count=("dateTime", "size"),
                                   starttime=("dateTime", "min"), last=("dateTime", "max"))
    g["endtime"] = g["last"] + Q11_GAP_MS
    g["window_start"], g["window_end"] = g["starttime"], g["endtime"]
    g = g.sort_values(["window_start", "bidder"], kind="stable")
    return g[["bidder", "bid_count", "starttime", "endtime", "window_start", "window_end"]]


QUERIES: dict[str, Callable[[Frames], pd.DataFrame]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8, "q9": q9, "q11": q11,
}

_BID_Q0 = {"bid": BID_OUT}
#: the columns each query reads (a big data set's other columns are not loaded)
NEEDS = {"q0": _BID_Q0, "q1": _BID_Q0, "q2": {"bid": ["auction", "price"]},
         "q3": {"person": ["id", "name", "city", "state"], "auction": ["id", "seller", "category"]},
         "q4": {"auction": ["id", "reserve", "dateTime", "expires", "category"],
               "bid": ["auction", "bidder", "price", "dateTime"]}, "q5": {"bid": ["auction", "dateTime"]},
         "q7": _BID_Q0, "q8": {"person": ["id", "name", "dateTime"], "auction": ["seller", "dateTime"]},
         "q9": {"auction": AUCTION_FIELDS, "bid": ["auction", "bidder", "price", "dateTime"], "bid_extra": ["extra"]},
         "q11": {"bid": ["bidder", "dateTime"]}}
_ARROW_STRINGS = {pa.string(): pd.ArrowDtype(pa.string())}
#: rows converted to records at a time when writing JSON lines
WRITE_ROWS = 100_000


def load(data_dir: str, columns: dict[str, list[str] | None] | None = None) -> Frames:
    """The data set's tables as DataFrames (``columns``: kind -> columns to read, None for all; the pseudo
    kind "bid_extra" reads the bids' extra column as an Arrow array)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"no data set directory {data_dir}")
    columns = columns or {"person": None, "auction": None, "bid": None}
    frames = {}
    for kind, cols in columns.items():
        if kind == "bid_extra":     # the bids' padding as one Arrow column: q9 takes a few of its rows
            frames[kind] = pq.read_table(os.path.join(data_dir, "bid.parquet"), columns=cols).column(0)
            continue
        path = os.path.join(data_dir, f"{kind}.parquet")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing (make the data set with 'python -m stram.nexmark generate')")
        # strings stay in Arrow memory (Python str objects would take several times the space)
        frames[kind] = pq.read_table(path, columns=cols).to_pandas(types_mapper=_ARROW_STRINGS.get)
    return frames


def _check(query: str) -> None:
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; the oracle answers {', '.join(QUERIES)}")


def answer_frame(query: str, data_dir: str) -> pd.DataFrame:
    """The query's answer over the data set in ``data_dir`` as a DataFrame (columns in output order)."""
    _check(query)
    return QUERIES[query](load(data_dir, NEEDS[query]))


def answer_frames(query: str, frames: Frames) -> list[dict]:
    """The query's answer over in-memory tables (kind -> DataFrame with the interface's columns), as records."""
    _check(query)
    return QUERIES[query](frames).to_dict("records")


def answer(query: str, data_dir: str) -> list[dict]:
    """The query's answer over the data set in ``data_dir`` (made by ``generate``), as records."""
    return answer_frame(query, data_dir).to_dict("records")


def write_jsonl(frame: pd.DataFrame, path: str) -> int:
    """Write an answer as JSON lines to ``path`` ('-': stdout), a slice at a time; returns the row count."""
    out = sys.stdout.buffer if path == "-" else open(path, "wb")
    try:
        for first in range(0, len(frame), WRITE_ROWS):
            rows = frame.iloc[first:first + WRITE_ROWS].to_dict("records")
            out.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    return len(frame)
