"""The NEXMark matrix: each query on stram (1 and 2 partitions), Flink SQL and Bytewax, measured and checked.

Every run is a process tree started from scratch (start-up included): its wall time, events/s = events /
wall time, the CPU seconds of the whole tree (the sum of each process's last sampled time, or the root's
wait4 resource usage, itself and the children it waited for, when larger) and the peak of its summed RSS,
sampled every 50 ms. The tree includes detached processes that inherited the run's marker variable.
Its result is checked against the oracle (bench.nexmark.check); a wrong one prints WRONG, never a figure.
Runs are interleaved: for each query, every round runs every system once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import psutil

from bench.nexmark import check, install
from bench.peers.bench_peers import VENVS, venv_python
from stram.nexmark.generator import FORMAT

#: the repository (stram's runs start there)
ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11")
SYSTEMS = ("stram1", "stram2", "flink", "bytewax")
NAMES = {"stram1": "stram, 1 partition", "stram2": "stram, 2 partitions", "flink": "Flink SQL, parallelism 2",
         "bytewax": "Bytewax, 1 worker"}
#: fields a system writes as timestamps (read back as epoch ms)
TIMESTAMPS = {"flink": ("window_start", "window_end", "stime", "starttime", "endtime")}
SAMPLE_S = 0.05
#: the environment variable that marks a measured run's processes
TREE_MARK = "STRAM_BENCH_TREE"


@dataclasses.dataclass
class Run:
    wall: float
    cpu: float
    peak_rss: int
    ok: bool
    detail: str = ""       # WRONG: why; FAILED: the error's tail
    peak_pss: int = 0


@dataclasses.dataclass
class Measured:
    wall: float
    cpu: float
    peak_rss: int
    returncode: int
    stdout: str
    stderr: str
    peak_pss: int = 0


def pss(pid: int) -> int:
    """``pid``'s proportional set size in bytes (each shared page counted as its share among the processes
    mapping it, so summed over processes it counts a shared library once, where RSS counts it per
    process); 0 where the kernel does not tell (no ``smaps_rollup``)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def measure(cmd: list[str], cwd: str, env: dict | None = None) -> Measured:
    """Run ``cmd`` to its end, sampling its process tree (CPU, and the peaks of RSS and PSS summed over the
    tree); stdout and stderr kept (in files, so no pipe fills).

    The tree is the process's descendants and every process that inherited its TREE_MARK environment
    variable: a local ``stram launch --detach`` starts the master and its containers in a session of their
    own, reparented to init, out of reach of the parent links."""
    token = uuid.uuid4().hex
    env = dict(os.environ if env is None else env, **{TREE_MARK: token})
    looked: set[int] = set()
    marked: dict[int, psutil.Process] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = psutil.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        cpu_seen: dict[int, float] = {}
        peak = peak_pss = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            for p in psutil.process_iter():
                if p.pid not in looked:
                    looked.add(p.pid)
                    try:
                        if p.environ().get(TREE_MARK) == token:
                            marked[p.pid] = p
                    except psutil.Error:
                        pass
            try:
                tree = {p.pid: p for p in [proc] + proc.children(recursive=True)}
            except psutil.Error:
                tree = {}
            rss = shared = 0
            for p in {**marked, **tree}.values():
                try:
                    with p.oneshot():
                        t = p.cpu_times()
                        cpu_seen[p.pid] = t.user + t.system
                        rss += p.memory_info().rss
                    shared += pss(p.pid)
                except psutil.Error:
                    pass
            peak, peak_pss = max(peak, rss), max(peak_pss, shared)
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu = max(sum(cpu_seen.values()), usage.ru_utime + usage.ru_stime)
        out.seek(0)
        err.seek(0)
        return Measured(wall, cpu, peak, proc.returncode, out.read().decode(errors="replace"),
                        err.read().decode(errors="replace"), peak_pss)


def dataset(events: int, seed: int, data: str | None) -> tuple[str, int]:
    """(the data set's directory, its events): ``data`` as it is if it holds a data set, else one generated
    there; without ``data``, the cached one for (events, seed) (``$STRAM_CACHE/nexmark/events-N-seed-S``),
    generated once."""
    explicit = data is not None
    if data is None:
        cache = os.path.abspath(os.path.expanduser(os.environ.get("STRAM_CACHE") or "~/.cache/stram"))
        data = os.path.join(cache, "nexmark", f"events-{events}-seed-{seed}")
    meta = os.path.join(data, "meta.json")
    if os.path.exists(meta):
        with open(meta) as f:
            info = json.load(f)
        if info.get("events") == events and info.get("seed") == seed and (explicit or info.get("format") == FORMAT):
            return data, events     # (a cached data set of an older format is made again)
        if explicit:
            print(f"data: {data} holds {info.get('events'):,} events (seed {info.get('seed')}); using it as it is")
            return data, int(info["events"])
    print(f"data: generating {events:,} events (seed {seed}) into {data}", flush=True)
    cmd = [sys.executable, "-m", "stram.nexmark", "generate", "--events", str(events), "--seed", str(seed),
           "--out", data]
    subprocess.run(cmd + ([] if explicit else ["--force"]), cwd=ROOT, check=True)
    return data, events


def longest_auction_ms(data: str) -> int:
    """The longest auction (expires - dateTime) of the data set: the bound of Flink's q4/q9 interval join."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    t = pq.read_table(os.path.join(data, "auction.parquet"), columns=["dateTime", "expires"])
    if t.num_rows == 0:
        return 0
    return int(pc.max(pc.subtract(t.column("expires"), t.column("dateTime"))).as_py())


def stram_unavailable() -> str:
    """"" when this checkout can run the queries on stram, else why not."""
    proc = subprocess.run([sys.executable, "-m", "stram.nexmark", "run", "--help"], cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode != 0 or "--json" not in proc.stdout:
        return "this checkout's 'python -m stram.nexmark run' has no --json (the queries on stram are not merged)"
    return ""


class Matrix:
    """The systems' commands for a data set, and what keeps a system out."""

    def __init__(self, data: str, events: int, commands: dict[str, str] | None = None):
        self.data, self.events = data, events
        self.commands = commands or {}          # name -> a command template ({query} {data} {out})
        self._max_auction: int | None = None
        self.jars: list[str] = []

    def unavailable(self, system: str) -> str:
        if system in self.commands:
            return ""
        if system.startswith("stram"):
            return stram_unavailable()
        if not venv_python(system).exists():
            return f"no venv at {VENVS / system}; run with --setup"
        if system == "flink":
            self.jars, why = install.flink_jars()
            return why
        return ""

    def command(self, system: str, query: str, out: str) -> list[str]:
        if system in self.commands:
            return shlex.split(self.commands[system].format(query=query, data=self.data, out=out))
        if system.startswith("stram"):
            return [sys.executable, "-m", "stram.nexmark", "run", query, "--data", self.data, "--out", out,
                    "--partitions", system[len("stram"):], "--json"]
        if system == "flink":
            if self._max_auction is None:
                self._max_auction = longest_auction_ms(self.data)
            return [str(venv_python("flink")), "-I", str(HERE / "flink_job.py"), query, self.data, out,
                    "--jars", ":".join(self.jars), "--parallelism", "2", "--max-auction-ms", str(self._max_auction)]
        if system == "bytewax":
            return [str(venv_python("bytewax")), "-I", str(HERE / "bytewax_job.py"), query, self.data, out]
        raise ValueError(f"unknown system {system}")

    def run(self, system: str, query: str, expected, work: str) -> Run:
        out = tempfile.mkdtemp(prefix=f"{system}-{query}-", dir=work)
        os.rmdir(out)          # the systems make it (Flink's sink wants to)
        cwd = str(ROOT) if system.startswith("stram") or system in self.commands else tempfile.gettempdir()
        try:
            m = measure(self.command(system, query, out), cwd)
            if m.returncode != 0:
                tail = " / ".join(line.strip() for line in m.stderr.strip().splitlines()[-3:])
                return Run(m.wall, m.cpu, m.peak_rss, False, f"FAILED (exit {m.returncode}): {tail[-400:]}",
                           m.peak_pss)
            suffix = ".jsonl" if system.startswith("stram") else ""
            verdict = check.check(out, expected, TIMESTAMPS.get(system, ()), suffix=suffix)
            return Run(m.wall, m.cpu, m.peak_rss, verdict.ok, "" if verdict.ok else f"WRONG: {verdict.detail}",
                       m.peak_pss)
        finally:
            shutil.rmtree(out, ignore_errors=True)


def summary(system: str, runs: list[Run], events: int, ref: float | None) -> str:
    """One table row: medians, or WRONG/FAILED with the first bad run's reason."""
    name = f"{system:<8} {NAMES.get(system, '(--command)'):<26}"
    bad = [r for r in runs if not r.ok]
    if bad:
        return f"{name} {bad[0].detail[:300]}"
    rate = statistics.median(events / r.wall for r in runs)
    ratio = f"{rate / ref:9.2f}x" if ref else f"{'-':>10}"
    return (f"{name} {rate:>12,.0f} {statistics.median(r.wall for r in runs):>8.2f} "
            f"{statistics.median(r.cpu for r in runs):>8.2f} {max(r.peak_rss for r in runs) / 2**20:>8.0f} "
            f"{max(r.peak_pss for r in runs) / 2**20:>8.0f} {ratio}")


def table(query: str, results: dict[str, list[Run]], events: int, skipped: dict[str, str]) -> list[str]:
    ref_runs = results.get("stram1") or []
    ref = statistics.median(events / r.wall for r in ref_runs) if ref_runs and all(r.ok for r in ref_runs) else None
    lines = [f"{query}: {events:,} events, {max((len(r) for r in results.values()), default=0)} run(s); medians",
             f"{'system':<35} {'events/s':>12} {'wall s':>8} {'CPU s':>8} {'RSS MB':>8} {'PSS MB':>8} {'vs stram1':>10}"]
    for system, runs in results.items():
        lines.append(summary(system, runs, events, ref))
    for system, why in skipped.items():
        lines.append(f"{system:<8} {NAMES.get(system, '(--command)'):<26} skipped: {why}")
    return lines


def run_matrix(queries: list[str], systems: list[str], runs: int, data: str, events: int,
               commands: dict[str, str] | None = None, printer=print) -> dict[str, dict[str, list[Run]]]:
    """Every query × system, ``runs`` interleaved rounds each; prints a table per query; returns the runs."""
    from stram.nexmark import oracle
    matrix = Matrix(data, events, commands)
    skipped = {}
    for system in systems:
        why = matrix.unavailable(system)
        if why:
            skipped[system] = why
            printer(f"{system}: skipped ({why})")
    active = [s for s in systems if s not in skipped]
    work = tempfile.mkdtemp(prefix="stram-bench-nexmark-")
    everything: dict[str, dict[str, list[Run]]] = {}
    try:
        for query in queries:
            expected = oracle.answer_frame(query, data)
            results: dict[str, list[Run]] = {s: [] for s in active}
            for _ in range(runs):
                for system in active:
                    results[system].append(matrix.run(system, query, expected, work))
            everything[query] = results
            printer("")
            for line in table(query, results, events, skipped):
                printer(line)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return everything
