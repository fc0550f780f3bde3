"""The chaos soak's answers: the input it generates, and the checks of a word count's output.

The truth is computed here in Python, directly from the generated text (the
words of ``[a-z0-9]+`` in the lower-cased line, what ``WordSplitter`` emits);
the output is every ``*.jsonl`` file under the output directory, one
``{"key", "count", "total"}`` row per key and window (``KeyCounter``).

EXACTLY_ONCE (:func:`check_exactly_once`): per key, the sum of ``count`` and
the largest ``total`` both equal the truth, and no row is repeated.

AT_LEAST_ONCE (:func:`check_at_least_once`): a replay after a failure may write
rows again, so the sum may exceed the truth. What is checked, per key ``k``
with the rows ``(count, total)`` written for it:

1. nothing invented: every key is a word of the input, ``0 < count <= total
   <= truth[k]``, and each row starts from a state that was itself written:
   ``total - count`` is 0 or the ``total`` of another row of ``k`` (a
   restarted counter resumes from its checkpoint, whose last rows its
   downstream wrote before the checkpoint it recovers from);
2. nothing lost: the rows contain a complete counting history, a chain
   ``0 -> t1 -> ... -> truth[k]`` in which every step ``a -> b`` is a row
   ``(b - a, b)``; so the largest ``total`` is the truth as well;
3. duplication bounded: a row written again comes from a window replayed by
   one recovery, and every fault causes at most one recovery of each
   operator, so no identical row appears more than ``1 + faults`` times.
"""

from __future__ import annotations

import json
import pathlib
import random
import re
from collections import Counter, defaultdict

__all__ = ["make_input", "read_rows", "check_exactly_once", "check_at_least_once"]

_WORD = re.compile(r"[a-z0-9]+")


def make_input(rng: random.Random, path: pathlib.Path, lines: int) -> Counter:
    """Write ``lines`` lines of Zipf-distributed words (some punctuation, mixed case, empty
    lines) to ``path``; the truth, counted from the written text."""
    vocab = [f"w{i}" for i in range(400)] + ["Whale", "SEA", "ship's", "a-b", "x9", "42"]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    truth: Counter = Counter()
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            n = rng.choice((0, 1, 3, 6, 9, 12, 15))
            line = " ".join(rng.choices(vocab, weights, k=n)) + rng.choice(("", ".", ",", "!"))
            f.write(line + "\n")
            truth.update(_WORD.findall(line.lower()))
    return truth


def read_rows(out_dir: pathlib.Path) -> tuple[list[dict], str | None]:
    """Every row of every ``*.jsonl`` file under ``out_dir``; (rows, the first bad line or None)."""
    rows: list[dict] = []
    for f in sorted(pathlib.Path(out_dir).rglob("*.jsonl")):
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or not {"key", "count", "total"} <= row.keys():
                    raise ValueError("not a count row")
            except ValueError:
                return rows, f"{f.name}:{n}: unreadable line {line[:80]!r}"
            rows.append(row)
    return rows, None


def _common(out_dir: pathlib.Path, truth: Counter) -> tuple[dict, str | None]:
    """Rows grouped by key as lists of (count, total); or the first thing wrong."""
    rows, bad = read_rows(out_dir)
    if bad:
        return {}, bad
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        by_key[row["key"]].append((row["count"], row["total"]))
    invented = sorted(set(by_key) - set(truth))
    if invented:
        return {}, f"{len(invented)} key(s) not in the input, e.g. {invented[:3]}"
    missing = sorted(set(truth) - set(by_key))
    if missing:
        return {}, f"{len(missing)} key(s) missing, e.g. {missing[:3]} (truth {truth[missing[0]]})"
    return by_key, None


def check_exactly_once(out_dir: pathlib.Path, truth: Counter) -> str | None:
    """None when the output is exact; else what is wrong (the first few differences)."""
    by_key, bad = _common(out_dir, truth)
    if bad:
        return bad
    wrong = []
    for key, n in truth.items():
        rows = by_key[key]
        total = sum(c for c, _ in rows)
        top = max(t for _, t in rows)
        if total != n or top != n or len({t for _, t in rows}) != len(rows):
            wrong.append(f"{key}: truth {n}, sum {total}, max total {top}, rows {len(rows)}")
    if wrong:
        return f"{len(wrong)} key(s) wrong: " + "; ".join(wrong[:3])
    return None


def check_at_least_once(out_dir: pathlib.Path, truth: Counter, faults: int) -> str | None:
    """None when the output is a correct at-least-once output (see the module docstring)."""
    by_key, bad = _common(out_dir, truth)
    if bad:
        return bad
    wrong = []
    for key, n in truth.items():
        rows = by_key[key]
        totals = {t for _, t in rows}
        for c, t in rows:
            if not 0 < c <= t <= n:
                wrong.append(f"{key}: row (count {c}, total {t}) impossible, truth {n}")
                break
            if t - c and t - c not in totals:
                wrong.append(f"{key}: row (count {c}, total {t}) starts from {t - c}, never written")
                break
        else:
            reach, edges = {0}, defaultdict(list)
            for c, t in set(rows):
                edges[t - c].append(t)
            frontier = [0]
            while frontier:
                for t in edges[frontier.pop()]:
                    if t not in reach:
                        reach.add(t)
                        frontier.append(t)
            if n not in reach:
                wrong.append(f"{key}: no chain of rows from 0 to {n} (max total {max(totals)})")
            else:
                (row, times), = Counter(rows).most_common(1)
                if times > 1 + faults:
                    wrong.append(f"{key}: row {row} written {times} times, more than 1 + {faults} faults")
    if wrong:
        return f"{len(wrong)} key(s) wrong: " + "; ".join(wrong[:3])
    return None


def duplication(out_dir: pathlib.Path, truth: Counter) -> float:
    """Words counted in the output over words in the input (1.0: no duplicates)."""
    rows, _ = read_rows(out_dir)
    return sum(r.get("count", 0) for r in rows) / max(1, sum(truth.values()))
