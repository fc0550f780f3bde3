"""``python -m bench.nexmark``: the NEXMark queries on stram, Flink SQL and Bytewax, checked and measured.

    python -m bench.nexmark --setup                     # once: Bytewax and PyFlink venvs, Flink's format jars
    python -m bench.nexmark [--events 10M] [--queries q0,q1,...] [--systems stram1,stram2,flink,bytewax]
                            [--runs 3] [--data DIR] [--seed S] [--command NAME=TEMPLATE]...
    python -m bench.nexmark --latency [--rate 200000] [--seconds 60] [--queries q5,q7,...] [-D NAME=VALUE]...

One data set (``python -m stram.nexmark generate``, cached by events and seed), then for each query every
system ``--runs`` times, interleaved; a table per query of the medians (events/s = events / wall time of
the whole process tree, start-up included; CPU seconds of the tree; peak summed RSS) and the ratio to
stram with one partition. Every result is checked against stram.nexmark.oracle: a wrong one prints WRONG.
``--command NAME=TEMPLATE`` adds a system run as TEMPLATE ({query}, {data}, {out} filled in). Systems and
figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from bench.nexmark import runner


def _count(text: str) -> int:
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    number = float(text[:-1] if scale > 1 else text)
    if number < 1 or not (number * scale).is_integer():
        raise argparse.ArgumentTypeError(f"not a positive whole number of events: {text}")
    return int(number * scale)


def _names(text: str, known: tuple, what: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {','.join(unknown) or '(none)'}; "
                                         f"choose from {','.join(known)}")
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark", description=__doc__.splitlines()[0])
    p.add_argument("--setup", action="store_true", help="install the peers (and Flink's format jars), then exit")
    p.add_argument("--events", type=_count, default=10_000_000, help="events in the data set (10M, 200k, 1e6...)")
    p.add_argument("--seed", type=int, default=0, help="the data set's seed")
    p.add_argument("--data", metavar="DIR", help="the data set's directory (default: a cache per events and seed)")
    p.add_argument("--queries", default=",".join(runner.QUERIES), help="comma-separated queries")
    p.add_argument("--systems", default=",".join(runner.SYSTEMS), help="comma-separated systems")
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds (medians printed)")
    p.add_argument("--command", action="append", default=[], metavar="NAME=TEMPLATE",
                   help="another system: a command template with {query}, {data} and {out} (repeatable)")
    p.add_argument("--latency", action="store_true", help="stram only: replay at --rate and print window latencies")
    p.add_argument("--rate", type=_count, default=200_000, help="--latency: events per second replayed")
    p.add_argument("--seconds", type=float, default=60.0, help="--latency: seconds of replay")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="--latency: passed to 'python -m stram.nexmark run' (an attribute such as "
                        "CHECKPOINT_WINDOW_COUNT=2; repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    commands = {}
    for item in args.command:
        name, sep, template = item.partition("=")
        if not sep or not name or not template:
            p.error(f"--command wants NAME=TEMPLATE, not {item!r}")
        commands[name] = template
    try:
        queries = _names(args.queries, runner.QUERIES, "query")
        systems = _names(args.systems, runner.SYSTEMS + tuple(commands), "system")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.setup:
        from bench.nexmark import install
        install.setup(systems)
        return 0
    if args.latency:
        from bench.nexmark import latency
        return latency.main(queries, args.rate, args.seconds, args.seed, args.data, args.defines)
    data, events = runner.dataset(args.events, args.seed, args.data)
    print(f"data: {data} ({events:,} events)")
    results = runner.run_matrix(queries, systems, args.runs, data, events, commands)
    print(f"\ncommand: python -m bench.nexmark {shlex.join(argv if argv is not None else sys.argv[1:])}")
    bad = any(not r.ok for per in results.values() for runs in per.values() for r in runs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
