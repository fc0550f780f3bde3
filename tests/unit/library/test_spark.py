"""The Spark integration in process: the stram source against a real buffer server (end to end: test_spark_e2e.py)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")
pd = pytest.importorskip("pandas")

W0 = (1_700_000_000 << 32) - 1  # "before window 0" of a start time
TOKEN = b"spark-test-token"


# ---------------------------------------------------------------- the source, without Spark's JVM

@pytest.fixture
def buffer_server():
    from stram.agent.bufferserver import BufferServer

    server = BufferServer(token=TOKEN)
    server.start()
    yield server
    server.stop()


def _publish(server, publisher: str, windows: range, rows_per_window: int = 3, end: bool = False) -> None:
    import datetime as dt

    from stram.agent.engine.codec import get_codec
    codec = get_codec("pickle")
    pub = server.publisher(publisher, windows[0])
    for w in windows:
        pub.begin_window(w)
        pub.payload(0, codec.encode([{"event_time": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                                      "user": f"u{w - W0}", "page": f"/p/{i}", "extra": 1}
                                     for i in range(rows_per_window)]))
        pub.end_window(w)
    if end:
        pub.end_stream()


def _channel_state(server, sources: dict[int, int], ended: dict[int, int] | None = None, codec: str = "pickle"):
    return {"operator": "'analytics' (9)", "initial": W0, "read_timeout": 2.0, "connect_timeout": 2.0,
            "ports": {"input": [{"publisher": f"{s}.output", "source": s, "host": server.host,
                                 "port_number": server.port, "token": TOKEN.hex(), "mask": 0, "keys": [],
                                 "codec": codec} for s in sources]},
            "windows": {str(s): w for s, w in sources.items()},
            "ended": {str(s): w for s, w in (ended or {}).items()}}


def _schema(ddl_fields):
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

    types = {"timestamp": TimestampType(), "string": StringType(), "int": IntegerType()}
    return StructType([StructField(n, types[t]) for n, t in ddl_fields])


SCHEMA = [("event_time", "timestamp"), ("user", "string"), ("page", "string")]


def test_source_offsets_partitions_read_commit(tmp_path, buffer_server):
    from stram.spark import Channel, StramStreamReader, latest_window, probe_end_of_stream

    _publish(buffer_server, "5.output", range(W0 + 1, W0 + 7))
    _publish(buffer_server, "6.output", range(W0 + 1, W0 + 4), end=True)
    channel = Channel(str(tmp_path / "ch"))
    channel.write_state(_channel_state(buffer_server, {5: W0 + 6, 6: W0 + 3}))
    reader = StramStreamReader({"channel": channel.directory, "port": "input"}, _schema(SCHEMA))
    start = reader.initialOffset()
    assert start == {"port": "input", "window": W0}
    # the newest window every upstream partition finished
    assert reader.latestOffset(start, None) == {"port": "input", "window": W0 + 3}
    parts = reader.partitions(start, {"port": "input", "window": W0 + 2})
    assert [p.publisher for p in parts] == ["5.output", "6.output"]
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    assert sorted(r["user"] for r in rows) == ["u1"] * 6 + ["u2"] * 6  # windows (W0, W0+2], no more
    assert set(rows[0]) == {"event_time", "user", "page"}
    assert reader.partitions(start, start) == []
    reader.commit({"port": "input", "window": W0 + 2})
    assert channel.read_commit("input") == W0 + 2
    # partition 6 ended after W0+3: END_STREAM stops a read that asks for more
    more = reader.partitions({"port": "input", "window": W0 + 2}, {"port": "input", "window": W0 + 6})
    t0 = time.monotonic()
    counts = {p.publisher: sum(b.num_rows for b in reader.read(p)) for p in more}
    assert counts == {"5.output": 12, "6.output": 3} and time.monotonic() - t0 < 2
    probe = lambda pub, after, **kw: probe_end_of_stream(buffer_server.host, buffer_server.port, TOKEN,  # noqa
                                                         pub, after, **kw)
    assert probe("6.output", W0 + 3) == (True, W0 + 3)  # W0+3 was its last window
    assert probe("6.output", W0 + 2) == (False, W0 + 3)  # it goes on after W0+2
    t0 = time.monotonic()
    assert probe("5.output", W0 + 6, wait=0.2) == (False, W0 + 6)  # nothing yet: unknown
    assert time.monotonic() - t0 < 1
    # an ended partition no longer holds the others back; all ended: the newest of them
    state = _channel_state(buffer_server, {5: W0 + 6, 6: W0 + 3}, ended={6: W0 + 3})
    assert latest_window(state, "input") == W0 + 6
    state = _channel_state(buffer_server, {5: W0 + 6, 6: W0 + 3}, ended={5: W0 + 6, 6: W0 + 3})
    assert latest_window(state, "input") == W0 + 6
    # never before the start Spark gives
    assert reader.latestOffset({"port": "input", "window": W0 + 5}, None)["window"] == W0 + 5


def test_source_schema_mismatch_and_dead_server(tmp_path, buffer_server):
    from stram.spark import Channel, StramReadError, StramSchemaError, StramStreamReader

    _publish(buffer_server, "5.output", range(W0 + 1, W0 + 3))
    channel = Channel(str(tmp_path / "ch"))
    channel.write_state(_channel_state(buffer_server, {5: W0 + 2}))
    bad = StramStreamReader({"channel": channel.directory}, _schema([("event_time", "timestamp"), ("user", "int")]))
    part = bad.partitions(bad.initialOffset(), bad.latestOffset())[0]
    with pytest.raises(StramSchemaError, match=r"STRAM_SCHEMA_MISMATCH.*'analytics' \(9\).*user int32"):
        list(bad.read(part))
    missing = StramStreamReader({"channel": channel.directory}, _schema(SCHEMA + [("referrer", "string")]))
    with pytest.raises(StramSchemaError, match=r"no field\(s\) \['referrer'\]"):
        list(missing.read(part))
    # a read that waits for windows nobody publishes times out instead of hanging
    late = StramStreamReader({"channel": channel.directory}, _schema(SCHEMA))
    part = late.partitions({"port": "input", "window": W0}, {"port": "input", "window": W0 + 5})[0]
    t0 = time.monotonic()
    with pytest.raises(StramReadError, match="nothing received for 2s"):
        list(late.read(part))
    assert time.monotonic() - t0 < 6
    # a buffer server that is gone fails the read at once
    buffer_server.stop()
    t0 = time.monotonic()
    with pytest.raises(StramReadError, match="STRAM_READ_ERROR"):
        list(late.read(part))
    assert time.monotonic() - t0 < 3


def test_source_passes_arrow_batches_through(tmp_path, buffer_server):
    import pyarrow as pa

    from stram.agent.engine.codec import get_codec
    from stram.spark import Channel, StramStreamReader

    pub = buffer_server.publisher("7.output", W0 + 1)
    batch = pa.record_batch({"page": ["/a", "/b"], "user": ["x", "y"], "n": pa.array([1, 2], pa.int64())})
    for w in (W0 + 1, W0 + 2):
        pub.begin_window(w)
        pub.payload(0, get_codec("arrow").encode([batch]))
        pub.end_window(w)
    channel = Channel(str(tmp_path / "ch"))
    channel.write_state(_channel_state(buffer_server, {7: W0 + 2}, codec="arrow"))
    reader = StramStreamReader({"channel": channel.directory}, _schema([("user", "string"), ("page", "string")]))
    out = [b for p in reader.partitions(reader.initialOffset(), reader.latestOffset()) for b in reader.read(p)]
    assert all(isinstance(b, pa.RecordBatch) for b in out)
    assert [b.schema.names for b in out] == [["user", "page"]] * len(out)
    assert sum(b.num_rows for b in out) == 4


def test_commits_are_reported_only_once_the_ends_of_upstreams_are_known(buffer_server):
    """Reporting an upstream's last window lets the master remove it: its END_STREAM must be seen first."""
    from stram.spark.pipeline import SparkPipeline, _Upstream

    pub = buffer_server.publisher("5.output", W0 + 1)
    for w in (W0 + 1, W0 + 2):
        pub.begin_window(w)
        pub.end_window(w)
    op = SparkPipeline()
    up = _Upstream(port="input", source=5, publisher="5.output", host=buffer_server.host,
                   port_number=buffer_server.port, token=TOKEN, mask=0, keys=[], codec="pickle", window=W0 + 2)
    op._upstreams = [up]
    assert op._may_report(W0 + 1)  # the upstream has finished a later window
    assert not op._may_report(W0 + 2)  # W0+2 may be its last window: held
    pub.begin_window(W0 + 3)
    assert op._may_report(W0 + 2) and up.proof == W0 + 3 and up.ended is None  # it goes on
    pub.end_window(W0 + 3)
    pub.end_stream()
    up.window = W0 + 3
    assert op._inputs_ended() is None
    assert op._may_report(W0 + 3) and up.ended == W0 + 3
    assert op._inputs_ended() == W0 + 3


def test_an_upstream_ends_only_when_the_master_says_so(tmp_path):
    """A key missing from upstream_windows is no end of stream; ended_upstreams is."""
    from stram.operator import OperatorContext
    from stram.spark.channel import Channel
    from stram.spark.pipeline import SparkPipeline, _Upstream

    told = {"windows": {5: W0 + 3, 6: W0 + 4}, "ended": {}}
    op = SparkPipeline()
    op._ctx = OperatorContext(id=9, name="analytics", checkpoint_window=W0,
                              upstream_windows=lambda: dict(told["windows"]),
                              ended_upstreams=lambda: dict(told["ended"]))
    op._channel = Channel(str(tmp_path / "ch"))
    op._upstreams = [_Upstream(port="input", source=s, publisher=f"{s}.output", host="h", port_number=1,
                               token=TOKEN, mask=0, keys=[], codec="pickle") for s in (5, 6)]
    op._publish_state()
    assert [(u.window, u.ended) for u in op._upstreams] == [(W0 + 3, None), (W0 + 4, None)]
    told["windows"] = {6: W0 + 5}  # 5 is not in this response: nothing is concluded from that
    op._publish_state()
    assert [(u.window, u.ended) for u in op._upstreams] == [(W0 + 3, None), (W0 + 5, None)]
    told["ended"] = {5: W0 + 4}  # the master removed it after it shut down at W0 + 4
    op._publish_state()
    assert [(u.window, u.ended) for u in op._upstreams] == [(W0 + 4, W0 + 4), (W0 + 5, None)]
    assert op._channel.read_state()["ended"] == {"5": W0 + 4}
