"""The file operators end to end, EXACTLY_ONCE, with containers killed mid-run: DirectoryInput into
ParquetOutput, and DataGenerator into JsonLinesOutput; the outputs against answers computed here."""

from __future__ import annotations

import collections
import json
import os
import random

import pyarrow.parquet as pq
from e2ekit import kill_container_of, launch_detached, running_operators, wait_final, wait_until

FAST = ["-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "HEARTBEAT_INTERVAL_MILLIS=300",
        "-D", "CHECKPOINT_WINDOW_COUNT=5", "-D", "PROCESSING_MODE=EXACTLY_ONCE"]


def final_parquet(out) -> list:
    return sorted(p for p in out.rglob("*.parquet") if not p.name.startswith("."))


def parquet_rows(out) -> list[dict]:
    """Every row of the final Parquet files, with the Hive directory's field put back."""
    rows = []
    for f in final_parquet(out):
        extra = dict(part.split("=", 1) for part in f.relative_to(out).parts[:-1])
        rows += [{**row, **extra} for row in pq.read_table(f).to_pylist()]
    return rows


def as_multiset(rows: list[dict]) -> collections.Counter:
    return collections.Counter(json.dumps(r, sort_keys=True) for r in rows)


class Producer:
    """Writes JSON-lines files into the watched directory the safe way (a hidden name, then a rename),
    with a malformed line now and then; remembers the good records."""

    def __init__(self, where) -> None:
        self.where = where
        self.records: list[dict] = []
        self.files = 0
        self.rng = random.Random(31)

    def add(self, n: int) -> None:
        for _ in range(n):
            lines = []
            for i in range(self.rng.randrange(50, 400)):
                rec = {"file": self.files, "i": i, "group": self.rng.choice("abc"), "x": self.rng.random()}
                self.records.append(rec)
                lines.append(json.dumps(rec))
                if self.rng.random() < 0.01:
                    lines.append('{"broken": ')
            tmp = self.where / f".f{self.files:04d}.writing"
            tmp.write_text("\n".join(lines) + "\n")
            os.rename(tmp, self.where / f"f{self.files:04d}.jsonl")
            self.files += 1


def test_directory_into_parquet_exactly_once_through_kills(tmp_path):
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    producer = Producer(inbox)
    producer.add(3)
    spec = tmp_path / "files.yaml"
    spec.write_text(f"""
name: files-to-parquet
operators:
  reader:
    class: stram.operators.files:DirectoryInput
    properties: {{path: "{inbox}", format: jsonl, scan_interval_ms: 100, records_per_window: 40,
                 end_when_idle_ms: 10000}}
  out:
    class: stram.operators.parquet:ParquetOutput
    properties: {{path: "{out}", partition_by: group}}
streams:
  records: {{from: reader.output, to: [out.input]}}
""")
    app_id = launch_detached(str(spec), *FAST)
    wait_until(lambda: running_operators(app_id) == 2, what="both operators running")
    wait_until(lambda: final_parquet(out), timeout=90, what="a first committed Parquet file")
    producer.add(4)
    kill_container_of(app_id, "reader")  # mid-file: it resumes from its checkpoint's file and offset
    producer.add(3)
    seen = len(final_parquet(out))
    wait_until(lambda: len(final_parquet(out)) > seen, timeout=90, what="more committed Parquet files")
    kill_container_of(app_id, "out")  # its uncommitted ranges are written again, never twice
    producer.add(4)
    app = wait_final(app_id, timeout=240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    rows = parquet_rows(out)
    assert len(rows) == len(producer.records)
    assert as_multiset(rows) == as_multiset(producer.records)
    assert not [p for p in out.rglob(".*") if p.is_file()]  # no temporary file left behind


def expected_record(n: int, seed: int, keys: int, interval_ms: int, disorder_ms: int) -> dict:
    """Record n of DataGenerator as its documentation defines it (start_ms 0), computed here apart."""
    z = (seed * 1_000_003 + n) * 0x9E3779B97F4A7C15 % 2 ** 64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % 2 ** 64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % 2 ** 64
    h = z ^ (z >> 31)
    return {"key": f"k{h % keys}", "value": (h >> 32) % 1000,
            "ts": n * interval_ms - (h >> 44) % (disorder_ms + 1), "seq": n}


def test_generator_into_json_lines_exactly_once_through_kills(tmp_path):
    out = tmp_path / "out"
    count, seed, keys, interval, disorder = 30_000, 17, 50, 5, 40
    spec = tmp_path / "gen.yaml"
    spec.write_text(f"""
name: generated
operators:
  gen:
    class: stram.operators.generate:DataGenerator
    properties: {{count: {count}, rate: 2500.0, seed: {seed}, keys: {keys}, interval_ms: {interval},
                 disorder_ms: {disorder}}}
  out:
    class: stram.operators.io:JsonLinesOutput
    properties: {{path: "{out}"}}
streams:
  records: {{from: gen.output, to: [out.input]}}
""")

    def written() -> list[dict]:
        return [json.loads(line) for f in sorted(out.rglob("*.jsonl")) for line in f.read_text().splitlines()]

    app_id = launch_detached(str(spec), *FAST)
    wait_until(lambda: running_operators(app_id) == 2, what="both operators running")
    wait_until(lambda: out.exists() and written(), timeout=90, what="a first committed window")
    kill_container_of(app_id, "gen")  # the restart emits the same records from its checkpoint on
    seen = len(written())
    wait_until(lambda: len(written()) > seen, timeout=90, what="more committed windows")
    kill_container_of(app_id, "out")
    app = wait_final(app_id, timeout=240)
    assert app["state"] == "SUCCEEDED", app.get("diagnostics")
    got = sorted(written(), key=lambda r: r["seq"])
    assert got == [expected_record(n, seed, keys, interval, disorder) for n in range(count)]
