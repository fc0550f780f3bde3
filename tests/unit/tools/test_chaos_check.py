"""The chaos soak's output checks (bench/recovery/chaos_check.py) catch wrong output, and pass right output."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest

from bench.recovery.chaos_check import check_at_least_once, check_exactly_once, make_input


def write(out, rows, name="part-out-7.jsonl"):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / name, "a") as f:
        for key, count, total in rows:
            f.write(json.dumps({"key": key, "count": count, "total": total}) + "\n")


TRUTH = Counter({"a": 5, "b": 2})
GOOD = [("a", 2, 2), ("b", 1, 1), ("a", 3, 5), ("b", 1, 2)]


def test_make_input_truth_is_what_the_text_holds(tmp_path):
    truth = make_input(random.Random(3), tmp_path / "in.txt", 200)
    assert truth == Counter(re.findall(r"[a-z0-9]+", (tmp_path / "in.txt").read_text().lower()))
    assert truth == make_input(random.Random(3), tmp_path / "again.txt", 200)  # seeded
    assert len(truth) > 50


def test_exactly_once_accepts_exact_output(tmp_path):
    write(tmp_path, GOOD)
    assert check_exactly_once(tmp_path, TRUTH) is None


@pytest.mark.parametrize("rows, says", [
    (GOOD + [("a", 3, 5)], "a: truth 5, sum 8"),              # a replayed window written twice
    (GOOD[:3], "b: truth 2, sum 1"),                          # a window lost
    (GOOD + [("c", 1, 1)], "not in the input"),
    ([r for r in GOOD if r[0] != "b"], "missing"),
])
def test_exactly_once_rejects(tmp_path, rows, says):
    write(tmp_path, rows)
    assert says in (check_exactly_once(tmp_path, TRUTH) or "")


def test_unreadable_line_is_wrong(tmp_path):
    write(tmp_path, GOOD)
    with open(tmp_path / "part-out-7.jsonl", "a") as f:
        f.write('{"key": "a", "cou\n')
    assert "unreadable line" in check_at_least_once(tmp_path, TRUTH, faults=3)


def test_at_least_once_accepts_replays_within_the_bound(tmp_path):
    # a replay from the checkpoint after (a: 2) with other window boundaries: 2 -> 4 -> 5
    write(tmp_path, GOOD + [("a", 3, 5), ("a", 2, 4), ("a", 1, 5)])
    assert check_at_least_once(tmp_path, TRUTH, faults=1) is None


@pytest.mark.parametrize("extra, faults, says", [
    ([("a", 3, 5)] * 2, 1, "written 3 times"),                 # more copies than faults allow
    ([("a", 1, 4)], 3, "starts from 3, never written"),        # a state nobody wrote
    ([("a", 6, 6)], 3, "impossible"),                          # beyond the truth
])
def test_at_least_once_rejects(tmp_path, extra, faults, says):
    write(tmp_path, GOOD + extra)
    assert says in (check_at_least_once(tmp_path, TRUTH, faults) or "")


def test_at_least_once_needs_a_complete_chain(tmp_path):
    write(tmp_path, [("a", 2, 2), ("b", 1, 1), ("b", 1, 2), ("a", 1, 5)])  # 2 -> 5 skips a window
    assert "starts from 4" in check_at_least_once(tmp_path, TRUTH, faults=3)
    (tmp_path / "part-out-7.jsonl").unlink()
    write(tmp_path, [("a", 2, 2), ("a", 2, 4), ("b", 1, 1), ("b", 1, 2)])  # ends at 4, truth 5
    assert "no chain of rows from 0 to 5" in check_at_least_once(tmp_path, TRUTH, faults=3)
