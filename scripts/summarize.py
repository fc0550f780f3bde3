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


def sessions(path: str, late_path: str) -> None:
    rows = read_jsonl(path)
    late = read_jsonl(late_path)
    users = {r["key"] for r in rows}
    clicks = sum(r["value"] for r in rows)
    print(f"{clicks:,} clicks in {len(rows):,} sessions of {len(users)} users "
          f"({clicks / max(len(rows), 1):.1f} clicks per session); {len(late)} clicks arrived too late")
    print("longest sessions:")
    for r in sorted(rows, key=lambda r: (r["window_start"] - r["window_end"], r["key"]))[:5]:
        minutes = (r["window_end"] - r["window_start"]) / 60000
        print(f"  {r['key']}  {minutes:5.1f} min  {r['value']:>3} clicks  from {r['window_start']}")
    print(f"output: {path} (late clicks: {late_path})")


def main(argv: list[str]) -> int:
    kind, path = argv[0], argv[1]
    if kind == "wordcount":
        wordcount(path)
    elif kind == "sessions":
        sessions(path, argv[2])
    elif kind == "clickstream":
        from specs.clickstream_pipeline import summarize  # type: ignore[import-not-found]
        summarize(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
