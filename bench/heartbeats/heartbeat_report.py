"""The heartbeat load harness's report (:mod:`bench.heartbeats.bench_heartbeats`): its figures as lines, and the
steady state's slow seconds."""

from __future__ import annotations

from typing import Any

__all__ = ["report", "slow_seconds", "SLOW_SHARE", "SLOW_MS"]

#: A second of the steady state is slow when more than this share of the heartbeats begun in it
#: took longer than :data:`SLOW_MS` (a second that alone would put the run's p99 over it).
SLOW_SHARE, SLOW_MS = 0.01, 100


def slow_seconds(by_second: dict[int, list[float]]) -> list[int]:
    """The seconds of the steady state (from its start) that were slow: where the p99 comes from.
    Slow seconds CHECKPOINT_WINDOW_COUNT windows apart are the operators' checkpoints, reported by
    every container within one interval (heartbeats that carry one cost the master more:
    ``python -m bench.heartbeats.profile_heartbeats`` prints both)."""
    return [s for s, lats in sorted(by_second.items())
            if sum(lat > SLOW_MS / 1000 for lat in lats) > SLOW_SHARE * len(lats)]


def report(r: dict[str, Any]) -> None:
    """Print one configuration's figures (:func:`bench.heartbeats.bench_heartbeats.measure`): lines for a
    reader, then one line of ``name=value`` figures."""
    print(f"{r['containers']} containers x {r['operators'] // r['containers']} operators, {r['seconds']}s: "
          f"heartbeat RPC p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms; "
          f"{r['heartbeats_per_s']} heartbeats/s; errors {r['errors']}, timeouts declared {r['timeouts']}")
    for line in r["first_errors"]:
        print(f"  failed call: {line}")
    print(f"  CPU per heartbeat: the master {r['master_ms_per_hb']} ms, the simulated agents "
          f"{r['harness_ms_per_hb']} ms ({r['harness_cpu_pct']}% of a core; the harness, apart)")
    print(f"  master: CPU {r['master_cpu_pct']}% of a core ({r['front_cpu_pct']}% in its umbilical's front "
          f"process), peak RSS {r['master_rss_mb']} MB, plan {r['plan_s']} s; "
          f"journal {r['journal_writes']} writes of {r['journal_kb']} KB, {r['journal_ms_mean']} ms mean / "
          f"{r['journal_ms_p99']} ms p99 / {r.get('journal_ms_max')} ms max ({r.get('journal_compactions')} "
          f"compactions); committed-window update {r['committed_ms_mean']} ms mean / "
          f"{r['committed_ms_max']} ms max; admin operators page {r['admin_operators_ms']} ms; "
          f"heartbeats per batch {r['batch_mean']} mean, {r['batch_max']} max; a heartbeat's arrival to its "
          f"answer in the master {r['master_answer_ms_mean']} ms mean / {r['master_answer_ms_p99']} ms p99")
    print(f"  steady state (heartbeats begun once every operator was ACTIVE): p50 {r['steady_p50_ms']} ms, "
          f"p99 {r['steady_p99_ms']} ms over {r['steady_heartbeats']} (arrival to answer in the master: p50 "
          f"{r['steady_master_answer_ms_p50']} ms, p99 {r['steady_master_answer_ms_p99']} ms); "
          f"heartbeat interval at the end "
          f"{r['interval_ms']} ms (stram.master.core.pacing)")
    if r["steady_s"]:
        slow = r["steady_slow_at"]
        at = ", ".join(f"+{s}" for s in slow[:15]) + (", ..." if len(slow) > 15 else "")
        print(f"  slow seconds of the steady state (over {SLOW_SHARE:.0%} of the heartbeats begun in it took over "
              f"{SLOW_MS} ms): {r['steady_slow_s']} of {r['steady_s']}" + (f", at {at} s" if at else ""))
    if "gc_young" in r:
        print(f"  garbage collector in the master: {r['gc_young']} young collections (longest "
              f"{r['gc_young_max_ms']} ms), {r['gc_gen1']} of generation 1 ({r['gc_gen1_max_ms']} ms), "
              f"{r['gc_full']} full ({r['gc_full_max_ms']} ms); in the steady state {r['gc_steady']}, "
              f"{r['gc_steady_total_ms']} ms in all, longest {r['gc_steady_max_ms']} ms")
    print(f"  deploy: every operator ACTIVE {r['deploy_s']} s after planning began "
          f"({r['deploy_from_process_start_s']} s after the master's process started); "
          f"`stram list-operators` {r['list_operators_s']} s ({r['list_operators_rows']} rows)")
    if "restart_resume_s" in r:
        print(f"  restart: the new attempt resumed {r['restart_resume_s']} s after its process started "
              f"(journal restored in {r['restart_restore_s']} s, serving at {r['restart_serving_s']} s); "
              f"relaunched {r['relaunched']}, not adopted {r['lost']}; heartbeat p99 after the restart "
              f"{r['p99_after_restart_ms']} ms over {r['heartbeats_after_restart']} heartbeats")
    print(" ".join(f"{k}={v}" for k, v in r.items() if not isinstance(v, (dict, list))), flush=True)
