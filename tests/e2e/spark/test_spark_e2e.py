"""The Spark integration end to end: the clickstream application with real Spark, its output checked against pandas."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")
pd = pytest.importorskip("pandas")

from conftest import ROOT  # noqa: E402
from e2ekit import admin, kill_container_of, launch_detached, running_operators, wait_final, wait_until  # noqa: E402

from specs.clickstream_ops import ClickstreamGenerator, events  # noqa: E402
from stram.client import cli  # noqa: E402


def operator_row(app_id: str, name: str) -> dict | None:
    """The operator ``name``'s row on the admin API; None while the master does not answer or lacks it."""
    rows = (admin(app_id, "operators") or {}).get("operators", [])
    return next((r for r in rows if r["name"] == name), None)


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


# ---------------------------------------------------------------- end to end (real apps, real Spark)

def _poll(app_id: str) -> dict | None:
    """containers, operators and info of one moment (None while the master does not answer)."""
    return admin(app_id, "snapshot")


@pytest.mark.spark
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_clickstream_output_equals_direct_computation(tmp_path, tls):
    """With TLS, Spark's tasks read the buffer servers over TLS too (trusting the application's cert)."""
    gen = dict(seed=11, rate=1000, events=20000, users=300, pages=40, speedup=10)
    out = tmp_path / "out"
    app_id = launch_detached("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={out}",
                             "-D", f"TLS={'true' if tls else 'false'}", *generator_args(**gen))
    app = wait_final(app_id, 240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    assert_output_equals_direct(out, gen)
    # a Spark checkpoint under APP_PATH/spark/<operator name>, with the query's commits
    assert os.listdir(os.path.join(app["app_path"], "spark", "analytics", "commits"))


@pytest.mark.spark
def test_buffers_keep_what_spark_has_not_committed(tmp_path):
    """Nothing is purged before Spark's first commit; after it, buffers purge up to it and no further."""
    gen = dict(seed=5, rate=1000, events=300000, users=300, pages=40, speedup=10)
    app_id = launch_detached("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={tmp_path / 'out'}",
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


@pytest.mark.spark
def test_exactly_once_with_spark_and_upstream_containers_killed(tmp_path):
    """An upstream container killed early, then the SparkPipeline's own after Spark's first commit.

    The upstream goes first, while the generator surely still runs; the
    SparkPipeline's kill needs only Spark's first commit, however long
    Spark takes to start, and its replay comes from the buffer servers.
    """
    gen = dict(seed=23, rate=1000, events=45000, users=300, pages=40, speedup=10)
    out = tmp_path / "out"
    app_id = launch_detached("specs/clickstream.yaml", "-D", f"operators.analytics.output_path={out}",
                             "-D", "PROCESSING_MODE=EXACTLY_ONCE", *generator_args(**gen))
    initial = wait_until(lambda: running_operators(app_id) == 4 and operator_row(app_id, "analytics"),
                         timeout=60, what="all operators running")["recovery_checkpoint"]
    upstream = kill_container_of(app_id, "parse[0]")  # the SparkPipeline is redeployed in place
    wait_until(lambda: (row := operator_row(app_id, "parse")) and row["container"] != upstream
               and running_operators(app_id) == 4, timeout=60, what="parse redeployed")
    wait_until(lambda: (row := operator_row(app_id, "analytics")) and row["recovery_checkpoint"] > initial,
               timeout=180, what="Spark's first commit")
    victim = kill_container_of(app_id, "analytics")  # the SparkPipeline: a new container, a new JVM
    wait_until(lambda: (row := operator_row(app_id, "analytics")) is None
               or (row["container"] != victim and row["state"] == "ACTIVE"),
               timeout=60, what="the SparkPipeline redeployed")
    app = wait_final(app_id, 240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    assert_output_equals_direct(out, gen)
    log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
    assert log.count("redeploying") >= 2, "two recoveries expected"


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
    apps = {name: launch_detached("specs/clickstream.yaml", *common, *args, env={"PYTHONPATH": str(mod)})
            for name, (args, _) in cases.items()}
    for name, app_id in apps.items():
        app = wait_final(app_id, 180)
        expected = cases[name][1]
        assert app["state"] == "FAILED", (name, app)
        assert "SparkPipeline 'analytics'" in app["diagnostics"] and expected in app["diagnostics"], (name, app)
        cap = subprocess.run([sys.executable, "-m", "stram.client.cli", "get-app-info", app_id, "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        assert expected in cap.stdout, (name, cap.stdout[-2000:])
        master_log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
        assert expected in master_log, name
