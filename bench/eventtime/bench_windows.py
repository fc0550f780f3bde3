"""The window operators' own cost, in process, beside a plain Python loop doing the same sums (run on demand).

    python -m bench.eventtime.bench_windows [--records 1000000] [--keys 1000] [--runs 3] [--only NAME]

Each case feeds ``--records`` generated records (``stram.operators.generate.record``: keys, values,
event times 1 ms apart with 50 ms of disorder) to one operator through its batch handler in
streaming windows of 10,000 records, with the watermark after each, as the engine calls it; and
the same answer computed by a plain loop over the same list (dict of dicts, no engine), checked
equal. Prints records/s of both and the ratio (operator / loop); medians of ``--runs``,
interleaved. No processes, no streams: the engine's transfer is measured by bench.transfer.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from typing import Any, Callable

from stram.agent.engine.batch import batch_handler
from stram.common.watermarks import MAX_WATERMARK
from stram.operator import OperatorContext
from stram.operators.generate import record
from stram.operators.window import WindowedAggregate

WINDOW_RECORDS = 10_000
DISORDER = 50


def records(n: int, keys: int) -> list[dict]:
    return [record(i, seed=3, keys=keys, interval_ms=1, disorder_ms=DISORDER) for i in range(n)]


def run_operator(props: dict, data: list[dict]) -> tuple[float, list]:
    op = WindowedAggregate()
    for k, v in props.items():
        setattr(op, k, v)
    out: list = []
    op.output.emit = out.append
    op.output.emit_batch = out.extend
    op.late.emit_batch = lambda rows: None
    op.setup(OperatorContext(id=1, name="w"))
    handle = batch_handler(op, "input")
    start = time.perf_counter()
    high = None
    for i in range(0, len(data), WINDOW_RECORDS):
        chunk = data[i:i + WINDOW_RECORDS]
        op.begin_window(i)
        handle(chunk)
        if high is not None:
            op.on_watermark(high - DISORDER)
        high = max(r["ts"] for r in chunk) if high is None else max(high, max(r["ts"] for r in chunk))
        op.end_window()
    op.begin_window(len(data))
    op.on_watermark(MAX_WATERMARK)
    op.end_window()
    return time.perf_counter() - start, out


def loop_tumbling(data: list[dict], size: int, field: str | None) -> tuple[float, list]:
    start = time.perf_counter()
    acc: dict = defaultdict(dict)
    for r in data:
        w = r["ts"] - r["ts"] % size
        per = acc[w]
        per[r["key"]] = per.get(r["key"], 0) + (r[field] if field else 1)
    out = [{"key": k, "window_start": w, "window_end": w + size, "value": v}
           for w in sorted(acc) for k, v in acc[w].items()]
    return time.perf_counter() - start, out


def loop_sliding(data: list[dict], size: int, slide: int, field: str) -> tuple[float, list]:
    start = time.perf_counter()
    acc: dict = defaultdict(dict)
    for r in data:
        t = r["ts"]
        s = t - t % slide
        while s > t - size:
            per = acc[s]
            per[r["key"]] = per.get(r["key"], 0) + r[field]
            s -= slide
    out = [{"key": k, "window_start": w, "window_end": w + size, "value": v}
           for w in sorted(acc) for k, v in acc[w].items()]
    return time.perf_counter() - start, out


def loop_sessions(data: list[dict], gap: int) -> tuple[float, list]:
    start = time.perf_counter()
    by_key: dict = defaultdict(list)
    for r in data:
        by_key[r["key"]].append(r["ts"])
    out = []
    for k, times in by_key.items():
        times.sort()
        first = last = times[0]
        n = 1
        for t in times[1:]:
            if t - last < gap:
                last, n = t, n + 1
            else:
                out.append({"key": k, "window_start": first, "window_end": last + gap, "value": n})
                first = last = t
                n = 1
        out.append({"key": k, "window_start": first, "window_end": last + gap, "value": n})
    return time.perf_counter() - start, out


CASES: dict[str, tuple[dict, Callable[[list], tuple[float, list]]]] = {
    "tumbling-count": ({"key_field": "key", "timestamp_field": "ts", "window": {"kind": "tumbling", "size_ms": 1000},
                        "aggregate": "count"}, lambda d: loop_tumbling(d, 1000, None)),
    "tumbling-sum": ({"key_field": "key", "timestamp_field": "ts", "window": {"kind": "tumbling", "size_ms": 1000},
                      "aggregate": "sum:value"}, lambda d: loop_tumbling(d, 1000, "value")),
    "sliding-sum": ({"key_field": "key", "timestamp_field": "ts",
                     "window": {"kind": "sliding", "size_ms": 1000, "slide_ms": 250}, "aggregate": "sum:value"},
                    lambda d: loop_sliding(d, 1000, 250, "value")),
    "session-count": ({"key_field": "key", "timestamp_field": "ts", "window": {"kind": "session", "gap_ms": 500},
                       "aggregate": "count"}, lambda d: loop_sessions(d, 500)),
}


def canon(rows: list[dict]) -> list[tuple[Any, ...]]:
    return sorted((str(r["key"]), r["window_start"], r["window_end"], r["value"]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    data = records(args.records, args.keys)
    print(f"{args.records:,} records, {args.keys} keys, windows of {WINDOW_RECORDS:,} records")
    print(f"{'case':<16} {'operator rec/s':>15} {'loop rec/s':>12} {'operator/loop':>14}")
    for name, (props, loop) in CASES.items():
        if args.only not in name:
            continue
        op_times, loop_times = [], []
        for _ in range(args.runs):
            t_op, got = run_operator(props, data)
            t_loop, want = loop(data)
            if canon(got) != canon(want):
                raise SystemExit(f"{name}: the operator's answer differs from the loop's")
            op_times.append(t_op)
            loop_times.append(t_loop)
        a, b = statistics.median(op_times), statistics.median(loop_times)
        print(f"{name:<16} {args.records / a:>15,.0f} {args.records / b:>12,.0f} {b / a:>14.2f}")


if __name__ == "__main__":
    main()
