"""Housekeeping off the heartbeat path: the checkpoint purger, the master's window samples and GC."""

from __future__ import annotations

import collections
import gc
import os
import random
import sys
import threading
import time

import pytest


from stram.common import fs  # noqa: E402
from stram.master.core.reports import END_MILLIS, METRICS, TUPLES_IN, TUPLES_OUT, WINDOW_ID, WindowHistory  # noqa: E402
from stram.master.process.housekeeping import Purger  # noqa: E402
from statekit import StateRun


def test_the_purger_deletes_in_order_off_the_callers_thread(tmp_path):
    files = [tmp_path / f"c{i}" for i in range(200)]
    for f in files:
        f.write_bytes(b"x")
    seen: list[tuple[str, str]] = []
    gate = threading.Event()

    def delete(uri: str) -> None:
        gate.wait(10)
        seen.append((threading.current_thread().name, uri))
        fs.delete(uri)

    purger = Purger(delete)
    try:
        purger.submit(f"file://{f}" for f in files)
        purger.submit([f"file://{tmp_path}/missing"])  # a missing file is no error
        assert purger.pending() == 201 and all(f.exists() for f in files)  # submit returned at once
        gate.set()
        assert purger.drain(10)
        assert not any(f.exists() for f in files)
        assert [uri for _, uri in seen] == [f"file://{f}" for f in files] + [f"file://{tmp_path}/missing"]
        assert {name for name, _ in seen} == {"checkpoint-purger"}
        assert (purger.deleted, purger.failed) == (201, 0)
    finally:
        purger.close()


def test_a_failed_deletion_is_counted_and_the_rest_go_on(tmp_path, caplog):
    def delete(uri: str) -> None:
        if uri.endswith("bad"):
            raise OSError("permission denied")
        fs.delete(uri)

    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")
    purger = Purger(delete)
    try:
        purger.submit([f"file://{tmp_path}/a", f"file://{tmp_path}/bad", f"file://{tmp_path}/b"])
        assert purger.drain(10)
        assert (purger.deleted, purger.failed) == (2, 1)
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
        assert "could not delete obsolete checkpoint" in caplog.text and "permission denied" in caplog.text
    finally:
        purger.close()


def test_close_stops_after_its_time_and_drops_the_rest(tmp_path):
    slow = threading.Event()
    purger = Purger(lambda uri: slow.wait(0.2))
    purger.submit(str(i) for i in range(100))
    t0 = time.monotonic()
    purger.close(timeout=0.5)
    assert time.monotonic() - t0 < 3
    assert purger.pending() == 0 and purger.deleted < 100
    purger.submit(["late"])  # after close: ignored
    assert purger.pending() == 0


def test_fs_delete_of_local_files_and_directories(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "g").write_bytes(b"x")
    fs.delete(f"file://{tmp_path}/f")
    fs.delete(f"file://{tmp_path}/d")
    fs.delete(f"file://{tmp_path}/never")
    assert sorted(os.listdir(tmp_path)) == []
    with pytest.raises(FileNotFoundError):
        fs.delete(f"file://{tmp_path}/never", missing_ok=False)


SPEC = """
name: samples
operators:
  src: {class: "stram.operators.io:LineReader", properties: {path: /dev/null}}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/samples-out}}
streams:
  s: {from: src.output, to: [out.input]}
"""


def test_the_masters_window_samples_are_not_tracked_by_the_garbage_collector():
    """Tracked samples (20 per operator) made collections scan hundreds of thousands of objects
    at scale: a history keeps its windows' numbers in an array and gives them back as plain
    tuples, with None for no metrics."""
    run = StateRun(SPEC)
    run.deploy()
    for k in range(1, 4):
        reports = []
        for name, tuples in (("src", 7 * k), ("out", 5 * k)):
            rep = run.report(name, k)
            ws = rep.window_stats.add(window_id=run.w(k), cpu_time_used=1000)
            port = ws.input_ports.add() if name == "out" else ws.output_ports.add()
            port.id, port.tuple_count, port.end_window_timestamp = "p", tuples, 1000 * k
            if name == "src":
                ws.metrics["receiver"] = '{"lag": 3}'
            reports.append(rep)
        for cid in {run.cid("src"), run.cid("out")}:
            run.heartbeat(cid, *(r for r in reports if run.state.plan.operators[r.node_id].container == cid))
    src, out = (list(run.state.window_history[run.id(n)]) for n in ("src", "out"))
    assert [s[WINDOW_ID] for s in out] == [run.w(k) for k in (1, 2, 3)]
    for sample in src + out:
        assert type(sample) is tuple
    assert src[-1][METRICS] == {"receiver": {"lag": 3}} and out[-1][METRICS] is None
    assert [s[TUPLES_OUT] for s in src] == [7, 14, 21] and [s[TUPLES_IN] for s in out] == [5, 10, 15]
    rows = {r["name"]: r for r in run.state.operator_rows()}
    assert rows["src"]["metrics"] == {"receiver": {"lag": 3}} and rows["out"]["metrics"] == {}
    assert rows["out"]["last_window_tuples"] == [15, 0] and rows["out"]["tuples_in_total"] == 30
    assert rows["src"]["windows_total"] == 3 and rows["src"]["tuples_out_total"] == 42
    assert rows["out"]["tuples_per_sec"] == (10 + 15) / 2.0
    # more windows than a history keeps: none of them stays an object the collector tracks
    history = run.state.window_history[run.id("out")]
    gc.collect()
    before = len(gc.get_objects())
    for k in range(4, 200):
        history.append((run.w(k), 5, 0, 1000 * k, 10, None))
    assert len(gc.get_objects()) - before < 5


def test_a_window_history_reads_as_the_deque_of_tuples_it_replaced():
    rng = random.Random(7)
    for case in range(200):
        maxlen = rng.choice([1, 2, 3, 20])
        history, reference = WindowHistory(maxlen), collections.deque(maxlen=maxlen)
        for k in range(rng.randrange(0, 3 * maxlen + 2)):
            sample = (rng.choice([7 << 32 | k, -1, 0]), rng.randrange(0, 50), rng.choice([0, rng.randrange(50)]),
                      1000 * k + rng.choice([0, 0, -5000]), rng.randrange(10 ** 9),
                      rng.choice([None, None, {"lag": k}]))
            history.append(sample)
            reference.append(sample)
            assert len(history) == len(reference) and list(history) == list(reference), case
            assert [history[i] for i in range(-len(reference), len(reference))] == list(reference) * 2
        with pytest.raises(IndexError):
            history[len(reference)]
        samples = list(reference)
        span = (samples[-1][END_MILLIS] - samples[0][END_MILLIS]) / 1000 if len(samples) >= 2 else 0
        expected = sum(s[TUPLES_OUT] or s[TUPLES_IN] for s in samples[1:]) / span if span > 0 else 0.0
        assert history.rate() == pytest.approx(expected), case
        assert history.rate(inputs_only=True) == pytest.approx(
            sum(s[TUPLES_IN] for s in samples[1:]) / span if span > 0 else 0.0), case
        copy = history.copy()
        history.append((1, 2, 3, 4, 5, {"x": 1}))
        assert list(copy) == samples  # a copy keeps what it saw
    beyond = WindowHistory(2)
    beyond.append((1, 1 << 70, -(1 << 70), 3, 4, None))  # an agent's nonsense is clamped, not raised
    assert beyond[0] == (1, (1 << 63) - 1, -(1 << 63), 3, 4, None) and len(beyond) == 1


def test_recording_a_heartbeats_windows_equals_appending_and_counting_each():
    """WindowHistory.record (the heartbeat's one call per operator) against append and
    OperatorTotals.add of each window, over drawn heartbeats: agents that send their totals or only
    the ports, metrics now and then, retried windows, figures past 64 bits."""
    from stram import wire as proto
    from stram.master.core.reports import OperatorTotals, decode_metrics, port_totals
    rng = random.Random(11)
    for case in range(300):
        maxlen = rng.choice([1, 2, 3, 20])
        history, totals = WindowHistory(maxlen), OperatorTotals()
        ref_history, ref_totals = WindowHistory(maxlen), OperatorTotals()
        window = 7 << 32
        for beat in range(rng.randrange(1, 8)):
            now = 1000 * (beat + 1)
            ohb = proto.OperatorHeartbeat(node_id=1)
            window -= rng.choice([0, 0, 0, 2])  # a retried heartbeat reports windows again
            for _ in range(rng.randrange(0, 2 * maxlen + 2)):
                window += 1
                ws = ohb.window_stats.add(window_id=window, cpu_time_used=rng.randrange(10 ** 6))
                if rng.random() < 0.7:  # the agent's totals
                    ws.tuples_in, ws.tuples_out = rng.randrange(100), rng.choice([0, rng.randrange(1 << 40)])
                    ws.end_window_millis = now - rng.randrange(0, 500)
                else:  # only the ports (an end of 0 falls back on the heartbeat's time)
                    ws.input_ports.add(id="in", tuple_count=rng.randrange(100),
                                       end_window_timestamp=rng.choice([0, now - 3]))
                    ws.output_ports.add(id="out", tuple_count=rng.randrange(100))
                if rng.random() < 0.2:
                    ws.metrics["lag"] = str(rng.randrange(9))
                if rng.random() < 0.02:
                    ws.cpu_time_used = (1 << 63) - 1 - rng.randrange(3)  # near the bound
            history.record(ohb.window_stats, now, totals)
            for ws in ohb.window_stats:  # what the heartbeat did before
                if ws.end_window_millis:
                    tuples_in, tuples_out, end = ws.tuples_in, ws.tuples_out, ws.end_window_millis
                else:
                    tuples_in, tuples_out, end = port_totals(ws)
                sample = (ws.window_id, tuples_in, tuples_out, end or now, ws.cpu_time_used,
                          decode_metrics(ws.metrics) if ws.metrics else None)
                ref_history.append(sample)
                ref_totals.add(sample)
            assert list(history) == list(ref_history), (case, beat)
            assert totals == ref_totals, (case, beat)
    beyond, totals = WindowHistory(2), OperatorTotals()
    ohb = proto.OperatorHeartbeat(node_id=1)
    ohb.window_stats.add(window_id=1, tuples_in=1, end_window_millis=5)
    history_before = list(beyond)
    beyond.record(ohb.window_stats, 9, totals)
    assert history_before == [] and list(beyond) == [(1, 1, 0, 5, 0, None)] and totals.windows == 1


def test_readers_copy_a_few_operators_per_hold_of_the_lock_and_see_the_same(monkeypatch):
    """The operators page and get-app-info copy COPY_CHUNK operators per hold of the master's
    lock (heartbeats go on in between); pieced together they equal the one-hold answer."""
    from stram.master.core import reports
    run = StateRun(SPEC.replace("src: {", "src: {partitions: 5, "))
    run.deploy()
    run.everyone(2, 1)
    holds = []

    class Lock:
        def __enter__(self):
            holds.append(1)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(reports, "COPY_CHUNK", 2)
    ops = list(run.state.plan.operators.values())
    assert len(ops) == 7  # five partitions, their unifier, the output
    copies = [row for chunk in reports.in_chunks(Lock(), ops, run.state.operator_copies) for row in chunk]
    assert len(holds) == 4
    assert reports.operator_rows(copies) == run.state.operator_rows()
    info = run.state.info_head()
    for tables in reports.in_chunks(Lock(), ops, run.state.operator_info):
        for key, table in tables.items():
            info[key].update(table)
    assert len(holds) == 8
    whole = run.state.info()
    assert info == whole and len(whole["recovery_checkpoints"]) == 7 and len(whole["throughput"]) == 7


def test_a_restored_state_neither_plans_the_spec_again_nor_keeps_stale_change_marks(monkeypatch):
    """Restore used to plan the spec, then replace that plan with the journal's: the discarded
    plan's objects stayed marked changed, and every heartbeat's journal write and committed-window
    update scanned them (10 ms each at 20,000 operators)."""
    from stram.master.core.plan import PhysicalPlan
    from stram.master.core.state import MasterState
    from stram.master.spec import AppSpec
    spec = SPEC.replace("src: {", "src: {partitions: 4, ")
    run = StateRun(spec)
    run.deploy()
    run.everyone(3, 2)
    doc = run.state.snapshot()

    def no_planning(*args, **kwargs):
        raise AssertionError("restore planned the spec again")

    monkeypatch.setattr(PhysicalPlan, "from_spec", no_planning)
    restored = MasterState.restore(AppSpec.from_yaml(spec), doc, run.state.app_path, "test-token", 10_000)
    assert len(restored.plan.changes.journal.marks) == 0 and len(restored.plan.changes.committed.marks) == 0
    clocks = ("window_advanced_millis", "last_heartbeat_millis", "launch_at")  # restarted at `now` by design

    def timeless(plan: dict) -> dict:
        return {kind: [{k: v for k, v in item.items() if k not in clocks} for item in items]
                if isinstance(items, list) else items for kind, items in plan.items()}
    assert timeless(restored.snapshot()["plan"]) == timeless(doc["plan"])
    assert set(restored.plan.operators) == set(run.state.plan.operators)
    again = StateRun.around(restored)
    again.everyone(4, 2)
    assert restored.committed == run.state.committed
    live = set(map(id, restored.plan.operators.values())) | set(map(id, restored.plan.containers.values()))
    assert set(restored.plan.changes.journal.marks) <= live  # only the restored plan's objects, never others


def test_the_purger_deletes_each_file_its_delay_after_submission_at_the_earliest(tmp_path):
    deleted: dict[str, float] = {}
    purger = Purger(lambda uri: deleted.setdefault(uri, time.monotonic()), delay=0.3)
    try:
        submitted = {}
        for i in range(3):
            submitted[f"u{i}"] = time.monotonic()
            purger.submit([f"u{i}"])
            time.sleep(0.1)
        deadline = time.monotonic() + 10
        while len(deleted) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert list(deleted) == ["u0", "u1", "u2"]  # in order
        assert all(deleted[u] - submitted[u] >= 0.3 for u in submitted), (deleted, submitted)
    finally:
        purger.close()


def test_drain_deletes_at_once_whatever_the_delay(tmp_path):
    files = [tmp_path / f"c{i}" for i in range(300)]  # more than one batch
    for f in files:
        f.write_bytes(b"x")
    purger = Purger(delay=60)
    try:
        purger.submit(f"file://{f}" for f in files)
        time.sleep(0.3)
        assert all(f.exists() for f in files) and purger.pending() == 300  # waiting for their delay
        t0 = time.monotonic()
        assert purger.drain(10)
        assert time.monotonic() - t0 < 5 and not any(f.exists() for f in files) and purger.deleted == 300
    finally:
        purger.close()


def test_the_masters_purge_delay_is_half_a_checkpoint_period_at_most_30_s():
    from stram.master.process.housekeeping import purge_delay
    from stram.master.spec import AppSpec

    def spec(attributes: str) -> AppSpec:
        return AppSpec.from_yaml(f"name: p\nattributes: {{{attributes}}}\n"
                                 "operators:\n  a: {class: 'tests.kits.e2e_ops:KeyedSource'}\n")
    assert purge_delay(spec("STREAMING_WINDOW_SIZE_MILLIS: 500, CHECKPOINT_WINDOW_COUNT: 10")) == 2.5
    assert purge_delay(spec("STREAMING_WINDOW_SIZE_MILLIS: 500")) == 15.0  # the default count, 60
    assert purge_delay(spec("STREAMING_WINDOW_SIZE_MILLIS: 1000, CHECKPOINT_WINDOW_COUNT: 600")) == 30.0
