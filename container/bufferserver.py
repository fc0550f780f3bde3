"""Buffer server: keeps each publisher's stream by window and replays it to subscribers over TCP.

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

Storage model
-------------
A publisher's stream is a list of *units*: the data messages from just after
one ``END_WINDOW`` up to and including the next ``END_WINDOW``. So a unit is
window ``w``'s ``BEGIN_WINDOW w`` ... ``END_WINDOW w`` preceded by any markers
(``CHECKPOINT``, ``RESET_WINDOW``) published between the previous window and
this one; a final unit may hold only markers and ``END_STREAM``. Subscribing
"from window ``f``" delivers the first unit whose window id is ``>= f`` and
everything after it. Frames are stored exactly as they travel, so sending is a
``sendmsg`` of stored buffers; when a publisher's memory passes the limit,
whole older units (and, only if that is not enough, the open one) move to an
append-only spill file per unit.

Memory bound: with a spool directory a publisher's in-memory bytes are at
most the limit whenever a call returns; without one, ``payload`` waits until
a purge makes room (13-byte control frames are always admitted, and a payload
larger than the whole limit only into an empty buffer). Buffers being sent
to a subscriber (at most 4 MiB each) are not counted.

Rewind and reset: re-publishing an id from window ``f`` drops windows
``>= f`` and any unfinished window; a subscriber that was already sent some of
the dropped data gets ``ERROR`` (it must be redeployed), the others continue
with the new data. ``RESET`` drops everything the same way.
"""

from __future__ import annotations

import bisect
import enum
import hmac
import itertools
import logging
import os
import re
import shutil
import socket
import struct
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Iterable, Iterator

__all__ = [
    "MessageType", "BufferServer", "Publisher", "RemotePublisher", "Subscriber",
    "BufferServerError", "ProtocolError", "purge", "reset",
    "encode_publish", "encode_subscribe", "encode_purge", "encode_reset",
    "MAX_FRAME", "FIRST_WINDOW",
]

log = logging.getLogger("container.bufferserver")

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


_PAYLOAD = MessageType.PAYLOAD
_BEGIN = MessageType.BEGIN_WINDOW
_END = MessageType.END_WINDOW
_END_STREAM = MessageType.END_STREAM
_CHECKPOINT = MessageType.CHECKPOINT
_RESET_WINDOW = MessageType.RESET_WINDOW
_WINDOW_MSGS = frozenset({_BEGIN, _END, _CHECKPOINT, _RESET_WINDOW})
_DATA_MSGS = frozenset({_PAYLOAD, _END_STREAM}) | _WINDOW_MSGS
_REQUESTS = frozenset({MessageType.PUBLISH, MessageType.SUBSCRIBE,
                       MessageType.PURGE, MessageType.RESET})
_KNOWN = frozenset(int(t) for t in MessageType)
#: int -> MessageType without an enum call on the hot path.
_TYPE_OF: list[MessageType | None] = [None] * 256
for _t in MessageType:
    _TYPE_OF[_t] = _t

_LEN = struct.Struct(">I")
_CTRL = struct.Struct(">IBq")          # window control frame: length 9, type, window id
_PAYLOAD_HDR = struct.Struct(">IBI")   # length, type, partition tag
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_END_STREAM_FRAME = _LEN.pack(1) + bytes([_END_STREAM])
_IOV_MAX = 1024                        # buffers per sendmsg (Linux IOV_MAX)
_SEND_BUDGET = 4 << 20                 # bytes a subscriber thread sends per batch
_RECV_SIZE = 1 << 20
_MAX_REQUEST = 1 << 20                 # largest request frame (before a connection's role is known)


# --------------------------------------------------------------------------- frames

def _frame(mtype: int, body: bytes = b"") -> bytes:
    return _LEN.pack(len(body) + 1) + bytes((mtype,)) + body


def _blob(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError("field longer than 65535 bytes")
    return _U16.pack(len(data)) + data


def _as_token(token: bytes | str) -> bytes:
    return token.encode() if isinstance(token, str) else bytes(token)


def encode_publish(token: bytes, publisher_id: str, from_window: int) -> bytes:
    """Frame of a PUBLISH request."""
    return _frame(MessageType.PUBLISH, _blob(token) + _blob(publisher_id.encode()) + _I64.pack(from_window))


def encode_subscribe(token: bytes, publisher_id: str, from_window: int, mask: int,
                     keys: Iterable[int], subscriber_id: str) -> bytes:
    """Frame of a SUBSCRIBE request."""
    keys = list(keys)
    body = (_blob(token) + _blob(publisher_id.encode()) + _I64.pack(from_window) + _U32.pack(mask)
            + _U16.pack(len(keys)) + b"".join(_U32.pack(k) for k in keys) + _blob(subscriber_id.encode()))
    return _frame(MessageType.SUBSCRIBE, body)


def encode_purge(token: bytes, publisher_id: str, window: int) -> bytes:
    """Frame of a PURGE request."""
    return _frame(MessageType.PURGE, _blob(token) + _blob(publisher_id.encode()) + _I64.pack(window))


def encode_reset(token: bytes, publisher_id: str) -> bytes:
    """Frame of a RESET request."""
    return _frame(MessageType.RESET, _blob(token) + _blob(publisher_id.encode()))


class _Body:
    """Sequential reader of a request body; any overrun is a garbled frame."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 1

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError(f"garbled {_TYPE_OF[self.data[0]].name} request: truncated body")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def blob(self) -> bytes:
        return self._take(_U16.unpack(self._take(2))[0])

    def text(self) -> str:
        try:
            return self.blob().decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"garbled {_TYPE_OF[self.data[0]].name} request: bad UTF-8") from None

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def u16(self) -> int:
        return _U16.unpack(self._take(2))[0]

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"garbled {_TYPE_OF[self.data[0]].name} request: "
                                f"{len(self.data) - self.pos} trailing bytes")


class _FrameReader:
    """Receives frames with ``recv_into`` into one reusable bytearray.

    :meth:`parse` returns ``(start, end)`` offsets of complete frames (length
    prefix included) in :attr:`buf`; they stay valid until the next :meth:`fill`.
    """

    __slots__ = ("sock", "max_frame", "buf", "view", "start", "end", "size", "bytes_received")

    def __init__(self, sock: socket.socket, max_frame: int, size: int = _RECV_SIZE) -> None:
        self.sock, self.max_frame, self.size = sock, max_frame, size
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.bytes_received = 0

    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return self.end - self.start

    def fill(self) -> int:
        """Receive once (blocking per the socket's timeout); 0 means EOF."""
        avail = self.end - self.start
        need = 4 if avail < 4 else 4 + _LEN.unpack_from(self.buf, self.start)[0]
        cap = len(self.buf)
        if cap - self.start < need or cap - self.end < min(64 << 10, cap >> 2):
            # room for a big frame plus one normal receive, so big frames rarely move
            target = need + self.size if need > self.size else self.size
            if cap < need or cap > 8 * target:
                new = bytearray(target)
                new[:avail] = self.view[self.start:self.end]
                self.view.release()
                self.buf, self.view = new, memoryview(new)
            else:
                self.buf[:avail] = self.buf[self.start:self.end]
            self.start, self.end = 0, avail
        n = self.sock.recv_into(self.view[self.end:])
        self.end += n
        self.bytes_received += n
        return n

    def parse(self, limit: int = 1 << 30) -> list[tuple[int, int]]:
        """Offsets of the complete frames received, at most ``limit`` of them."""
        out: list[tuple[int, int]] = []
        s, e, buf, mx = self.start, self.end, self.buf, self.max_frame
        unpack = _LEN.unpack_from
        while e - s >= 4 and len(out) < limit:
            (n,) = unpack(buf, s)
            if n > mx:
                raise ProtocolError(f"oversized frame: length {n} exceeds the limit of {mx} bytes")
            if n == 0:
                raise ProtocolError("garbled frame: zero length (no message type)")
            if e - s - 4 < n:
                break
            out.append((s, s + 4 + n))
            s += 4 + n
        self.start = s
        return out

    def read_frame(self) -> bytes | None:
        """The next frame's body (type byte first) as bytes; None at a clean EOF."""
        while True:
            frames = self.parse(limit=1)
            if frames:
                s, e = frames[0]
                return bytes(self.view[s + 4:e])
            if not self.fill():
                if self.pending():
                    raise ProtocolError(f"truncated frame: connection closed after {self.pending()} bytes of a frame")
                return None


def _send_buffers(sock: socket.socket, bufs: list) -> None:
    """Send a list of bytes-like objects with as few syscalls as possible."""
    if len(bufs) == 1:
        sock.sendall(bufs[0])
        return
    bufs = list(bufs)
    i, n = 0, len(bufs)
    while i < n:
        sent = sock.sendmsg(bufs[i:i + _IOV_MAX])
        while i < n:
            size = len(bufs[i])
            if sent >= size:
                sent -= size
                i += 1
            else:
                if sent:
                    bufs[i] = memoryview(bufs[i])[sent:]
                break


def _flatten(frames: list) -> list:
    """Stored frames -> buffers to send (a payload may be a (header, data) pair)."""
    out: list = []
    for f in frames:
        if f.__class__ is tuple:
            out += f
        else:
            out.append(f)
    return out


def _frame_len(f) -> int:
    return len(f[0]) + len(f[1]) if f.__class__ is tuple else len(f)


def _wanted(frame, mask: int, keys: frozenset) -> bool:
    """Partition filter: control frames always, a payload when ``tag & mask`` is a key."""
    head = frame[0] if frame.__class__ is tuple else frame
    return head[4] != _PAYLOAD or (_U32.unpack_from(head, 5)[0] & mask) in keys


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "<unknown peer>"


# --------------------------------------------------------------------------- storage

@dataclass(eq=False)
class _Unit:
    """One window's frames (plus the markers published before it)."""

    seq: int                                       #: position in the stream, never reused
    window: int | None = None                      #: id from BEGIN_WINDOW; None while only markers
    closed: bool = False                           #: END_WINDOW (or a final END_STREAM) stored
    #: in-memory frames after the spilled ones: bytes, or a (header, data) pair for
    #: payloads published in-process (stored without copying the data)
    frames: list = field(default_factory=list)
    mem_bytes: int = 0
    spilled: int = 0                               #: frames on disk (always a prefix)
    offsets: array = field(default_factory=lambda: array("q", [0]))  #: file offset of each spilled frame, then the size
    path: str | None = None
    alive: bool = True                             #: False once purged or rewound away

    def count(self) -> int:
        return self.spilled + len(self.frames)


@dataclass(eq=False)
class _Sub:
    """Server-side state of one subscriber connection."""

    sock: socket.socket
    peer: str
    name: str
    from_window: int
    mask: int
    keys: frozenset
    seq: int = 0                                   #: cursor: unit seq ...
    index: int = 0                                 #: ... and frame index in it
    passed: bool = False                           #: delivered a unit >= from_window (ids only grow)
    delivered_to: tuple[int, int] | None = None    #: cursor just after the last frame handed out
    error: str | None = None                       #: fail with this reason (ERROR frame)
    kicked: bool = False                           #: close without ERROR (client may reconnect)


class _Stream:
    """All stored data of one publisher id, guarded by ``cond``."""

    def __init__(self, server: "BufferServer", publisher_id: str) -> None:
        self.server = server
        self.id = publisher_id
        self.cond = threading.Condition(threading.Lock())
        self.units: list[_Unit] = []
        self.seqs = itertools.count()
        self.memory = 0
        self.spilled_bytes = 0
        self.generation = 0            #: bumped by every publisher attach and reset
        self.publisher_sock: socket.socket | None = None
        self.open: _Unit | None = None  #: unit receiving frames
        self.in_window = False
        self.last_window: int | None = None
        self.ended = False
        self.publishing = False        #: a publisher is attached
        self.subscribers: set[_Sub] = set()
        self.dir: str | None = None

    # -- publishing --------------------------------------------------------
    def attach(self, from_window: int, sock: socket.socket | None) -> int:
        with self.cond:
            self._truncate(lambda u: u.window is None or u.window >= from_window or not u.closed,
                           f"publisher {self.id!r} rewound to window {from_window}")
            self.generation += 1
            self.publishing = True
            old, self.publisher_sock = self.publisher_sock, sock
            self.cond.notify_all()
            gen = self.generation
        _shutdown(old)
        return gen

    def detach(self, gen: int) -> None:
        with self.cond:
            if gen == self.generation:
                self.publisher_sock = None
                self.publishing = False

    def append(self, gen: int, mtype: int, frame: bytes, window: int = 0) -> None:
        with self.cond:
            self._append(gen, mtype, frame, window, _frame_len(frame))
            self.cond.notify_all()

    def append_many(self, gen: int, items: list[tuple[int, bytes, int]]) -> None:
        with self.cond:
            try:
                for mtype, frame, window in items:
                    self._append(gen, mtype, frame, window, len(frame))
            finally:
                self.cond.notify_all()

    def _append(self, gen: int, mtype: int, frame, window: int, size: int) -> None:
        if gen != self.generation:
            raise BufferServerError(f"publisher {self.id!r} was superseded or reset")
        if self.server._stopping:
            raise BufferServerError("buffer server stopped")
        if self.ended:
            raise ProtocolError(f"publisher {self.id!r}: data after END_STREAM")
        if mtype == _PAYLOAD:
            if not self.in_window:
                raise ProtocolError(f"publisher {self.id!r}: PAYLOAD outside a window")
            if self.memory + size > self.server.memory_limit:
                self._make_room(gen, size)
            unit = self.open
        elif mtype == _BEGIN:
            if self.in_window:
                raise ProtocolError(f"publisher {self.id!r}: BEGIN_WINDOW {window} inside window {self.open.window}")
            if self.last_window is not None and window <= self.last_window:
                raise ProtocolError(f"publisher {self.id!r}: window {window} does not follow {self.last_window}")
            unit = self.open
            if unit is None:
                unit = self.open = _Unit(next(self.seqs))
                self.units.append(unit)
            unit.window = self.last_window = window
            self.in_window = True
        elif mtype == _END:
            if not self.in_window or self.open.window != window:
                opened = f"BEGIN_WINDOW {self.open.window}" if self.in_window else "no open window"
                raise ProtocolError(f"publisher {self.id!r}: END_WINDOW {window} does not match {opened}")
            unit = self.open
        else:  # markers and END_STREAM go into the open unit
            unit = self.open
            if unit is None:
                unit = self.open = _Unit(next(self.seqs))
                self.units.append(unit)
        unit.frames.append(frame)
        unit.mem_bytes += size
        self.memory += size
        if mtype == _END or mtype == _END_STREAM:
            unit.closed = True
            self.open = None
            self.in_window = False
            self.ended = mtype == _END_STREAM
        if self.memory > self.server.memory_limit and self.server.spool_root is not None:
            self._spill(self.server.memory_limit, include_open=True)

    def _make_room(self, gen: int, size: int) -> None:
        """Spill, or wait for a purge, until ``size`` more bytes fit the limit."""
        limit = self.server.memory_limit
        if self.server.spool_root is not None:
            self._spill(max(limit // 2 - size, 0), include_open=False)
            return
        while self.memory and self.memory + size > limit:
            if self.server._stopping:
                raise BufferServerError("buffer server stopped")
            self.cond.wait(0.5)
            if gen != self.generation:
                raise BufferServerError(f"publisher {self.id!r} was superseded or reset")

    def _spill(self, target: int, include_open: bool) -> None:
        for unit in self.units:
            if self.memory <= target:
                return
            if unit.frames and (unit.closed or include_open):
                self._spill_unit(unit)

    def _spill_unit(self, unit: _Unit) -> None:
        if unit.path is None:
            if self.dir is None:
                self.dir = self.server._stream_dir(self.id)
            unit.path = os.path.join(self.dir, f"{unit.seq:010d}.spill")
        with open(unit.path, "ab") as f:
            f.writelines(_flatten(unit.frames))
        offsets = unit.offsets
        for fr in unit.frames:
            offsets.append(offsets[-1] + _frame_len(fr))
        unit.spilled += len(unit.frames)
        self.spilled_bytes += unit.mem_bytes
        self.memory -= unit.mem_bytes
        unit.frames = []
        unit.mem_bytes = 0

    # -- dropping ----------------------------------------------------------
    def _drop_units(self, units: list[_Unit]) -> None:
        for u in units:
            u.alive = False
            self.memory -= u.mem_bytes
            self.spilled_bytes -= u.offsets[-1]
            if u.path is not None:
                try:
                    os.unlink(u.path)
                except FileNotFoundError:
                    pass

    def _truncate(self, drop_from, reason: str) -> None:
        """Drop the first unit matching ``drop_from`` and every unit after it."""
        i = next((k for k, u in enumerate(self.units) if drop_from(u)), len(self.units))
        if i < len(self.units):
            boundary = (self.units[i].seq, 0)
            for sub in self.subscribers:
                if sub.delivered_to is not None and sub.delivered_to > boundary:
                    sub.error = reason
                elif (sub.seq, sub.index) > boundary:
                    sub.seq, sub.index = boundary
            self._drop_units(self.units[i:])
            del self.units[i:]
        self.open = None
        self.in_window = self.ended = False
        self.last_window = self.units[-1].window if self.units else None

    def purge(self, window: int) -> int:
        with self.cond:
            n = 0
            for u in self.units:
                if u.window is None or u.window > window or not u.closed:
                    break
                n += 1
            self._drop_units(self.units[:n])
            del self.units[:n]
            self.cond.notify_all()
            return n

    def reset(self) -> None:
        with self.cond:
            self._truncate(lambda u: True, f"publisher {self.id!r} was reset")
            kicked = [s for s in self.subscribers if s.error is None]
            for sub in kicked:
                sub.kicked = True
            self.generation += 1
            self.publishing = False
            old, self.publisher_sock = self.publisher_sock, None
            subs = [s.sock for s in kicked]     # failed ones still send their ERROR
            self.cond.notify_all()
        _shutdown(old)
        for s in subs:
            _shutdown(s)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- subscribing -------------------------------------------------------
    def _unit_at(self, seq: int) -> _Unit | None:
        i = bisect.bisect_left(self.units, seq, key=lambda u: u.seq)
        return self.units[i] if i < len(self.units) else None

    def collect(self, sub: _Sub):
        """Next thing to send to ``sub`` (call with ``cond`` held); None = wait.

        Returns ``("mem", frames)``, ``("file", (unit, first, last, offsets))``,
        ``("end", None)``, ``("stop", None)`` or ``("fail", reason)``.
        """
        while True:
            if sub.error is not None:
                return "fail", sub.error
            if sub.kicked or self.server._stopping:
                return "stop", None
            u = self._unit_at(sub.seq)
            if u is None:
                return ("end", None) if self.ended else None
            if u.seq != sub.seq:
                sub.seq, sub.index = u.seq, 0
            if not sub.passed:
                if u.window is None:
                    if not u.closed:
                        return None          # markers of a window not yet begun
                elif u.window < sub.from_window:
                    sub.seq, sub.index = u.seq + 1, 0
                    continue
                else:
                    sub.passed = True
            if sub.index >= u.count():
                if u.closed or u is not self.units[-1]:
                    sub.seq, sub.index = u.seq + 1, 0
                    continue
                return None
            first = sub.index
            if first < u.spilled:
                offsets = u.offsets
                start = offsets[first]
                last = bisect.bisect_right(offsets, start + _SEND_BUDGET, first + 1, u.spilled + 1) - 1
                last = min(max(last, first + 1), u.spilled)
                sub.index = last
                sub.delivered_to = (u.seq, last)
                return "file", (u, first, last, offsets[first:last + 1])
            k = first - u.spilled
            frames = u.frames
            total, j = 0, k
            while j < len(frames) and total < _SEND_BUDGET:
                f = frames[j]
                total += len(f[0]) + len(f[1]) if f.__class__ is tuple else len(f)
                j += 1
            sub.index = u.spilled + j
            sub.delivered_to = (u.seq, sub.index)
            return "mem", frames[k:j]

    def stats(self) -> dict:
        with self.cond:
            windows = [u.window for u in self.units if u.window is not None]
            return {"memory_bytes": self.memory, "spilled_bytes": self.spilled_bytes,
                    "windows": len(windows),
                    "first_window": windows[0] if windows else None,
                    "last_window": windows[-1] if windows else None,
                    "subscribers": len(self.subscribers),
                    "publishing": self.publishing}


def _readable(sock: socket.socket) -> bool:
    """True when the peer sent data or closed (a subscriber must do neither)."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _close_with_error(sock: socket.socket, reason: str) -> None:
    """Best effort: send ERROR, then drop unread input so the close does not reset the peer."""
    try:
        sock.settimeout(0.5)
        sock.sendall(_frame(MessageType.ERROR, reason.encode()))
        sock.shutdown(socket.SHUT_WR)
        for _ in range(64):
            if not sock.recv(65536, socket.MSG_DONTWAIT):
                break
    except OSError:
        pass


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# --------------------------------------------------------------------------- in-process publisher

class Publisher:
    """Publishes one port's stream into a :class:`BufferServer` of the same process.

    Obtained from :meth:`BufferServer.publisher`. Methods raise
    :class:`BufferServerError` once another publisher took over the id or the
    id was reset, and :class:`ProtocolError` for calls out of window order.
    ``payload`` blocks while the publisher is over its memory limit and the
    server has no spool directory (backpressure).
    """

    __slots__ = ("publisher_id", "_stream", "_gen", "_max_frame")

    def __init__(self, stream: _Stream, generation: int, max_frame: int) -> None:
        self.publisher_id = stream.id
        self._stream, self._gen, self._max_frame = stream, generation, max_frame

    def begin_window(self, window_id: int) -> None:
        """Start window ``window_id`` (must be above every earlier window)."""
        self._stream.append(self._gen, _BEGIN, _CTRL.pack(9, _BEGIN, window_id), window_id)

    def payload(self, tag: int, data: bytes) -> None:
        """Append one codec-encoded batch with partition tag ``tag`` to the open window."""
        if data.__class__ is not bytes:
            data = bytes(data)      # stored by reference: only immutable bytes
        size = len(data)
        if size + 5 > self._max_frame:
            raise ValueError(f"payload of {size} bytes exceeds the frame limit of {self._max_frame}")
        self._stream.append(self._gen, _PAYLOAD, (_PAYLOAD_HDR.pack(size + 5, _PAYLOAD, tag), data))

    def end_window(self, window_id: int) -> None:
        """End the open window, which must be ``window_id``."""
        self._stream.append(self._gen, _END, _CTRL.pack(9, _END, window_id), window_id)

    def checkpoint(self, window_id: int) -> None:
        """Append a CHECKPOINT marker for ``window_id``."""
        self._stream.append(self._gen, _CHECKPOINT, _CTRL.pack(9, _CHECKPOINT, window_id), window_id)

    def reset_window(self, window_id: int) -> None:
        """Append a RESET_WINDOW marker carrying ``window_id``."""
        self._stream.append(self._gen, _RESET_WINDOW, _CTRL.pack(9, _RESET_WINDOW, window_id), window_id)

    def end_stream(self) -> None:
        """Append END_STREAM; nothing may follow."""
        self._stream.append(self._gen, _END_STREAM, _END_STREAM_FRAME)

    def flush(self) -> None:
        """Nothing to flush in-process (present for parity with :class:`RemotePublisher`)."""

    def close(self) -> None:
        """Detach; the stored data stays until purged or reset."""
        self._stream.detach(self._gen)


# --------------------------------------------------------------------------- server

class BufferServer:
    """The buffer server of one container.

    Parameters
    ----------
    token : bytes
        Every request must present it (``bufferServerToken``).
    host, port : str, int
        Address to bind; port 0 picks a free port.
    memory_limit_mb : float
        In-memory bytes allowed per publisher (MiB).
    spool_dir : str, optional
        Where windows beyond the memory limit spill. None: publishers block
        in ``payload`` until a purge frees memory.
    max_frame : int
        Largest frame length accepted; a longer length closes the connection.
    handshake_timeout : float
        Seconds a new connection has to send its request.

    Notes
    -----
    One thread accepts, one thread serves each connection; idle threads sleep
    on sockets or conditions. A bad connection is closed with a warning on the
    ``container.bufferserver`` logger and never affects others.
    """

    def __init__(self, token: bytes | str, host: str = "127.0.0.1", port: int = 0,
                 memory_limit_mb: float = 64, spool_dir: str | None = None,
                 max_frame: int = MAX_FRAME, handshake_timeout: float = 10.0) -> None:
        self.token = _as_token(token)
        self.host, self.port = host, port
        self.memory_limit = int(memory_limit_mb * (1 << 20))
        self.spool_dir = spool_dir
        self.max_frame = max_frame
        self.handshake_timeout = handshake_timeout
        self.spool_root: str | None = None
        if spool_dir is not None:
            os.makedirs(spool_dir, exist_ok=True)
            self.spool_root = tempfile.mkdtemp(prefix="bufferserver-", dir=spool_dir)
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = False
        self._dir_ids = itertools.count()

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> tuple[str, int]:
        """Bind and start serving; returns the bound ``(host, port)``."""
        listener = socket.create_server((self.host, self.port), backlog=128)
        self._listener = listener
        self.host, self.port = listener.getsockname()[:2]
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name=f"bufferserver-accept-{self.port}")
        self._accept_thread.start()
        log.info("buffer server listening on %s:%d", self.host, self.port)
        return self.host, self.port

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving: close every connection, wake blocked publishers, delete spill files.

        Parameters
        ----------
        grace : float
            Seconds to wait for connection threads to finish.
        """
        self._stopping = True
        if self._listener is not None:
            _shutdown(self._listener)
            self._listener.close()
        with self._lock:
            streams = list(self._streams.values())
            conns = dict(self._conns)
        for st in streams:
            with st.cond:
                st.cond.notify_all()
        for sock in conns:
            _shutdown(sock)
        deadline = time.monotonic() + grace
        for t in [self._accept_thread, *conns.values()]:
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        if self.spool_root is not None:
            shutil.rmtree(self.spool_root, ignore_errors=True)

    def __enter__(self) -> "BufferServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- in-process API ----------------------------------------------------
    def publisher(self, publisher_id: str, from_window: int) -> Publisher:
        """Publish ``publisher_id`` from this process.

        Parameters
        ----------
        publisher_id : str
            ``"<operatorId>.<portName>"``.
        from_window : int
            Stored windows ``>= from_window`` (and any unfinished window) are
            dropped and replaced by what is published next; subscribers that
            already received dropped data get an ERROR.

        Returns
        -------
        Publisher
        """
        stream = self._stream(publisher_id)
        return Publisher(stream, stream.attach(from_window, None), self.max_frame)

    def purge(self, publisher_id: str, window: int) -> int:
        """Drop complete windows ``<= window`` of one publisher (``""``: all); returns how many."""
        with self._lock:
            streams = list(self._streams.values()) if publisher_id == "" else \
                [s for s in (self._streams.get(publisher_id),) if s is not None]
        return sum(s.purge(window) for s in streams)

    def reset(self, publisher_id: str) -> None:
        """Drop all data of ``publisher_id``; disconnect its publisher and subscribers.

        Subscribers that had received some of the data get an ERROR; the
        others are disconnected without one and may subscribe again.
        """
        with self._lock:
            stream = self._streams.get(publisher_id)
        if stream is not None:
            stream.reset()      # the (now empty) entry stays: waiting subscribers hold it

    def disconnect_subscribers(self, publisher_id: str | None = None) -> int:
        """Close subscriber connections (of one publisher or all) without an ERROR.

        Clients with ``reconnect`` resume exactly where they were; used by
        tests and when a stream is rewired. Returns the number closed.
        """
        with self._lock:
            streams = [s for k, s in self._streams.items() if publisher_id in (None, k)]
        n = 0
        for st in streams:
            with st.cond:
                subs = list(st.subscribers)
                for sub in subs:
                    sub.kicked = True
                st.cond.notify_all()
            for sub in subs:
                _shutdown(sub.sock)
            n += len(subs)
        return n

    def stats(self) -> dict[str, dict]:
        """Per publisher id: ``memory_bytes``, ``spilled_bytes``, ``windows``,
        ``first_window``, ``last_window`` (None when empty), ``subscribers``, ``publishing``."""
        with self._lock:
            streams = list(self._streams.items())
        return {k: s.stats() for k, s in streams}

    def _stream(self, publisher_id: str) -> _Stream:
        with self._lock:
            stream = self._streams.get(publisher_id)
            if stream is None:
                stream = self._streams[publisher_id] = _Stream(self, publisher_id)
            return stream

    def _stream_dir(self, publisher_id: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", publisher_id)[:80]
        path = os.path.join(self.spool_root, f"{next(self._dir_ids):04d}-{safe}")
        os.makedirs(path, exist_ok=True)
        return path

    # -- connections -------------------------------------------------------
    def _accept_loop(self) -> None:
        listener = self._listener
        while not self._stopping:
            try:
                conn, _ = listener.accept()
            except OSError as e:
                if self._stopping:
                    break
                log.warning("buffer server accept failed: %s", e)
                time.sleep(0.1)
                continue
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name=f"bufferserver-conn-{_peer_name(conn)}")
            with self._lock:
                if self._stopping:
                    conn.close()
                    break
                self._conns[conn] = t
            t.start()

    def _serve(self, sock: socket.socket) -> None:
        peer = _peer_name(sock)
        reader = _FrameReader(sock, min(self.max_frame, _MAX_REQUEST), size=64 << 10)
        try:
            sock.settimeout(self.handshake_timeout)
            try:
                body = reader.read_frame()
            except socket.timeout:
                raise ProtocolError(f"no request within {self.handshake_timeout:g}s") from None
            if body is None:
                log.debug("connection from %s closed before a request", peer)
                return
            sock.settimeout(None)
            reader.max_frame = self.max_frame
            mtype = body[0]
            if mtype not in _KNOWN:
                raise ProtocolError(f"unknown message type {mtype}")
            if mtype not in _REQUESTS:
                raise ProtocolError(f"expected a request, got {_TYPE_OF[mtype].name}")
            req = _Body(body)
            try:
                token = req.blob()
            except ProtocolError:
                raise ProtocolError(f"missing token in {_TYPE_OF[mtype].name} request") from None
            if not token:
                raise ProtocolError(f"missing token in {_TYPE_OF[mtype].name} request")
            if not hmac.compare_digest(token, self.token):
                raise ProtocolError(f"wrong token in {_TYPE_OF[mtype].name} request")
            publisher_id = req.text()
            if mtype == MessageType.PUBLISH:
                from_window = req.i64()
                req.done()
                self._serve_publisher(sock, peer, reader, publisher_id, from_window)
            elif mtype == MessageType.SUBSCRIBE:
                from_window, mask, nkeys = req.i64(), req.u32(), req.u16()
                keys = frozenset(req.u32() for _ in range(nkeys))
                name = req.text()
                req.done()
                self._serve_subscriber(sock, peer, publisher_id, from_window, mask, keys, name)
            elif mtype == MessageType.PURGE:
                window = req.i64()
                req.done()
                n = self.purge(publisher_id, window)
                sock.sendall(_frame(MessageType.OK, f"purged {n} windows".encode()))
            else:
                req.done()
                self.reset(publisher_id)
                sock.sendall(_frame(MessageType.OK))
        except ProtocolError as e:
            log.warning("buffer server: closing connection from %s: %s", peer, e)
            _close_with_error(sock, str(e))
        except BufferServerError as e:
            log.info("buffer server: closing connection from %s: %s", peer, e)
        except OSError as e:
            if not self._stopping:
                log.info("buffer server: connection from %s lost: %s", peer, e)
        except Exception:  # never let one connection take the server down
            log.exception("buffer server: unexpected error on connection from %s", peer)
        finally:
            with self._lock:
                self._conns.pop(sock, None)
            sock.close()

    def _serve_publisher(self, sock: socket.socket, peer: str, reader: _FrameReader,
                         publisher_id: str, from_window: int) -> None:
        stream = self._stream(publisher_id)
        gen = stream.attach(from_window, sock)
        log.debug("publisher %r from %s, window %d", publisher_id, peer, from_window)
        try:
            sock.sendall(_frame(MessageType.OK))
            buf, view = reader.buf, reader.view
            unpack_i64 = _I64.unpack_from
            while True:
                frames = reader.parse()
                if frames:
                    buf, view = reader.buf, reader.view
                    items = []
                    for s, e in frames:
                        mtype, n = buf[s + 4], e - s - 4
                        if mtype == _PAYLOAD:
                            if n < 5:
                                raise ProtocolError("garbled PAYLOAD frame: no partition tag")
                            items.append((mtype, bytes(view[s:e]), 0))
                        elif mtype in _WINDOW_MSGS:
                            if n != 9:
                                raise ProtocolError(f"garbled {_TYPE_OF[mtype].name} frame: {n} bytes")
                            items.append((mtype, bytes(view[s:e]), unpack_i64(buf, s + 5)[0]))
                        elif mtype == _END_STREAM:
                            if n != 1:
                                raise ProtocolError(f"garbled END_STREAM frame: {n} bytes")
                            items.append((mtype, _END_STREAM_FRAME, 0))
                        elif mtype in _KNOWN:
                            raise ProtocolError(f"unexpected {_TYPE_OF[mtype].name} on a publisher connection")
                        else:
                            raise ProtocolError(f"unknown message type {mtype}")
                    stream.append_many(gen, items)
                if not reader.fill():
                    if stream.generation != gen:
                        raise BufferServerError(f"publisher {publisher_id!r} was superseded or reset")
                    if reader.pending():
                        raise ProtocolError(f"truncated frame: connection closed after "
                                            f"{reader.pending()} bytes of a frame")
                    log.debug("publisher %r from %s disconnected", publisher_id, peer)
                    return
        finally:
            stream.detach(gen)

    def _serve_subscriber(self, sock: socket.socket, peer: str, publisher_id: str, from_window: int,
                          mask: int, keys: frozenset, name: str) -> None:
        stream = self._stream(publisher_id)
        sub = _Sub(sock, peer, name, from_window, mask, keys)
        with stream.cond:
            stream.subscribers.add(sub)
        log.debug("subscriber %r from %s to %r from window %d", name, peer, publisher_id, from_window)
        fh = None
        try:
            sock.sendall(_frame(MessageType.OK))
            while True:
                with stream.cond:
                    while (item := stream.collect(sub)) is None:
                        if not stream.cond.wait(1.0) and _readable(sock):
                            item = ("stop", None)   # the client sent something or went away
                            break
                kind, value = item
                if kind == "mem":
                    if mask:
                        value = [f for f in value if _wanted(f, mask, keys)]
                    if value:
                        _send_buffers(sock, _flatten(value))
                elif kind == "file":
                    unit, first, last, offsets = value
                    if fh is None or fh.name != unit.path:
                        if fh is not None:
                            fh.close()
                        try:
                            fh = open(unit.path, "rb")
                        except FileNotFoundError:
                            if unit.alive:
                                raise
                            fh = None
                            continue          # purged meanwhile: nobody needs it any more
                    start = offsets[0]
                    fh.seek(start)
                    data = fh.read(offsets[-1] - start)
                    if mask:
                        mv = memoryview(data)
                        parts = [mv[a - start:b - start] for a, b in zip(offsets, offsets[1:])]
                        parts = [f for f in parts if _wanted(f, mask, keys)]
                        if parts:
                            _send_buffers(sock, parts)
                    else:
                        sock.sendall(data)
                elif kind == "end":
                    sock.shutdown(socket.SHUT_WR)
                    return
                elif kind == "fail":
                    log.info("subscriber %r from %s: %s", name, peer, value)
                    sock.sendall(_frame(MessageType.ERROR, value.encode()))
                    return
                else:
                    return
        finally:
            if fh is not None:
                fh.close()
            with stream.cond:
                stream.subscribers.discard(sub)


# --------------------------------------------------------------------------- clients

def _connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _expect_ok(reader: _FrameReader, what: str) -> bytes:
    body = reader.read_frame()
    if body is None:
        raise BufferServerError(f"{what}: connection closed by the buffer server")
    if body[0] == MessageType.ERROR:
        raise BufferServerError(f"{what}: {body[1:].decode(errors='replace')}")
    if body[0] != MessageType.OK:
        raise ProtocolError(f"{what}: expected OK, got message type {body[0]}")
    return body[1:]


def _request(host: str, port: int, frame: bytes, what: str, timeout: float) -> bytes:
    with _connect(host, port, timeout) as sock:
        sock.sendall(frame)
        return _expect_ok(_FrameReader(sock, MAX_FRAME, size=4096), what)


def purge(host: str, port: int, token: bytes | str, publisher_id: str, window: int,
          timeout: float = 10.0) -> None:
    """Ask a buffer server to drop complete windows ``<= window`` (``publisher_id=""``: all publishers).

    Raises
    ------
    BufferServerError
        When the server rejects the request.
    """
    _request(host, port, encode_purge(_as_token(token), publisher_id, window),
             f"purge {publisher_id!r}", timeout)


def reset(host: str, port: int, token: bytes | str, publisher_id: str, timeout: float = 10.0) -> None:
    """Ask a buffer server to drop all data of ``publisher_id`` and disconnect its clients."""
    _request(host, port, encode_reset(_as_token(token), publisher_id), f"reset {publisher_id!r}", timeout)


class RemotePublisher:
    """Publishes a stream into a buffer server over TCP.

    Same methods as :class:`Publisher`. Frames are buffered and sent in one
    ``sendmsg`` when ``flush_bytes`` are pending and at every ``end_window``,
    ``checkpoint`` and ``end_stream``. Backpressure from the server shows up
    as a blocking send.

    Parameters
    ----------
    host, port, token
        The buffer server and its token.
    publisher_id : str
        ``"<operatorId>.<portName>"``.
    from_window : int
        Rewind point, as for :meth:`BufferServer.publisher`.
    flush_bytes : int
        Pending bytes that trigger a send.
    """

    def __init__(self, host: str, port: int, token: bytes | str, publisher_id: str, from_window: int,
                 *, flush_bytes: int = 1 << 20, connect_timeout: float = 10.0,
                 max_frame: int = MAX_FRAME) -> None:
        self.publisher_id = publisher_id
        self.flush_bytes, self.max_frame = flush_bytes, max_frame
        self._pending: list = []
        self._pending_bytes = 0
        self.bytes_sent = 0
        self._sock = _connect(host, port, connect_timeout)
        try:
            self._sock.sendall(encode_publish(_as_token(token), publisher_id, from_window))
            _expect_ok(_FrameReader(self._sock, MAX_FRAME, size=4096), f"publish {publisher_id!r}")
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)

    def _ctrl(self, mtype: int, window_id: int, flush: bool) -> None:
        self._pending.append(_CTRL.pack(9, mtype, window_id))
        self._pending_bytes += 13
        if flush or self._pending_bytes >= self.flush_bytes:
            self.flush()

    def begin_window(self, window_id: int) -> None:
        """Start window ``window_id``."""
        self._ctrl(_BEGIN, window_id, False)

    def payload(self, tag: int, data: bytes) -> None:
        """Append one encoded batch with partition tag ``tag``."""
        if len(data) + 5 > self.max_frame:
            raise ValueError(f"payload of {len(data)} bytes exceeds the frame limit of {self.max_frame}")
        self._pending.append(_PAYLOAD_HDR.pack(len(data) + 5, _PAYLOAD, tag))
        self._pending.append(data)
        self._pending_bytes += len(data) + 9
        if self._pending_bytes >= self.flush_bytes:
            self.flush()

    def end_window(self, window_id: int) -> None:
        """End window ``window_id`` and send what is pending."""
        self._ctrl(_END, window_id, True)

    def checkpoint(self, window_id: int) -> None:
        """Append a CHECKPOINT marker and send what is pending."""
        self._ctrl(_CHECKPOINT, window_id, True)

    def reset_window(self, window_id: int) -> None:
        """Append a RESET_WINDOW marker."""
        self._ctrl(_RESET_WINDOW, window_id, False)

    def end_stream(self) -> None:
        """Append END_STREAM and send what is pending."""
        self._pending.append(_END_STREAM_FRAME)
        self._pending_bytes += len(_END_STREAM_FRAME)
        self.flush()

    def flush(self) -> None:
        """Send every pending frame."""
        if not self._pending:
            return
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        try:
            _send_buffers(self._sock, pending)
        except OSError as e:
            raise BufferServerError(f"publisher {self.publisher_id!r}: connection lost: {e}") from e
        self.bytes_sent += sum(len(b) for b in pending)

    def close(self) -> None:
        """Flush and close; the server keeps the data."""
        try:
            self.flush()
        finally:
            try:
                self._sock.shutdown(socket.SHUT_WR)
                self._sock.settimeout(5.0)
                while self._sock.recv(4096):   # wait for the server to finish reading
                    pass
            except OSError:
                pass
            self._sock.close()

    def __enter__(self) -> "RemotePublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


Message = tuple[MessageType, object]


class Subscriber:
    """Reads one publisher's stream from a buffer server, exactly once across reconnects.

    Messages are ``(MessageType, value)``: the window id for BEGIN_WINDOW,
    END_WINDOW, CHECKPOINT and RESET_WINDOW, ``(tag, bytes)`` for PAYLOAD and
    None for END_STREAM (the last message).

    When the connection drops and ``reconnect`` is on, the subscriber
    subscribes again from the window it was in and skips the messages of that
    window it already delivered (the server's order is deterministic), with
    exponential backoff between attempts. An ERROR from the server (rejected
    request, publisher rewound or reset under it) raises
    :class:`BufferServerError` instead.

    Parameters
    ----------
    host, port, token
        The upstream buffer server.
    publisher_id : str
        Stream to read.
    from_window : int
        First window wanted (the first delivered is the first id ``>=`` it).
    mask : int
        Partition mask; 0 delivers every payload.
    keys : iterable of int
        A payload with tag ``t`` is delivered when ``t & mask`` is in ``keys``.
    reconnect : bool
        Resume after a dropped connection.
    backoff : (float, float)
        First and largest delay between reconnect attempts, seconds.
    subscriber_id : str
        Name in the server's logs.
    """

    def __init__(self, host: str, port: int, token: bytes | str, publisher_id: str, from_window: int,
                 mask: int = 0, keys: Iterable[int] = (), *, reconnect: bool = True,
                 backoff: tuple[float, float] = (0.05, 2.0), subscriber_id: str = "",
                 connect_timeout: float = 10.0, max_frame: int = MAX_FRAME) -> None:
        self.host, self.port, self.token = host, port, _as_token(token)
        self.publisher_id, self.from_window = publisher_id, from_window
        self.mask, self.keys = mask, tuple(keys)
        self.reconnect, self.backoff = reconnect, backoff
        self.subscriber_id = subscriber_id or f"{publisher_id}@{os.getpid()}"
        self.connect_timeout, self.max_frame = connect_timeout, max_frame
        self._bytes_done = 0              # bytes of closed connections
        #: Connections made after the first.
        self.reconnects = 0
        #: Messages received again after a reconnect and dropped (already delivered).
        self.skipped = 0
        self._sock: socket.socket | None = None
        self._reader: _FrameReader | None = None
        self._resume_from = from_window   # window to subscribe from on reconnect
        self._count = 0                   # messages delivered since the current unit began
        self._skip = 0                    # messages to drop after a reconnect
        self._ended = False
        self._closed = threading.Event()
        self._delay = backoff[0]
        self._connections = 0
        self._timeout: float | None = None
        self._deferred: BufferServerError | None = None

    # -- connection --------------------------------------------------------
    def _open(self) -> None:
        sock = _connect(self.host, self.port, self.connect_timeout)
        try:
            sock.sendall(encode_subscribe(self.token, self.publisher_id, self._resume_from,
                                          self.mask, self.keys, self.subscriber_id))
            reader = _FrameReader(sock, self.max_frame)
            _expect_ok(reader, f"subscribe {self.publisher_id!r}")
        except BaseException:
            sock.close()
            raise
        self._timeout: float | None = None
        sock.settimeout(None)
        if self._connections:
            self.reconnects += 1
        self._connections += 1
        self._sock, self._reader, self._skip = sock, reader, self._count
        if self._closed.is_set():
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            if self._reader is not None:
                self._bytes_done += self._reader.bytes_received
            _shutdown(self._sock)
            self._sock.close()
            self._sock = self._reader = None

    def _lost(self, reason: object) -> None:
        self._drop()
        if self._closed.is_set():
            return
        if not self.reconnect:
            raise BufferServerError(f"subscriber {self.publisher_id!r}: connection lost: {reason}")
        log.info("subscriber %r: connection lost (%s); resubscribing from window %d in %.2fs",
                 self.publisher_id, reason, self._resume_from, self._delay)
        self._closed.wait(self._delay)
        self._delay = min(self._delay * 2, self.backoff[1])

    # -- reading -----------------------------------------------------------
    def _batch(self, timeout: float | None) -> list[Message] | None:
        """One receive's worth of messages; [] on timeout; None when finished."""
        while not self._closed.is_set() and not self._ended:
            if self._sock is None:
                try:
                    self._open()
                except BufferServerError:
                    raise
                except OSError as e:
                    self._lost(e)
                    continue
            if self._deferred is not None:
                err, self._deferred = self._deferred, None
                if not isinstance(err, ProtocolError):
                    self._drop()
                    raise err
                self._lost(err)
                continue
            reader = self._reader
            try:
                out = self._parse(reader)       # frames already buffered first
                if out:
                    self._delay = self.backoff[0]
                    return out
                if timeout != self._timeout:
                    self._sock.settimeout(timeout)
                    self._timeout = timeout
                n = reader.fill()
            except socket.timeout:
                return []
            except (ProtocolError, OSError) as e:
                self._lost(e)
                continue
            if not n:
                self._lost(f"truncated frame ({reader.pending()} bytes)" if reader.pending()
                           else "closed by the server")
        return None

    def _parse(self, reader: _FrameReader) -> list[Message]:
        out: list[Message] = []
        buf, view = reader.buf, reader.view
        unpack_i64, unpack_u32 = _I64.unpack_from, _U32.unpack_from
        for s, e in reader.parse():
            t = buf[s + 4]
            if t == _PAYLOAD:
                msg = (_PAYLOAD, (unpack_u32(buf, s + 5)[0], bytes(view[s + 9:e])))
            elif t == _END:
                msg = (_END, unpack_i64(buf, s + 5)[0])
            elif t == _BEGIN or t == _CHECKPOINT or t == _RESET_WINDOW:
                msg = (_TYPE_OF[t], unpack_i64(buf, s + 5)[0])
            elif t == _END_STREAM:
                msg = (_END_STREAM, None)
            elif t == MessageType.ERROR:   # raised after the messages before it are delivered
                reason = bytes(view[s + 5:e]).decode(errors="replace")
                self._deferred = BufferServerError(f"subscriber {self.publisher_id!r}: {reason}")
                break
            else:
                self._deferred = ProtocolError(f"unexpected message type {t} in a stream")
                break
            if self._skip:
                self._skip -= 1
                self.skipped += 1
                continue
            if t == _END:
                self._resume_from, self._count = msg[1] + 1, 0
            else:
                self._count += 1
                if t == _BEGIN:
                    self._resume_from = msg[1]
                elif t == _END_STREAM:
                    self._ended = True
                    out.append(msg)
                    self._drop()
                    break
            out.append(msg)
        return out

    def messages(self) -> Iterator[Message]:
        """Yield messages in order until END_STREAM or :meth:`close`."""
        while (batch := self._batch(None)) is not None:
            yield from batch

    def poll(self, timeout: float | None = None) -> list[Message] | None:
        """Messages available within ``timeout`` seconds ([] if none); None once finished."""
        return self._batch(timeout)

    @property
    def bytes_received(self) -> int:
        """Bytes received from the server, over all connections."""
        reader = self._reader
        return self._bytes_done + (reader.bytes_received if reader is not None else 0)

    @property
    def ended(self) -> bool:
        """True once END_STREAM was delivered."""
        return self._ended

    def close(self) -> None:
        """Stop; a blocked :meth:`messages` or :meth:`poll` returns."""
        self._closed.set()
        sock = self._sock
        _shutdown(sock)
        if sock is not None:
            sock.close()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self._drop()
