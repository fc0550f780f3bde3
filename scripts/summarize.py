"""Summaries of example outputs, printed by ``scripts/run-example``."""

from __future__ import annotations

import json
import pathlib
import sys


def read_jsonl(path: str) -> list[dict]:
    """Every JSON line of every ``*.jsonl`` file under ``path``."""
    rows = []
    for f in sorted(pathlib.Path(path).rglob("*.jsonl")):
        rows.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
    return rows


def wordcount(path: str, top: int = 20) -> None:
    totals: dict[str, int] = {}
    for row in read_jsonl(path):
        totals[row["key"]] = max(totals.get(row["key"], 0), row["total"])
    print(f"{sum(totals.values()):,} words, {len(totals):,} distinct; top {top}:")
    for word, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        print(f"  {word:<12} {n:>6,}")
    print(f"output: {path}")


def main(argv: list[str]) -> int:
    kind, path = argv[0], argv[1]
    if kind == "wordcount":
        wordcount(path)
    elif kind == "clickstream":
        from specs.clickstream_pipeline import summarize  # type: ignore[import-not-found]
        summarize(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
