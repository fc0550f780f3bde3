"""Heartbeat pacing: a master that cannot keep up asks its containers to heartbeat less often.

A master serves its containers' heartbeats on one interpreter. When they
arrive faster than it answers them (2,000 containers at a 1 s interval need
about 2,000 answers a second; ``bench/bench_heartbeats.py`` measured 330-500
on 2 cores), the answers queue: they took 3-6 s, every heartbeat carried more
windows for the master to read, and a container's deploy waited for its turn
in the queue. YARN's ResourceManager meets the same load from its
NodeManagers by stretching their heartbeat interval with its own load; the
master does the same with what its containers see, the time from a
heartbeat's arrival to its answer:

- every period (at least a second, and at least one interval, so that every
  container heard the last change), if more than :data:`SLOW_SHARE` of the
  answers, and at least :data:`MIN_SLOW`, took longer than :data:`SLOW_SECONDS`,
  the interval grows by half;
- if none did, it shrinks by a tenth, back to ``HEARTBEAT_INTERVAL_MILLIS``
  (a few slow answers hold it where it is);
- it never exceeds ``HEARTBEAT_MAX_INTERVAL_MILLIS``, nor a third of
  ``HEARTBEAT_TIMEOUT_MILLIS`` (three heartbeats fit in every timeout).

The interval is asked for in slots (:meth:`HeartbeatPacer.ask_ms`), stretched
or not: each container has its own moment in the interval, from a hash of its
id, and each answer asks for the time from the heartbeat's sending to that
container's next moment, between half and one and a half intervals away.
Containers answered together come back together one interval later: a deploy,
or a stall of the master, left the containers of a 2,000-container application
heartbeating in waves one interval apart, 600 a second for two seconds in ten
and 60 for the rest, and each wave queued (``bench/bench_heartbeats.py``:
batches of 64 heartbeats, answers at 0.3-0.8 s at p99 with the master half
idle). Asked for in slots they come back spread evenly over the interval after
one round, whatever brought them together; a container in its slot is asked
for exactly the interval.

Setting ``HEARTBEAT_MAX_INTERVAL_MILLIS`` to ``HEARTBEAT_INTERVAL_MILLIS``
keeps the interval fixed: every container heartbeats once an interval, in its
slot (one heartbeat, after a start or a stall, moves it there, asked for between
half and one and a half intervals: the only asks then that are not the interval). A container
being deployed is asked for its next heartbeat after the configured interval
(its operators' first report ends the deploy). The interval in use is in
``get-app-info`` (``heartbeat_interval_millis``).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from typing import Callable

__all__ = ["HeartbeatPacer", "SLOW_SECONDS", "SLOW_SHARE", "MIN_SLOW"]

log = logging.getLogger("stram.master.core.pacing")

#: An answer slower than this (arrival to answer, in the master) counts as slow: the p99 a
#: master of 2,000 containers is meant to hold (issue 16).
SLOW_SECONDS = 0.1
#: The interval grows when more than this share of a period's answers were slow, and at least
#: :data:`MIN_SLOW` of them: a few containers whose answers waited for a garbage collection, a
#: deploy or a loaded machine are not a master that cannot keep up with its containers.
SLOW_SHARE = 0.05
MIN_SLOW = 50
#: Factors applied once per period.
GROW, SHRINK = 1.5, 0.9
#: Shortest period between two changes.
MIN_PERIOD_SECONDS = 1.0

class HeartbeatPacer:
    """The heartbeat interval a master asks for, from how long its answers take.

    Parameters
    ----------
    base_ms:
        ``HEARTBEAT_INTERVAL_MILLIS``: the interval when the master keeps up.
    max_ms:
        The longest interval it may ask for (at least ``base_ms``).
    clock:
        Seconds, monotonic (tests pass their own).

    :meth:`observe` is called from the server's event loop, :attr:`interval_ms` read under
    the master's lock: the figures are plain numbers, updated under a lock of their own.
    """

    def __init__(self, base_ms: int, max_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_ms = int(base_ms)
        self.max_ms = max(self.base_ms, int(max_ms))
        self.clock = clock
        self._interval = float(self.base_ms)
        self._lock = threading.Lock()
        self._period_start = clock()
        self._answers = 0
        self._slow = 0
        self._slowest = 0.0

    @classmethod
    def for_attributes(cls, attr: Callable[[str], object], clock: Callable[[], float] = time.monotonic
                       ) -> "HeartbeatPacer":
        """The pacer of an application's attributes (``attr``: name -> value, defaults applied)."""
        base = int(attr("HEARTBEAT_INTERVAL_MILLIS"))  # type: ignore[arg-type]
        ceiling = int(attr("HEARTBEAT_TIMEOUT_MILLIS")) // 3  # type: ignore[arg-type]
        wanted = attr("HEARTBEAT_MAX_INTERVAL_MILLIS")
        return cls(base, min(ceiling, int(wanted)) if wanted is not None else ceiling, clock)  # type: ignore[arg-type]

    @property
    def interval_ms(self) -> int:
        """The interval to ask containers for now, in milliseconds."""
        return int(self._interval)

    def ask_ms(self, container_id: str, now_ms: int, sent_ms: int = 0) -> int:
        """The interval the answer to a heartbeat of ``container_id`` sent at ``sent_ms`` (its
        ``sent_millis``, wall-clock milliseconds; ``now_ms`` when it gave none) asks for: the time
        to the container's next slot in the interval (:attr:`interval_ms` times a hash of its id,
        past whole intervals since the epoch), from half to one and a half intervals away. A
        container heartbeating in its slot is asked for exactly one interval, so the asks average
        the interval; one that is not is moved there in one heartbeat.

        The time is counted from when the heartbeat was sent, not answered: a container waits the
        interval from its last heartbeat's start (:mod:`stram.agent.agent`), and a master's queue
        moves nobody. A stretched interval is asked for never below the configured interval nor
        above the ceiling."""
        period = int(self._interval)
        slot = zlib.crc32(container_id.encode()) * period >> 32
        delay = (slot - (sent_ms or now_ms)) % period
        if delay < period // 2:
            delay += period
        if period <= self.base_ms:
            return delay
        return min(self.max_ms, max(self.base_ms, delay))

    def observe(self, seconds: float) -> None:
        """One heartbeat was answered ``seconds`` after it arrived."""
        with self._lock:
            self._answers += 1
            if seconds > SLOW_SECONDS:
                self._slow += 1
            if seconds > self._slowest:
                self._slowest = seconds
            now = self.clock()
            if now - self._period_start >= max(MIN_PERIOD_SECONDS, self._interval / 1000):
                self._adjust(now)

    def _adjust(self, now: float) -> None:
        before = self._interval
        if self._slow > SLOW_SHARE * self._answers and self._slow >= MIN_SLOW:
            self._interval = min(float(self.max_ms), before * GROW)
        elif not self._slow:
            self._interval = max(float(self.base_ms), before * SHRINK)
        if int(self._interval) != int(before) and (self._interval in (self.base_ms, self.max_ms)
                                                   or self._interval > before):
            log.info("heartbeat interval %d ms (configured %d ms): %d of %d answers took over %d ms, "
                     "the slowest %d ms", self._interval, self.base_ms, self._slow, self._answers,
                     SLOW_SECONDS * 1000, self._slowest * 1000)
        self._period_start, self._answers, self._slow, self._slowest = now, 0, 0, 0.0
