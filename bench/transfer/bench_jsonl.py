"""JsonLinesOutput's encoders side by side: a dict per row (orjson) against an Arrow batch column by column.

``python -m bench.transfer.bench_jsonl [--rows N] [--batch N] [--pad N]`` builds NEXMark-like bid rows
(four integers and a padding string of about ``--pad`` characters), warms both encoders up, then times
each over the same batches in one process, interleaved, and prints nanoseconds per row and their ratio.
Both outputs are decoded and compared first: a figure is printed only for equal lines.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import pyarrow as pa

from stram.operators import arrowjson
from stram.operators.io import _to_json


def batches(rows: int, batch: int, pad: int, seed: int = 0) -> list[Any]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        out.append(pa.RecordBatch.from_pydict({
            "auction": [rng.randrange(1000, 10**6) for _ in range(n)],
            "bidder": [rng.randrange(1000, 10**6) for _ in range(n)],
            "price": [rng.randrange(1, 10**7) for _ in range(n)],
            "dateTime": [1_700_000_000_000 + start + i for i in range(n)],
            "extra": ["".join(rng.choices(letters, k=rng.randrange(pad // 2, pad * 3 // 2 + 1))) for _ in range(n)],
        }))
    return out


def by_dicts(chunk: list[Any]) -> int:
    return sum(len(b"\n".join(map(_to_json, b.to_pylist()))) for b in chunk)


def by_arrow(chunk: list[Any]) -> int:
    return sum(arrowjson.json_lines(b, _to_json).nbytes for b in chunk)


def same_lines(chunk: list[Any]) -> bool:
    for b in chunk:
        dicts = [json.loads(line) for line in map(_to_json, b.to_pylist())]
        arrow = [json.loads(line) for line in arrowjson.json_lines(b, _to_json).to_pylist()]
        if dicts != arrow:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.transfer.bench_jsonl", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=400_000, help="rows timed per round (default 400,000)")
    p.add_argument("--batch", type=int, default=4096, help="rows per Arrow batch (default 4,096, the NEXMark sources')")
    p.add_argument("--pad", type=int, default=67, help="mean characters of the padding string (default 67)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians printed (default 3)")
    args = p.parse_args(argv)
    data = batches(args.rows, args.batch, args.pad)
    if not same_lines(data[:2]):
        print("the two encoders wrote different lines: no figures")
        return 1
    by_dicts(data[:1])
    by_arrow(data[:1])  # both warmed up (pyarrow's kernels, orjson)
    times: dict[str, list[float]] = {"dicts": [], "arrow": []}
    for _ in range(args.rounds):
        for name, fn in (("dicts", by_dicts), ("arrow", by_arrow)):
            started = time.perf_counter()
            fn(data)
            times[name].append((time.perf_counter() - started) / args.rows * 1e9)
    dicts, arrow = statistics.median(times["dicts"]), statistics.median(times["arrow"])
    print(f"{args.rows:,} rows in batches of {args.batch:,}, padding ~{args.pad} characters, medians of {args.rounds}")
    print(f"  a dict per row (orjson):   {dicts:7.0f} ns/row")
    print(f"  Arrow, column by column:   {arrow:7.0f} ns/row   ({dicts / arrow:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
