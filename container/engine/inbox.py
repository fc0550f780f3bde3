"""A node's input queue: bounded by the tuples it holds, with a low-water mark.

A ``queue.Queue`` bounded by messages holds very different amounts of data
depending on what the messages carry (256 messages of 1,024 lines held most of
the word count's input). :class:`Inbox` counts a message by its weight (the
tuples in a data batch, 1 for a control tuple), so its bound is a bound on data.

A producer that finds the inbox full waits until it has drained to half its
capacity (the low-water mark), not merely until there is room for one more
message. Each wait costs a thread switch, so a smaller bound that woke the
producer on every message taken would pay one switch per batch; this one pays
one per half-inbox.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

__all__ = ["Inbox", "Full"]


class Full(Exception):
    """:meth:`Inbox.put_nowait` found no room."""


class Inbox:
    """FIFO of messages, each with a weight; :meth:`put` waits while the inbox is full.

    ``capacity`` is in weight units. A message is taken whenever the inbox holds less
    than its capacity and no producer waits, however heavy it is: a bound never stalls
    a stream, it only limits how far a producer runs ahead.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"inbox capacity must be at least 2, not {capacity}")
        self.capacity = capacity
        #: A waiting producer resumes once the weight held is at or below this.
        self.low_water = capacity // 2
        self._items: collections.deque[tuple[Any, int]] = collections.deque()
        self._weight = 0
        lock = threading.Lock()
        self._not_empty = threading.Condition(lock)
        self._not_full = threading.Condition(lock)
        self._blocked = False  # a producer reached the capacity: none puts until the low-water mark

    def put(self, item: Any, weight: int = 1) -> None:
        with self._not_full:
            while self._blocked or self._weight >= self.capacity:
                self._blocked = True
                self._not_full.wait()
            self._add(item, weight)

    def put_nowait(self, item: Any, weight: int = 1) -> None:
        """Add ``item`` now, or raise :class:`Full`."""
        with self._not_full:
            if self._blocked or self._weight >= self.capacity:
                raise Full
            self._add(item, weight)

    def put_anyway(self, item: Any, weight: int = 1) -> None:
        """Add ``item`` whatever the inbox holds (a stop message must always get through)."""
        with self._not_full:
            self._add(item, weight)

    def _add(self, item: Any, weight: int) -> None:
        self._items.append((item, weight))
        self._weight += weight
        self._not_empty.notify()

    def get(self) -> Any:
        with self._not_empty:
            while not self._items:
                self._not_empty.wait()
            return self._take()

    def get_nowait(self) -> Any:
        """The next item, or raise ``IndexError`` when there is none."""
        with self._not_empty:
            if not self._items:
                raise IndexError("inbox is empty")
            return self._take()

    def _take(self) -> Any:
        item, weight = self._items.popleft()
        self._weight -= weight
        if self._blocked and self._weight <= self.low_water:
            self._blocked = False
            self._not_full.notify_all()
        return item

    def qsize(self) -> int:
        """Messages waiting."""
        return len(self._items)

    def weight(self) -> int:
        """Tuples (weight) waiting."""
        return self._weight

    def empty(self) -> bool:
        return not self._items
