"""DirectoryInput in process: files appearing over time, malformed lines, restarts, partitions, watermarks."""

from __future__ import annotations

import json
import os
import pickle
import random

import pytest

from stram.common.partition import partition_hash
from stram.common.watermarks import IDLE, MAX_WATERMARK
from stram.operator import FatalError, OperatorContext, ShutdownException
from stram.operators.files import DirectoryInput
from stram.operators.io import LineChunks


class Harness:
    """Runs an input operator window by window, as the engine would, recording what it emits."""

    def __init__(self, op, index: int = 0, count: int = 1, attributes: dict | None = None) -> None:
        self.op = op
        self.out: list = []
        self.logs: list[str] = []
        self.metrics: dict = {}
        self.watermarks: list[int] = []
        self.window = 0
        self.ended = False
        op.output.emit_batch = self.out.extend
        op.output.emit = self.out.append
        op.setup(OperatorContext(id=1, name="dir", partition_index=index, partition_count=count,
                                 attributes=attributes or {}, log=self.logs.append,
                                 set_metric=self.metrics.__setitem__, emit_watermark=self.watermarks.append))

    def window_of(self, calls: int = 50) -> list:
        """One window of at most ``calls`` emit_tuples calls; what it emitted."""
        self.window += 1
        before = len(self.out)
        self.op.begin_window(self.window)
        try:
            for _ in range(calls):
                self.op.emit_tuples()
        except ShutdownException:
            self.ended = True
        self.op.end_window()
        return self.out[before:]

    def state(self) -> dict:
        return pickle.loads(pickle.dumps(self.op.get_state()))


def directory_input(where, **props) -> DirectoryInput:
    op = DirectoryInput()
    op.path = str(where)
    op.scan_interval_ms = 0
    for k, v in props.items():
        setattr(op, k, v)
    return op


def write(path, name: str, lines: list[str], rename: bool = True) -> None:
    """Write a file the way a producer should: under a hidden name, then renamed into place."""
    tmp = path / f".{name}.writing" if rename else path / name
    tmp.write_text("".join(line + "\n" for line in lines))
    if rename:
        os.rename(tmp, path / name)


def test_files_appearing_over_time_are_each_read_once_in_name_order(tmp_path):
    write(tmp_path, "b.txt", ["b1", "b2"])
    write(tmp_path, "a.txt", ["a1"])
    h = Harness(directory_input(tmp_path))
    assert h.window_of() == ["a1", "b1", "b2"]
    assert h.window_of() == []
    (tmp_path / ".c.txt.writing").write_text("partial\n")  # being written: hidden
    (tmp_path / "_SUCCESS").write_text("")
    write(tmp_path, "c.txt", ["c1", "", "c3"])
    (tmp_path / "sub").mkdir()  # directories are not files to read
    assert h.window_of() == ["c1", "", "c3"]
    (tmp_path / "d.txt").write_bytes(b"d1\r\nd2")  # CRLF and a last line without its newline
    assert h.window_of() == ["d1", "d2"]
    assert h.window_of() == []
    assert h.op.finished == {"a.txt", "b.txt", "c.txt", "d.txt"}


def test_pattern_and_records_per_window(tmp_path):
    write(tmp_path, "x.csv", ["no"])
    lines = [f"l{i}" for i in range(25)]
    write(tmp_path, "x.log", lines)
    h = Harness(directory_input(tmp_path, pattern="*.log", records_per_window=10, batch_lines=3))
    got = [h.window_of() for _ in range(4)]
    assert [len(w) for w in got] == [10, 10, 5, 0]
    assert sum(got, []) == lines


def test_malformed_json_lines_are_logged_with_file_and_line_counted_and_skipped(tmp_path):
    rows = [{"id": 1}, "{not json", [1, 2], {"id": 2}, "", {"id": 3}]
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"
    (tmp_path / "in.jsonl").write_text(text)
    h = Harness(directory_input(tmp_path, format="jsonl"))
    assert h.window_of() == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert h.metrics["malformed"] == 2  # the blank line is no record, and no error either
    assert len(h.logs) == 2
    assert "in.jsonl line 2: not JSON" in h.logs[0] and "skipped" in h.logs[0]
    assert "in.jsonl line 3: a JSON list, not an object" in h.logs[1]


def test_a_restart_from_a_pickled_state_never_rereads_nor_skips(tmp_path):
    """Checkpoints at random windows, each followed by a crash: the output after each restart
    continues exactly where the checkpoint was, so the windows up to the last checkpoints of
    each run add up to every line once."""
    rng = random.Random(7)
    expected = []
    pending_files = []
    for f in range(12):
        lines = [f"f{f}-{i}" for i in range(rng.randrange(0, 40))]
        pending_files.append((f"f{f:02d}.txt", lines))
    committed: list = []  # output of windows up to the checkpoint each run's successor resumes from
    state = None
    for run in range(8):
        op = directory_input(tmp_path, records_per_window=7, batch_lines=rng.choice([1, 2, 5]))
        if state is not None:
            op.set_state(state)
        h = Harness(op)
        since_checkpoint: list = []
        for _ in range(rng.randrange(1, 6)):
            if pending_files and rng.random() < 0.6:
                name, lines = pending_files.pop(0)
                write(tmp_path, name, lines)
                expected += lines
            since_checkpoint += h.window_of(calls=rng.randrange(1, 4))
            if rng.random() < 0.5:  # a checkpoint after this window
                state = h.state()
                committed += since_checkpoint
                since_checkpoint = []
        h.op.teardown()  # the crash: what came after the last checkpoint is replayed by the next run
    for name, lines in pending_files:
        write(tmp_path, name, lines)
        expected += lines
    op = directory_input(tmp_path)
    if state is not None:
        op.set_state(state)
    h = Harness(op)
    while h.window_of():
        pass
    assert committed + h.out == expected


def test_partitions_share_the_files_by_the_hash_of_their_names(tmp_path):
    names = [f"part-{i}.txt" for i in range(30)]
    for name in names:
        write(tmp_path, name, [name])
    count = 3
    seen = []
    for index in range(count):
        h = Harness(directory_input(tmp_path), index=index, count=count)
        got = h.window_of()
        assert got == sorted(n for n in names if partition_hash(n) % count == index)
        seen += got
    assert sorted(seen) == sorted(names)


def test_repartitioning_mid_file_keeps_every_line_once(tmp_path):
    names = [f"p{i}.txt" for i in range(10)]
    everything = []
    for name in names:
        lines = [f"{name}:{i}" for i in range(20)]
        write(tmp_path, name, lines)
        everything += lines
    before = []
    states = []
    for index in range(2):
        h = Harness(directory_input(tmp_path, records_per_window=25, batch_lines=4), index=index, count=2)
        before += h.window_of()
        states.append(h.state())
    assert any(s["current"] for s in states)  # a file was cut in the middle
    after = []
    new = DirectoryInput.split_state(states, 3, owner=None)
    for index, state in enumerate(new):
        op = directory_input(tmp_path)
        op.set_state(state)
        h = Harness(op, index=index, count=3)
        while h.window_of():
            pass
        after += h.out
    assert sorted(before + after) == sorted(everything)


def test_finished_files_that_left_the_directory_are_forgotten(tmp_path):
    for i in range(5):
        write(tmp_path, f"f{i}", [str(i)])
    h = Harness(directory_input(tmp_path))
    assert h.window_of() == ["0", "1", "2", "3", "4"]
    for i in range(4):
        os.remove(tmp_path / f"f{i}")
    write(tmp_path, "g", ["g"])
    assert h.window_of() == ["g"]
    assert h.op.finished == {"f4", "g"}


def test_watermark_is_the_highest_timestamp_less_the_bound_and_max_at_the_end(tmp_path):
    rows = [{"ts": 100}, {"ts": 350}, {"ts": 200}, {"ts": "soon"}, {"ts": 300.5}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    h = Harness(directory_input(tmp_path, format="jsonl", timestamp_field="ts", out_of_orderness_ms=50,
                                end_when_idle_ms=0))
    h.window_of(calls=2)  # first call opens and reads a.jsonl; the second finds it ended
    assert h.watermarks[-1] == max(r["ts"] for r in rows[:3]) - 50
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[3:]))
    h.window_of(calls=2)
    assert h.out == rows[:3] + rows[4:] and h.metrics["malformed"] == 1  # no number in ts: skipped
    assert h.watermarks[-1] == 300  # 350 is still the highest
    h.window_of()
    assert h.ended and h.watermarks[-1] == MAX_WATERMARK


def test_an_input_without_records_for_idle_timeout_is_idle(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"ts": 5}\n')
    h = Harness(directory_input(tmp_path, format="jsonl", timestamp_field="ts", idle_timeout_ms=0))
    h.window_of()
    assert h.watermarks[-1] == IDLE


@pytest.mark.parametrize("props, word", [
    ({"format": "csv"}, "format"),
    ({"timestamp_field": "ts"}, "timestamp_field"),
    ({"scan_interval_ms": -1}, "scan_interval_ms"),
    ({"path": ""}, "path"),
])
def test_bad_properties_are_fatal_and_named(tmp_path, props, word):
    op = directory_input(tmp_path, **props)
    with pytest.raises(FatalError, match=word):
        Harness(op)


def test_a_file_as_path_is_fatal(tmp_path):
    (tmp_path / "f").write_text("x\n")
    with pytest.raises(FatalError, match="is a file, not a directory"):
        Harness(directory_input(tmp_path / "f"))


def test_line_chunks_offsets_match_the_bytes(tmp_path):
    """Reading from every offset the reader reports gives the rest of the file's lines."""
    rng = random.Random(3)
    data = b"".join(rng.choice([b"", b"a", b"bb", "\u00e9".encode()]) * rng.randrange(5) + b"\n"
                    for _ in range(300)) + b"tail"
    path = tmp_path / "f"
    path.write_bytes(data)
    LineChunks.CHUNK, old = 64, LineChunks.CHUNK
    try:
        reader = LineChunks(str(path), 0)
        lines, offsets = [], []
        while True:
            run, count, offset = reader.read(rng.randrange(1, 9))
            if not count:
                break
            got = run.split(b"\n")
            assert len(got) == count
            lines += got
            offsets.append((offset, len(lines)))
        reader.close()
        assert lines == data.split(b"\n")
        for offset, n in offsets[::17]:
            assert data[offset:].split(b"\n") == lines[n:] or (offset == len(data) and n == len(lines))
    finally:
        LineChunks.CHUNK = old


def test_a_directory_that_does_not_exist_yet_is_watched_for(tmp_path):
    where = tmp_path / "later"
    h = Harness(directory_input(where))
    assert "does not exist (yet)" in h.logs[0]
    assert h.window_of() == []
    where.mkdir()
    write(where, "a", ["x"])
    assert h.window_of() == ["x"]
