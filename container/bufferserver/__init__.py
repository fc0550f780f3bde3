"""Buffer server: keeps each publisher's stream by window and replays it to subscribers over TCP.

Every container runs one :class:`BufferServer`; its operators' output ports
publish into it (in-process, :class:`Publisher`) and downstream containers
read from it (:class:`Subscriber`), from any stored window on, exactly once
across reconnects. The package is split by what runs where:

``protocol``
    The wire format (frame layout, :class:`MessageType`, request encoding);
    bytes only.
``connection``
    Frame I/O on a socket, shared by the server and the clients.
``store``
    Per-publisher window storage: memory bound, spill to disk, backpressure,
    rewind and reset; the in-process :class:`Publisher`.
``server``
    :class:`BufferServer`, the TCP server in front of the stores.
``client``
    :class:`RemotePublisher`, :class:`Subscriber` and the :func:`purge` /
    :func:`reset` requests, run by whoever reads or writes over TCP.

The names below are the public API; import them from here.
"""

from stram.agent.bufferserver.client import RemotePublisher, Subscriber, purge, reset
from stram.agent.bufferserver.protocol import (FIRST_WINDOW, MAX_FRAME, BufferServerError, MessageType, ProtocolError,
                                               encode_publish, encode_purge, encode_reset, encode_subscribe)
from stram.agent.bufferserver.server import BufferServer
from stram.agent.bufferserver.store import Publisher

__all__ = [
    "MessageType", "BufferServer", "Publisher", "RemotePublisher", "Subscriber",
    "BufferServerError", "ProtocolError", "purge", "reset",
    "encode_publish", "encode_subscribe", "encode_purge", "encode_reset",
    "MAX_FRAME", "FIRST_WINDOW",
]
