"""A spill is written without the stream's lock: subscribers and purges go on meanwhile."""

from __future__ import annotations

import builtins
import threading

from stram.agent.bufferserver import BufferServer
from stram.agent.bufferserver import MessageType as M
from stram.agent.bufferserver import store
from test_bufferserver import TOKEN, publish, read_all, subscribe, windows


class _HeldFile:
    """A spill file whose first write waits for ``release`` (and says when it started)."""

    def __init__(self, real, started: threading.Event, release: threading.Event) -> None:
        self.real, self.started, self.release = real, started, release

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.real.close()

    def writelines(self, buffers) -> None:
        if not self.started.is_set():
            self.started.set()
            assert self.release.wait(30), "the test never let the spill go on"
        self.real.writelines(buffers)


def test_subscribers_and_purges_go_on_while_a_spill_is_written(tmp_path, monkeypatch):
    started, release = threading.Event(), threading.Event()
    monkeypatch.setattr(store, "open", lambda path, mode: _HeldFile(builtins.open(path, mode), started, release),
                        raising=False)
    srv = BufferServer(TOKEN, memory_limit_mb=0.25, spool_dir=str(tmp_path))
    srv.start()
    data = windows(range(1, 13), 4, size=20_000) + [(M.END_STREAM, None)]   # 80 KB windows
    publisher = threading.Thread(target=publish, args=(srv.publisher("p", 0), data), daemon=True)
    try:
        publisher.start()
        assert started.wait(10), "nothing was spilled"
        # the first window is being written to its spill file; it is still served from memory
        early = subscribe(srv, "p", 0)
        assert early.wait_count(6, timeout=10)[:6] == data[:6]
        # and the purge of the first two windows is not held up by the write either
        purged = threading.Thread(target=srv.purge, args=("p", 2), daemon=True)
        purged.start()
        purged.join(10)
        assert not purged.is_alive(), "the purge waited for the spill"
        assert publisher.is_alive(), "the spill did not wait for the test"
        release.set()
        publisher.join(30)
        assert not publisher.is_alive()
        early.close()
        # the purged window's file went (it was created under the purge's feet), the rest is exact
        assert not (tmp_path / "p").exists() or not any(
            f.name == f"{0:010d}.spill" for f in (tmp_path / "p").rglob("*.spill"))
        late = subscribe(srv, "p", 0)
        late.thread.join(10)
        assert late.error is None and late.msgs == windows(range(3, 13), 4, size=20_000) + [(M.END_STREAM, None)]
        stats = srv.stats()["p"]
        assert 0 < stats["memory_bytes"] <= 0.25 * 2**20
        on_disk = sum(f.stat().st_size for f in tmp_path.rglob("*.spill"))
        assert stats["spilled_bytes"] == on_disk > 0
    finally:
        release.set()
        srv.stop()


def test_a_publisher_over_its_limit_spills_a_slice_and_splits_a_window_between_disk_and_memory(tmp_path):
    # 256 KB of memory: a spill writes a slice of 32 KB or more (SPILL_SLICES), not half of it; here
    # that is two of a closed 80 KB window's four 20 KB frames, the oldest, and the rest stay in memory
    limit = 2**18
    srv = BufferServer(TOKEN, memory_limit_mb=limit / 2**20, spool_dir=str(tmp_path))
    srv.start()
    data = windows(range(1, 13), 4, size=20_000) + [(M.END_STREAM, None)]
    try:
        publish(srv.publisher("p", 0), data)
        stream = srv._streams["p"]
        split = [u for u in stream.units if u.spilled and u.frames]
        assert split, [(u.window, u.spilled, len(u.frames)) for u in stream.units]
        stats = srv.stats()["p"]
        # spilling a slice at a time keeps memory near the limit (half of it would be left at most
        # after a spill of half): less goes to disk
        assert limit - limit // store.SPILL_SLICES - 2 * 20_100 <= stats["memory_bytes"] <= limit
        assert stats["spilled_bytes"] == sum(f.stat().st_size for f in tmp_path.rglob("*.spill")) > 0
        # every frame is served, in order, from the spill files then from memory
        assert read_all(srv, "p", 0) == data
        assert read_all(srv, "p", 7) == windows(range(7, 13), 4, size=20_000) + [(M.END_STREAM, None)]
    finally:
        srv.stop()


def test_arrow_pieces_spill_and_come_back_as_one_stream(tmp_path):
    """Frames kept as the Arrow codec's pieces (the batches' own buffers) are written to the spill
    file piece by piece; a subscriber reading them back from disk and from memory decodes the
    same batches, in order."""
    import pyarrow as pa

    from stram.agent.engine.codec import get_codec

    codec = get_codec("arrow")
    batches = [pa.record_batch({"id": pa.array(range(w * 3000, (w + 1) * 3000), pa.int64()),
                                "s": [f"{w}-{i:050d}" for i in range(3000)]}) for w in range(12)]
    srv = BufferServer(TOKEN, memory_limit_mb=0.5, spool_dir=str(tmp_path))   # ~190 KB a window
    srv.start()
    try:
        pub = srv.publisher("a", 0)
        for w, batch in enumerate(batches, 1):
            pub.begin_window(w)
            pub.payload(w, codec.encode_parts([batch]))
            pub.end_window(w)
        pub.end_stream()
        assert srv.stats()["a"]["spilled_bytes"] > 0
        for alloc in (None, codec.receive_buffer):
            got = [v for t, v in read_all(srv, "a", 0, alloc=alloc) if t == M.PAYLOAD]
            assert [tag for tag, _ in got] == list(range(1, 13))
            assert all(codec.decode(data)[0].equals(batch) for (_, data), batch in zip(got, batches))
    finally:
        srv.stop()
