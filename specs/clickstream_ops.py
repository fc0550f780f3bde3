"""Operators of the clickstream example: a deterministic click-log generator and a parse/filter step."""

from __future__ import annotations

import datetime as _dt
import functools
import random
import time
from typing import Any, Optional

from stram.operator import InputOperator, InputPort, Operator, OperatorContext, OutputPort, ShutdownException

__all__ = ["ClickstreamGenerator", "ParseFilter", "events", "flush_line", "parse_line", "BLOCK"]

#: Events are drawn in blocks of this many, each block from its own seeded RNG, so
#: event ``i`` depends only on the generator's parameters, never on window sizes.
BLOCK = 1024
#: Share of malformed lines the parse step must drop.
CORRUPT_SHARE = 0.01
#: Users whose id is a multiple of this are bots (their agent says so).
BOT_EVERY = 50
#: How far after the last event the final flush marker lies, in seconds of event time.
FLUSH_AFTER = 3600.0


def _iso(seconds: float) -> str:
    """Epoch seconds as ``2024-01-01T00:00:00.000Z`` (millisecond precision)."""
    millis = int(round(seconds * 1000))
    stamp = _dt.datetime.fromtimestamp(millis // 1000, tz=_dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis % 1000:03d}Z"


@functools.lru_cache(maxsize=8)
def _block(seed: int, block: int, users: int, pages: int, rate: float, start_time: float,
           lateness: float, speedup: float) -> tuple[str, ...]:
    rng = random.Random(f"clickstream:{seed}:{block}")
    out = []
    for i in range(block * BLOCK, (block + 1) * BLOCK):
        if rng.random() < CORRUPT_SHARE:
            out.append(f"#corrupt {rng.getrandbits(32):08x}")
            continue
        when = start_time + i * speedup / rate - lateness * rng.random()
        user = rng.randrange(users)
        page = min(int(pages * rng.random() ** 2), pages - 1)  # low page ids are popular
        r = rng.random()
        action = "view" if r < 0.85 else "click" if r < 0.97 else "purchase"
        agent = "bot/1.0" if user % BOT_EVERY == 0 else "Mozilla/5.0"
        out.append(f"{_iso(when)} user=u{user:05d} page=/p/{page:03d} action={action} agent={agent}")
    return tuple(out)


def events(seed: int, start: int, stop: int, *, users: int = 500, pages: int = 50,
           rate: float = 1000.0, start_time: float = 1704067200.0, lateness: float = 2.0,
           speedup: float = 1.0) -> list[str]:
    """Raw click-log lines ``start`` to ``stop`` (exclusive) of a generator's stream.

    A line is ``<ISO time> user=u00042 page=/p/007 action=view agent=Mozilla/5.0``,
    or, for about 1% of them, a corrupt line starting with ``#``. Event ``i``
    happens at ``start_time + i * speedup / rate`` seconds, minus up to
    ``lateness`` seconds (events arrive slightly out of order).

    Parameters
    ----------
    seed : int
        Seed of the stream; the same parameters always give the same lines.
    start, stop : int
        Range of event numbers.
    users, pages : int
        Number of distinct users and pages.
    rate : float
        Events per second (of emission).
    start_time : float
        Event time of event 0, epoch seconds.
    lateness : float
        Largest delay of an event behind its nominal time, seconds.
    speedup : float
        Seconds of event time per second of emission.

    Returns
    -------
    list of str
    """
    out: list[str] = []
    for block in range(start // BLOCK, (stop + BLOCK - 1) // BLOCK):
        lines = _block(seed, block, users, pages, rate, start_time, lateness, speedup)
        lo = max(start - block * BLOCK, 0)
        hi = min(stop - block * BLOCK, BLOCK)
        out.extend(lines[lo:hi])
    return out


def flush_line(total: int, rate: float, start_time: float, speedup: float = 1.0) -> str:
    """The marker after the last event: its event time, far after every window, moves
    the watermark past the last windows so that append-mode aggregations emit them."""
    return f"{_iso(start_time + total * speedup / rate + FLUSH_AFTER)} user=- page=- action=flush agent=stram"


def parse_line(line: str) -> Optional[dict[str, Any]]:
    """A page view as ``{"event_time", "user", "page"}``; the flush marker with user and
    page None; None for anything else (corrupt lines, bots, clicks, purchases)."""
    if not line or line[0] == "#":
        return None
    parts = line.split(" ")
    if len(parts) != 5:
        return None
    try:
        fields = dict(p.split("=", 1) for p in parts[1:])
        when = _dt.datetime.fromisoformat(parts[0])
    except ValueError:
        return None
    action = fields.get("action")
    if action == "flush":
        return {"event_time": when, "user": None, "page": None}
    if action != "view" or fields.get("agent", "").startswith("bot"):
        return None
    return {"event_time": when, "user": fields.get("user"), "page": fields.get("page")}


class ClickstreamGenerator(InputOperator):
    """Emits a deterministic click log (see :func:`events`) at ``rate`` lines per second.

    Each window gets its share of the rate, computed from the window count, so a
    window replayed from a checkpoint holds exactly the same lines. After
    ``events`` lines it emits the flush marker (:func:`flush_line`) and ends
    the stream. Its state is the number of windows and lines emitted.
    """

    output = OutputPort()
    seed: int = 42
    #: Lines per second (also the event-time rate of the stream).
    rate: float = 1000.0
    #: Total lines before the stream ends (the flush marker comes on top).
    events: int = 20000
    users: int = 500
    pages: int = 50
    #: Event time of line 0, epoch seconds; None: the wall clock at the first window.
    start_time: Optional[float] = 1704067200.0
    #: Largest delay of an event's time behind its nominal time, seconds.
    lateness: float = 2.0
    #: Seconds of event time per second of emission.
    speedup: float = 1.0
    #: Emit the flush marker at the end.
    flush: bool = True
    transient = ("_quota", "_window_ms")

    def __init__(self) -> None:
        #: Lines emitted so far and windows begun so far.
        self.emitted = 0
        self.windows = 0
        self._quota = 0
        self._window_ms = 500

    def setup(self, context: OperatorContext) -> None:
        if self.rate <= 0:
            raise ValueError("ClickstreamGenerator: 'rate' must be positive")
        self._window_ms = context.streaming_window_size_millis

    def begin_window(self, window_id: int) -> None:
        if self.start_time is None:
            self.start_time = time.time()
        self.windows += 1
        target = int(self.windows * self.rate * self._window_ms / 1000)
        self._quota = max(0, min(target, self.events) - self.emitted)

    def emit_tuples(self) -> None:
        if self._quota:  # the whole window's share in one call: replays are identical
            emit = self.output.emit
            for line in events(self.seed, self.emitted, self.emitted + self._quota, users=self.users,
                               pages=self.pages, rate=self.rate, start_time=float(self.start_time),
                               lateness=self.lateness, speedup=self.speedup):
                emit(line)
            self.emitted += self._quota
            self._quota = 0
        if self.emitted >= self.events:
            if self.flush:
                self.output.emit(flush_line(self.events, self.rate, float(self.start_time), self.speedup))
            raise ShutdownException(f"all {self.events} events emitted")


class ParseFilter(Operator):
    """Parses click-log lines into page views ``{"event_time", "user", "page"}``.

    Drops corrupt lines, bots, and every action but ``view``; passes the flush
    marker on (with user and page None).
    """

    input = InputPort()
    output = OutputPort()

    def process_input(self, line: str) -> None:
        view = parse_line(line)
        if view is not None:
            self.output.emit(view)
