"""NEXMark q5, hot items, with the dataflow API: per sliding window of 10 s every 2 s, the auctions with
the most bids (ties all kept), read from a generated data set's bid.parquet.

    python -m stram.nexmark generate --events 1000000 --out /tmp/nexmark
    NEXMARK_DATA=/tmp/nexmark stram launch specs/nexmark_q5.py

(without NEXMARK_DATA it reads specs/data/nexmark). Results go to out/nexmark-q5/ of the directory you
launch from, as {auction, num, window_start, window_end}; `python -m stram.nexmark oracle q5 --data
/tmp/nexmark --out -` prints the same rows. `python -m stram.nexmark run q5 ...` runs the same query
(stram.nexmark.queries) and sums it up.
"""

import os

from stram.flow import Flow, windows

DATA = os.path.abspath(os.environ.get("NEXMARK_DATA", "specs/data/nexmark"))
if not os.path.isfile(os.path.join(DATA, "bid.parquet")):
    raise FileNotFoundError(f"no NEXMark data set in {DATA}: make one with 'python -m stram.nexmark generate "
                            f"--events 1000000 --out DIR' and set NEXMARK_DATA=DIR")
SIZE_MS, SLIDE_MS = 10_000, 2_000


def last_ms(count):
    """A window's count, timed 1 ms before the window's end: the slide-long window ending with it."""
    return count["window_end"] - 1


def no_top():
    return [0, []]


def add_count(top, count):
    """The highest count so far and the auctions that have it."""
    if count["value"] > top[0]:
        return [count["value"], [count["key"]]]
    if count["value"] == top[0]:
        top[1].append(count["key"])
    return top


def merge_tops(a, b):
    return (a if a[0] > b[0] else b) if a[0] != b[0] else [a[0], a[1] + b[1]]


def rows(hottest):
    num, auctions = hottest["value"]
    start = hottest["key"]
    return [{"auction": a, "num": num, "window_start": start, "window_end": start + SIZE_MS} for a in auctions]


flow = Flow("nexmark-q5", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 500, "CHECKPOINT_WINDOW_COUNT": 20,
                                      "PROCESSING_MODE": "EXACTLY_ONCE"})
bids = flow.read_parquet(os.path.join(DATA, "bid.parquet"), timestamp_field="dateTime",
                         columns=["auction", "dateTime"], name="bids")
counts = bids.key_by("auction").window(windows.sliding(SIZE_MS, SLIDE_MS)).count(name="bids_per_auction")
hottest = counts.key_by("window_start").window(windows.tumbling(SLIDE_MS), timestamp=last_ms) \
    .fold(no_top, add_count, merge_tops, name="hottest")
hottest.flat_map(rows, name="rows", locality="THREAD_LOCAL").write_jsonl("out/nexmark-q5", name="out",
                                                                         locality="THREAD_LOCAL")
