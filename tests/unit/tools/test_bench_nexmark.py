"""bench.nexmark's parsing, result checking and matrix, with fake systems on a tiny data set (no peers needed).

A fake system is a script that writes the oracle's answer (reordered, or with Flink's timestamp strings)
or a wrong one (a row dropped, a value changed, a row twice, a field missing); the checker must take the
first kind and report every one of the second WRONG, and the matrix must print WRONG, never a figure.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow.parquet as pq
import pytest

from bench.nexmark import __main__ as cli
from bench.nexmark import check, install, latency, runner
from stram.nexmark import generator, oracle
from stram.nexmark.model import GeneratorConfig

EVENTS = 3000

FAKE = textwrap.dedent("""
    import json, os, sys
    from stram.nexmark import oracle
    query, data, out, how = sys.argv[1:5]
    rows = oracle.answer(query, data)[::-1]
    if how == "drop":
        rows = rows[1:]
    elif how == "twice":
        rows = rows + rows[:1]
    elif how == "change":
        first = dict(rows[0])
        key = next(k for k, v in first.items() if isinstance(v, int))
        first[key] += 1
        rows = [first] + rows[1:]
    os.makedirs(out)
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        with open(os.path.join(out, f"part-{i}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\\n" for r in part)
    open(os.path.join(out, ".in-progress"), "w").write("not a result")
""")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("nexmark")
    generator.write_dataset(str(path / "data"), EVENTS, GeneratorConfig())
    return str(path / "data")


def write_rows(out, rows):
    out.mkdir()
    (out / "part-0").write_text("".join(json.dumps(r) + "\n" for r in rows))


def stamp(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms").strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_counts_and_names_parse():
    assert [cli._count(t) for t in ("200k", "10M", "1e6", "2500")] == [200_000, 10_000_000, 1_000_000, 2500]
    with pytest.raises(Exception):
        cli._count("0.5k1")
    args = cli.parser().parse_args(["--events", "200k", "--queries", "q5,q11", "--systems", "flink", "--runs", "1"])
    assert (args.events, args.queries, args.systems, args.runs) == (200_000, "q5,q11", "flink", 1)
    with pytest.raises(SystemExit):
        cli.main(["--queries", "q6"])
    with pytest.raises(SystemExit):
        cli.main(["--systems", "spark"])
    with pytest.raises(SystemExit):
        cli.main(["--command", "nameonly"])


@pytest.mark.parametrize("query", ["q5", "q11"])
def test_timestamps_read_back_as_epoch_ms(data, tmp_path, query):
    expected = oracle.answer_frame(query, data)
    rows = expected.to_dict("records")
    fields = [c for c in expected.columns if c in runner.TIMESTAMPS["flink"]]
    flinkish = [{k: stamp(v) if k in fields else v for k, v in r.items()} for r in rows]
    write_rows(tmp_path / "out", flinkish[::-1])
    assert check.check(str(tmp_path / "out"), expected, runner.TIMESTAMPS["flink"]).ok
    # one window shifted by a millisecond is another answer
    flinkish[0][fields[0]] = stamp(rows[0][fields[0]] + 1)
    write_rows(tmp_path / "bad", flinkish)
    assert not check.check(str(tmp_path / "bad"), expected, runner.TIMESTAMPS["flink"]).ok


def test_wrong_results_are_told_apart(data, tmp_path):
    expected = oracle.answer_frame("q9", data)
    rows = expected.to_dict("records")
    assert len(rows) > 2
    cases = {"missing": rows[1:], "twice": rows + rows[:1], "extra field": [{**rows[0], "x": 1}] + rows[1:],
             "no field": [{k: v for k, v in rows[0].items() if k != "price"}] + rows[1:],
             "float price": [{**rows[0], "price": rows[0]["price"] + 0.5}] + rows[1:]}
    for name, bad in cases.items():
        out = tmp_path / name.replace(" ", "-")
        write_rows(out, bad)
        verdict = check.check(str(out), expected)
        assert not verdict.ok, name
        assert verdict.detail, name
    write_rows(tmp_path / "good", rows[::-1])
    assert check.check(str(tmp_path / "good"), expected).ok
    assert not check.check(str(tmp_path / "absent"), expected).ok


def test_matrix_prints_wrong_never_a_figure(data, tmp_path, capsys):
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    base = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{query}} {{data}} {{out}}"
    argv = ["--data", data, "--events", str(EVENTS), "--queries", "q3,q7", "--runs", "2", "--systems",
            "good,drop,twice,change"]
    for how in ("good", "drop", "twice", "change"):
        argv += ["--command", f"{how}={base} {how}"]
    assert cli.main(argv) == 1          # some result was wrong
    out = capsys.readouterr().out
    for query in ("q3", "q7"):
        table = out.split(f"{query}: {EVENTS:,} events")[1].split("\n\n")[0]
        lines = {line.split()[0]: line for line in table.splitlines()[2:] if line.strip()}
        assert set(lines) == {"good", "drop", "twice", "change"}
        figures = lines["good"].split()[2:]
        assert float(figures[0].replace(",", "")) > 0 and "WRONG" not in lines["good"]
        for how in ("drop", "twice", "change"):
            assert "WRONG" in lines[how], lines[how]
    assert "command: python -m bench.nexmark" in out


def test_measure_counts_the_children(tmp_path):
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(3_000_000))'])"
    m = runner.measure([sys.executable, "-c", code], str(tmp_path))
    assert m.returncode == 0 and m.wall > 0 and m.cpu > 0 and m.peak_rss > 0
    failed = runner.measure([sys.executable, "-c", "import sys; sys.exit('boom')"], str(tmp_path))
    assert failed.returncode == 1 and "boom" in failed.stderr


def test_a_missing_peer_is_skipped_saying_why(data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "venv_python", lambda name: tmp_path / "no-venv" / name / "bin" / "python")
    monkeypatch.setattr(runner, "stram_unavailable", lambda: "no stram run here")
    results = runner.run_matrix(["q2"], ["stram1", "bytewax"], 1, data, EVENTS)
    assert results == {"q2": {}}
    out = capsys.readouterr().out
    assert "stram1: skipped (no stram run here)" in out
    assert "bytewax: skipped (no venv at" in out and "--setup" in out
    # Flink installed but without its Parquet jars: skipped, naming them
    monkeypatch.setenv("STRAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(install, "flink_version", lambda: "9.9.9")
    jars, why = install.flink_jars()
    assert jars == [] and "flink-sql-parquet-9.9.9.jar" in why and "--setup" in why


def test_measure_finds_detached_processes(tmp_path):
    # a grandchild in a session of its own whose parent has returned (so init adopted it), holding 200 MB
    # until the run is about to end: found by the marker variable, not by parent links
    held, release = tmp_path / "held", tmp_path / "release"
    grandchild = (f"import pathlib, time; x = bytearray(200 * 2**20); pathlib.Path({str(held)!r}).write_text('1')\n"
                  f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.01)")
    middle = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {grandchild!r}], "
              "start_new_session=True, stdout=subprocess.DEVNULL)")
    root = (f"import pathlib, subprocess, sys, time; subprocess.run([sys.executable, '-c', {middle!r}])\n"
            f"while not pathlib.Path({str(held)!r}).exists(): time.sleep(0.01)\n"
            f"time.sleep(1.0); pathlib.Path({str(release)!r}).write_text('1')")
    m = runner.measure([sys.executable, "-c", root], str(tmp_path))
    assert m.returncode == 0 and held.exists()
    assert m.peak_rss > 200 * 2**20 and m.peak_pss > 200 * 2**20


def test_pss_counts_pages_shared_by_the_tree_once(tmp_path):
    # two children map one 128 MiB file and read every page: each has it all in its RSS, and half in its PSS
    path, ready = tmp_path / "shared.bin", tmp_path / "ready"
    block = bytes(range(256)) * 4096
    path.write_bytes(block * 128)   # written out, not a hole (a hole may read as the zero page)
    child = (f"import mmap, pathlib, time\nf = open({str(path)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, "
             f"access=mmap.ACCESS_READ)\nsum(m[i] for i in range(0, len(m), 4096))\n"
             f"pathlib.Path({str(ready)!r} + str(__import__('os').getpid())).write_text('1'); time.sleep(1.5)")
    root = (f"import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {child!r}]) for _ in range(2)]\n"
            "[p.wait() for p in ps]")
    m = runner.measure([sys.executable, "-c", root], str(tmp_path))
    assert m.returncode == 0 and len(list(tmp_path.glob("ready*"))) == 2
    assert m.peak_rss > 256 * 2**20                            # the file's pages twice
    assert 128 * 2**20 < m.peak_pss < m.peak_rss - 100 * 2**20  # once, and the interpreters' own


def test_pss_of_a_process_gone_is_zero():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert runner.pss(dead.pid) == 0 and runner.pss(os.getpid()) > 0


def test_latency_counts_from_the_sources_schedule_and_the_last_source_to_pass(data):
    kinds = ("person", "auction", "bid")
    times = {k: pq.read_table(f"{data}/{k}.parquet", columns=["dateTime"]).column(0).to_pylist() for k in kinds}
    sources = [{"path": f"{data}/{k}.parquet", "rate": 10.0 * (i + 1), "started": 100.0 + i} for i, k in
               enumerate(kinds)]
    last = max(max(t) for t in times.values())
    ends = [min(times["bid"]) + 1, (min(times["bid"]) + last) // 2, last + 1]
    got = latency.passing_moments(sources, ends, bound=0)
    for end in ends:
        # by hand: per source, the index of its first event at or past the end, scheduled at started + j / rate
        firsts = [next((j for j, t in enumerate(times[s["path"].split("/")[-1][:-8]]) if t >= end), None)
                  for s in sources]
        if None in firsts:
            assert end not in got    # passed only by the end of input
        else:
            assert got[end] == max(s["started"] + j / s["rate"] for s, j in zip(sources, firsts))
    assert len(got) == 2


def test_latency_tells_written_from_committed(tmp_path):
    out = tmp_path / "out" / "op-1"
    out.mkdir(parents=True)
    (out / "00000000000000000007.tmp").write_text(json.dumps({"window_end": 10}) + "\n")
    read, written, committed = {}, {}, {}
    latency.scan(str(tmp_path / "out"), read, written, committed, now=1.0)
    (out / "00000000000000000007.tmp").rename(out / "00000000000000000007.jsonl")
    (out / ".00000000000000000008.tmp").write_text(json.dumps({"window_end": 20}) + "\n")   # not a result
    latency.scan(str(tmp_path / "out"), read, written, committed, now=2.0)
    assert written == {10: 1.0} and committed == {10: 2.0}
