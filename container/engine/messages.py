"""The data plane's messages: what moves between a node's upstreams, its queue and its sinks.

A message is ``(kind, value)``: :data:`DATA` carries a batch (a list of tuples,
or of Arrow record batches), :data:`WATERMARK` an event-time watermark (sent
just before its window's END_WINDOW), the others a window id (:data:`END_STREAM` none).
:class:`Receiver` is what a sink hands messages to: a downstream node, whether it
queues them (``put``) or runs them at once (``on_message``).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["DATA", "BEGIN_WINDOW", "END_WINDOW", "CHECKPOINT", "END_STREAM", "WATERMARK", "message_weight",
           "Receiver"]

DATA, BEGIN_WINDOW, END_WINDOW, CHECKPOINT, END_STREAM, WATERMARK = range(6)


def message_weight(kind: int, value: Any) -> int:
    """What a queued message counts toward QUEUE_CAPACITY: a data batch its tuples (a pyarrow
    record batch or table its rows), anything else 1."""
    if kind != DATA or not value:
        return 1
    if hasattr(value[0], "num_rows"):  # an Arrow stream's batch: a few record batches of many rows
        return max(sum(getattr(t, "num_rows", 1) for t in value), 1)
    return len(value)


class Receiver(Protocol):
    """A downstream node as its sinks see it."""

    def put(self, src: int, kind: int, value: Any) -> None:
        """Queue a message from upstream ``src`` (CONTAINER_LOCAL)."""

    def on_message(self, src: int, kind: int, value: Any) -> None:
        """Handle a message from upstream ``src`` now, on the caller's thread (THREAD_LOCAL)."""
