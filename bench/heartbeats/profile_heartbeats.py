"""The master's heartbeat path in one process: CPU per heartbeat, no gRPC, no agents.

    python -m bench.heartbeats.profile_heartbeats --containers 500 --operators 10 --rounds 5 [--profile]
    python -m bench.heartbeats.profile_heartbeats --wide 250 --operators 3    # one connected application
    python -m bench.heartbeats.profile_heartbeats --containers 2000 --operators 10 --rounds 2 --reads

Plans the load harness's application (:mod:`bench.heartbeats.bench_heartbeats`) and feeds
``MasterState.handle`` every container's heartbeats round after round, journaling after each as
the dispatcher does: the state's and the journal's share of a heartbeat, apart from the
transport's (:mod:`bench.heartbeats.bench_umbilical`). CPU time, not wall time: it holds on a
loaded machine. What it prints, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeats.profile_heartbeats",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=500)
    parser.add_argument("--operators", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--wide", type=int, metavar="P", help="stages of P partitions, all-to-all (P <= 256)")
    parser.add_argument("--reads", action="store_true",
                        help="also time, after the rounds, what the admin API and the journal's snapshot cost "
                             "the master's interpreter (median CPU ms of 5)")
    args = parser.parse_args()
    from bench.heartbeats.bench_heartbeats import spec_yaml
    from bench.heartbeats.heartbeat_wire import SimContainer

    from stram import wire as proto
    from stram.master.core.state import Heartbeat, InitContextRequest, MasterState, Reply, Start
    from stram.master.spec import AppSpec
    try:
        from stram.master.journal.log import JournalWriter
    except ImportError:  # a stram from before the journal's log: the whole snapshot when its key changed
        JournalWriter = None
    if args.wide:
        spec = AppSpec.from_yaml(wide_yaml(args.wide, args.operators))
        args.containers, args.operators = args.wide * args.operators, 1
    else:
        spec = AppSpec.from_yaml(spec_yaml(args.containers, args.operators, 1000, 500, 10, 30_000))
    now = int(time.time() * 1000)
    app_path = "file://" + tempfile.mkdtemp(prefix="stram-profile-hb-")
    c0 = time.process_time()
    state = MasterState(spec, "app", app_path, "tok", now, now)
    state.handle(Start(now))
    plan_s = time.process_time() - c0
    if JournalWriter is not None:
        writer = JournalWriter(app_path)
        journal = lambda: writer.write(state)  # noqa: E731
    else:
        from stram.master.journal.document import write_journal
        last = [None]

        def journal() -> None:
            key = state.journal_key()
            if key != last[0]:
                write_journal(app_path, state.snapshot())
                last[0] = key
    sims = {cid: SimContainer(cid, 1) for cid in state.plan.containers}
    ctxs = {cid: state.handle(InitContextRequest(cid))[0].value for cid in sims}
    profiler = cProfile.Profile()
    rounds, jrounds = [], []
    by_kind = {False: [0.0, 0], True: [0.0, 0]}  # plain heartbeats, those with checkpoints: CPU s, count
    for r in range(args.rounds):
        if r == 1 and args.profile:
            profiler.enable()
        spent, count, jspent = 0.0, 0, 0.0
        round_began = now
        for i, cid in enumerate(list(sims)):
            # a second a round, whatever the containers (1 ms apart each made rounds of 2,000 last 2 s:
            # their heartbeats reported 4 windows of 500 ms, not the 2 of the real harness)
            now = round_began + 1 + (1000 * i) // len(sims)
            hb = sims[cid].heartbeat(proto, ctxs[cid], now)
            c0 = time.process_time()
            instructions = state.handle(Heartbeat(hb, now))
            c1 = time.process_time()
            journal()
            c2 = time.process_time()
            spent += c2 - c0
            jspent += c2 - c1
            count += 1
            if r:  # by kind: a heartbeat that reports a saved checkpoint moves the committed window
                kind = by_kind[any(o.saved_checkpoints for o in hb.container_stats.operators)]
                kind[0] += c2 - c0
                kind[1] += 1
            (response,) = [i.value for i in instructions if isinstance(i, Reply)]
            for info in response.deploy_request:
                sims[cid].ops[info.id] = info.checkpoint.window_id
        now = round_began + 1000
        rounds.append(1000 * spent / count)
        jrounds.append(1000 * jspent / count)
    profiler.disable()
    steady = sum(rounds[1:]) / max(1, len(rounds) - 1)
    print(f"containers={args.containers} operators={args.containers * args.operators} plan_cpu_s={plan_s:.2f} "
          f"first_round_ms_per_hb={rounds[0]:.2f} ms_per_hb={steady:.3f} "
          f"journal_ms_per_hb={sum(jrounds[1:]) / max(1, len(jrounds) - 1):.3f} "
          f"committed_windows={state.committed - state.initial_window} "
          + " ".join(f"{name}_ms_per_hb={1000 * cpu / n:.3f} {name}_heartbeats={n}"
                     for name, (cpu, n) in (("plain", by_kind[False]), ("checkpoint", by_kind[True])) if n))
    if args.reads:
        print(" ".join(f"{name}_ms={ms:.1f}" for name, ms in reads(state).items()))
    if args.profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 0


def reads(state) -> dict[str, float]:  # noqa: ANN001
    """CPU milliseconds (median of 5) of the operators page's steps and of a journal snapshot's encoding:
    ``copies_ms`` (what the page copies under the master's lock), ``rows_orjson_ms`` (the copies as
    dicts, encoded by orjson: the page before OperatorPage, and the ``snapshot`` page's way),
    ``operator_page_ms`` (OperatorPage, the page now), ``snapshot_docs_ms`` (the journal's document
    made of field dicts, encoded) and ``snapshot_objects_ms`` (the plan's objects encoded as they are,
    the journal's snapshot now)."""
    import statistics

    import orjson

    from stram.master.admin.pagejson import OperatorPage
    from stram.master.core.reports import operator_rows
    from stram.master.journal import document as journal

    page = OperatorPage()
    copies = state.operator_copies()
    page.rows(copies)  # its fixed fields, encoded once for good
    steps = {
        "copies": lambda: state.operator_copies(),
        "rows_orjson": lambda: orjson.dumps(operator_rows(copies), option=orjson.OPT_SORT_KEYS),
        "operator_page": lambda: page.rows(copies),
        "snapshot_docs": lambda: journal.encode(state.snapshot()),
        "snapshot_objects": lambda: journal.encode(state.snapshot(objects=True)),
    }
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(5):
            c0 = time.process_time()
            step()
            times.append(1000 * (time.process_time() - c0))
        out[name] = statistics.median(times)
    return out


def wide_yaml(partitions: int, stages: int) -> str:
    """A source and ``stages - 1`` relays of ``partitions`` partitions each, every stream across containers."""
    lines = ["name: heartbeat-wide", "attributes:", "  HEARTBEAT_INTERVAL_MILLIS: 1000",
             "  STREAMING_WINDOW_SIZE_MILLIS: 500", "  CHECKPOINT_WINDOW_COUNT: 10",
             "  HEARTBEAT_TIMEOUT_MILLIS: 30000", "operators:"]
    for k in range(stages):
        cls = "Source" if k == 0 else "Relay"
        lines.append(f"  o{k}: {{class: 'bench.heartbeats.heartbeat_ops:{cls}', partitions: {partitions}}}")
    lines.append("streams:")
    lines += [f"  s{k}: {{from: o{k}.output, to: [o{k + 1}.input]}}" for k in range(stages - 1)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
