"""The Spark integration: the stram source against a real buffer server, and the clickstream app end to end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytest.importorskip("pyspark")
pd = pytest.importorskip("pandas")

from conftest import ROOT  # noqa: E402
from scripts import cli  # noqa: E402
from appmaster import apps as stram_apps, client as stram_client
from appmaster.errors import StramError
from specs.clickstream_ops import ClickstreamGenerator, events  # noqa: E402
from test_e2e_local import app_processes, running_operators, wait_until  # noqa: E402

W0 = (1_700_000_000 << 32) - 1  # "before window 0" of a start time
TOKEN = b"spark-test-token"


# ---------------------------------------------------------------- helpers

def launch(*args: str, env: dict[str, str] | None = None) -> str:
    """Launch a spec detached; the application id."""
    out = subprocess.run([sys.executable, "-m", "scripts.cli", "launch", *args, "--detach"],
                         capture_output=True, text=True, cwd=ROOT, check=True,
                         env=dict(os.environ, **(env or {})))
    return out.stdout.strip().splitlines()[-1]


def wait_final(app_id: str, timeout: float) -> dict:
    """Wait until the application reached a final state and its processes are gone."""
    app = wait_until(lambda: (a := stram_apps.find_app(app_id)).get("state") in ("SUCCEEDED", "FAILED", "KILLED") and a,
                     timeout=timeout, what=f"{app_id} to end")
    wait_until(lambda: not app_processes(app_id), timeout=30, what=f"the processes of {app_id} to exit")
    return app


def agent_pid(app_id: str, container_id: str) -> int:
    """Pid of a container's agent (``python -m container``, not its JVM or Spark workers)."""
    for proc in app_processes(app_id):
        try:
            cmd = proc.cmdline()
            if proc.environ().get("STRAM_CONTAINER_ID") == container_id and cmd[-2:] == ["-m", "container"]:
                return proc.pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no agent process for {container_id}")


def kill_container_of(app_id: str, label_prefix: str) -> str:
    """SIGKILL the container running an operator whose label starts with ``label_prefix``."""
    rows = stram_client.admin(stram_apps.find_app(app_id), "containers")["containers"]
    victim = next(r["id"] for r in rows if r["state"] == "RUNNING"
                  and any(op.startswith(label_prefix) for op in r["operators"]))
    os.kill(agent_pid(app_id, victim), signal.SIGKILL)
    return victim


def operator_row(app_id: str, name: str) -> dict:
    return next(r for r in stram_client.admin(stram_apps.find_app(app_id), "operators")["operators"] if r["name"] == name)


def generator_args(**gen) -> list[str]:
    out = []
    for key, value in gen.items():
        out += ["-D", f"operators.clicks.{key}={value}"]
    return out


def direct_aggregation(gen: dict) -> "pd.DataFrame":
    """The independent answer: the generator's lines parsed, filtered and aggregated with pandas."""
    lines = events(gen["seed"], 0, gen["events"], users=gen["users"], pages=gen["pages"], rate=gen["rate"],
                   start_time=ClickstreamGenerator.start_time, lateness=ClickstreamGenerator.lateness,
                   speedup=gen["speedup"])
    pattern = re.compile(r"^(\S+) user=(\S+) page=(\S+) action=(\S+) agent=(\S+)$")
    df = pd.DataFrame([m.groups() for m in map(pattern.match, lines) if m],
                      columns=["time", "user", "page", "action", "agent"])
    df = df[(df["action"] == "view") & ~df["agent"].str.startswith("bot")]
    df["window_start"] = pd.to_datetime(df["time"], utc=True).dt.floor("10s")
    out = df.groupby(["window_start", "page"]).agg(views=("user", "size"), users=("user", "nunique"))
    return out.reset_index().sort_values(["window_start", "page"]).reset_index(drop=True)


def assert_output_equals_direct(out_dir, gen: dict) -> None:
    from specs.clickstream_pipeline import read_output

    got = read_output(str(out_dir))
    want = direct_aggregation(gen)
    merged = want.merge(got, on=["window_start", "page"], how="outer", suffixes=("_want", "_got"), indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    extra = merged[merged["_merge"] == "right_only"]
    assert missing.empty, f"{len(missing)} window rows missing:\n{missing.head()}"
    assert extra.empty, f"{len(extra)} unexpected window rows:\n{extra.head()}"
    assert not got.duplicated(["window_start", "page"]).any(), "duplicated window rows"
    assert (merged["views_want"] == merged["views_got"]).all() and (merged["users_want"] == merged["users_got"]).all()
    assert len(got) == len(want) and want["window_start"].nunique() >= 5


# ---------------------------------------------------------------- the source, without Spark's JVM

@pytest.fixture
def buffer_server():
    from container.bufferserver import BufferServer

    server = BufferServer(token=TOKEN)
    server.start()
    yield server
    server.stop()


def _publish(server, publisher: str, windows: range, rows_per_window: int = 3, end: bool = False) -> None:
    from container.codec import get_codec

    import datetime as dt
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
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType, IntegerType

    types = {"timestamp": TimestampType(), "string": StringType(), "int": IntegerType()}
    return StructType([StructField(n, types[t]) for n, t in ddl_fields])


SCHEMA = [("event_time", "timestamp"), ("user", "string"), ("page", "string")]


def test_source_offsets_partitions_read_commit(tmp_path, buffer_server):
    from container.spark import Channel, StramStreamReader, latest_window, probe_end_of_stream

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
    from container.spark import Channel, StramReadError, StramSchemaError, StramStreamReader

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

    from container.codec import get_codec
    from container.spark import Channel, StramStreamReader

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
    from container.spark.pipeline import SparkPipeline, _Upstream

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


# ---------------------------------------------------------------- end to end (real apps, real Spark)

def _poll(app_id: str) -> dict | None:
    app = stram_apps.find_app(app_id)
    try:
        containers = stram_client.admin(app, "containers")["containers"]
        operators = stram_client.admin(app, "operators")["operators"]  # after: at least as new as the purge
        info = stram_client.admin(app, "info")
    except StramError:
        return None
    return {"containers": containers, "operators": operators, "info": info}


@pytest.mark.slow
@pytest.mark.spark
def test_clickstream_output_equals_direct_computation(tmp_path):
    gen = dict(seed=11, rate=1000, events=20000, users=300, pages=40, speedup=10)
    out = tmp_path / "out"
    app_id = launch("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={out}",
                    *generator_args(**gen))
    app = wait_final(app_id, 240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    assert_output_equals_direct(out, gen)
    # a Spark checkpoint under APP_PATH/spark/<operator name>, with the query's commits
    assert os.listdir(os.path.join(app["app_path"], "spark", "analytics", "commits"))


@pytest.mark.slow
@pytest.mark.spark
def test_buffers_keep_what_spark_has_not_committed(tmp_path):
    """Nothing is purged before Spark's first commit; after it, buffers purge up to it and no further."""
    gen = dict(seed=5, rate=1000, events=300000, users=300, pages=40, speedup=10)
    app_id = launch("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={tmp_path / 'out'}",
                    *generator_args(**gen))
    try:
        first_windows: dict[str, int] = {}
        before = after = 0
        metrics: dict = {}
        initial = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (after >= 3 and metrics.get("spark_batch_id") is not None):
            s = _poll(app_id)
            time.sleep(0.3)
            if s is None or len(s["operators"]) < 4:
                continue
            spark = next(r for r in s["operators"] if r["name"] == "analytics")
            if initial is None:
                initial = s["info"]["recovery_checkpoints"]["clicks"]
            reported = spark["recovery_checkpoint"]  # Spark's newest committed window, as the master has it
            metrics.update(spark.get("metrics") or {})
            for c in s["containers"]:
                for pub, st in c["buffer_server_publishers"].items():
                    if not st["windows"]:
                        continue
                    first_windows.setdefault(pub, st["first_window"])
                    # every window after Spark's commit is still there
                    assert st["first_window"] <= max(reported, initial) + 1, (pub, st, reported)
                    assert st["windows"] == st["last_window"] - st["first_window"] + 1, (pub, st)
                    if reported == initial:
                        before += 1
                        assert st["first_window"] == first_windows[pub], (pub, st)  # nothing purged yet
                    elif st["first_window"] > first_windows[pub]:
                        after += 1  # purged once Spark committed
        assert before and after >= 3, (before, after)
        assert metrics.get("spark_batch_id") is not None and metrics.get("spark_rows_total", 0) > 0, metrics
        assert metrics["spark_committed_window"] > initial and metrics.get("spark_end_window"), metrics
        assert metrics.get("spark_state") == "running"
    finally:
        cli.main(["kill-app", app_id])
        wait_final(app_id, 60)


@pytest.mark.slow
@pytest.mark.spark
def test_exactly_once_with_spark_and_upstream_containers_killed(tmp_path):
    gen = dict(seed=23, rate=1000, events=45000, users=300, pages=40, speedup=10)
    out = tmp_path / "out"
    app_id = launch("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={out}",
                    "-D", "PROCESSING_MODE=EXACTLY_ONCE", *generator_args(**gen))
    initial = wait_until(lambda: running_operators(app_id) == 4 and operator_row(app_id, "analytics"),
                         timeout=60, what="all operators running")["recovery_checkpoint"]
    wait_until(lambda: operator_row(app_id, "analytics")["recovery_checkpoint"] > initial, timeout=120,
               what="Spark's first commit")
    victim = kill_container_of(app_id, "analytics")  # the SparkPipeline: a new container, a new JVM
    wait_until(lambda: operator_row(app_id, "analytics")["container"] != victim and running_operators(app_id) == 4,
               timeout=60, what="the SparkPipeline redeployed")
    time.sleep(2)
    kill_container_of(app_id, "parse[0]")  # an upstream: the SparkPipeline is redeployed in place again
    app = wait_final(app_id, 240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    assert_output_equals_direct(out, gen)
    log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
    assert log.count("redeploying") >= 2, "two recoveries expected"


@pytest.mark.slow
@pytest.mark.spark
def test_pipeline_errors_fail_the_application_cleanly(tmp_path):
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "broken_pipelines.py").write_text(
        "def build(spark, inputs):\n    raise RuntimeError('deliberate failure in build')\n")
    common = ["-D", "operators.clicks.events=40000", "-D", "operators.clicks.rate=1000",
              "-D", f"operators.analytics.output_path={tmp_path / 'out'}"]
    cases = {
        "unimportable": (["-D", "operators.analytics.pipeline=no_such_pipeline_module:build"],
                         "cannot import pipeline module 'no_such_pipeline_module'"),
        "raises": (["-D", "operators.analytics.pipeline=broken_pipelines:build"],
                   "pipeline 'broken_pipelines:build' raised RuntimeError: deliberate failure in build"),
        "schema": (["-D", "operators.analytics.schema=event_time TIMESTAMP, user INT, page STRING"],
                   "tuples do not match the declared schema"),
    }
    apps = {name: launch("specs/clickstream.yaml", *common, *args, env={"PYTHONPATH": str(mod)})
            for name, (args, _) in cases.items()}
    for name, app_id in apps.items():
        app = wait_final(app_id, 180)
        expected = cases[name][1]
        assert app["state"] == "FAILED", (name, app)
        assert "SparkPipeline 'analytics'" in app["diagnostics"] and expected in app["diagnostics"], (name, app)
        cap = subprocess.run([sys.executable, "-m", "scripts.cli", "get-app-info", app_id, "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        assert expected in cap.stdout, (name, cap.stdout[-2000:])
        master_log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
        assert expected in master_log, name
