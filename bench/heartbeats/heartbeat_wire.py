"""The simulated agents' containers and their heartbeats, encoded straight to protobuf's wire format.

Built field by field with the protobuf library, a heartbeat cost the harness a
large share of its CPU per heartbeat, on the same cores as the master it
measures (bench/README.md has the figure). Most of a heartbeat is the same from one
operator and one window to the next: the port stats of a window differ only in
the time, which is the same for the whole heartbeat, and the containers'
operators report the same windows. :func:`encode_heartbeat` writes each distinct
piece once per heartbeat and joins them. ``tests/unit/tools/test_bench_heartbeats.py``
checks that what it writes parses to the message
:meth:`SimContainer.heartbeat` builds.

Only the fields the harness sends are written; like protobuf's own encoder, a
field at its default (0, "") is left out.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["SimContainer", "encode_heartbeat", "varint"]

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
    """A ``ContainerHeartbeat`` as :meth:`SimContainer.heartbeat` builds it.

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


class SimContainer:
    """One simulated container: its operators and the windows they report."""

    def __init__(self, container_id: str, pid: int) -> None:
        self.id = container_id
        self.pid = pid  # what the launcher recorded for it, else the agent process's number
        self.ops: dict[int, int] = {}  # operator id -> last window reported
        self.ended = False

    def advance(self, ctx: Any, now: int) -> list[tuple[int, list[int], int]]:
        """Per operator: its id, the windows it reports now (the last 8 it finished since its last
        heartbeat, oldest first) and its current window; the operators move on to now."""
        window_ms = ctx.streaming_window_size_millis
        base = (ctx.start_window_millis // 1000) << 32
        current = base | max(0, (now - ctx.start_window_millis) // window_ms)
        reports = []
        for op_id, last in self.ops.items():
            windows = list(range(max(last + 1, current - 7), current + 1)) if current > last else []
            if current > last:
                self.ops[op_id] = current
            reports.append((op_id, windows, self.ops[op_id]))
        return reports

    def heartbeat(self, proto: Any, ctx: Any, now: int) -> Any:
        """The heartbeat as a message (see :meth:`heartbeat_bytes`, which the agents send)."""
        stats = proto.ContainerStats(container_id=self.id)
        for op_id, windows, current in self.advance(ctx, now):
            hb = stats.operators.add(node_id=op_id, generated_tms=now, interval_ms=1000,
                                     state=proto.OperatorHeartbeat.ACTIVE)
            for w in windows:
                ws = hb.window_stats.add(window_id=w, cpu_time_used=50_000, tuples_in=100, tuples_out=100,
                                         end_window_millis=now)  # the totals, as the agent sends them
                ws.input_ports.add(id="input", tuple_count=100, end_window_timestamp=now)
                ws.output_ports.add(id="output", tuple_count=100, end_window_timestamp=now, buffer_server_bytes=1600)
                if (w & 0xFFFFFFFF) % ctx.checkpoint_window_count == 0:
                    hb.saved_checkpoints.append(w)
                    ws.checkpoint.window_id = w
            hb.current_window_id = current
        return proto.ContainerHeartbeat(container_id=self.id, buffer_server_host="127.0.0.1",
                                        buffer_server_port=9, jvm_name=f"{self.pid}@sim", memory_mb_free=8000,
                                        memory_mb_used=60, container_stats=stats, sent_millis=now)

    def heartbeat_bytes(self, ctx: Any, now: int) -> bytes:
        """:meth:`heartbeat`, serialized, for much less CPU (:func:`encode_heartbeat`)."""
        return encode_heartbeat(self.id, self.pid, self.advance(ctx, now), now,
                                               ctx.checkpoint_window_count)
