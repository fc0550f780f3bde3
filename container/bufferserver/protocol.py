"""Buffer-server wire protocol: message types, frame layout, encoding and request parsing.

Only bytes live here (no sockets, no storage): the :class:`MessageType` codes,
the errors, the ``struct`` layouts and constants of frames, the encoders of the
four requests and :class:`Body`, the server's parser of a request frame.

Wire format
-----------
Every message is one frame: a 4-byte big-endian unsigned length ``N``, then
``N`` bytes whose first byte is the :class:`MessageType`. Integers are
big-endian; window ids are signed 64-bit; strings and the token are a 2-byte
length followed by the bytes (strings UTF-8).

=================  ===========================================================
type               body after the type byte
=================  ===========================================================
PAYLOAD            partition tag (u32), codec-encoded batch (rest of frame)
BEGIN_WINDOW,      window id (i64)
END_WINDOW,
CHECKPOINT,
RESET_WINDOW
WATERMARK          event-time watermark, epoch ms (i64), inside a window
END_STREAM         (empty)
PUBLISH            token, publisher id, from window (i64)
SUBSCRIBE          token, publisher id, from window (i64), partition mask
                   (u32), key count (u16), keys (u32 each), subscriber id
PURGE              token, publisher id ("" = every publisher), window (i64)
RESET              token, publisher id
OK                 optional UTF-8 text (rest of frame)
ERROR              UTF-8 reason (rest of frame)
=================  ===========================================================

A connection starts with one request. The server answers ``OK`` or ``ERROR``;
after an ``OK`` to ``PUBLISH`` the client streams data frames, after an ``OK``
to ``SUBSCRIBE`` the server does. ``ERROR`` from the server mid-stream means
the data the subscriber was reading is gone (publisher rewound or reset): the
client must not silently resume. The server never decodes payloads.
"""

from __future__ import annotations

import enum
import struct
from typing import Iterable

__all__ = [
    "MessageType", "BufferServerError", "ProtocolError",
    "encode_publish", "encode_subscribe", "encode_purge", "encode_reset",
    "MAX_FRAME", "FIRST_WINDOW",
]

#: Default largest frame (length field) accepted, 64 MiB.
MAX_FRAME = 64 << 20
#: A window id below every real one: subscribe from here to get everything.
FIRST_WINDOW = -(1 << 63)


class MessageType(enum.IntEnum):
    """First byte of every frame."""

    # data messages (publisher -> server -> subscribers)
    PAYLOAD = 1
    BEGIN_WINDOW = 2
    END_WINDOW = 3
    END_STREAM = 4
    CHECKPOINT = 5
    RESET_WINDOW = 6
    WATERMARK = 7
    # requests (client -> server, first frame of a connection)
    PUBLISH = 16
    SUBSCRIBE = 17
    PURGE = 18
    RESET = 19
    # responses (server -> client)
    OK = 32
    ERROR = 33


class BufferServerError(Exception):
    """A buffer-server operation failed (rejected request, lost stream, stopped server)."""


class ProtocolError(BufferServerError):
    """Bytes that break the wire format or a stream's window rules."""


PAYLOAD = MessageType.PAYLOAD
BEGIN = MessageType.BEGIN_WINDOW
END = MessageType.END_WINDOW
END_STREAM = MessageType.END_STREAM
CHECKPOINT = MessageType.CHECKPOINT
RESET_WINDOW = MessageType.RESET_WINDOW
WATERMARK = MessageType.WATERMARK
WINDOW_MSGS = frozenset({BEGIN, END, CHECKPOINT, RESET_WINDOW, WATERMARK})
REQUESTS = frozenset({MessageType.PUBLISH, MessageType.SUBSCRIBE,
                       MessageType.PURGE, MessageType.RESET})
KNOWN = frozenset(int(t) for t in MessageType)
#: int -> MessageType without an enum call on the hot path.
TYPE_OF: list[MessageType | None] = [None] * 256
for _t in MessageType:
    TYPE_OF[_t] = _t

LEN = struct.Struct(">I")
CTRL = struct.Struct(">IBq")          # window control frame: length 9, type, window id
PAYLOAD_HDR = struct.Struct(">IBI")   # length, type, partition tag
_U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
END_STREAM_FRAME = LEN.pack(1) + bytes([END_STREAM])


# --------------------------------------------------------------------------- frames

def encode_frame(mtype: int, body: bytes = b"") -> bytes:
    return LEN.pack(len(body) + 1) + bytes((mtype,)) + body


def _blob(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError("field longer than 65535 bytes")
    return _U16.pack(len(data)) + data


def as_token(token: bytes | str) -> bytes:
    return token.encode() if isinstance(token, str) else bytes(token)


def encode_publish(token: bytes, publisher_id: str, from_window: int) -> bytes:
    """Frame of a PUBLISH request."""
    return encode_frame(MessageType.PUBLISH, _blob(token) + _blob(publisher_id.encode()) + I64.pack(from_window))


def encode_subscribe(token: bytes, publisher_id: str, from_window: int, mask: int,
                     keys: Iterable[int], subscriber_id: str) -> bytes:
    """Frame of a SUBSCRIBE request."""
    keys = list(keys)
    body = (_blob(token) + _blob(publisher_id.encode()) + I64.pack(from_window) + U32.pack(mask)
            + _U16.pack(len(keys)) + b"".join(U32.pack(k) for k in keys) + _blob(subscriber_id.encode()))
    return encode_frame(MessageType.SUBSCRIBE, body)


def encode_purge(token: bytes, publisher_id: str, window: int) -> bytes:
    """Frame of a PURGE request."""
    return encode_frame(MessageType.PURGE, _blob(token) + _blob(publisher_id.encode()) + I64.pack(window))


def encode_reset(token: bytes, publisher_id: str) -> bytes:
    """Frame of a RESET request."""
    return encode_frame(MessageType.RESET, _blob(token) + _blob(publisher_id.encode()))


class Body:
    """Sequential reader of a request body; any overrun is a garbled frame."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 1

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError(f"garbled {TYPE_OF[self.data[0]].name} request: truncated body")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def blob(self) -> bytes:
        return self._take(_U16.unpack(self._take(2))[0])

    def text(self) -> str:
        try:
            return self.blob().decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"garbled {TYPE_OF[self.data[0]].name} request: bad UTF-8") from None

    def i64(self) -> int:
        return I64.unpack(self._take(8))[0]

    def u32(self) -> int:
        return U32.unpack(self._take(4))[0]

    def u16(self) -> int:
        return _U16.unpack(self._take(2))[0]

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"garbled {TYPE_OF[self.data[0]].name} request: "
                                f"{len(self.data) - self.pos} trailing bytes")
