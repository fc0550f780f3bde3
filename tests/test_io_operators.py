"""The built-in file operators in process: JsonLinesOutput's window files in EXACTLY_ONCE mode."""

from __future__ import annotations

import json

from container import fs
from container.operator import OperatorContext
from container.operators import io

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
            for line in f.read_text().splitlines()]


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
