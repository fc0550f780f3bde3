"""``python -m stram.nexmark``: generate a NEXMark data set, answer a query with the oracle, run a query.

    python -m stram.nexmark generate --events N --seed S --out DIR
    python -m stram.nexmark oracle QUERY --data DIR --out FILE.jsonl
    python -m stram.nexmark run QUERY --data DIR --out OUTDIR [--partitions N] [--rate EVENTS_PER_S] [-D NAME=VALUE]...
"""

from __future__ import annotations

import argparse
import sys
import time

from stram.nexmark import DEFAULT_BASE_TIME_MS

#: runs at least this big report progress on stderr
PROGRESS_FROM_EVENTS = 1_000_000


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        number = float(text)            # 1e7
        if not number.is_integer():
            raise argparse.ArgumentTypeError(f"not a whole number: {text}")
        value = int(number)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


#: The queries the oracle answers (its QUERIES; a unit test checks), named here so that the parser, hence
#: ``run``, which waits as long as its query runs, never imports the oracle's pandas and pyarrow.
ORACLE_QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of events per second: {text}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0 events per second, not {text}")
    return value


def parser() -> argparse.ArgumentParser:
    from stram.nexmark.queries import QUERIES as ON_STRAM
    QUERIES = ORACLE_QUERIES
    top = argparse.ArgumentParser(prog="python -m stram.nexmark",
                                  description="NEXMark for stram: event generator, query oracle, queries on stram.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = sub.add_parser("generate", help="write a NEXMark data set (person/auction/bid.parquet, meta.json)",
                         description="Generate NEXMark events 0 .. N-1 by the suite's rules into DIR: "
                                     "person.parquet, auction.parquet, bid.parquet (dateTime/expires in epoch ms) "
                                     "and meta.json. The same seed and options give the same data.")
    gen.add_argument("--events", type=_count, required=True, metavar="N", help="number of events (1 person : 3 auctions : 46 "
                     "bids per 50); 1e7 style accepted")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--out", required=True, metavar="DIR", help="output directory (must be absent or empty)")
    gen.add_argument("--rate", type=_positive, default=10_000,
                     help="events per second of event time (the suite's firstEventRate, default 10000)")
    gen.add_argument("--base-time", type=int, default=DEFAULT_BASE_TIME_MS, metavar="MS",
                     help=f"event time of event 0, epoch ms (default {DEFAULT_BASE_TIME_MS})")
    gen.add_argument("--force", action="store_true", help="overwrite the NEXMark files of a non-empty DIR")
    gen.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    gen.set_defaults(func=generate)

    orc = sub.add_parser("oracle", help="answer a query over a data set, engine-free (pandas)",
                         description="Compute a query's answer over a data set made by 'generate', independent "
                                     "of any engine, as JSON lines (field names of the suite's Flink SQL query; "
                                     "windowed results with window_start/window_end in epoch ms).")
    orc.add_argument("query", choices=sorted(QUERIES, key=lambda q: int(q[1:])), metavar="QUERY",
                     help="one of " + ", ".join(sorted(QUERIES, key=lambda q: int(q[1:]))))
    orc.add_argument("--data", required=True, metavar="DIR", help="data set directory (from 'generate')")
    orc.add_argument("--out", required=True, metavar="FILE", help="output file, JSON lines ('-' for stdout)")
    orc.set_defaults(func=oracle)

    run_p = sub.add_parser("run", help="run a query on stram, locally, to its end",
                           description="Run QUERY on stram over a data set, launched locally as `stram launch` "
                                       "does; results as JSON lines under OUTDIR (new or empty), the oracle's "
                                       "fields. Prints one summary line: events, result rows, wall seconds "
                                       "(launch to end), events/s.")
    run_p.add_argument("query", choices=list(ON_STRAM), metavar="QUERY", help="one of " + ", ".join(ON_STRAM))
    run_p.add_argument("--data", required=True, metavar="DIR", help="data set directory (from 'generate')")
    run_p.add_argument("--out", required=True, metavar="OUTDIR", help="output directory for *.jsonl results")
    run_p.add_argument("--partitions", type=_positive, default=1, help="partitions of the query's operators")
    run_p.add_argument("--rate", type=_rate, metavar="EVENTS_PER_S",
                       help="replay the data set at this many events per second of wall time: event i goes out "
                            "no earlier than i/rate seconds after the sources start (each kind's source paces "
                            "its share, each partition its part, a token bucket per streaming window); the "
                            "summary then lists when each source started. Default: as fast as possible")
    run_p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                       help="set an attribute or property of the query's application (repeatable), as "
                            "`stram launch -D` does")
    run_p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run_p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run_p.set_defaults(func=run)
    return top


def generate(args: argparse.Namespace) -> int:
    from stram.nexmark.generator import report_progress, write_dataset
    from stram.nexmark.model import GeneratorConfig
    try:
        cfg = GeneratorConfig(seed=args.seed, first_event_rate=args.rate, base_time_ms=args.base_time)
    except ValueError as e:
        raise SystemExit(f"nexmark generate: {e}")
    progress = None if args.quiet or args.events < PROGRESS_FROM_EVENTS else report_progress
    started = time.monotonic()
    try:
        meta = write_dataset(args.out, args.events, cfg, force=args.force, progress=progress)
    except (FileExistsError, ValueError, OSError) as e:
        raise SystemExit(f"nexmark generate: {e}")
    counts = meta["counts"]
    print(f"nexmark: wrote {meta['events']:,} events to {args.out} ({counts['person']:,} persons, "
          f"{counts['auction']:,} auctions, {counts['bid']:,} bids) in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0


def oracle(args: argparse.Namespace) -> int:
    from stram.nexmark import oracle as oracle_mod
    try:
        frame = oracle_mod.answer_frame(args.query, args.data)
        count = oracle_mod.write_jsonl(frame, args.out)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise SystemExit(f"nexmark oracle: {e}")
    print(f"nexmark: {args.query}: {count:,} rows to {args.out}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    import json

    from stram.common.errors import StramError
    from stram.flow import FlowError
    from stram.nexmark.runner import format_summary, run_query
    try:
        summary = run_query(args.query, args.data, args.out, args.partitions, args.defines,
                            progress=not (args.quiet or args.json), rate=args.rate)
    except (ValueError, OSError, FlowError, StramError) as e:
        raise SystemExit(f"nexmark run: {e}")
    print(json.dumps(summary) if args.json else format_summary(summary), flush=True)
    return 0 if summary["state"] == "SUCCEEDED" else 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
