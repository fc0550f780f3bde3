"""NEXMark's configuration, record schemas and the arithmetic rules of its generator.

Everything here is a pure function of the configuration and an event number ``n`` (0, 1, 2, ...):
which kind event ``n`` is (per ``total`` events: ``person`` persons, then ``auction`` auctions, then
``bid`` bids), the id it creates, the latest person/auction id that exists at it, its timestamp, and
its random draws. Draws come from a counter-based hash of (seed, n, slot), not from a sequential
random stream, so any event can be computed alone: a stream source can start at any index and a
range of events equals the same slice of a longer run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stram.nexmark import DEFAULT_BASE_TIME_MS

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: a random person/auction pick may name one up to this many ids past the newest one (not yet created)
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
#: hot sellers/bidders/auctions are the first person/auction of each block of this many
HOT_BLOCK = 100

KINDS = ("person", "auction", "bid")

SCHEMAS = {
    "person": pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("emailAddress", pa.string()),
        ("creditCard", pa.string()), ("city", pa.string()), ("state", pa.string()),
        ("dateTime", pa.int64()), ("extra", pa.string())]),
    "auction": pa.schema([
        ("id", pa.int64()), ("itemName", pa.string()), ("description", pa.string()),
        ("initialBid", pa.int64()), ("reserve", pa.int64()), ("dateTime", pa.int64()),
        ("expires", pa.int64()), ("seller", pa.int64()), ("category", pa.int64()), ("extra", pa.string())]),
    "bid": pa.schema([
        ("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()), ("channel", pa.string()),
        ("url", pa.string()), ("dateTime", pa.int64()), ("extra", pa.string())]),
}


@dataclass(frozen=True)
class GeneratorConfig:
    """The suite's generator parameters (defaults as the suite's NexmarkConfiguration) plus seed and base time."""

    seed: int = 0
    first_event_rate: int = 10_000          # events per second of event time
    base_time_ms: int = DEFAULT_BASE_TIME_MS
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_auction_ratio: int = 2              # P(hot auction) = 1 - 1/ratio
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    person_id_lead: int = PERSON_ID_LEAD
    auction_id_lead: int = AUCTION_ID_LEAD

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"GeneratorConfig.{f.name} must be an integer, not {value!r}")
        positive = ("first_event_rate", "person_proportion", "auction_proportion", "bid_proportion",
                    "hot_auction_ratio", "hot_sellers_ratio", "hot_bidders_ratio", "num_in_flight_auctions",
                    "num_active_people")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"GeneratorConfig.{name} must be >= 1, not {getattr(self, name)}")
        for name in ("person_id_lead", "auction_id_lead", "base_time_ms", "avg_person_byte_size",
                     "avg_auction_byte_size", "avg_bid_byte_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"GeneratorConfig.{name} must be >= 0, not {getattr(self, name)}")

    @property
    def total(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---- event kinds, ids, timestamps ------------------------------------------------------------------

def kind_codes(cfg: GeneratorConfig, n: np.ndarray) -> np.ndarray:
    """0 person, 1 auction, 2 bid for each event number."""
    rem = n % cfg.total
    return (rem >= cfg.person_proportion).astype(np.int8) + (rem >= cfg.person_proportion + cfg.auction_proportion)


def count_kinds(cfg: GeneratorConfig, start: int, stop: int) -> dict[str, int]:
    """How many events of each kind lie in [start, stop), without generating them."""
    def upto(m: int) -> tuple[int, int]:
        epochs, rem = divmod(m, cfg.total)
        p = epochs * cfg.person_proportion + min(rem, cfg.person_proportion)
        a = epochs * cfg.auction_proportion + min(max(rem - cfg.person_proportion, 0), cfg.auction_proportion)
        return p, a
    p1, a1 = upto(start)
    p2, a2 = upto(stop)
    persons, auctions = p2 - p1, a2 - a1
    return {"person": persons, "auction": auctions, "bid": (stop - start) - persons - auctions}


def last_person(cfg: GeneratorConfig, n: np.ndarray) -> np.ndarray:
    """Base-0 id of the newest person at event n (the one n creates, if n is a person)."""
    epoch, rem = np.divmod(n, cfg.total)
    return epoch * cfg.person_proportion + np.minimum(rem, cfg.person_proportion - 1)


def last_auction(cfg: GeneratorConfig, n: np.ndarray) -> np.ndarray:
    """Base-0 id of the newest auction at event n (the one n creates, if n is an auction); -1 if none."""
    epoch, rem = np.divmod(n, cfg.total)
    pp, ap = cfg.person_proportion, cfg.auction_proportion
    within = np.clip(rem - pp, -1, ap - 1)   # -1: a person, counts from the previous epoch's last auction
    return epoch * ap + within


def timestamps(cfg: GeneratorConfig, n: np.ndarray) -> np.ndarray:
    """Event time (epoch ms) of event n: base + floor(floor(n * 1e6 / rate microseconds) / 1000)."""
    delay_us = 1_000_000.0 / cfg.first_event_rate
    return cfg.base_time_ms + (n.astype(np.float64) * delay_us).astype(np.int64) // 1000


def pick_person(cfg: GeneratorConfig, n: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A random person among the active ones (the newest num_active_people) plus a few leads; base 0."""
    people = last_person(cfg, n) + 1
    active = np.minimum(people, cfg.num_active_people)
    return people - active + below(h, active + cfg.person_id_lead)


def pick_auction(cfg: GeneratorConfig, n: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A random auction among those likely in flight (newest num_in_flight_auctions) plus leads; base 0."""
    newest = last_auction(cfg, n)
    oldest = np.maximum(newest - cfg.num_in_flight_auctions, 0)
    return oldest + below(h, newest - oldest + 1 + cfg.auction_id_lead)


def nearest_round(x: np.ndarray) -> np.ndarray:
    """Round half up to int64 (the suite's Math.round)."""
    return np.floor(x + 0.5).astype(np.int64)


def prices(h: np.ndarray) -> np.ndarray:
    """The suite's price distribution: round(10 ** (6u) * 100) cents, u uniform in [0, 1); log-uniform 1..1e6."""
    return nearest_round(np.power(10.0, unit(h) * 6.0) * 100.0)


def extra_lengths(h: np.ndarray, current: np.ndarray, average: int) -> np.ndarray:
    """Padding length so a record averages ``average`` bytes: (avg - current) +- 20 %, 0 when over."""
    want = average - current
    delta = nearest_round(want * 0.2)
    size = want - delta + below(h, np.maximum(2 * delta, 1))
    return np.where(want > 0, size, 0)


# ---- counter-based random draws -------------------------------------------------------------------

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SLOT = 0xD1B54A32D192ED03
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijective scramble of 64-bit words."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def event_keys(seed: int, n: np.ndarray) -> np.ndarray:
    """One 64-bit key per event, from which its draws derive."""
    base = mix(np.array([seed & _MASK64], dtype=np.uint64))
    with np.errstate(over="ignore"):
        return mix(base + n.astype(np.uint64) * _GOLDEN)


def draw(keys: np.ndarray, slot: int) -> np.ndarray:
    """The event's random word number ``slot`` (one word per decision)."""
    return mix(keys + np.uint64((slot + 1) * _SLOT & _MASK64))


def draws(keys: np.ndarray, first_slot: int, count: int) -> np.ndarray:
    """Words ``first_slot .. first_slot+count-1`` of every event: an (events x count) matrix."""
    slots = np.array([(s + 1) * _SLOT & _MASK64 for s in range(first_slot, first_slot + count)], dtype=np.uint64)
    return mix(keys[:, None] + slots[None, :])


def below(h: np.ndarray, bound) -> np.ndarray:
    """Uniform integers in [0, bound) from random words (bound < 2**32): the high 32 bits scaled."""
    bound = np.asarray(bound, dtype=np.uint64)
    return (((h >> np.uint64(32)) * bound) >> np.uint64(32)).astype(np.int64)


def unit(h: np.ndarray) -> np.ndarray:
    """Uniform doubles in [0, 1) from random words (53 bits)."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
