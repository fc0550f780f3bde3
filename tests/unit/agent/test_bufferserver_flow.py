"""Buffer-server flow control over real sockets: a publisher waits for a subscriber that reads slowly
(``lag_limit_mb``, the BUFFER_LAG_MB attribute), and a subscriber that stopped reading holds nobody back."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from stram.agent.bufferserver import BufferServer
from stram.agent.bufferserver import MessageType as M
from stram.agent.bufferserver import Subscriber
from stram.agent.bufferserver.connection import _RECV_SIZE
from stram.agent.bufferserver.store import _SEND_BUDGET, STALL_SECONDS

TOKEN = b"flow-token"
PAYLOAD = 100_000
WINDOWS, PER_WINDOW = 80, 8            # 64 MB in all


class Source:
    """Publishes WINDOWS x PER_WINDOW payloads in a thread, counting the bytes it has handed over."""

    def __init__(self, srv: BufferServer) -> None:
        self.srv, self.published, self.done_at = srv, 0, None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            pub = self.srv.publisher("p", 0)
            for w in range(1, WINDOWS + 1):
                pub.begin_window(w)
                for i in range(PER_WINDOW):
                    pub.payload(i, f"{w}:{i}:".encode().ljust(PAYLOAD, b"."))
                    self.published += PAYLOAD
                pub.end_window(w)
            pub.end_stream()
            self.done_at = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc


def connected(srv: BufferServer) -> Subscriber:
    """A subscriber to "p" from the start, connected (a Subscriber connects at its first read)."""
    sub = Subscriber(srv.host, srv.port, TOKEN, "p", 0)
    assert sub.poll(0.05) == []
    deadline = time.monotonic() + 5
    while not srv.stats().get("p", {}).get("subscribers"):
        assert time.monotonic() < deadline, "the subscriber did not connect"
        time.sleep(0.005)
    return sub


def largest_send_buffer() -> int:
    """The most a TCP socket's send buffer grows to here (tcp_wmem's largest; 4 MiB elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            return int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 << 20


def slow_read(srv: BufferServer, source: Source, pause: float) -> tuple[list[bytes], int, int]:
    """Read the whole stream, ``pause`` seconds per payload; the ids read, the publisher's largest
    lead over what was read and the largest receive buffer the kernel gave the connection (bytes:
    the kernel grows it as the stream goes, up to tcp_rmem's largest, 32 MB on some machines)."""
    sub = connected(srv)
    sock = sub._sock  # its connection (it connected in connected(); it does not reconnect here)
    ids: list[bytes] = []
    received = lead = rcvbuf = 0
    source.thread.start()
    for typ, val in sub.messages():
        if typ == M.PAYLOAD:
            received += len(val[1])
            ids.append(val[1][:10])
            lead = max(lead, source.published - received)
            if sock.fileno() >= 0:  # (closed once END_STREAM came)
                rcvbuf = max(rcvbuf, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
            time.sleep(pause)
    sub.close()
    source.thread.join(10)
    assert source.error is None
    return ids, lead, rcvbuf


def expected_ids() -> list[bytes]:
    return [f"{w}:{i}:".encode().ljust(10, b".") for w in range(1, WINDOWS + 1) for i in range(PER_WINDOW)]


@pytest.mark.parametrize("lag_mb", [2, None])
def test_a_publisher_runs_at_the_pace_of_a_subscriber_that_reads_slowly(tmp_path, lag_mb):
    # memory for everything: without flow control nothing would slow the publisher down
    srv = BufferServer(TOKEN, memory_limit_mb=256, spool_dir=str(tmp_path), lag_limit_mb=lag_mb)
    srv.start()
    try:
        source = Source(srv)
        ids, lead, rcvbuf = slow_read(srv, source, pause=0.0015)
        assert ids == expected_ids()
        total = WINDOWS * PER_WINDOW * PAYLOAD
        waited = srv.stats()["p"]["throttled_millis"]
        if lag_mb is None:  # the publisher was done long before the subscriber (64 MB ahead at most)
            assert lead > total // 2, lead / 2**20
            assert waited == 0
        else:  # the limit, plus what is in flight: a send batch, both sockets' buffers, the client's
            # receive buffer and the frame it is in
            in_flight = _SEND_BUDGET + largest_send_buffer() + rcvbuf + _RECV_SIZE + PAYLOAD
            assert lead <= lag_mb * 2**20 + in_flight, (lead / 2**20, in_flight / 2**20)
            # it waited for most of the reading (80 ms per 5 MB), and says so
            assert waited > 300, waited
        print(f"lag limit {lag_mb} MiB: the publisher's largest lead {lead / 2**20:.1f} MiB "
              f"(the receive buffer grew to {rcvbuf / 2**20:.1f} MiB)")
    finally:
        srv.stop()


def test_a_subscriber_that_stops_reading_holds_the_publisher_back_only_for_a_moment(tmp_path):
    srv = BufferServer(TOKEN, memory_limit_mb=256, spool_dir=str(tmp_path), lag_limit_mb=1)
    srv.start()
    try:
        stuck = connected(srv)
        stuck_messages = stuck.messages()
        source = Source(srv)
        started = time.monotonic()
        source.thread.start()
        assert next(stuck_messages) == (M.BEGIN_WINDOW, 1)  # it reads, then reads no more
        source.thread.join(STALL_SECONDS * 10)
        assert source.error is None and source.done_at is not None, "the publisher waited for a stuck subscriber"
        # it waited about one stall at most: after its first batch, the subscriber took nothing
        assert source.done_at - started < STALL_SECONDS + 3.0, source.done_at - started
        # the subscriber that stopped loses nothing when it reads again
        ids = [val[1][:10] for typ, val in stuck_messages if typ == M.PAYLOAD]
        assert ids == expected_ids()
        stuck.close()
    finally:
        srv.stop()
