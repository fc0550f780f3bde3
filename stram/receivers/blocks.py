"""Blocks and the block generator: how a receiver's stored items are cut up and queued.

A receiver's ``store`` calls add items to a :class:`BlockGenerator`; every
block interval it cuts them into a :class:`Block`, the unit that the
write-ahead log keeps, the source acknowledges and the operator emits. The
generator's bounded queue is the receiver's backpressure.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["Block", "BlockGenerator", "GeneratorStopped"]


@dataclass
class Block:
    """Items stored together: the unit of the write-ahead log, acknowledgement and emission."""

    #: Position in the receiver's block sequence (increasing, never reused with the WAL on).
    seq: int
    #: The stored items, in store order.
    items: list[Any]
    #: What ``store_many(..., metadata=...)`` attached to these items.
    metadata: list[Any] = field(default_factory=list)
    #: Items stored in this process up to and including this block (0 for blocks read back from the WAL).
    items_through: int = 0
    #: ``time.monotonic()`` when the block was cut.
    created: float = 0.0


class GeneratorStopped(RuntimeError):
    """``store`` after the receiver's operator was torn down: the item has nowhere to go."""


class BlockGenerator:
    """Cuts stored items into blocks every interval and queues them, boundedly, for pushing.

    A block counts against ``capacity`` from when it is cut until
    :meth:`release` (the operator emitted it). While ``capacity`` blocks are
    outstanding, ``add``/``add_many`` wait and the timer does not cut: the
    receiver is slowed down, nothing is dropped.

    Parameters
    ----------
    interval_millis:
        Block interval (``BLOCK_INTERVAL_MILLIS``).
    capacity:
        Most blocks between cutting and release.
    first_seq:
        Sequence number of the first block cut.
    """

    def __init__(self, interval_millis: int = 200, capacity: int = 10, first_seq: int = 0) -> None:
        self.interval = max(int(interval_millis), 1) / 1000
        self.capacity = max(int(capacity), 1)
        #: Items added since this generator was created.
        self.items_added = 0
        self._next_seq = first_seq
        self._cond = threading.Condition()
        self._buffer: list[Any] = []
        self._metadata: list[Any] = []
        self._blocks: collections.deque[Block] = collections.deque()
        self._outstanding = 0
        self._stopped = False
        self._halt = threading.Event()
        self._timer: threading.Thread | None = None

    # -- storing side --------------------------------------------------------
    def add(self, item: Any) -> None:
        """Add one item; waits while the block queue is full."""
        with self._cond:
            self._wait_for_room()
            self._buffer.append(item)
            self.items_added += 1

    def add_many(self, items: Iterable[Any], metadata: Any = None) -> None:
        """Add items (all into the same block); ``metadata`` travels with that block.

        With ``metadata`` an empty ``items`` still makes a block (e.g. "this
        empty file is done").
        """
        items = list(items)
        with self._cond:
            self._wait_for_room()
            self._buffer.extend(items)
            self.items_added += len(items)
            if metadata is not None:
                self._metadata.append(metadata)

    def _wait_for_room(self) -> None:
        while self._outstanding >= self.capacity and not self._stopped:
            self._cond.wait(0.1)
        if self._stopped:
            raise GeneratorStopped("the receiver's operator stopped; the item has nowhere to go")

    # -- cutting -------------------------------------------------------------
    def start(self) -> None:
        """Start the block interval timer."""
        if self._timer is None:
            self._timer = threading.Thread(target=self._tick, daemon=True, name="block-generator")
            self._timer.start()

    def _tick(self) -> None:
        due = time.monotonic() + self.interval
        while not self._halt.wait(max(0.0, due - time.monotonic())):
            self.cut()
            due += self.interval
            now = time.monotonic()
            if due <= now:  # fell behind (e.g. the process was paused): no burst of cuts
                due = now + self.interval

    def cut(self) -> Block | None:
        """Cut what was added since the last cut into a block, if any and if there is room."""
        with self._cond:
            if not (self._buffer or self._metadata) or self._outstanding >= self.capacity:
                return None
            block = Block(self._next_seq, self._buffer, self._metadata, self.items_added,
                          time.monotonic())
            self._buffer, self._metadata = [], []
            self._next_seq += 1
            self._outstanding += 1
            self._blocks.append(block)
            self._cond.notify_all()
            return block

    # -- pushing side --------------------------------------------------------
    def take(self, timeout: float | None = None) -> Block | None:
        """The oldest cut block not taken yet, waiting up to ``timeout``; None if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._blocks:
                left = None if deadline is None else deadline - time.monotonic()
                if self._stopped or (left is not None and left <= 0):
                    return None
                self._cond.wait(left)
            return self._blocks.popleft()

    def release(self, count: int = 1) -> None:
        """``count`` taken blocks were emitted: room for as many new ones."""
        with self._cond:
            self._outstanding = max(0, self._outstanding - count)
            self._cond.notify_all()

    # -- state ---------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Blocks cut and not yet released."""
        return self._outstanding

    @property
    def idle(self) -> bool:
        """Nothing buffered and no block outstanding."""
        with self._cond:
            return not (self._buffer or self._metadata) and self._outstanding == 0

    def stop(self) -> None:
        """Stop the timer and refuse further items (waiting ``add`` calls raise)."""
        self._halt.set()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(2.0)
