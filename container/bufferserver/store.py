"""Buffer-server storage: each publisher's windows in memory, spilled to disk past a limit.

:class:`Stream` holds one publisher id's data and its subscribers' cursors
(guarded by one condition); :class:`Publisher` is the in-process handle that
appends to it. The server (:mod:`stram.agent.bufferserver.server`) feeds remote
publishers into the same :class:`Stream` and sends subscribers what
:meth:`Stream.collect` hands out.

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

Flow control: with a lag limit (the server's ``lag_limit``, ``BUFFER_LAG_MB``),
``payload`` waits while a subscriber that is reading is more than the limit
behind what was published (in bytes of the stream): a fast publisher runs at
its slowest reader's pace instead of filling its memory, then its disk, with
windows nobody has read yet. The lag counts what the server has handed to the
subscriber's connection: the kernel's socket buffers (a receive buffer grows to
``tcp_rmem``'s largest on Linux, megabytes) and the subscriber's input queue
hold more on top of it. A subscriber that has taken nothing for
:data:`STALL_SECONDS` (its container is gone or stuck, or its operator waits for
another input) holds nobody back: the publisher goes on as without the limit,
so a stall never becomes a deadlock.

Memory bound: with a spool directory a publisher's in-memory bytes are at
most the limit whenever a call returns; without one, ``payload`` waits until
a purge makes room (13-byte control frames are always admitted, and a payload
larger than the whole limit only into an empty buffer). Buffers being sent
to a subscriber (batches of about 4 MiB, or one larger frame) are not counted.

Rewind and reset: re-publishing an id from window ``f`` drops windows
``>= f`` and any unfinished window; a subscriber that was already sent some of
the dropped data gets ``ERROR`` (it must be redeployed), the others continue
with the new data. ``RESET`` drops everything the same way.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import socket
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Protocol

from stram.agent.bufferserver.connection import shutdown
from stram.agent.bufferserver.protocol import (BEGIN, CHECKPOINT, CTRL, END, END_STREAM, END_STREAM_FRAME, PAYLOAD,
                                               PAYLOAD_HDR, RESET_WINDOW, U32, WATERMARK, BufferServerError,
                                               ProtocolError)

__all__ = ["Publisher"]

_SEND_BUDGET = 4 << 20                 # bytes a subscriber thread sends per batch
#: A publisher over its memory limit spills a slice of it at a time (1/8: 64 MB of 512): while it
#: writes it appends nothing, and a subscriber that keeps up drains what is left in memory.
SPILL_SLICES = 8
#: A subscriber that has taken nothing for this long does not hold its publisher back (flow control).
STALL_SECONDS = 1.0


class _Owner(Protocol):
    """What a stream reads from the server that owns it.

    That is a :class:`~stram.agent.bufferserver.server.BufferServer`, described
    here instead of imported: the server imports this module.
    """

    memory_limit: int
    lag_limit: int | None
    spool_root: str | None
    _stopping: bool

    def _stream_dir(self, publisher_id: str) -> str: ...


# --------------------------------------------------------------------------- stored frames

def flatten(frames: list) -> list:
    """Stored frames -> buffers to send (a payload is its header and its pieces, a tuple)."""
    out: list = []
    for f in frames:
        if f.__class__ is tuple:
            out += f
        else:
            out.append(f)
    return out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _frame_len(f) -> int:
    return sum(map(len, f)) if f.__class__ is tuple else len(f)


def _kept(data) -> tuple:
    """A payload's pieces as the store keeps them, by reference: ``bytes`` and ``pyarrow.Buffer``
    (memory nobody changes); anything else (a bytearray, a memoryview) is copied into bytes."""
    pieces = data if data.__class__ is tuple else (data,)
    return tuple(p if p.__class__ is bytes or _is_arrow_buffer(p) else bytes(p) for p in pieces)


def _is_arrow_buffer(p) -> bool:
    cls = p.__class__
    return cls.__name__ == "Buffer" and cls.__module__ == "pyarrow.lib"


def wanted(frame, mask: int, keys: frozenset) -> bool:
    """Partition filter: control frames always, a payload when ``tag & mask`` is a key."""
    head = frame[0] if frame.__class__ is tuple else frame
    return head[4] != PAYLOAD or (U32.unpack_from(head, 5)[0] & mask) in keys


# --------------------------------------------------------------------------- storage

@dataclass(eq=False)
class _Unit:
    """One window's frames (plus the markers published before it)."""

    seq: int                                       #: position in the stream, never reused
    base: int = 0                                  #: bytes published before it (the stream's offset)
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
class Sub:
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
    unit_off: int = 0                              #: bytes of the cursor's unit handed out before it
    moved: float = field(default_factory=time.monotonic)  #: when it last took something (or subscribed)


class Stream:
    """All stored data of one publisher id, guarded by ``cond``."""

    def __init__(self, server: _Owner, publisher_id: str) -> None:
        self.server = server
        self.id = publisher_id
        self.cond = threading.Condition(threading.Lock())
        self.units: list[_Unit] = []
        self.seqs = itertools.count()
        self.memory = 0
        self.spilled_bytes = 0
        self.appended = 0              #: bytes published since the stream began (less what a rewind dropped)
        self.throttled = 0             #: publishers waiting for a subscriber to catch up (flow control)
        self.throttled_seconds = 0.0   #: how long they waited, in all
        self.generation = 0            #: bumped by every publisher attach and reset
        self.publisher_sock: socket.socket | None = None
        self.open: _Unit | None = None  #: unit receiving frames
        self.in_window = False
        self.last_window: int | None = None
        self.ended = False
        self.publishing = False        #: a publisher is attached
        self.subscribers: set[Sub] = set()
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
        shutdown(old)
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
        if mtype == PAYLOAD:
            if not self.in_window:
                raise ProtocolError(f"publisher {self.id!r}: PAYLOAD outside a window")
            if self.server.lag_limit is not None and self.subscribers:
                self._throttle(gen)
            if self.memory + size > self.server.memory_limit:
                self._make_room(gen, size)
            unit = self.open
        elif mtype == BEGIN:
            if self.in_window:
                raise ProtocolError(f"publisher {self.id!r}: BEGIN_WINDOW {window} inside window {self.open.window}")
            if self.last_window is not None and window <= self.last_window:
                raise ProtocolError(f"publisher {self.id!r}: window {window} does not follow {self.last_window}")
            unit = self.open
            if unit is None:
                unit = self.open = _Unit(next(self.seqs), self.appended)
                self.units.append(unit)
            unit.window = self.last_window = window
            self.in_window = True
        elif mtype == END:
            if not self.in_window or self.open.window != window:
                opened = f"BEGIN_WINDOW {self.open.window}" if self.in_window else "no open window"
                raise ProtocolError(f"publisher {self.id!r}: END_WINDOW {window} does not match {opened}")
            unit = self.open
        else:  # markers and END_STREAM go into the open unit
            unit = self.open
            if unit is None:
                unit = self.open = _Unit(next(self.seqs), self.appended)
                self.units.append(unit)
        unit.frames.append(frame)
        unit.mem_bytes += size
        self.memory += size
        self.appended += size
        if mtype == END or mtype == END_STREAM:
            unit.closed = True
            self.open = None
            self.in_window = False
            self.ended = mtype == END_STREAM
        if self.memory > self.server.memory_limit and self.server.spool_root is not None:
            self._spill(self.server.memory_limit, include_open=True)

    def _make_room(self, gen: int, size: int) -> None:
        """Spill, or wait for a purge, until ``size`` more bytes fit the limit."""
        limit = self.server.memory_limit
        if self.server.spool_root is not None:
            # a slice at a time: the publisher appends nothing while it writes, and its subscribers
            # run dry if it writes half its memory at once
            self._spill(max(limit - max(limit // SPILL_SLICES, size) - size, 0), include_open=False)
            self._still_publishing(gen)
            return
        while self.memory and self.memory + size > limit:
            self._still_publishing(gen)
            self.cond.wait(0.5)
            self._still_publishing(gen)

    def _behind(self, sub: Sub) -> int:
        """Bytes published that ``sub`` has not taken yet."""
        u = self._unit_at(sub.seq)
        if u is None:
            return 0
        return self.appended - (u.base + sub.unit_off if u.seq == sub.seq else u.base)

    def _lagging(self, limit: int) -> Sub | None:
        """A subscriber still reading that is more than ``limit`` bytes behind (None: none)."""
        now = time.monotonic()
        for sub in self.subscribers:
            if sub.error is None and not sub.kicked and now - sub.moved < STALL_SECONDS \
                    and self._behind(sub) > limit:
                return sub
        return None

    def _throttle(self, gen: int) -> None:
        """Wait (``cond`` let go) until no reading subscriber is more than the lag limit behind."""
        limit = self.server.lag_limit
        while self._lagging(limit) is not None:
            self.throttled += 1
            began = time.monotonic()
            try:
                self.cond.wait(0.05)
            finally:
                self.throttled -= 1
                self.throttled_seconds += time.monotonic() - began
            self._still_publishing(gen)

    def _still_publishing(self, gen: int) -> None:
        """Raise unless publisher generation ``gen`` may still append (after ``cond`` was let go)."""
        if self.server._stopping:
            raise BufferServerError("buffer server stopped")
        if gen != self.generation:
            raise BufferServerError(f"publisher {self.id!r} was superseded or reset")

    def _spill(self, target: int, include_open: bool) -> None:
        """Move whole units (oldest first) to their spill files until memory is at most ``target``.

        Called by the publisher's thread with ``cond`` held; it lets go of ``cond`` while it
        writes, so subscribers keep being served and purges keep dropping units meanwhile.
        The publisher appends nothing while it spills: nobody else changes a unit's frames.
        """
        for unit in list(self.units):
            if self.memory <= target:
                return
            if unit.alive and unit.frames and (unit.closed or include_open):
                self._spill_unit(unit, self.memory - target)

    def _spill_unit(self, unit: _Unit, need: int) -> None:
        """Move the unit's oldest frames in memory to its spill file: at least ``need`` bytes, or all."""
        if unit.path is None:
            if self.dir is None:
                self.dir = self.server._stream_dir(self.id)
            unit.path = os.path.join(self.dir, f"{unit.seq:010d}.spill")
        frames, size, path = unit.frames, unit.mem_bytes, unit.path
        if need < size:
            k = size = 0
            while size < need:
                size += _frame_len(frames[k])
                k += 1
            frames = frames[:k]
        failed: OSError | None = None
        self.cond.release()
        try:
            with open(path, "ab") as f:
                f.writelines(flatten(frames))
        except OSError as exc:
            failed = exc
        finally:
            self.cond.acquire()
        if not unit.alive:  # purged or rewound away while it was written
            _unlink(path)
            return
        if failed is not None:
            if self.server._stopping:
                return  # its directory went with the server
            raise failed
        offsets = unit.offsets
        for fr in frames:
            offsets.append(offsets[-1] + _frame_len(fr))
        unit.spilled += len(frames)
        unit.frames = unit.frames[len(frames):]
        unit.mem_bytes -= size
        self.spilled_bytes += size
        self.memory -= size

    # -- dropping ----------------------------------------------------------
    def _drop_units(self, units: list[_Unit]) -> None:
        for u in units:
            u.alive = False
            self.memory -= u.mem_bytes
            self.spilled_bytes -= u.offsets[-1]
            if u.path is not None:
                _unlink(u.path)

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
                    sub.unit_off = 0
            self.appended = self.units[i].base
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
        shutdown(old)
        for s in subs:
            shutdown(s)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- subscribing -------------------------------------------------------
    def _unit_at(self, seq: int) -> _Unit | None:
        i = bisect.bisect_left(self.units, seq, key=lambda u: u.seq)
        return self.units[i] if i < len(self.units) else None

    def collect(self, sub: Sub):
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
                sub.seq, sub.index, sub.unit_off = u.seq, 0, 0
            if not sub.passed:
                if u.window is None:
                    if not u.closed:
                        return None          # markers of a window not yet begun
                elif u.window < sub.from_window:
                    sub.seq, sub.index, sub.unit_off = u.seq + 1, 0, 0
                    continue
                else:
                    sub.passed = True
            if sub.index >= u.count():
                if u.closed or u is not self.units[-1]:
                    sub.seq, sub.index, sub.unit_off = u.seq + 1, 0, 0
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
                self._taken(sub, offsets[last] - start)
                return "file", (u, first, last, offsets[first:last + 1])
            k = first - u.spilled
            frames = u.frames
            total, j = 0, k
            while j < len(frames) and total < _SEND_BUDGET:
                total += _frame_len(frames[j])
                j += 1
            sub.index = u.spilled + j
            sub.delivered_to = (u.seq, sub.index)
            self._taken(sub, total)
            return "mem", frames[k:j]

    def _taken(self, sub: Sub, size: int) -> None:
        """``sub`` was handed ``size`` more bytes of its unit: wake a publisher waiting for it."""
        sub.unit_off += size
        sub.moved = time.monotonic()
        if self.throttled:
            self.cond.notify_all()

    def stats(self) -> dict:
        with self.cond:
            windows = [u.window for u in self.units if u.window is not None]
            return {"memory_bytes": self.memory, "spilled_bytes": self.spilled_bytes,
                    "windows": len(windows),
                    "first_window": windows[0] if windows else None,
                    "last_window": windows[-1] if windows else None,
                    "subscribers": len(self.subscribers),
                    "publishing": self.publishing,
                    "throttled_millis": int(self.throttled_seconds * 1000)}


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

    def __init__(self, stream: Stream, generation: int, max_frame: int) -> None:
        self.publisher_id = stream.id
        self._stream, self._gen, self._max_frame = stream, generation, max_frame

    def begin_window(self, window_id: int) -> None:
        """Start window ``window_id`` (must be above every earlier window)."""
        self._stream.append(self._gen, BEGIN, CTRL.pack(9, BEGIN, window_id), window_id)

    def payload(self, tag: int, data: bytes | tuple) -> None:
        """Append one codec-encoded batch with partition tag ``tag`` to the open window: bytes,
        or its pieces in order (:meth:`stram.agent.engine.codec.Codec.encode_parts`)."""
        pieces = _kept(data)
        size = sum(map(len, pieces))
        if size + 5 > self._max_frame:
            raise ValueError(f"payload of {size} bytes exceeds the frame limit of {self._max_frame}")
        self._stream.append(self._gen, PAYLOAD, (PAYLOAD_HDR.pack(size + 5, PAYLOAD, tag), *pieces))

    def end_window(self, window_id: int) -> None:
        """End the open window, which must be ``window_id``."""
        self._stream.append(self._gen, END, CTRL.pack(9, END, window_id), window_id)

    def checkpoint(self, window_id: int) -> None:
        """Append a CHECKPOINT marker for ``window_id``."""
        self._stream.append(self._gen, CHECKPOINT, CTRL.pack(9, CHECKPOINT, window_id), window_id)

    def watermark(self, value: int) -> None:
        """Append the open window's event-time watermark (its END_WINDOW follows)."""
        self._stream.append(self._gen, WATERMARK, CTRL.pack(9, WATERMARK, value))

    def reset_window(self, window_id: int) -> None:
        """Append a RESET_WINDOW marker carrying ``window_id``."""
        self._stream.append(self._gen, RESET_WINDOW, CTRL.pack(9, RESET_WINDOW, window_id), window_id)

    def end_stream(self) -> None:
        """Append END_STREAM; nothing may follow."""
        self._stream.append(self._gen, END_STREAM, END_STREAM_FRAME)

    def flush(self) -> None:
        """Nothing to flush in-process (present for parity with :class:`RemotePublisher`)."""

    def close(self) -> None:
        """Detach; the stored data stays until purged or reset."""
        self._stream.detach(self._gen)
