"""The queries' per-Arrow-batch steps (q5's pane counts, q7's batch tops, q11's session points) give
what their windows would get from the bids one by one, checked on random batches against plain Python."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from stram.nexmark.queries import BID_OUT, Q7_SIZE_MS, Q11_GAP_MS, _batch_tops, _session_points, _window_tops


def random_bids(rng: random.Random, n: int, span_ms: int) -> list[dict]:
    times = sorted(rng.randrange(span_ms) for _ in range(n))
    return [{"auction": rng.randrange(8), "bidder": rng.randrange(6), "price": rng.randrange(5),
             "dateTime": t, "extra": rng.choice("ab")} for t in times]


def batch_of(bids: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(bids)


def sessions(points: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(start, last time, total weight) of the sessions of weighted times, times at most the gap apart linked."""
    out: list[list[int]] = []
    for t, n in sorted(points):
        if out and t - out[-1][1] <= Q11_GAP_MS:
            out[-1][1], out[-1][2] = t, out[-1][2] + n
        else:
            out.append([t, t, n])
    return [tuple(s) for s in out]


SPANS = [1_000, 30_000, 200_000]   # a batch within one pane or window, and batches spread wider


@pytest.mark.parametrize("span", SPANS)
def test_session_points_make_the_sessions_the_bids_make(span):
    rng = random.Random(span)
    for _ in range(30):
        bids = random_bids(rng, rng.randrange(1, 60), span)
        points = _session_points(batch_of(bids))
        for bidder in {b["bidder"] for b in bids}:
            want = sessions([(b["dateTime"], 1) for b in bids if b["bidder"] == bidder])
            got = sessions([(p["dateTime"], p["n"]) for p in points if p["bidder"] == bidder])
            assert got == want
        assert len(points) <= max(len(bids), 2 * len({b["bidder"] for b in bids}))


def test_window_tops_are_the_rows_of_a_windows_top_count():
    rng = random.Random(3)
    for _ in range(30):
        rows = [{"key": k, "window_start": 10, "window_end": 20, "value": rng.randrange(1, 5)}
                for k in rng.sample(range(100), rng.randrange(1, 20))]
        top = max(r["value"] for r in rows)
        assert _window_tops(pa.Table.from_pylist(rows)) == [r for r in rows if r["value"] == top]


@pytest.mark.parametrize("span", SPANS)
def test_batch_tops_are_each_windows_highest_bids(span):
    rng = random.Random(span)
    for _ in range(30):
        bids = random_bids(rng, rng.randrange(1, 60), span)
        want = []
        for start in sorted({b["dateTime"] - b["dateTime"] % Q7_SIZE_MS for b in bids}):
            mine = [b for b in bids if start <= b["dateTime"] < start + Q7_SIZE_MS]
            top = max(b["price"] for b in mine)
            want += [{**b, "window_start": start, "window_end": start + Q7_SIZE_MS} for b in mine if b["price"] == top]
        assert _batch_tops(batch_of([{k: b[k] for k in BID_OUT} for b in bids])) == want
