"""The simulated agents' heartbeats, encoded straight to protobuf's wire format.

Built field by field with the protobuf library, a heartbeat of 10 operators cost
the harness about 90 us (a quarter of its CPU per heartbeat), on the same two
cores as the master it measures. Most of a heartbeat is the same from one
operator and one window to the next: the port stats of a window differ only in
the time, which is the same for the whole heartbeat, and the containers'
operators report the same windows. :func:`encode_heartbeat` writes each distinct
piece once per heartbeat and joins them. ``tests/test_bench_heartbeats.py``
checks that what it writes parses to the message
:meth:`bench_heartbeats.SimContainer.heartbeat` builds.

Only the fields the harness sends are written; like protobuf's own encoder, a
field at its default (0, "") is left out.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["encode_heartbeat", "varint"]

_VARINT, _LEN = 0, 2


def varint(n: int) -> bytes:
    """``n`` as a base-128 varint (a negative int64 as its 64-bit two's complement, 10 bytes)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def _int(field: int, n: int) -> bytes:
    return _key(field, _VARINT) + varint(n) if n else b""


def _msg(field: int, body: bytes) -> bytes:
    return _key(field, _LEN) + varint(len(body)) + body


def _str(field: int, text: str) -> bytes:
    return _msg(field, text.encode()) if text else b""


# OperatorStats fields
_WS_WINDOW, _WS_CHECKPOINT, _WS_IN, _WS_OUT, _WS_CPU, _WS_TUPLES_IN, _WS_TUPLES_OUT, _WS_END = 1, 2, 3, 4, 5, 8, 9, 10
# OperatorHeartbeat fields
_OP_NODE, _OP_GENERATED, _OP_INTERVAL, _OP_STATE, _OP_WINDOWS, _OP_CURRENT, _OP_SAVED = 1, 2, 3, 4, 5, 7, 8
#: OperatorHeartbeat.DeployState.ACTIVE
ACTIVE = 1


#: Varints of the numbers below 2**14 (lengths, operator ids), looked up rather than computed.
_SMALL = [varint(n) for n in range(1 << 14)]
_K_NODE, _K_WINDOWS, _K_CURRENT, _K_SAVED, _K_OPERATOR = (
    _key(_OP_NODE, _VARINT), _key(_OP_WINDOWS, _LEN), _key(_OP_CURRENT, _VARINT), _key(_OP_SAVED, _LEN), _key(2, _LEN))


# the constant parts: a port's id and count, the output port's bytes, a window's figures, an
# operator's interval and state; the keys of the fields that hold the heartbeat's time
_IN_PORT, _OUT_PORT, _OUT_BYTES = _str(1, "input") + _int(2, 100), _str(1, "output") + _int(2, 100), _int(4, 1600)
_WS_COUNTS = _int(_WS_CPU, 50_000) + _int(_WS_TUPLES_IN, 100) + _int(_WS_TUPLES_OUT, 100)
_OP_REST = _int(_OP_INTERVAL, 1000) + _int(_OP_STATE, ACTIVE)
_K_PORT_END, _K_WS_END, _K_GENERATED, _K_SENT = (
    _key(3, _VARINT), _key(_WS_END, _VARINT), _key(_OP_GENERATED, _VARINT), _key(11, _VARINT))


def _sized(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else varint(n)


def encode_heartbeat(container_id: str, pid: int, ops: Iterable[tuple[int, list[int], int]], now: int,
                     checkpoint_count: int) -> bytes:
    """A ``ContainerHeartbeat`` as :meth:`bench_heartbeats.SimContainer.heartbeat` builds it.

    ``ops``: per operator, its id, the windows it reports (oldest first) and its current window.
    A window that is a multiple of ``checkpoint_count`` (in its low 32 bits) carries a checkpoint.
    """
    t = varint(now)  # the one time of the whole heartbeat, in six fields
    ports = (_msg(_WS_IN, _IN_PORT + _K_PORT_END + t) + _msg(_WS_OUT, _OUT_PORT + _K_PORT_END + t + _OUT_BYTES))
    tail = ports + _WS_COUNTS + _K_WS_END + t
    head = _K_GENERATED + t + _OP_REST
    # the pieces every operator of the container shares, made once: per window its OperatorStats
    # field and whether it is a checkpoint, per current window its field
    windows: dict[int, tuple[bytes, bytes]] = {}
    currents: dict[int, bytes] = {}
    parts = []
    for op_id, reported, current in ops:
        body = [_K_NODE, _sized(op_id) if op_id > 0 else varint(op_id), head]
        saved = []
        for w in reported:
            piece = windows.get(w)
            if piece is None:
                mark = varint(w) if (w & 0xFFFFFFFF) % checkpoint_count == 0 else b""
                stats = _int(_WS_WINDOW, w) + (_msg(_WS_CHECKPOINT, _int(1, w)) if mark else b"") + tail
                piece = windows[w] = (_K_WINDOWS + _sized(len(stats)) + stats, mark)
            body.append(piece[0])
            if piece[1]:
                saved.append(piece[1])
        field = currents.get(current)
        if field is None:
            field = currents[current] = _int(_OP_CURRENT, current)
        body.append(field)
        if saved:  # packed, as proto3 writes a repeated int64
            packed = b"".join(saved)
            body += (_K_SAVED, _sized(len(packed)), packed)
        op = b"".join(body)
        parts += (_K_OPERATOR, _sized(len(op)), op)
    stats = _str(1, container_id) + b"".join(parts)
    return b"".join((_str(1, container_id), _str(2, "127.0.0.1"), _int(3, 9), _str(4, f"{pid}@sim"),
                     _int(5, 8000), _msg(9, stats), _int(10, 60), _K_SENT, t))
