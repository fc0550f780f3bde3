"""bench.transfer.bench_jsonl: both encoders timed over equal lines, and a figure for each."""

from __future__ import annotations

from bench.transfer import bench_jsonl


def test_it_prints_both_encoders_and_their_ratio(capsys):
    assert bench_jsonl.main(["--rows", "3000", "--batch", "1000", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "a dict per row" in out and "Arrow, column by column" in out and "x)" in out


def test_the_batches_are_what_both_encoders_agree_on():
    data = bench_jsonl.batches(2000, 700, 10)
    assert [b.num_rows for b in data] == [700, 700, 600]
    assert bench_jsonl.same_lines(data)
