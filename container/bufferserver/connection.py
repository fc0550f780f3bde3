"""Frame I/O on a buffer-server TCP connection, shared by the server and the clients.

:class:`FrameReader` receives into one reusable buffer and cuts it into
frames without copying; :func:`send_buffers` sends many buffers with few
``sendmsg`` calls; :func:`shutdown` wakes whoever is blocked on a socket.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any, Callable

from stram.agent.bufferserver.protocol import LEN, ProtocolError

_IOV_MAX = 1024                        # buffers per sendmsg (Linux IOV_MAX)
_RECV_SIZE = 1 << 20
#: A frame at least this long is received into a buffer of its own, handed on as it is
#: (a reader given ``alloc``): its bytes are not copied out of the shared buffer.
BIG_FRAME = 256 << 10


class FrameReader:
    """Receives frames with ``recv_into`` into one reusable bytearray.

    :meth:`parse` returns ``(start, end)`` offsets of complete frames (length
    prefix included) in :attr:`buf`; they stay valid until the next :meth:`fill`.
    Given ``alloc`` (``alloc(n)``: a writable buffer of ``n`` bytes), a frame of
    :data:`BIG_FRAME` bytes or more that has not arrived whole yet is received into a
    buffer of its own instead, which :meth:`take_big` hands over once complete (it comes
    before anything :meth:`parse` returns after it).
    """

    __slots__ = ("sock", "max_frame", "buf", "view", "start", "end", "size", "bytes_received",
                 "alloc", "_big", "_big_have")

    def __init__(self, sock: socket.socket, max_frame: int, size: int = _RECV_SIZE,
                 alloc: Callable[[int], Any] | None = None) -> None:
        self.sock, self.max_frame, self.size = sock, max_frame, size
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.bytes_received = 0
        self.alloc = alloc
        #: The big frame being received (a byte view of its own buffer, length prefix included).
        self._big: memoryview | None = None
        self._big_have = 0

    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return self.end - self.start + (self._big_have if self._big is not None else 0)

    def take_big(self) -> memoryview | None:
        """The big frame received whole (a byte view, length prefix included), once; else None."""
        big = self._big
        if big is None or self._big_have < len(big):
            return None
        self._big = None
        return big

    def fill(self) -> int:
        """Receive once (blocking per the socket's timeout); 0 means EOF."""
        if self._big is not None:
            return self._fill_big()
        avail = self.end - self.start
        need = 4 if avail < 4 else 4 + LEN.unpack_from(self.buf, self.start)[0]
        if self.alloc is not None and need >= BIG_FRAME and need - 4 <= self.max_frame:
            # its own buffer: what came of it moves there once, the rest is received in place
            big = self._big = memoryview(self.alloc(need)).cast("B")
            big[:avail] = self.view[self.start:self.end]
            self._big_have = avail
            self.start = self.end = 0
            return self._fill_big()
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

    def _fill_big(self) -> int:
        n = self.sock.recv_into(self._big[self._big_have:])
        self._big_have += n
        self.bytes_received += n
        return n

    def parse(self, limit: int = 1 << 30) -> list[tuple[int, int]]:
        """Offsets of the complete frames received, at most ``limit`` of them."""
        out: list[tuple[int, int]] = []
        s, e, buf, mx = self.start, self.end, self.buf, self.max_frame
        unpack = LEN.unpack_from
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


def send_buffers(sock: socket.socket, bufs: list) -> None:
    """Send a list of bytes-like objects with as few syscalls as possible."""
    if len(bufs) == 1:
        sock.sendall(bufs[0])
        return
    if isinstance(sock, ssl.SSLSocket):  # no sendmsg under TLS: one record stream of the joined bytes
        sock.sendall(b"".join(bufs))
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


def shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
