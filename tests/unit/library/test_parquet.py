"""ParquetOutput in process: files read back with pyarrow, exactly once across replays, partition directories."""

from __future__ import annotations

import collections
import json
import pickle
import random

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from stram.operator import FatalError, OperatorContext
from stram.operators.parquet import ParquetOutput

W = 7 << 32  # window ids of these tests


def output(tmp_path, mode: str = "EXACTLY_ONCE", state: dict | None = None, **props) -> ParquetOutput:
    op = ParquetOutput()
    op.path = str(tmp_path / "out")
    for k, v in props.items():
        setattr(op, k, v)
    if state is not None:
        op.set_state(state)
    op.setup(OperatorContext(id=4, name="pq", attributes={"PROCESSING_MODE": mode}))
    return op


def window(op: ParquetOutput, window_id: int, rows: list, batch: bool = True) -> None:
    op.begin_window(window_id)
    if batch:
        op.process_batch(rows)
    else:
        for row in rows:
            op.process_input(row)
    op.end_window()


def checkpoint(op: ParquetOutput) -> dict:
    return pickle.loads(pickle.dumps(op.get_state()))


def final_files(tmp_path) -> list:
    return sorted(p for p in (tmp_path / "out").rglob("*.parquet") if not p.name.startswith("."))


def read_back(tmp_path) -> list[dict]:
    """Every row of the final files, each file read on its own (their schemas may differ), with a
    Hive directory's field put back as its string."""
    rows = []
    for f in final_files(tmp_path):
        extra = dict(part.split("=", 1) for part in f.relative_to(tmp_path / "out").parts[:-1])
        for row in pq.read_table(f).to_pylist():
            rows.append({**{k: v for k, v in row.items() if v is not None}, **extra})
    return rows


def multiset(rows: list[dict]) -> collections.Counter:
    return collections.Counter(json.dumps(r, sort_keys=True) for r in rows)


def sample(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        row = {"id": i, "key": rng.choice("abc"), "v": rng.random()}
        if rng.random() < 0.3:
            row["extra"] = rng.choice(["x", "y"])  # some records have a field others lack
        rows.append(row)
    return rows


def test_files_become_final_only_once_committed_and_read_back_equal(tmp_path):
    rng = random.Random(1)
    rows = sample(rng, 300)
    op = output(tmp_path)
    window(op, W + 1, rows[:100])
    window(op, W + 2, rows[100:200], batch=False)
    state = checkpoint(op)  # the checkpoint writes the range's files, under temporary names
    assert final_files(tmp_path) == [] and state["pending"]
    window(op, W + 3, rows[200:])
    op.committed(W + 2)
    assert multiset(read_back(tmp_path)) == multiset(rows[:200])
    checkpoint(op)
    op.committed(W + 3)
    assert multiset(read_back(tmp_path)) == multiset(rows)
    assert len(final_files(tmp_path)) == 2  # one file per range, not one per window
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file() and p.name.startswith(".")]


def test_union_of_fields_with_nulls_and_types_kept(tmp_path):
    rows = [{"a": 1, "b": "x"}, {"a": 2, "c": [1, 2]}, {"b": "z", "d": {"e": 1.5}}]
    op = output(tmp_path, mode="AT_LEAST_ONCE")
    window(op, W + 1, rows)
    checkpoint(op)
    (f,) = final_files(tmp_path)
    table = pq.read_table(f)
    assert table.schema.field("a").type == pa.int64() and table.schema.field("c").type == pa.list_(pa.int64())
    assert table.to_pylist() == [{k: r.get(k) for k in ("a", "b", "c", "d")} for r in rows]


def test_a_field_of_mixed_types_is_written_as_strings(tmp_path):
    op = output(tmp_path, mode="AT_LEAST_ONCE")
    window(op, W + 1, [{"a": 1}, {"a": "two"}, {"a": None}])
    checkpoint(op)
    assert pq.read_table(final_files(tmp_path)[0]).to_pylist() == [{"a": "1"}, {"a": "two"}, {"a": None}]


def test_partition_directories_and_rows_per_file(tmp_path):
    rng = random.Random(2)
    rows = sample(rng, 250)
    rows[7]["key"] = "a/b c"  # a value that needs escaping in a directory name
    op = output(tmp_path, partition_by="key", rows_per_file=40)
    window(op, W + 1, rows)  # 250 rows >= 40: the range ends with this window
    op.committed(W + 1)
    files = final_files(tmp_path)
    counts = collections.Counter(r["key"] for r in rows)
    assert {f.parent.name for f in files} == {"key=" + k.replace("/", "%2F").replace(" ", "%20") for k in counts}
    for f in files:
        assert pq.read_metadata(f).num_rows <= 40 and "key" not in pq.read_schema(f).names
    assert len(files) == sum(-(-n // 40) for n in counts.values())
    # pyarrow's hive partitioning gives the field back from the directory names
    table = ds.dataset(str(tmp_path / "out"), format="parquet", partitioning="hive").to_table()
    assert collections.Counter(table.column("key").to_pylist()) == counts
    assert sorted(table.column("id").to_pylist()) == list(range(250))


def test_replays_after_restarts_never_duplicate_nor_drop(tmp_path):
    """Random crashes: each restart resumes from the last checkpoint's state and replays the windows
    after it (with their records in another order); commits come late and at random."""
    rng = random.Random(11)
    windows = {W + i: sample(rng, rng.randrange(0, 30)) for i in range(1, 80)}
    for w, rows in windows.items():
        for row in rows:
            row["w"] = w
    state, last_checkpoint, committed = None, W, W
    next_window = W + 1
    while next_window < W + 80 or committed < W + 79:
        op = output(tmp_path, state=state, rows_per_file=rng.choice([10, 50, 1000]),
                    windows_per_file=rng.choice([None, 3]))
        next_window = last_checkpoint + 1  # the replay starts after the checkpoint
        for _ in range(rng.randrange(1, 15)):
            if next_window >= W + 80:
                break
            rows = list(windows[next_window])
            rng.shuffle(rows)
            window(op, next_window, rows)
            if rng.random() < 0.3 or next_window == W + 79:
                state, last_checkpoint = checkpoint(op), next_window
            next_window += 1
            if rng.random() < 0.3 and committed < last_checkpoint:
                committed = rng.randrange(committed, last_checkpoint) + 1
                op.committed(committed)
        if next_window >= W + 80 and rng.random() < 0.5 and committed < last_checkpoint:
            committed = last_checkpoint
            op.committed(committed)
        # the crash: nothing after the last checkpoint survives but the files it wrote
    expected = [row for rows in windows.values() for row in rows]
    assert multiset(read_back(tmp_path)) == multiset(expected)
    assert not [p for p in (tmp_path / "out").rglob(".*") if p.is_file()]


def test_at_least_once_writes_final_files_at_once(tmp_path):
    op = output(tmp_path, mode="AT_LEAST_ONCE", windows_per_file=2)
    window(op, W + 1, [{"a": 1}])
    assert final_files(tmp_path) == []
    window(op, W + 2, [{"a": 2}])
    assert read_back(tmp_path) == [{"a": 1}, {"a": 2}]
    assert op.get_state()["pending"] == []


@pytest.mark.parametrize("props, word", [({"compression": "lzma"}, "compression"),
                                         ({"rows_per_file": 0}, "rows_per_file"),
                                         ({"windows_per_file": 0}, "windows_per_file")])
def test_bad_properties_are_fatal_and_named(tmp_path, props, word):
    with pytest.raises(FatalError, match=word):
        output(tmp_path, **props)


def test_a_record_that_is_not_a_dict_is_fatal(tmp_path):
    op = output(tmp_path)
    op.begin_window(W + 1)
    with pytest.raises(FatalError, match="takes dict records, got a str"):
        op.process_batch([{"a": 1}, "text"])
