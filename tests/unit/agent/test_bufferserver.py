"""Buffer server over real sockets on 127.0.0.1: replay, reconnects, rewind, purge, memory bounds, bad input."""

from __future__ import annotations

import collections
import logging
import socket
import struct
import threading
import time
from typing import Callable

import psutil
import pyarrow as pa
import pytest

from stram.agent.bufferserver import FIRST_WINDOW, BufferServer, BufferServerError
from stram.agent.bufferserver import MessageType as M
from stram.agent.bufferserver import (ProtocolError, RemotePublisher, Subscriber, encode_publish, encode_subscribe,
                                      purge, reset)
from stram.agent.bufferserver.connection import BIG_FRAME
from stram.agent.engine.codec import get_codec
from stram.common.secret import scoped_credential

TOKEN = b"s3cret-token"
BASE = 1_700_000_000 << 32          # (baseSeconds << 32) | index


# ---------------------------------------------------------------- helpers

@pytest.fixture
def server():
    srv = BufferServer(TOKEN)
    srv.start()
    yield srv
    srv.stop()


def window_msgs(w: int, n: int, tag: Callable[[int], int] = lambda i: i % 4, size: int = 0) -> list:
    """The messages of window ``w`` with ``n`` payloads (what a subscriber must see)."""
    out = [(M.BEGIN_WINDOW, w)]
    for i in range(n):
        data = f"{w}:{i}:".encode()
        out.append((M.PAYLOAD, (tag(i), data + b"x" * max(0, size - len(data)))))
    out.append((M.END_WINDOW, w))
    return out


def publish(pub, msgs: list, pause: float = 0.0) -> None:
    """Replay a message list through a publisher's methods."""
    for t, v in msgs:
        if t == M.PAYLOAD:
            pub.payload(*v)
            if pause:
                time.sleep(pause)
        elif t == M.BEGIN_WINDOW:
            pub.begin_window(v)
        elif t == M.END_WINDOW:
            pub.end_window(v)
        elif t == M.CHECKPOINT:
            pub.checkpoint(v)
        elif t == M.RESET_WINDOW:
            pub.reset_window(v)
        elif t == M.END_STREAM:
            pub.end_stream()


def windows(ids, n: int = 3, **kw) -> list:
    return [m for w in ids for m in window_msgs(w, n, **kw)]


class Collector:
    """Consumes ``Subscriber.messages()`` in a thread."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub, self.msgs, self.error = sub, [], None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for m in self.sub.messages():
                self.msgs.append(m)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            self.error = e

    def wait(self, pred: Callable[[list], bool], timeout: float = 5.0) -> list:
        deadline = time.monotonic() + timeout
        while not pred(self.msgs):
            if self.error is not None or time.monotonic() > deadline:
                raise AssertionError(f"timed out; error={self.error!r}; got {len(self.msgs)}: {self.msgs[-5:]}")
            time.sleep(0.005)
        return self.msgs

    def wait_count(self, n: int, timeout: float = 5.0) -> list:
        return self.wait(lambda m: len(m) >= n, timeout)

    def close(self) -> None:
        self.sub.close()
        self.thread.join(5)


def subscribe(srv, pid, from_window=FIRST_WINDOW, **kw) -> Collector:
    return Collector(Subscriber(srv.host, srv.port, TOKEN, pid, from_window, **kw))


def read_all(srv, pid, from_window=FIRST_WINDOW, timeout=5.0, **kw) -> list:
    """Every message until END_STREAM."""
    c = subscribe(srv, pid, from_window, **kw)
    c.thread.join(timeout)
    assert not c.thread.is_alive(), f"no END_STREAM; got {c.msgs[-5:]}"
    assert c.error is None
    return c.msgs


# ---------------------------------------------------------------- publish / subscribe

def test_in_process_publish_subscribe_from_start(server):
    data = [(M.RESET_WINDOW, BASE)] + windows(range(BASE + 1, BASE + 6)) + [(M.END_STREAM, None)]
    publish(server.publisher("1.output", FIRST_WINDOW), data)
    assert read_all(server, "1.output") == data
    st = server.stats()["1.output"]
    assert (st["windows"], st["first_window"], st["last_window"]) == (5, BASE + 1, BASE + 5)
    assert st["memory_bytes"] > 0 and st["spilled_bytes"] == 0


def test_subscribe_from_a_middle_window_starts_at_the_first_id_at_or_above_it(server):
    ids = [BASE - 1, BASE, BASE + 1, BASE + 3, BASE + 4]    # "-1 style" ids and a gap
    data = windows(ids) + [(M.CHECKPOINT, BASE + 4), (M.END_STREAM, None)]
    publish(server.publisher("p", FIRST_WINDOW), data)
    assert read_all(server, "p", BASE + 2) == windows([BASE + 3, BASE + 4]) + data[-2:]
    assert read_all(server, "p", BASE) == windows(ids[1:]) + data[-2:]
    # from beyond the last window: only the markers after it and the end of the stream
    assert read_all(server, "p", BASE + 100) == data[-2:]


def test_markers_between_windows_travel_with_the_next_window(server):
    data = ([(M.RESET_WINDOW, BASE)] + windows([BASE + 1]) + [(M.CHECKPOINT, BASE + 1)]
            + windows([BASE + 2]) + [(M.END_STREAM, None)])
    publish(server.publisher("p", FIRST_WINDOW), data)
    assert read_all(server, "p", BASE + 2) == [(M.CHECKPOINT, BASE + 1)] + windows([BASE + 2]) + [(M.END_STREAM, None)]


def test_late_subscriber_gets_stored_windows_then_live_data(server):
    pub = server.publisher("p", FIRST_WINDOW)
    publish(pub, windows(range(1, 4)))
    early = subscribe(server, "p", 2)
    early.wait_count(10)
    late = subscribe(server, "p", 3)              # subscribes after window 3 was published
    late.wait_count(5)
    publish(pub, windows(range(4, 6)) + [(M.END_STREAM, None)], pause=0.001)
    early.thread.join(5)
    late.thread.join(5)
    assert early.msgs == windows(range(2, 6)) + [(M.END_STREAM, None)]
    assert late.msgs == windows(range(3, 6)) + [(M.END_STREAM, None)]


def test_subscriber_waits_for_a_publisher_that_does_not_exist_yet(server):
    c = subscribe(server, "later", 0)
    time.sleep(0.1)
    assert c.msgs == []
    data = windows([1, 2]) + [(M.END_STREAM, None)]
    publish(server.publisher("later", 0), data)
    c.thread.join(5)
    assert c.msgs == data


def test_publish_over_tcp(server):
    data = [(M.RESET_WINDOW, BASE)] + windows(range(BASE, BASE + 20), 5, size=3000) + [(M.END_STREAM, None)]
    live = subscribe(server, "9.out", BASE + 10)
    with RemotePublisher(server.host, server.port, TOKEN, "9.out", FIRST_WINDOW, flush_bytes=4096) as pub:
        publish(pub, data)
    assert read_all(server, "9.out") == data
    live.thread.join(5)
    assert live.msgs == windows(range(BASE + 10, BASE + 20), 5, size=3000) + [(M.END_STREAM, None)]
    assert live.sub.bytes_received > 10 * 5 * 3000


def test_poll_returns_what_is_available(server):
    pub = server.publisher("p", 0)
    sub = Subscriber(server.host, server.port, TOKEN, "p", 0)
    assert sub.poll(0.05) == []
    publish(pub, windows([1]))
    got = []
    deadline = time.monotonic() + 5
    while len(got) < 5 and time.monotonic() < deadline:
        got += sub.poll(0.1)
    assert got == windows([1])
    pub.end_stream()
    assert sub.poll(1) == [(M.END_STREAM, None)]
    assert sub.poll(0.1) is None and sub.ended
    sub.close()


def test_arrow_batches_through_the_server(server):
    codec = get_codec("arrow")
    batch = pa.record_batch({"k": pa.array(range(1000), pa.int64()), "s": [f"{i:056d}" for i in range(1000)]})
    pub = server.publisher("a", 0)
    pub.begin_window(1)
    pub.payload(0, codec.encode([batch, batch]))
    pub.end_window(1)
    pub.end_stream()
    msgs = read_all(server, "a", 0)
    (tag, data), = [v for t, v in msgs if t == M.PAYLOAD]
    out = codec.decode(data)
    assert len(out) == 2 and out[0].equals(batch)


def test_big_arrow_payloads_are_received_into_arrow_memory_and_decoded_in_place(server):
    """The Arrow codec's pieces go out as they are (encode_parts); a subscriber given the codec's
    receive_buffer gets each big payload in Arrow's memory, and the decoded batches point into it."""
    codec = get_codec("arrow")
    batch = pa.record_batch({"k": pa.array(range(20_000), pa.int64()), "s": [f"{i:056d}" for i in range(20_000)]})
    pub = server.publisher("a", 0)
    for w in (1, 2, 3):
        pub.begin_window(w)
        pub.payload(w, codec.encode_parts([batch, batch.slice(w, 5000)]))
        pub.end_window(w)
    pub.end_stream()
    msgs = read_all(server, "a", 0, alloc=codec.receive_buffer)
    payloads = [v for t, v in msgs if t == M.PAYLOAD]
    assert [tag for tag, _ in payloads] == [1, 2, 3]
    for w, (_, data) in zip((1, 2, 3), payloads):
        assert isinstance(data, memoryview) and isinstance(data.obj, pa.Buffer)
        out = codec.decode(data)
        assert out[0].equals(batch) and out[1].equals(batch.slice(w, 5000))
        assert out[0].column(0).buffers()[1].address - data.obj.address < data.obj.size  # no copy


def test_publisher_window_rules(server):
    pub = server.publisher("p", 0)
    with pytest.raises(ProtocolError, match="outside a window"):
        pub.payload(0, b"x")
    pub.begin_window(5)
    with pytest.raises(ProtocolError, match="inside window"):
        pub.begin_window(6)
    with pytest.raises(ProtocolError, match="does not match"):
        pub.end_window(6)
    pub.end_window(5)
    with pytest.raises(ProtocolError, match="does not follow"):
        pub.begin_window(5)
    pub.end_stream()
    with pytest.raises(ProtocolError, match="after END_STREAM"):
        pub.checkpoint(5)
    with pytest.raises(ValueError, match="frame limit"):
        BufferServer(TOKEN, max_frame=100).publisher("q", 0).payload(0, b"x" * 100)


# ---------------------------------------------------------------- reconnect

def cut_connection(sub: Subscriber, timeout: float = 5.0) -> int:
    """Shut the subscriber's live connection down from its side: 1 once cut, 0 if it never had one.

    Between two connections there is nothing to cut (no socket, or ENOTCONN):
    wait for the next one rather than miss the cut.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock = sub._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                return 1
            except OSError:
                pass
        time.sleep(0.001)
    return 0


@pytest.mark.parametrize("side", ["server", "client"])
def test_reconnect_mid_window_delivers_every_message_exactly_once(server, side):
    # payload sizes vary up to 200 KB so cuts also land inside frames
    data = [m for w in range(1, 25)
            for m in window_msgs(w, 10, size=(w * 7919) % 200_000)] + [(M.END_STREAM, None)]
    pub = server.publisher("p", FIRST_WINDOW)
    publisher = threading.Thread(target=publish, args=(pub, data, 0.0005))
    c = subscribe(server, "p", 1, backoff=(0.01, 0.05))
    publisher.start()
    cuts = mid_window = 0
    for n in (3, 17, 40, 41, 90, 150, 200):
        c.wait_count(n)
        mid_window += c.msgs[-1][0] != M.END_WINDOW
        before = c.sub.reconnects
        cut = server.disconnect_subscribers("p") if side == "server" else cut_connection(c.sub)
        cuts += cut
        if cut:  # the next cut must land on the new connection, not on this one again
            deadline = time.monotonic() + 5
            while c.sub.reconnects == before and c.thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.001)
    publisher.join(10)
    c.thread.join(10)
    assert c.error is None
    assert c.msgs == data
    assert cuts >= 5 and c.sub.reconnects >= 5 and mid_window >= 3
    assert c.sub.skipped > 0                        # re-sent messages were dropped, not repeated


def test_big_payloads_arrive_in_their_own_buffers_across_cuts(server):
    """With ``alloc``, a frame of BIG_FRAME bytes or more, not received whole yet, is received
    into a buffer of its own and handed on as a view of it (no copy), the small ones as bytes;
    connections cut inside big frames lose nothing and repeat nothing."""
    sizes = [BIG_FRAME - 10, BIG_FRAME - 9, 3 * BIG_FRAME + 7, 10, 2 << 20, 40_000]
    data: list = []
    for w in range(1, 16):
        data.append((M.BEGIN_WINDOW, w))
        for i in range(4):
            head = f"{w}:{i}:".encode()
            data.append((M.PAYLOAD, (i, head + bytes([w + i]) * (sizes[(w + i) % len(sizes)] - len(head)))))
        data.append((M.END_WINDOW, w))
    data.append((M.END_STREAM, None))
    pub = server.publisher("big", FIRST_WINDOW)
    publisher = threading.Thread(target=publish, args=(pub, data, 0.002))
    c = subscribe(server, "big", 1, backoff=(0.01, 0.05), alloc=bytearray)
    publisher.start()
    for n in (5, 13, 30, 47):
        c.wait_count(n, timeout=10)
        cut_connection(c.sub)
    publisher.join(20)
    c.thread.join(20)
    assert c.error is None
    assert c.msgs == data
    assert c.sub.reconnects >= 2
    # one that came whole in a receive with what was before it is cut out of the shared buffer;
    # one longer than that buffer never is
    kind = {len(v[1]): type(v[1]) for t, v in c.msgs if t == M.PAYLOAD}
    assert kind[2 << 20] is memoryview
    assert {k for n, k in kind.items() if n + 9 < BIG_FRAME} == {bytes}


def test_reconnect_with_partition_filter(server):
    data = windows(range(1, 8), 40) + [(M.END_STREAM, None)]
    pub = server.publisher("p", 0)
    threading.Thread(target=publish, args=(pub, data, 0.0005), daemon=True).start()
    c = subscribe(server, "p", 0, mask=3, keys=[1, 2], backoff=(0.01, 0.05))
    for n in (5, 30, 31, 70):
        c.wait_count(n)
        server.disconnect_subscribers("p")
    c.thread.join(10)
    want = [m for m in data if m[0] != M.PAYLOAD or (m[1][0] & 3) in (1, 2)]
    assert c.msgs == want


def test_reconnect_after_the_server_comes_back(tmp_path):
    srv = BufferServer(TOKEN)
    host, port = srv.start()
    publish(srv.publisher("p", 0), windows([1, 2]))
    c = Collector(Subscriber(host, port, TOKEN, "p", 0, backoff=(0.01, 0.05)))
    c.wait_count(10)
    srv.stop()
    srv2 = BufferServer(TOKEN, port=port)    # a restarted container: replays from the window we were in
    srv2.start()
    try:
        time.sleep(0.1)
        publish(srv2.publisher("p", 0), windows([2, 3]) + [(M.END_STREAM, None)])
        c.thread.join(5)
        assert c.msgs == windows([1, 2, 3]) + [(M.END_STREAM, None)]
    finally:
        srv2.stop()


# ---------------------------------------------------------------- rewind, purge, reset

def test_republish_rewinds_windows_at_and_after_from_window(server):
    old = server.publisher("p", 0)
    publish(old, windows(range(1, 5)))
    reader = subscribe(server, "p", 1)            # reads old windows 3 and 4, which go away
    reader.wait_count(20)
    waiter = subscribe(server, "p", 5)            # has received nothing yet
    time.sleep(0.05)
    new = server.publisher("p", 3)
    with pytest.raises(BufferServerError, match="superseded"):
        old.begin_window(9)
    fresh = windows(range(3, 6), 2) + [(M.END_STREAM, None)]
    publish(new, fresh)
    reader.thread.join(5)
    assert isinstance(reader.error, BufferServerError) and "rewound" in str(reader.error)
    waiter.thread.join(5)
    assert waiter.msgs == windows([5], 2) + [(M.END_STREAM, None)]
    assert read_all(server, "p", 0) == windows([1, 2]) + fresh


def test_republish_drops_an_unfinished_window_and_keeps_followers_seamless(server):
    pub = server.publisher("p", 0)
    publish(pub, windows([1, 2]))
    follower = subscribe(server, "p", 0)
    follower.wait_count(10)
    pub.begin_window(3)                            # publisher dies inside window 3 ...
    time.sleep(0.02)
    rp = RemotePublisher(server.host, server.port, TOKEN, "p", 3)   # ... and comes back over TCP
    publish(rp, windows([3, 4]) + [(M.END_STREAM, None)])
    rp.close()
    follower.thread.join(5)
    # the follower had seen BEGIN_WINDOW 3 of the dropped attempt
    assert isinstance(follower.error, BufferServerError)
    assert read_all(server, "p", 0) == windows([1, 2, 3, 4]) + [(M.END_STREAM, None)]


def test_purge_drops_windows_from_memory(server):
    publish(server.publisher("p", 0), windows(range(1, 11)))
    publish(server.publisher("q", 0), windows(range(1, 4)))
    before = server.stats()["p"]["memory_bytes"]
    assert server.purge("p", 5) == 5
    st = server.stats()["p"]
    assert (st["windows"], st["first_window"], st["last_window"]) == (5, 6, 10)
    assert st["memory_bytes"] < before
    c = subscribe(server, "p", 0)
    assert c.wait_count(25) == windows(range(6, 11))
    c.close()
    purge(server.host, server.port, TOKEN, "", 100)   # every publisher, over TCP
    assert all(s["windows"] == 0 and s["memory_bytes"] == 0 for s in server.stats().values())


def test_purge_removes_spill_files(tmp_path):
    srv = BufferServer(TOKEN, memory_limit_mb=0.25, spool_dir=str(tmp_path))
    srv.start()
    try:
        publish(srv.publisher("p", 0), windows(range(1, 21), 4, size=20_000))
        spilled = sorted(p for p in tmp_path.rglob("*.spill"))
        assert len(spilled) >= 10 and srv.stats()["p"]["spilled_bytes"] > 0
        assert srv.stats()["p"]["memory_bytes"] <= 0.25 * 2**20
        srv.purge("p", 10)
        remaining = sorted(p for p in tmp_path.rglob("*.spill"))
        assert len(remaining) < len(spilled)
        c = subscribe(srv, "p", 0)
        assert c.wait_count(60) == windows(range(11, 21), 4, size=20_000)
        c.close()
        purge(srv.host, srv.port, TOKEN, "p", 20)
        assert list(tmp_path.rglob("*.spill")) == []
        assert srv.stats()["p"]["spilled_bytes"] == 0 and srv.stats()["p"]["memory_bytes"] == 0
    finally:
        srv.stop()
    assert list(tmp_path.iterdir()) == []


def test_reset_drops_everything_and_disconnects(server):
    pub = server.publisher("p", 0)
    publish(pub, windows([1, 2]))
    reader = subscribe(server, "p", 0, reconnect=True)
    reader.wait_count(10)
    waiter = subscribe(server, "p", 7)
    time.sleep(0.05)
    reset(server.host, server.port, TOKEN, "p")
    reader.thread.join(5)
    assert isinstance(reader.error, BufferServerError) and "reset" in str(reader.error)
    with pytest.raises(BufferServerError):
        pub.begin_window(3)
    assert server.stats().get("p", {"windows": 0})["windows"] == 0
    # the id can be published again; a subscriber that had nothing resumes transparently
    publish(server.publisher("p", 0), windows([7]) + [(M.END_STREAM, None)])
    waiter.thread.join(5)
    assert waiter.msgs == windows([7]) + [(M.END_STREAM, None)]


def test_reset_disconnects_a_remote_publisher(server):
    rp = RemotePublisher(server.host, server.port, TOKEN, "p", 0)
    publish(rp, windows([1]))
    server.reset("p")
    with pytest.raises(BufferServerError):
        for w in range(2, 200):             # the closed connection surfaces on a later send
            publish(rp, windows([w], 2, size=50_000))
    rp.close()


# ---------------------------------------------------------------- memory bound

def test_spooling_bounds_memory_with_a_slow_consumer(tmp_path):
    limit = 1 << 20
    srv = BufferServer(TOKEN, memory_limit_mb=1, spool_dir=str(tmp_path))
    srv.start()
    proc = psutil.Process()
    samples: list[int] = []
    rss: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            st = srv.stats().get("p")
            if st:
                samples.append(st["memory_bytes"])
            rss.append(proc.memory_info().rss)
            time.sleep(0.002)

    try:
        rss0 = proc.memory_info().rss
        sampler = threading.Thread(target=sample)
        sampler.start()
        received = 0
        expected = []
        sub = Subscriber(srv.host, srv.port, TOKEN, "p", 0)

        def publisher() -> None:
            pub = srv.publisher("p", 0)
            for w in range(1, 33):                  # 32 windows x 8 x 100 KB = 25.6 MB
                pub.begin_window(w)
                for i in range(8):
                    pub.payload(i, f"{w}:{i}:".encode().ljust(100_000, b"."))
                pub.end_window(w)
            pub.end_stream()

        t = threading.Thread(target=publisher)
        t.start()
        for typ, val in sub.messages():             # slow consumer
            if typ == M.PAYLOAD:
                received += len(val[1])
                expected.append(val[1][:12])
                time.sleep(0.001)
        t.join(5)
        stop.set()
        sampler.join()
        assert received == 32 * 8 * 100_000
        assert expected == [f"{w}:{i}:".encode().ljust(12, b".") for w in range(1, 33) for i in range(8)]
        assert samples and max(samples) <= limit
        st = srv.stats()["p"]
        assert st["spilled_bytes"] > 20 * 10**6 and st["memory_bytes"] <= limit
        # nothing close to the 25.6 MB published stayed resident
        assert max(rss) - rss0 < 16 * 2**20, (max(rss) - rss0) / 2**20
        print(f"peak stored {max(samples) / 2**20:.2f} MiB, RSS growth {(max(rss) - rss0) / 2**20:.1f} MiB")
    finally:
        stop.set()
        srv.stop()


@pytest.mark.parametrize("transport", ["in-process", "tcp"])
def test_a_window_larger_than_the_memory_bound_spills_while_open(tmp_path, transport):
    srv = BufferServer(TOKEN, memory_limit_mb=0.5, spool_dir=str(tmp_path))
    srv.start()
    try:
        c = subscribe(srv, "p", 0)
        data = windows([1], 60, size=30_000) + [(M.END_STREAM, None)]    # one 1.8 MB window
        if transport == "tcp":
            with RemotePublisher(srv.host, srv.port, TOKEN, "p", 0, flush_bytes=100_000) as pub:
                publish(pub, data, pause=0.0002)
        else:
            publish(srv.publisher("p", 0), data, pause=0.0002)
        c.thread.join(5)
        assert c.msgs == data
        st = srv.stats()["p"]
        assert st["memory_bytes"] <= 0.5 * 2**20 and st["spilled_bytes"] > 2**20
    finally:
        srv.stop()


def test_partition_filter_applies_to_spilled_windows(tmp_path):
    srv = BufferServer(TOKEN, memory_limit_mb=0.1, spool_dir=str(tmp_path))
    srv.start()
    try:
        data = windows(range(1, 11), 8, size=10_000) + [(M.END_STREAM, None)]
        publish(srv.publisher("p", 0), data)
        assert srv.stats()["p"]["spilled_bytes"] > 500_000
        got = read_all(srv, "p", 3, mask=3, keys=[2])
        assert got == [m for m in data[(3 - 1) * 10:] if m[0] != M.PAYLOAD or m[1][0] & 3 == 2]
    finally:
        srv.stop()


def test_without_spooling_the_publisher_blocks_until_a_purge():
    srv = BufferServer(TOKEN, memory_limit_mb=1)
    srv.start()
    done: list[int] = []

    def publisher() -> None:
        pub = srv.publisher("p", 0)
        for w in range(1, 11):                      # 10 windows x 4 x 100 KB = 4 MB
            pub.begin_window(w)
            for i in range(4):
                pub.payload(i, b"x" * 100_000)
            pub.end_window(w)
            done.append(w)

    try:
        t = threading.Thread(target=publisher, daemon=True)
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and len(done) <= 3
        st = srv.stats()["p"]
        assert st["memory_bytes"] <= 2**20
        c = subscribe(srv, "p", 0)                  # a subscriber alone frees nothing
        c.wait_count(6 * len(done))
        time.sleep(0.1)
        assert t.is_alive()
        while t.is_alive():                         # commit windows as the master would
            if done:
                purge(srv.host, srv.port, TOKEN, "p", done[-1])
            time.sleep(0.02)
        assert done == list(range(1, 11))
        assert srv.stats()["p"]["memory_bytes"] <= 2**20
        c.wait_count(60)
        assert [m[1] for m in c.msgs if m[0] == M.BEGIN_WINDOW] == list(range(1, 11))
        c.close()
    finally:
        srv.stop()


def test_stop_wakes_a_blocked_publisher():
    srv = BufferServer(TOKEN, memory_limit_mb=0.1)
    srv.start()
    errors = []
    publishing = threading.Event()

    def publisher() -> None:
        pub = srv.publisher("p", 0)
        pub.begin_window(1)
        publishing.set()
        try:
            for _ in range(10):
                pub.payload(0, b"x" * 50_000)
        except BufferServerError as e:
            errors.append(e)

    t = threading.Thread(target=publisher)
    t.start()
    # stopped once the publisher is in (a fixed sleep let a loaded machine stop the server first)
    assert publishing.wait(10)
    deadline = time.monotonic() + 10
    while srv.stats()["p"]["memory_bytes"] < 100_000 and time.monotonic() < deadline:
        time.sleep(0.01)      # two payloads in: the third blocks on the memory bound
    srv.stop()
    t.join(3)
    assert not t.is_alive() and errors


# ---------------------------------------------------------------- tokens and bad input

def encode_frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _blob(b: bytes) -> bytes:
    return struct.pack(">H", len(b)) + b


_GOOD_PUBLISH = encode_publish(TOKEN, "bad.pub", 0)

BAD_INPUTS = {
    "garbled request": (encode_frame(bytes([M.SUBSCRIBE]) + _blob(TOKEN) + struct.pack(">H", 500) + b"abc"),
                        "garbled SUBSCRIBE request"),
    "garbled data frame": (_GOOD_PUBLISH + encode_frame(bytes([M.BEGIN_WINDOW]) + b"\x00\x01\x02"),
                           "garbled BEGIN_WINDOW frame"),
    "truncated request": (encode_frame(bytes([M.PUBLISH]) + b"x" * 50)[:20], "truncated frame"),
    "truncated data frame": (_GOOD_PUBLISH + encode_frame(bytes([M.PAYLOAD]) + b"\0\0\0\1" + b"y" * 1000)[:300],
                             "truncated frame"),
    "oversized length": (struct.pack(">I", 1 << 31) + b"\x10", "oversized frame"),
    "oversized data frame": (_GOOD_PUBLISH + struct.pack(">IB", 200 << 20, M.PAYLOAD), "oversized frame"),
    "wrong token": (encode_publish(b"not-the-token", "p", 0), "wrong token"),
    "missing token": (encode_publish(b"", "p", 0), "missing token"),
    "no token at all": (encode_frame(bytes([M.PURGE])), "missing token"),
    "unknown type": (encode_frame(bytes([0x7F]) + b"hello"), "unknown message type 127"),
    "unknown type mid-stream": (_GOOD_PUBLISH + encode_frame(bytes([0xEE])), "unknown message type 238"),
    "data before request": (encode_frame(bytes([M.BEGIN_WINDOW]) + struct.pack(">q", 1)), "expected a request"),
    "request on a publisher connection": (_GOOD_PUBLISH + encode_subscribe(TOKEN, "p", 0, 0, [], "x"),
                                          "unexpected SUBSCRIBE"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_closes_only_that_connection(server, caplog, case):
    caplog.set_level(logging.WARNING, logger="stram.agent.bufferserver")
    payload, reason = BAD_INPUTS[case]
    pub = server.publisher("good", 0)
    good = subscribe(server, "good", 0)
    publish(pub, windows([1]))
    good.wait_count(5)

    raw = socket.create_connection((server.host, server.port))
    raw.settimeout(5)
    peer = f"127.0.0.1:{raw.getsockname()[1]}"
    raw.sendall(payload)
    if "truncated" in case:
        raw.shutdown(socket.SHUT_WR)               # the connection closes mid-frame
    received = b""
    try:
        while chunk := raw.recv(65536):             # the server closes it
            received += chunk
    except ConnectionResetError:
        pass
    raw.close()
    assert len(received) < 200                      # at most OK and an ERROR with the reason

    deadline = time.monotonic() + 2
    while not [r for r in caplog.records if peer in r.getMessage()] and time.monotonic() < deadline:
        time.sleep(0.01)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and peer in r.getMessage()]
    assert warnings, [r.getMessage() for r in caplog.records]
    assert reason in warnings[0].getMessage()

    # everyone else is still served
    publish(pub, windows([2]) + [(M.END_STREAM, None)])
    good.thread.join(5)
    assert good.msgs == windows([1, 2]) + [(M.END_STREAM, None)]
    assert read_all(server, "good", 2) == windows([2]) + [(M.END_STREAM, None)]


def test_wrong_token_clients_raise_without_retrying(server, caplog):
    caplog.set_level(logging.WARNING, logger="stram.agent.bufferserver")
    sub = Subscriber(server.host, server.port, b"nope", "p", 0)
    with pytest.raises(BufferServerError, match="wrong token"):
        next(sub.messages())
    with pytest.raises(BufferServerError, match="wrong token"):
        RemotePublisher(server.host, server.port, b"nope", "p", 0)
    with pytest.raises(BufferServerError, match="wrong token"):
        purge(server.host, server.port, b"nope", "p", 0)
    assert sum("wrong token" in r.getMessage() for r in caplog.records) == 3


def test_a_scoped_credential_reaches_its_one_stream_only(server, caplog):
    """A subscriber holds ``scoped_credential(key, "subscribe", publisher)``: that stream, nothing else."""
    caplog.set_level(logging.WARNING, logger="stram.agent.bufferserver")
    data = windows([BASE, BASE + 1]) + [(M.END_STREAM, None)]
    for pid in ("1.out", "2.out"):
        publish(server.publisher(pid, 0), data)
    may_read = scoped_credential(TOKEN, "subscribe", "1.out").encode()
    c = Collector(Subscriber(server.host, server.port, may_read, "1.out", FIRST_WINDOW))
    c.thread.join(5)
    assert c.error is None and c.msgs == data
    # not another publisher's stream, not as a publisher, not a purge or a reset
    with pytest.raises(BufferServerError, match="wrong token in SUBSCRIBE request for '2.out'"):
        next(Subscriber(server.host, server.port, may_read, "2.out", FIRST_WINDOW).messages())
    with pytest.raises(BufferServerError, match="wrong token in PUBLISH"):
        RemotePublisher(server.host, server.port, may_read, "1.out", FIRST_WINDOW)
    with pytest.raises(BufferServerError, match="wrong token in PURGE"):
        purge(server.host, server.port, may_read, "1.out", BASE + 1)
    with pytest.raises(BufferServerError, match="wrong token in RESET"):
        reset(server.host, server.port, may_read, "1.out")
    # a publish credential publishes its stream only
    may_write = scoped_credential(TOKEN, "publish", "3.out").encode()
    with RemotePublisher(server.host, server.port, may_write, "3.out", FIRST_WINDOW) as pub:
        publish(pub, data)
    assert read_all(server, "3.out") == data
    with pytest.raises(BufferServerError, match="wrong token in PUBLISH request for '4.out'"):
        RemotePublisher(server.host, server.port, may_write, "4.out", FIRST_WINDOW)
    # the owner's key still does everything
    assert read_all(server, "2.out") == data


def test_many_bad_connections_at_once_leave_the_server_healthy(server):
    pub = server.publisher("good", 0)
    good = subscribe(server, "good", 0)
    socks = []
    for i, (payload, _) in enumerate(list(BAD_INPUTS.values()) * 3):
        s = socket.create_connection((server.host, server.port))
        s.sendall(payload)
        if i % 2:
            s.close()                               # some vanish without waiting
        else:
            socks.append(s)
    publish(pub, windows(range(1, 5)) + [(M.END_STREAM, None)])
    good.thread.join(5)
    assert good.msgs == windows(range(1, 5)) + [(M.END_STREAM, None)]
    for s in socks:
        s.close()
    assert read_all(server, "good", 3) == windows([3, 4]) + [(M.END_STREAM, None)]


def test_connection_that_sends_nothing_times_out(caplog):
    caplog.set_level(logging.WARNING, logger="stram.agent.bufferserver")
    srv = BufferServer(TOKEN, handshake_timeout=0.2)
    srv.start()
    try:
        s = socket.create_connection((srv.host, srv.port))
        s.settimeout(3)
        while s.recv(1024):
            pass
        s.close()
        assert any("no request within" in r.getMessage() for r in caplog.records)
    finally:
        srv.stop()


def test_stop_closes_idle_subscribers_quickly():
    srv = BufferServer(TOKEN)
    srv.start()
    c = subscribe(srv, "p", 0, reconnect=False)
    time.sleep(0.05)
    t0 = time.monotonic()
    srv.stop(grace=2)
    assert time.monotonic() - t0 < 1.5
    c.thread.join(2)
    assert not c.thread.is_alive()


# ---------------------------------------------------------------- TLS

@pytest.fixture(scope="module")
def identity():
    from stram.common import tls
    return tls.make_identity("app-test")


@pytest.fixture
def tls_server(identity):
    from stram.common import tls
    srv = BufferServer(TOKEN, ssl_context=tls.server_context(identity))
    srv.start()
    yield srv
    srv.stop()


def test_tls_publish_and_subscribe_deliver_the_same_stream(tls_server, identity):
    from stram.common import tls
    client = tls.client_context(identity.cert_pem)
    data = [(M.RESET_WINDOW, BASE)] + windows(range(BASE, BASE + 20), 5, size=3000) + [(M.END_STREAM, None)]
    live = Collector(Subscriber(tls_server.host, tls_server.port, TOKEN, "9.out", BASE + 10, ssl_context=client))
    with RemotePublisher(tls_server.host, tls_server.port, TOKEN, "9.out", FIRST_WINDOW, flush_bytes=4096,
                         ssl_context=client) as pub:
        publish(pub, data)
    whole = Collector(Subscriber(tls_server.host, tls_server.port, TOKEN, "9.out", FIRST_WINDOW, ssl_context=client))
    for c in (live, whole):
        c.thread.join(5)
        assert c.error is None
    assert whole.msgs == data
    assert live.msgs == windows(range(BASE + 10, BASE + 20), 5, size=3000) + [(M.END_STREAM, None)]
    purge(tls_server.host, tls_server.port, TOKEN, "9.out", BASE + 5, ssl_context=client)


def test_tls_server_refuses_plain_clients_and_strangers_and_keeps_serving(tls_server, identity, caplog):
    from stram.common import tls
    caplog.set_level(logging.WARNING, logger="stram.agent.bufferserver")
    publish(tls_server.publisher("p", 0), windows([BASE]) + [(M.END_STREAM, None)])
    # a client without TLS (even with the key) gets nothing: its request is not a TLS handshake
    with pytest.raises(BufferServerError, match="connection (closed|lost)"):
        next(Subscriber(tls_server.host, tls_server.port, TOKEN, "p", FIRST_WINDOW, reconnect=False).messages())
    # the server's connection thread logs it, maybe after the client saw its connection close
    deadline = time.monotonic() + 5
    while "TLS handshake failed" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "TLS handshake failed" in caplog.text
    # a client that trusts another application's certificate will not talk to this server
    stranger = tls.client_context(tls.make_identity("other").cert_pem)
    with pytest.raises(BufferServerError, match="is not this application's"):
        next(Subscriber(tls_server.host, tls_server.port, TOKEN, "p", FIRST_WINDOW,
                        ssl_context=stranger).messages())
    # a TLS client of a plain server fails too (no silent downgrade)
    plain = BufferServer(TOKEN)
    plain.start()
    try:
        with pytest.raises((BufferServerError, OSError)):
            RemotePublisher(plain.host, plain.port, TOKEN, "q", FIRST_WINDOW,
                            ssl_context=tls.client_context(identity.cert_pem), connect_timeout=2)
    finally:
        plain.stop()
    # the server still serves its own
    good = Collector(Subscriber(tls_server.host, tls_server.port, TOKEN, "p", FIRST_WINDOW,
                                ssl_context=tls.client_context(identity.cert_pem)))
    good.thread.join(5)
    assert good.msgs == windows([BASE]) + [(M.END_STREAM, None)]


@pytest.fixture(autouse=True)
def fresh_log_limit():
    """Every test starts with the log's rate limit unspent (its counts are per process)."""
    from stram.agent.bufferserver import server as server_mod
    server_mod.LOG_LIMIT._seen.clear()
    yield server_mod.LOG_LIMIT
    server_mod.LOG_LIMIT._seen.clear()


def test_a_flood_of_refused_connections_writes_a_bounded_log(server, caplog, fresh_log_limit):
    """500 connections with a wrong token: each refused, the log says so at most LOG_LIMIT.burst
    times per message in its interval (then counts), and the server still serves."""
    caplog.set_level(logging.INFO, logger="stram.agent.bufferserver")
    for _ in range(500):
        with pytest.raises(BufferServerError, match="wrong token"):
            RemotePublisher(server.host, server.port, b"nope", "p", 0)
    refusals = [r for r in caplog.records if "wrong token" in r.getMessage()]
    assert 1 <= len(refusals) <= fresh_log_limit.burst
    by_template = collections.Counter(str(r.msg) for r in caplog.records)
    assert max(by_template.values()) <= fresh_log_limit.burst
    publish(server.publisher("p", 0), windows([BASE]) + [(M.END_STREAM, None)])
    assert read_all(server, "p", BASE) == windows([BASE]) + [(M.END_STREAM, None)]
