"""ParquetInput in process: rows as dicts or Arrow batches, partitions' stripes, watermarks, exact restarts."""

from __future__ import annotations

import json
import math
import pickle
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stram.common.watermarks import MAX_WATERMARK
from stram.flow import Flow
from stram.operator import FatalError, OperatorContext, ShutdownException
from stram.operators import parquet as parquet_module
from stram.operators.parquet import ParquetInput


def write(tmp_path, n: int, row_group: int, seed: int = 3, nulls: tuple = ()) -> tuple[str, list[dict]]:
    """A Parquet file of ``n`` rows {id, ts, name} (ts non-decreasing, null at the ``nulls`` rows)."""
    rnd = random.Random(seed)
    ts, rows = 1_000, []
    for i in range(n):
        ts += rnd.randrange(3)
        rows.append({"id": i, "ts": None if i in nulls else ts, "name": f"n{rnd.randrange(100)}"})
    path = str(tmp_path / "data.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group)
    return path, rows


class Run:
    """Drives a ParquetInput partition window by window, keeping what it emits and its watermarks."""

    def __init__(self, path: str, part: int = 0, parts: int = 1, state: dict | None = None, **props) -> None:
        self.op = op = ParquetInput()
        op.path = path
        for k, v in props.items():
            setattr(op, k, v)
        if state is not None:
            op.set_state(state)
        self.out: list = []
        self.watermarks: list[int] = []
        op.output.emit_batch = self.out.extend
        op.batches.emit = self.out.append
        op.setup(OperatorContext(id=1, name="pin", partition_index=part, partition_count=parts,
                                 emit_watermark=self.watermarks.append))
        self.ended = False

    def window(self, calls: int = 3) -> None:
        self.op.begin_window(0)
        try:
            for _ in range(calls):
                self.op.emit_tuples()
        except ShutdownException:
            self.ended = True
        self.op.end_window()

    def to_end(self) -> "Run":
        while not self.ended:
            self.window()
        return self


def test_rows_come_out_as_dicts_in_file_order_then_the_end(tmp_path):
    path, rows = write(tmp_path, 1000, row_group=300)
    run = Run(path, batch_rows=64, timestamp_field="ts").to_end()
    assert run.out == rows
    assert run.watermarks[-1] == MAX_WATERMARK


def test_columns_and_arrow_batches(tmp_path):
    path, rows = write(tmp_path, 500, row_group=128)
    run = Run(path, batch_rows=50, columns=["name", "id"], arrow=True).to_end()
    assert all(isinstance(b, pa.RecordBatch) and b.num_rows <= 50 for b in run.out)
    got = [r for b in run.out for r in b.to_pylist()]
    assert got == [{"name": r["name"], "id": r["id"]} for r in rows]
    assert list(got[0]) == ["name", "id"]


@pytest.mark.parametrize("stripe", ["row group", "batch_rows"])
@pytest.mark.parametrize("parts", [2, 3])
def test_partitions_take_turns_on_stripes_and_together_read_every_row_once(tmp_path, monkeypatch, parts, stripe):
    """Row groups of 333 rows are the stripes; groups above GROUP_STRIPE_ROWS rows, stripes of batch_rows."""
    if stripe == "batch_rows":
        monkeypatch.setattr(parquet_module, "GROUP_STRIPE_ROWS", 332)
    path, rows = write(tmp_path, 2000, row_group=333)
    size = 333 if stripe == "row group" else 40
    seen = []
    for part in range(parts):
        run = Run(path, part, parts, batch_rows=40)
        out = run.to_end().out
        assert all((r["id"] // size) % parts == part for r in out)
        assert [r["id"] for r in out] == sorted(r["id"] for r in out)
        seen += out
    assert sorted(seen, key=lambda r: r["id"]) == rows


def test_a_partition_decodes_only_its_own_row_groups(tmp_path, monkeypatch):
    path, rows = write(tmp_path, 2000, row_group=250)
    decoded = []
    real = pq.ParquetFile.iter_batches

    def counting(self, *args, row_groups=None, **kwargs):
        decoded.extend(row_groups)
        return real(self, *args, row_groups=row_groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    out = Run(path, 1, 3, batch_rows=64).to_end().out
    assert decoded == [1, 4, 7]
    assert [r["id"] for r in out] == [i for i in range(2000) if (i // 250) % 3 == 1]


def test_the_watermark_trails_the_largest_timestamp_by_the_bound(tmp_path):
    path, rows = write(tmp_path, 900, row_group=200)
    run = Run(path, batch_rows=30, records_per_window=70, timestamp_field="ts", out_of_orderness_ms=5)
    while not run.ended:
        before = len(run.out)
        run.window(calls=10)
        assert len(run.out) - before <= 70
        if not run.ended:
            assert run.watermarks[-1] == max(r["ts"] for r in run.out) - 5
    assert run.out == rows


@pytest.mark.parametrize("group_stripe_rows", [parquet_module.GROUP_STRIPE_ROWS, 100])
def test_a_restart_from_a_checkpoint_replays_exactly_the_rest(tmp_path, monkeypatch, group_stripe_rows):
    monkeypatch.setattr(parquet_module, "GROUP_STRIPE_ROWS", group_stripe_rows)
    path, rows = write(tmp_path, 1500, row_group=256)
    for parts in (1, 2, 3):
        for part in range(parts):
            first = Run(path, part, parts, batch_rows=37, records_per_window=101, timestamp_field="ts")
            for _ in range(4):
                first.window()
            state = pickle.loads(pickle.dumps(first.op.get_state()))
            mid = list(first.out)
            first.to_end()
            again = Run(path, part, parts, state=state, batch_rows=37, records_per_window=101,
                        timestamp_field="ts").to_end()
            assert mid + again.out == first.out


def test_rows_with_a_null_timestamp_are_skipped_and_counted(tmp_path):
    path, rows = write(tmp_path, 300, row_group=100, nulls=(5, 150))
    run = Run(path, batch_rows=64, timestamp_field="ts").to_end()
    assert run.out == [r for r in rows if r["ts"] is not None]
    assert run.op.malformed == 2


@pytest.mark.parametrize("props, words", [
    ({"timestamp_field": "name"}, "not an integer"),
    ({"timestamp_field": "nope"}, "not among the columns"),
    ({"columns": ["id", "nope"]}, "no column 'nope'"),
    ({"columns": ["id"], "timestamp_field": "ts"}, "not among the columns"),
    ({"batch_rows": 0}, "batch_rows"),
    ({"out_of_orderness_ms": -1}, "out_of_orderness_ms"),
])
def test_bad_properties_fail_naming_the_property(tmp_path, props, words):
    path, _ = write(tmp_path, 10, row_group=10)
    with pytest.raises(FatalError, match=words):
        Run(path, **props)


def test_a_missing_or_non_parquet_file_fails(tmp_path):
    with pytest.raises(FatalError, match="missing"):
        Run(str(tmp_path / "nope.parquet"))
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(FatalError, match="not a readable Parquet file"):
        Run(str(tmp_path / "x.parquet"))


def test_read_parquet_compiles_to_the_operator_and_its_arrow_port(tmp_path):
    flow = Flow("p")
    rows = flow.read_parquet("a.parquet", timestamp_field="ts", columns=["id", "ts"], batch_rows=100, name="a")
    rows.write_jsonl("out", name="o")
    batches = flow.read_parquet("b.parquet", arrow=True, name="b")
    batches.map(lambda b: b).write_jsonl("out2", name="o2")
    spec = flow.to_spec()
    assert spec["operators"]["a"] == {"class": "stram.operators.parquet:ParquetInput", "properties": {
        "path": "a.parquet", "timestamp_field": "ts", "columns": ["id", "ts"], "batch_rows": 100}}
    assert spec["operators"]["b"]["properties"] == {"path": "b.parquet", "arrow": True}
    assert spec["streams"]["b_batches"]["from"] == "b.batches"
    flow.compile()


class Clock:
    """The wall clock the pacing reads (``time.time`` in stram.operators.parquet), moved by the test."""

    def __init__(self, monkeypatch, now: float = 1_000.0) -> None:
        self.now = now
        monkeypatch.setattr(parquet_module.time, "time", lambda: self.now)


@pytest.mark.parametrize("parts, step", [(1, 0.05), (1, 0.7), (2, 0.05), (2, 2.0)])
def test_a_paced_source_emits_at_most_its_bucket_per_window_and_never_ahead_of_schedule(
        tmp_path, monkeypatch, parts, step):
    path, rows = write(tmp_path, 3000, row_group=500)
    clock = Clock(monkeypatch)
    rate = 1000.0                      # rows per second, shared by the partitions
    runs = [Run(path, part=i, parts=parts, batch_rows=64, timestamp_field="ts", rate=rate) for i in range(parts)]
    share = rate / parts
    # a streaming window (500 ms by default) lets out at most PACE_WINDOWS windows' worth of the share
    bucket = math.ceil(share * 0.5 * parquet_module.PACE_WINDOWS)
    started = clock.now
    while not all(r.ended for r in runs):
        for run in runs:
            if run.ended:
                continue
            before = emitted(run)
            run.window(calls=20)
            in_window = emitted(run) - before
            assert in_window <= bucket, (in_window, bucket)
            # row k goes out no earlier than k / share seconds after the first
            assert emitted(run) <= math.floor((clock.now - started) * share) + 1
        clock.now += step              # the wall time a window took
    got = sorted((r for run in runs for r in run.out), key=lambda r: r["id"])
    assert got == rows


def emitted(run: Run) -> int:
    return len(run.out)


def test_without_the_clock_moving_a_paced_source_emits_only_its_first_row(tmp_path, monkeypatch):
    path, rows = write(tmp_path, 200, row_group=100)
    Clock(monkeypatch)
    run = Run(path, batch_rows=50, rate=100.0)
    for _ in range(5):
        run.window(calls=10)
    assert run.out == rows[:1] and not run.ended


def test_an_unpaced_source_is_not_held_back(tmp_path, monkeypatch):
    path, rows = write(tmp_path, 2000, row_group=500)
    Clock(monkeypatch)
    run = Run(path, batch_rows=500)
    run.window(calls=5)
    assert len(run.out) == 2000


def test_a_paced_source_notes_its_start_once(tmp_path, monkeypatch):
    path, _ = write(tmp_path, 100, row_group=50)
    clock = Clock(monkeypatch, now=1234.5)
    report = tmp_path / "starts"
    Run(path, batch_rows=10, rate=50.0, start_report=str(report)).window()
    clock.now = 2000.0
    Run(path, batch_rows=10, rate=50.0, start_report=str(report)).window()   # a restart: the first start stands
    note = json.loads((report / "pin.0.json").read_text())
    assert note["started"] == 1234.5 and note["rate"] == 50.0 and note["path"] == path


@pytest.mark.parametrize("rate", [0, -5, "fast", True, float("inf")])
def test_a_bad_rate_is_a_fatal_error_naming_the_property(tmp_path, rate):
    path, _ = write(tmp_path, 10, row_group=10)
    with pytest.raises(FatalError, match="'rate'"):
        Run(path, rate=rate)
