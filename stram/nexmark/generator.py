"""The NEXMark event generator: persons, auctions and bids by the suite's rules, a column at a time.

Event ``n`` (0-based) is a person, an auction or a bid by ``n % 50`` (1 : 3 : 46 by default) and is a
pure function of (config, n): ``generate(cfg, start, stop)`` of any range equals that slice of a longer
run, so ``iter_events`` can serve as a stream source from any index. The rules (ids, hot keys, in-flight
auctions, active people, prices, expiry, padding) follow the published suite; docs/nexmark.md lists them.
``write_dataset`` writes DIR/person.parquet, DIR/auction.parquet, DIR/bid.parquet and DIR/meta.json.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stram.nexmark import text
from stram.nexmark.model import (FIRST_AUCTION_ID, FIRST_CATEGORY_ID, FIRST_PERSON_ID, HOT_BLOCK, KINDS, NUM_CATEGORIES,
                                 SCHEMAS, GeneratorConfig, below, count_kinds, draw, event_keys, extra_lengths,
                                 kind_codes, last_auction, last_person, pick_auction, pick_person, prices, timestamps)

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
NUM_CHANNELS = 10_000
#: P(a bid comes through a hot channel) = 1 - 1/HOT_CHANNELS_RATIO
HOT_CHANNELS_RATIO = 2
#: the fixed part of every record's size the padding tops up (ids, numbers, timestamps: 8 bytes each)
PERSON_FIXED, AUCTION_FIXED, BID_FIXED = 8, 8 + 5 * 8, 4 * 8
#: rows per Parquet row group: small enough that the partitions of a source take turns on row groups, each
#: decoding only its own (stram.operators.parquet.GROUP_STRIPE_ROWS), while staying close in event time
ROW_GROUP_ROWS = 1 << 16
#: meta.json's "format": 2 since row groups are ROW_GROUP_ROWS rows (1 had groups of a generator batch)
FORMAT = "stram-nexmark/2"
#: events generated at once: bounds the generator's memory (a few hundred bytes per event)
BATCH_EVENTS = 500_000
#: a distinct seed space for the channel table, so it does not correlate with event draws
_CHANNEL_SALT = 0x6E65786D61726B


@functools.lru_cache(maxsize=8)
def _pool(seed: int) -> np.ndarray:
    return text.padding_text(seed)


def _reverse32(i: int) -> int:
    """|Java Integer.reverse(i)|: the 32 bits of i mirrored, read as a signed int, absolute value."""
    r = int(format(i & 0xFFFFFFFF, "032b")[::-1], 2)
    return abs(r - (1 << 32) if r >= 1 << 31 else r)


@functools.lru_cache(maxsize=8)
def channels(seed: int) -> tuple[list[str], list[str]]:
    """(names, urls): the 4 hot channels first, then channel-0 .. channel-9999 with their URLs."""
    count = len(HOT_CHANNELS) + NUM_CHANNELS
    keys = event_keys(seed ^ _CHANNEL_SALT, np.arange(count, dtype=np.int64))
    parts: list = [b"https://www.nexmark.com/"]
    for slot in (10, 20, 30):
        parts += [text.words(keys, slot, 5, special=b"_"), b"/"]
    base = text.join(count, parts + [b"item.htm?query=1"]).to_pylist()
    tagged = below(draw(keys, 0), 10) > 0          # 9 in 10 channel URLs name their channel id
    urls = base[:len(HOT_CHANNELS)]
    for i in range(NUM_CHANNELS):
        j = len(HOT_CHANNELS) + i
        urls.append(base[j] + f"&channel_id={_reverse32(i)}" if tagged[j] else base[j])
    return HOT_CHANNELS + [f"channel-{i}" for i in range(NUM_CHANNELS)], urls


def persons(cfg: GeneratorConfig, n: np.ndarray) -> pa.Table:
    """The person events among event numbers ``n`` (all of ``n`` must be persons)."""
    k = event_keys(cfg.seed, n)
    name_index = below(draw(k, 0), len(FIRST_NAMES)) * len(LAST_NAMES) + below(draw(k, 1), len(LAST_NAMES))
    names = [f"{f} {la}" for f in FIRST_NAMES for la in LAST_NAMES]
    user, domain = text.words(k, 10, 7), text.words(k, 20, 5)
    cards = [text.digits(below(draw(k, 2 + g), 10_000), 4) for g in range(4)]
    card = text.join(len(n), [cards[0], b" ", cards[1], b" ", cards[2], b" ", cards[3]])
    city = below(draw(k, 6), len(US_CITIES))
    state = below(draw(k, 7), len(US_STATES))
    size = (PERSON_FIXED + np.array([len(s) for s in names])[name_index]
            + text.lengths(user) + 1 + text.lengths(domain) + 4 + 19
            + np.array([len(s) for s in US_CITIES])[city] + np.array([len(s) for s in US_STATES])[state])
    extra = text.padding(k, 9, _pool(cfg.seed), extra_lengths(draw(k, 8), size, cfg.avg_person_byte_size))
    return pa.Table.from_arrays([
        pa.array(last_person(cfg, n) + FIRST_PERSON_ID),
        text.choose(names, name_index),
        text.join(len(n), [user, b"@", domain, b".com"]),
        card,
        text.choose(US_CITIES, city),
        text.choose(US_STATES, state),
        pa.array(timestamps(cfg, n)),
        text.join(len(n), [extra]),
    ], schema=SCHEMAS["person"])


def auctions(cfg: GeneratorConfig, n: np.ndarray) -> pa.Table:
    """The auction events among event numbers ``n`` (all of ``n`` must be auctions)."""
    k = event_keys(cfg.seed, n)
    hot = below(draw(k, 0), cfg.hot_sellers_ratio) > 0
    seller = np.where(hot, last_person(cfg, n) // HOT_BLOCK * HOT_BLOCK, pick_person(cfg, n, draw(k, 1)))
    category = FIRST_CATEGORY_ID + below(draw(k, 2), NUM_CATEGORIES)
    initial = prices(draw(k, 3))
    reserve = initial + prices(draw(k, 5))
    ts = timestamps(cfg, n)
    # an auction lasts on average until num_in_flight_auctions more auctions have been created
    ahead = cfg.num_in_flight_auctions * cfg.total // cfg.auction_proportion
    horizon = timestamps(cfg, n + ahead) - ts
    expires = ts + 1 + below(draw(k, 4), np.maximum(2 * horizon, 1))
    item, desc = text.words(k, 100, 20), text.words(k, 200, 100)
    size = AUCTION_FIXED + text.lengths(item) + text.lengths(desc)
    extra = text.padding(k, 7, _pool(cfg.seed), extra_lengths(draw(k, 6), size, cfg.avg_auction_byte_size))
    return pa.Table.from_arrays([
        pa.array(last_auction(cfg, n) + FIRST_AUCTION_ID),
        text.join(len(n), [item]),
        text.join(len(n), [desc]),
        pa.array(initial),
        pa.array(reserve),
        pa.array(ts),
        pa.array(expires),
        pa.array(seller + FIRST_PERSON_ID),
        pa.array(category),
        text.join(len(n), [extra]),
    ], schema=SCHEMAS["auction"])


def bids(cfg: GeneratorConfig, n: np.ndarray) -> pa.Table:
    """The bid events among event numbers ``n`` (all of ``n`` must be bids)."""
    k = event_keys(cfg.seed, n)
    hot_auction = below(draw(k, 0), cfg.hot_auction_ratio) > 0
    auction = np.where(hot_auction, last_auction(cfg, n) // HOT_BLOCK * HOT_BLOCK, pick_auction(cfg, n, draw(k, 1)))
    hot_bidder = below(draw(k, 2), cfg.hot_bidders_ratio) > 0
    # hot bidders are the second person of a block, so they are not also the hot sellers
    bidder = np.where(hot_bidder, last_person(cfg, n) // HOT_BLOCK * HOT_BLOCK + 1, pick_person(cfg, n, draw(k, 3)))
    hot_channel = below(draw(k, 5), HOT_CHANNELS_RATIO) > 0
    channel = np.where(hot_channel, below(draw(k, 6), len(HOT_CHANNELS)),
                       len(HOT_CHANNELS) + below(draw(k, 6), NUM_CHANNELS))
    names, urls = channels(cfg.seed)
    extra = text.padding(k, 8, _pool(cfg.seed), extra_lengths(draw(k, 7), np.full(len(n), BID_FIXED),
                                                              cfg.avg_bid_byte_size))
    return pa.Table.from_arrays([
        pa.array(auction + FIRST_AUCTION_ID),
        pa.array(bidder + FIRST_PERSON_ID),
        pa.array(prices(draw(k, 4))),
        text.choose(names, channel),
        text.choose(urls, channel),
        pa.array(timestamps(cfg, n)),
        text.join(len(n), [extra]),
    ], schema=SCHEMAS["bid"])


_MAKERS = {"person": persons, "auction": auctions, "bid": bids}


def generate(cfg: GeneratorConfig, start: int, stop: int) -> dict[str, pa.Table]:
    """Events [start, stop) as three tables (each in event order)."""
    if not 0 <= start <= stop:
        raise ValueError(f"bad event range [{start}, {stop})")
    n = np.arange(start, stop, dtype=np.int64)
    codes = kind_codes(cfg, n)
    return {kind: _MAKERS[kind](cfg, n[codes == code]) for code, kind in enumerate(KINDS)}


def batches(cfg: GeneratorConfig, start: int, stop: int,
            batch_events: int = BATCH_EVENTS) -> Iterator[tuple[int, int, dict[str, pa.Table]]]:
    """(first, end, tables) for consecutive ranges of at most ``batch_events`` events."""
    for first in range(start, stop, batch_events):
        end = min(first + batch_events, stop)
        yield first, end, generate(cfg, first, end)


def iter_events(cfg: GeneratorConfig, start: int = 0, stop: int | None = None,
                batch_events: int = 10_000) -> Iterator[tuple[int, str, dict]]:
    """(event number, kind, record) in event order from ``start`` on; endless when ``stop`` is None."""
    first = start
    while stop is None or first < stop:
        end = first + batch_events if stop is None else min(first + batch_events, stop)
        tables = generate(cfg, first, end)
        rows = {kind: iter(tables[kind].to_pylist()) for kind in KINDS}
        for number, code in zip(range(first, end), kind_codes(cfg, np.arange(first, end, dtype=np.int64))):
            kind = KINDS[code]
            yield number, kind, next(rows[kind])
        first = end


def write_dataset(out_dir: str, events: int, cfg: GeneratorConfig, *, force: bool = False,
                  progress: Callable[[int, int], None] | None = None, batch_events: int = BATCH_EVENTS) -> dict:
    """Write events [0, events) to ``out_dir`` as person/auction/bid.parquet plus meta.json; returns the meta.

    Refuses a directory that exists and is not empty unless ``force`` (then its four files are replaced).
    Files are written under temporary names and renamed at the end, meta.json last.
    """
    if events < 0:
        raise ValueError(f"--events must be >= 0, not {events}")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not force:
        raise FileExistsError(f"{out_dir} exists and is not empty (use --force to overwrite its NEXMark files)")
    os.makedirs(out_dir, exist_ok=True)
    tmp = {kind: os.path.join(out_dir, f".{kind}.parquet.tmp") for kind in KINDS}
    # no dictionary for the random padding ("extra"): every value distinct, and a row group small enough
    # for its dictionary to fit made a reader decode the bids' columns 4-5 times slower
    writers = {kind: pq.ParquetWriter(tmp[kind], SCHEMAS[kind], compression="zstd",
                                      use_dictionary=[f.name for f in SCHEMAS[kind] if f.name != "extra"])
               for kind in KINDS}
    pending: dict[str, list[pa.Table]] = {kind: [] for kind in KINDS}

    def flush(kind: str, final: bool) -> None:
        """Whole row groups of what is pending (at the end, the rest too)."""
        rows = sum(t.num_rows for t in pending[kind])
        whole = rows if final else rows - rows % ROW_GROUP_ROWS
        if whole:
            table = pa.concat_tables(pending[kind])
            writers[kind].write_table(table.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
            pending[kind] = [table.slice(whole)] if whole < rows else []

    try:
        for _, end, tables in batches(cfg, 0, events, batch_events):
            for kind in KINDS:
                pending[kind].append(tables[kind])
                flush(kind, False)
            if progress:
                progress(end, events)
        for kind in KINDS:
            flush(kind, True)
    except BaseException:
        for kind in KINDS:
            writers[kind].close()
            os.remove(tmp[kind])
        raise
    for writer in writers.values():
        writer.close()
    for kind in KINDS:
        os.replace(tmp[kind], os.path.join(out_dir, f"{kind}.parquet"))
    last = timestamps(cfg, np.array([max(events - 1, 0)]))[0]
    meta = {
        "format": FORMAT,
        "events": events,
        "seed": cfg.seed,
        "rate": cfg.first_event_rate,
        "base_time_ms": cfg.base_time_ms,
        "first_event_time_ms": cfg.base_time_ms,
        "last_event_time_ms": int(last),
        "counts": count_kinds(cfg, 0, events),
        "config": cfg.as_dict(),
    }
    with open(os.path.join(out_dir, "meta.json.tmp"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(out_dir, "meta.json.tmp"), os.path.join(out_dir, "meta.json"))
    return meta


def read_meta(data_dir: str) -> dict:
    """A data set's meta.json."""
    with open(os.path.join(data_dir, "meta.json")) as f:
        return json.load(f)


def report_progress(done: int, total: int) -> None:
    """A progress line on stderr (for the CLI's big runs)."""
    print(f"nexmark: {done:,}/{total:,} events ({100 * done // max(total, 1)}%)", file=sys.stderr, flush=True)
