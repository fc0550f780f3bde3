"""Event-time test kit: random disordered streams, plain-Python oracles, and a driver run like the engine.

* :func:`stream` makes records ``{"key", "ts", "v", "id"}`` whose event times are disordered
  within a bound ``B`` (each on-time record's ts >= the max ts before it - B), plus, optionally,
  records so late that every window they belong to passed before they arrive (flagged).
* The oracles (:func:`window_oracle`, :func:`windowed_join_oracle`, :func:`interval_join_oracle`,
  :func:`dedup_oracle`) compute the answer from the definitions, from the on-time records alone.
* :func:`drive` runs an operator in streaming windows of ``R`` records the way the engine does:
  begin_window, the batch handler, on_watermark (max ts of the earlier windows - B) when it
  advanced, end_window; MAX_WATERMARK at the end. Modes: ``plain``, ``pickle`` (the state
  round-trips through pickle into a fresh instance at random window boundaries) and ``split``
  (``split_state`` into two partitions at a random boundary; later records routed by key).
"""

from __future__ import annotations

import pickle
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from stram.agent.engine.batch import batch_handler
from stram.common.arrowtypes import is_arrow
from stram.common.partition import key_function, owner_of
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import OperatorContext, operator_properties

WINDOW_BASE = 7 << 32


# ------------------------------------------------------------------ the stream

def stream(seed: int, n: int, *, keys: int = 5, bound: int = 50, advance: int = 20, late: float = 0.0,
           horizon: int = 0, lookback: int = 0, ports: tuple[str, ...] = ("input",),
           start: int = 100_000) -> list[tuple[str, dict, bool]]:
    """``n`` items (port, record, is_late).

    On-time records: ts = max ts so far + uniform(-bound, advance), so ts >= max before - bound.
    A fraction ``late`` are late: ts + ``horizon`` < (max ts of the records at least ``lookback``
    positions earlier) - bound, where ``horizon`` bounds how far past its ts a record's last
    window (or its state) reaches: such a record is late for any watermark the driver can have
    sent by then (with a driver window of R records, ``lookback`` = 2R: the watermark a window
    sees is the max of the windows before the previous one).
    """
    rng = random.Random(seed)
    items: list[tuple[str, dict, bool]] = []
    prefix_max: list[int] = []  # max ts of records [0..i]
    top = start
    for i in range(n):
        port = rng.choice(ports)
        key = f"k{rng.randrange(keys)}"
        old = i - lookback
        if late and old >= 0 and rng.random() < late:
            ts = prefix_max[old] - bound - horizon - 1 - rng.randrange(0, 200)
            items.append((port, {"key": key, "ts": ts, "v": rng.randrange(-50, 100), "id": i}, True))
        else:
            ts = top + rng.randint(-bound, advance)
            items.append((port, {"key": key, "ts": ts, "v": rng.randrange(-50, 100), "id": i}, False))
            top = max(top, ts)
        prefix_max.append(max(ts, prefix_max[-1]) if prefix_max else ts)
    return items


def on_time(items: list) -> list[tuple[str, dict]]:
    return [(p, r) for p, r, is_late in items if not is_late]


def late_ids(items: list) -> list[int]:
    return sorted(r["id"] for _, r, is_late in items if is_late)


# ------------------------------------------------------------------ oracles

def window_bounds(window: dict, ts: int) -> list[tuple[int, int]]:
    """Every (start, end) of the tumbling or sliding windows holding ``ts``, by the definition."""
    origin = window.get("origin_ms", 0)
    size = window["size_ms"]
    slide = window.get("slide_ms", size)
    out = []
    k = (ts - size - origin) // slide
    while origin + k * slide <= ts:
        s = origin + k * slide
        if s <= ts < s + size:
            out.append((s, s + size))
        k += 1
    return out


def sessions(records: list[dict], gap: int) -> list[tuple[int, int, list[dict]]]:
    """A key's sessions (start, end, records in arrival order): sorted by time, a record less than
    ``gap`` after the previous one joins its session."""
    out: list[list] = []
    for r in sorted(records, key=lambda r: r["ts"]):
        if out and r["ts"] < out[-1][1]:
            out[-1][1] = max(out[-1][1], r["ts"] + gap)
            out[-1][2].append(r)
        else:
            out.append([r["ts"], r["ts"] + gap, [r]])
    return [(s, e, sorted(rs, key=lambda r: r["id"])) for s, e, rs in out]


def window_groups(window: dict, records: list[dict]) -> dict[tuple, list[dict]]:
    """(key, start, end) -> the records of that key and window, in arrival order."""
    groups: dict[tuple, list[dict]] = {}
    if window["kind"] == "session":
        by_key: dict[Any, list] = {}
        for r in records:
            by_key.setdefault(r["key"], []).append(r)
        for k, rs in by_key.items():
            for s, e, members in sessions(rs, window["gap_ms"]):
                groups[(k, s, e)] = members
        return groups
    for r in records:
        for s, e in window_bounds(window, r["ts"]):
            groups.setdefault((r["key"], s, e), []).append(r)
    return groups


def window_oracle(window: dict, records: list[dict], value: Callable[[list[dict]], Any]) -> list[tuple]:
    """Sorted (key, start, end, value) of every key and window; ``value`` folds a group's records."""
    return sorted((k, s, e, value(rs)) for (k, s, e), rs in window_groups(window, records).items())


def rows(results: list[dict]) -> list[tuple]:
    return sorted((r["key"], r["window_start"], r["window_end"], r["value"]) for r in results)


def windowed_join_oracle(window: dict, items: list[tuple[str, dict]], how: str) -> Counter:
    """Multiset of (key, start, end, left id, right id or None)."""
    tagged = [dict(r, side=p) for p, r in items]
    out: Counter = Counter()
    for (k, s, e), rs in window_groups(window, tagged).items():
        lefts = [r for r in rs if r["side"] == "left"]
        rights = [r for r in rs if r["side"] == "right"]
        for left in lefts:
            for right in rights:
                out[(k, s, e, left["id"], right["id"])] += 1
            if how == "left" and not rights:
                out[(k, s, e, left["id"], None)] += 1
    return out


def interval_join_oracle(items: list[tuple[str, dict]], lower: int, upper: int, how: str) -> Counter:
    """Multiset of (key, left id, right id or None)."""
    lefts = [r for p, r in items if p == "left"]
    rights = [r for p, r in items if p == "right"]
    out: Counter = Counter()
    for left in lefts:
        matched = [r for r in rights if r["key"] == left["key"] and lower <= r["ts"] - left["ts"] <= upper]
        for right in matched:
            out[(left["key"], left["id"], right["id"])] += 1
        if how == "left" and not matched:
            out[(left["key"], left["id"], None)] += 1
    return out


def dedup_oracle(records: list[dict], within: int) -> list[int]:
    """Ids emitted, in arrival order: a record goes out unless one of its key within ``within`` did."""
    kept: list[dict] = []
    for r in records:
        if not any(k["key"] == r["key"] and abs(k["ts"] - r["ts"]) <= within for k in kept):
            kept.append(r)
    return [r["id"] for r in kept]


# ------------------------------------------------------------------ the driver

class FakeClock:
    """Processing time in seconds, advanced by hand."""

    def __init__(self, ms: int = 1_000_000) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def make(cls: type, props: dict, state: Optional[dict] = None, clock: Optional[FakeClock] = None,
         metrics: Optional[dict] = None) -> Any:
    """An instance as the agent makes one: properties, the checkpointed state, then setup."""
    op = cls()
    for k, v in props.items():
        setattr(op, k, v)
    if clock is not None:
        op._clock = clock
    if state is not None:
        op.set_state(state)
    sink = metrics if metrics is not None else {}
    op.setup(OperatorContext(id=1, name="op", set_metric=sink.__setitem__))
    return op


@dataclass
class Run:
    """What a driven operator emitted: output rows with the driver window they came in, and late."""

    output: list[tuple[int, dict]] = field(default_factory=list)
    late: list[dict] = field(default_factory=list)
    #: The largest state size the ``size`` callback saw (after each window's records).
    max_size: int = 0

    @property
    def results(self) -> list[dict]:
        return [r for _, r in self.output]


def drive(cls: type, props: dict, items: list, R: int, B: int, *, mode: str = "plain", seed: int = 0,
          clock: Optional[FakeClock] = None, size: Optional[Callable[[Any], int]] = None,
          metrics: Optional[dict] = None, arrow: bool = False) -> Run:
    """Run ``items`` ((port, record, is_late) or (port, record)) through operators of ``cls``; ``arrow``:
    each batch handed to the operator as one ``pyarrow.RecordBatch`` (Arrow results and late batches
    are read back as dict rows)."""
    rng = random.Random(seed)
    run = Run()
    chunk = [0]

    def rows_of(b: list) -> list:
        return [r for x in b for r in (x.to_pylist() if is_arrow(x) else (x,))]

    def handle(op: Any, port: str, part: list) -> None:
        if arrow:
            import pyarrow as pa
            part = [pa.RecordBatch.from_pylist(part)]
        batch_handler(op, port)(part)

    def wire(op: Any) -> Any:
        op.output.emit_batch = lambda b: run.output.extend((chunk[0], r) for r in rows_of(b))
        op.output.emit = lambda r: run.output.append((chunk[0], r))
        op.late.emit_batch = lambda b: run.late.extend(rows_of(b))
        op.late.emit = run.late.append
        return op

    ops = [wire(make(cls, props, clock=clock, metrics=metrics))]
    routes = {}
    records = [(it[0], it[1]) for it in items]
    windows = [records[i:i + R] for i in range(0, len(records), R)]
    split_at = rng.randrange(1, len(windows)) if mode == "split" and len(windows) > 1 else None
    earlier = None  # max ts of the windows before the current one
    sent = None
    for w, batch in enumerate(windows):
        if w == split_at:
            owner = owner_of(2)
            states = cls.split_state([ops[0].get_state()], 2, owner)
            ops = [wire(make(cls, props, pickle.loads(pickle.dumps(s)), clock=clock, metrics=metrics))
                   for s in states]
            given = {n: props.get(n) for n in operator_properties(cls)}
            routes = {p: key_function(cls.partition_key(given, p)) for p in {p for p, _ in records}}
        elif mode == "pickle" and w and rng.random() < 0.3:
            ops = [wire(make(cls, props, pickle.loads(pickle.dumps(op.get_state())), clock=clock, metrics=metrics))
                   for op in ops]
        chunk[0] = w
        for op in ops:
            op.begin_window(WINDOW_BASE + w)
        i = 0
        while i < len(batch):  # consecutive records of one port, in batches of random sizes
            j = i + 1
            while j < len(batch) and j - i < rng.randint(1, 8) and batch[j][0] == batch[i][0]:
                j += 1
            port = batch[i][0]
            if len(ops) == 1:
                handle(ops[0], port, [r for _, r in batch[i:j]])
            else:
                parts: list[list] = [[] for _ in ops]
                for _, r in batch[i:j]:
                    parts[owner(routes[port](r))].append(r)
                for op, part in zip(ops, parts):
                    if part:
                        handle(op, port, part)
            i = j
        if size is not None:
            run.max_size = max(run.max_size, sum(size(op) for op in ops))
        if earlier is not None and (sent is None or earlier - B > sent):
            sent = earlier - B
            for op in ops:
                op.on_watermark(sent)
        high = max(r["ts"] for _, r in batch)
        earlier = high if earlier is None else max(earlier, high)
        if clock is not None:
            clock.ms += rng.randint(0, 40)
        for op in ops:
            op.end_window()
    chunk[0] = len(windows)
    for op in ops:
        op.begin_window(WINDOW_BASE + len(windows))
        op.on_watermark(MAX_WATERMARK)
        op.end_window()
    return run
