"""The built-in file operators in process: JsonLinesOutput's window files in EXACTLY_ONCE mode."""

from __future__ import annotations

import json
import pickle

import pytest

from stram.common import fs
from stram.operator import OperatorContext, ShutdownException
from stram.operators import io

W = 5 << 32  # window ids of these tests


def output(tmp_path) -> io.JsonLinesOutput:
    op = io.JsonLinesOutput()
    op.path = str(tmp_path / "out")
    op.setup(OperatorContext(id=3, name="out", attributes={"PROCESSING_MODE": "EXACTLY_ONCE"}))
    return op


def write_window(op: io.JsonLinesOutput, window: int, rows: list) -> None:
    op.begin_window(window)
    for row in rows:
        op.process_input(row)
    op.end_window()


def final_rows(tmp_path) -> list:
    return [json.loads(line) for f in sorted((tmp_path / "out").rglob("*.jsonl"))
            for line in f.read_bytes().splitlines()]  # bytes: a U+2028 in a string is not a line break


def test_a_window_is_final_only_once_committed(tmp_path):
    op = output(tmp_path)
    write_window(op, W + 1, [{"k": 1}])
    write_window(op, W + 2, [{"k": 2}])
    assert final_rows(tmp_path) == []  # temporary files do not end in .jsonl
    op.committed(W + 1)
    assert final_rows(tmp_path) == [{"k": 1}]
    op.committed(W + 2)
    assert final_rows(tmp_path) == [{"k": 1}, {"k": 2}]


def test_a_replayed_window_never_disappears_from_the_final_files(tmp_path, monkeypatch):
    """A restart from a checkpoint that still lists window w as pending replays w after w was
    made final; finalizing it again must never leave a moment without w's final file."""
    op = output(tmp_path)
    write_window(op, W + 1, [{"k": 1}, {"k": 2}])
    checkpointed_pending = list(op.pending)  # what a checkpoint taken before the commit holds
    op.committed(W + 1)
    final = next((tmp_path / "out").rglob("*.jsonl"))

    # the recovered partition: the checkpointed state, then the replay of window w
    again = output(tmp_path)
    again.pending = checkpointed_pending
    write_window(again, W + 1, [{"k": 2}, {"k": 1}])  # replayed, possibly in another order

    seen_missing = []
    for name in ("delete", "move"):
        real = getattr(fs, name)

        def watched(*args, _real=real, **kw):
            _real(*args, **kw)
            if not final.exists():
                seen_missing.append(args)
        monkeypatch.setattr(fs, name, watched)
    again.committed(W + 1)
    assert seen_missing == []
    assert sorted(final_rows(tmp_path), key=lambda r: r["k"]) == [{"k": 1}, {"k": 2}]
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file() and not p.name.endswith(".jsonl")]


def window_files(root) -> dict:
    return {p.name: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_big_window_is_written_in_parts_split_alike_however_batched(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "PART_BYTES", 100)
    rows = [{"k": i, "pad": "x" * (i % 7)} for i in range(60)]
    bound = 100 + max(len(json.dumps(r, separators=(",", ":"))) for r in rows)
    files = []
    for sizes in ([1] * 60, [7, 13, 1, 39], [60]):
        root = tmp_path / str(len(sizes))
        op = output(root)
        op.begin_window(W + 1)
        at = 0
        for n in sizes:
            op.process_batch(rows[at:at + n])
            at += n
            assert sum(map(len, op._lines)) < bound  # never much more than a part held
        op.end_window()
        assert final_rows(root) == []
        op.committed(W + 1)
        assert final_rows(root) == rows  # every row once, in order (part names sort in the window's order)
        files.append(window_files(root))
    assert len(files[0]) > 5
    assert files[0] == files[1] == files[2]


def arrow_rows(count: int, seed: int = 3) -> list[dict]:
    """Rows of every kind of column the Arrow path encodes itself, and some it leaves to the encoder."""
    import datetime
    import decimal
    import random
    rng = random.Random(seed)
    texts = ["", "plain", "naïve €", "日本語", 'say "hi"', "back\\slash", "tab\there", "nl\nx", "\x01", "\u2028"]
    floats = [0.0, -0.0, 3.0, 0.1, 1e22, 1e-7, 123456789.125, float("nan"), float("inf"), -float("inf"), 5e-324]
    rows = []
    for i in range(count):
        rows.append({
            "i": rng.choice([0, -1, 2**63 - 1, -2**63, rng.randrange(-10**9, 10**9)]),
            "f": rng.choice(floats + [rng.uniform(-1e6, 1e6), float(rng.randrange(10**6))]),
            "s": rng.choice(texts) if i % 3 else rng.choice(texts[:4]),
            "b": rng.choice([True, False]),
            "n": rng.choice([None, 7]),
            "t": datetime.datetime(2024, 1, 1) + datetime.timedelta(milliseconds=rng.randrange(10**9)),
            "d": decimal.Decimal(rng.randrange(10**6)) / 100,
            "l": [rng.randrange(5) for _ in range(rng.randrange(3))],
        })
    return rows


def as_sent(rows: list[dict]) -> list[dict]:
    """The rows as the dict path writes them: NaN and infinities become null (orjson's rule)."""
    import math
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
            for row in rows]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_arrow_batches_are_written_as_their_rows_dicts_are(tmp_path, seed):
    """A RecordBatch becomes the same lines, read back as the same values of the same types, as its
    rows given one by one as dicts; a float stays a float, NaN and infinity become null."""
    import pyarrow as pa
    rows = arrow_rows(300, seed)
    batch = pa.RecordBatch.from_pylist(rows)
    by_dict, by_arrow = output(tmp_path / "dicts"), output(tmp_path / "arrow")
    write_window(by_dict, W + 1, batch.to_pylist())
    by_arrow.begin_window(W + 1)
    by_arrow.process_batch([batch.slice(0, 100), pa.Table.from_batches([batch.slice(100, 150)]), batch.slice(250)])
    by_arrow.end_window()
    for op in (by_dict, by_arrow):
        op.committed(W + 1)
    dicts, arrows = final_rows(tmp_path / "dicts"), final_rows(tmp_path / "arrow")
    assert len(arrows) == 300
    assert arrows == dicts
    assert [[type(v) for v in r.values()] for r in arrows] == [[type(v) for v in r.values()] for r in dicts]
    # and against the rows themselves (not only the dict path): a float column reads back as floats
    assert [r["f"] for r in arrows] == [r["f"] for r in as_sent(rows)]
    assert all(isinstance(r["f"], float) or r["f"] is None for r in arrows)
    assert [r["s"] for r in arrows] == [r["s"] for r in rows]


def test_arrow_batches_and_dicts_mixed_keep_their_order(tmp_path):
    import pyarrow as pa
    op = output(tmp_path)
    rows = [{"k": i} for i in range(10)]
    op.begin_window(W + 1)
    op.process_batch([rows[0], pa.RecordBatch.from_pylist(rows[1:4]), rows[4], pa.RecordBatch.from_pylist(rows[5:])])
    op.process_input(pa.RecordBatch.from_pylist([{"k": 10}]))
    op.process_input(pa.RecordBatch.from_pylist([{"k": 11}]).slice(0, 0))  # no rows: no line
    op.end_window()
    op.committed(W + 1)
    assert final_rows(tmp_path) == rows + [{"k": 10}]


def test_arrow_batches_split_into_the_parts_their_dicts_would(tmp_path, monkeypatch):
    """The part bound falls on the same row whether a window's rows come as dicts or as batches of any size."""
    import pyarrow as pa
    monkeypatch.setattr(io, "PART_BYTES", 100)
    rows = [{"k": i, "pad": "x" * (i % 7)} for i in range(60)]
    files = []
    for sizes in (None, [7, 13, 1, 39], [60], [30, 30]):
        root = tmp_path / str(sizes)
        op = output(root)
        op.begin_window(W + 1)
        if sizes is None:
            op.process_batch(rows)
        else:
            at = 0
            for n in sizes:
                op.process_batch([pa.RecordBatch.from_pylist(rows[at:at + n])])
                at += n
        op.end_window()
        op.committed(W + 1)
        assert final_rows(root) == rows
        files.append(window_files(root))
    assert len(files[0]) > 5
    assert all(f == files[0] for f in files[1:])


def test_an_append_cut_short_is_dropped_before_appending_again(tmp_path):
    """AT_LEAST_ONCE appends to one file: a line torn by a kill or a full disk must not glue onto the next."""
    out = tmp_path / "out"
    out.mkdir()
    part = out / "part-out-3.jsonl"
    part.write_bytes(b'{"k":1}\n{"k":2}\n{"k":3,"to')  # the writer died mid-line
    op = io.JsonLinesOutput()
    op.path = str(out)
    op.setup(OperatorContext(id=3, name="out", attributes={"PROCESSING_MODE": "AT_LEAST_ONCE"}))
    write_window(op, W + 1, [{"k": 3, "total": 9}, {"k": 4}])  # the replayed window
    op.teardown()
    assert [json.loads(line) for line in part.read_text().splitlines()] == [
        {"k": 1}, {"k": 2}, {"k": 3, "total": 9}, {"k": 4}]
    assert io.drop_torn_line(str(part)) == 0  # complete: nothing to drop
    assert io.drop_torn_line(str(out / "missing.jsonl")) == 0


# ---------------------------------------------------------------- LineReader

def expected_lines(data: bytes) -> list[str]:
    """Each line decoded alone, newline and trailing carriage returns dropped (computed apart from the reader)."""
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()  # the file ends with a newline: no empty last line
    return [r.decode("utf-8", "replace").rstrip("\r") for r in raw]


def sample_bytes(lines: int = 500) -> bytes:
    import random
    rng = random.Random(18)
    words = ["whale", "Ahab", "sea", "", "Ishmael's", "naïve", "€uro", "日本語", "a\r", "\xff"]
    out = []
    for _ in range(lines):
        line = " ".join(rng.choice(words) for _ in range(rng.randrange(0, 9)))
        out.append(line.encode("utf-8", "surrogateescape") + rng.choice([b"", b"\r", b"\xe2\x82"]))
    return b"\n".join(out) + b"\n"


def read_all(path: str, n: int, offset: int = 0) -> tuple[list[str], list[int]]:
    f = io.LineChunks(path, offset)
    lines, offsets = [], []
    while True:
        got, off = f.read_lines(n)
        lines += got
        offsets.append(off)
        if len(got) < n:
            break
    f.close()
    return lines, offsets


def test_lines_across_buffer_boundaries_come_out_whole_with_exact_offsets(tmp_path, monkeypatch):
    data = sample_bytes()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    want = expected_lines(data)
    for chunk in (1, 3, 7, 64, 1 << 20):  # lines (and UTF-8 sequences) cut by every chunk size
        monkeypatch.setattr(io.LineChunks, "CHUNK", chunk)
        for n in (1, 5, 1024):
            lines, offsets = read_all(str(path), n)
            assert lines == want, (chunk, n)
            # after k lines the offset is the byte just past the k-th newline
            ends = [i + 1 for i, b in enumerate(data) if b == 10]
            assert offsets == [ends[min(len(want), (i + 1) * n) - 1] for i in range(len(offsets))]


def test_a_final_line_without_newline_is_read_with_its_bytes_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(io.LineChunks, "CHUNK", 4)
    path = tmp_path / "in.txt"
    for data in (b"one\ntwo\r\nlast", b"only", b"", b"\n\nx\r", "last €".encode()):
        path.write_bytes(data)
        lines, offsets = read_all(str(path), 2)
        assert lines == expected_lines(data), data
        assert offsets[-1] == len(data)


def test_a_reader_resumed_from_a_checkpointed_offset_replays_exactly_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(io.LineChunks, "CHUNK", 50)
    data = sample_bytes(300) + b"tail without newline"
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    want = expected_lines(data)

    def reader(state=None):
        op = io.LineReader()
        op.path, op.batch_lines = str(path), 7
        if state is not None:
            op.set_state(state)
        got = []
        op.output.emit = got.append
        op.setup(OperatorContext(id=1, name="reader"))
        op.begin_window(W)
        return op, got

    for calls in (1, 3, 20):
        first, got = reader()
        for _ in range(calls):
            first.emit_tuples()
        state = pickle.loads(pickle.dumps(first.get_state()))  # what a checkpoint saves
        first.teardown()
        again, rest = reader(state)
        with pytest.raises(ShutdownException):
            while True:
                again.emit_tuples()
        again.teardown()
        assert got + rest == want
        assert len(got) == 7 * calls and state["offset"] == len(b"".join(
            line + b"\n" for line in data.split(b"\n")[:len(got)]))
