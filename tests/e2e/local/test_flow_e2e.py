"""End to end: applications written with the dataflow API (stram.flow), launched from their .py file.

Their answers are checked against counts made here in plain Python, and a flow
written in Python against the same flow written as YAML: the same logical DAG
(``launch --print-dag --json``) and the same output.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from collections import Counter

import yaml
from conftest import ROOT, read_counts, word_truth

from stram.client import cli
from stram.common import apps as stram_apps
from stram.common import pickled

WORDS = ROOT / "specs" / "data" / "words.txt"


def stram(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stram.client.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def jsonl_rows(out_dir) -> list[dict]:
    return [json.loads(line) for f in sorted(out_dir.rglob("*.jsonl")) for line in f.read_text().splitlines()
            if line.strip()]


def test_wordcount_app_file_gives_exact_counts(tmp_path, capsys):
    """specs/wordcount_flow.py: read_lines, flat_map, key_by, a running fold over 2 partitions."""
    out = tmp_path / "out"
    code = cli.main(["launch", "specs/wordcount_flow.py", "-D", f"operators.out.path={out}"])
    assert code == 0, capsys.readouterr().err
    running: dict[str, int] = {}
    for row in jsonl_rows(out):
        running[row["key"]] = max(running.get(row["key"], 0), row["value"])
    assert running == dict(word_truth(WORDS))
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".jsonl")]
    assert stram_apps.local_apps()[0]["state"] == "SUCCEEDED"


def records(path, n: int = 3000) -> list[dict]:
    """Purchases over a minute of event time, written as JSON lines to ``path``."""
    rng = random.Random(7)
    rows = [{"user": f"u{rng.randrange(40)}", "amount": rng.randrange(1, 100),
             "ts": 1_700_000_000_000 + rng.randrange(60_000)} for _ in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


FLOW_APP = """
from stram.flow import Flow
from stram.operators.aggregate import KeyCounter

flow = Flow("purchases", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200, "PROCESSING_MODE": "EXACTLY_ONCE"})
big = flow.read_jsonl(DATA, records_per_window=500) \\
    .map(lambda r: dict(r, amount=r["amount"] * 2)) \\
    .filter(lambda r: r["amount"] > THRESHOLD)
big.map(lambda r: r["user"]).to(KeyCounter, partitions=2).write_jsonl(OUT)
THRESHOLD = 60
"""


def yaml_spec(data, out) -> str:
    """The flow of FLOW_APP written as YAML: the generic operators with their functions pickled here."""
    fns = [pickled.dumps(lambda r: dict(r, amount=r["amount"] * 2)), pickled.dumps(lambda r: r["amount"] > 60),
           pickled.dumps(lambda r: r["user"])]
    return textwrap.dedent(f"""
        name: purchases
        attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 200, PROCESSING_MODE: EXACTLY_ONCE}}
        operators:
          read_jsonl: {{class: "stram.operators.io:JsonLinesReader", properties: {{path: "{data}",
                        records_per_window: 500}}}}
          map: {{class: "stram.flow.ops:Map", properties: {{fn: "{fns[0]}"}}}}
          filter: {{class: "stram.flow.ops:Filter", properties: {{fn: "{fns[1]}"}}}}
          map_2: {{class: "stram.flow.ops:Map", properties: {{fn: "{fns[2]}"}}}}
          key_counter: {{class: "stram.operators.aggregate:KeyCounter", partitions: 2}}
          write_jsonl: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{out}"}}}}
        streams:
          read_jsonl: {{from: read_jsonl.output, to: [map.input]}}
          map: {{from: map.output, to: [filter.input]}}
          filter: {{from: filter.output, to: [map_2.input]}}
          map_2: {{from: map_2.output, to: [key_counter.input]}}
          key_counter: {{from: key_counter.output, to: [write_jsonl.input]}}
    """)


def test_a_python_flow_and_its_yaml_twin_have_one_dag_and_one_answer(tmp_path):
    rows = records(tmp_path / "purchases.jsonl")
    truth = Counter(r["user"] for r in rows if r["amount"] * 2 > 60)
    app = tmp_path / "app" / "purchases.py"
    app.parent.mkdir()
    app.write_text(f"DATA = {str(tmp_path / 'purchases.jsonl')!r}\nOUT = {str(tmp_path / 'out-py')!r}\n" + FLOW_APP)
    spec = tmp_path / "purchases.yaml"
    spec.write_text(yaml_spec(tmp_path / "purchases.jsonl", tmp_path / "out-yaml"))

    dags = [stram("launch", "--print-dag", "--json", str(path)) for path in (app, spec)]
    assert [d.returncode for d in dags] == [0, 0], [d.stderr for d in dags]
    assert json.loads(dags[0].stdout) == json.loads(dags[1].stdout)

    for path in (app, spec):  # launched from a directory that is neither the app's nor the repository
        run = stram("launch", str(path), cwd=tmp_path)
        assert run.returncode == 0 and "SUCCEEDED" in run.stderr, run.stderr
    answers = []
    for out in ("out-py", "out-yaml"):
        sums, maxima, _ = read_counts(tmp_path / out)
        assert sums == truth and maxima == dict(truth)
        answers.append(maxima)
    assert answers[0] == answers[1]


WINDOW_APP = """
from stram.flow import Flow, windows

flow = Flow("windows", attributes={"STREAMING_WINDOW_SIZE_MILLIS": 200})
flow.read_jsonl(DATA, timestamp_field="ts", out_of_orderness_ms=60_000, records_per_window=500) \\
    .filter(lambda r: r["amount"] > 20) \\
    .key_by("user").window(windows.tumbling(5_000)).count(partitions=2) \\
    .write_jsonl(OUT)
"""


def test_a_windowed_count_in_python_and_in_yaml(tmp_path):
    """The records come in any order within the minute: the out-of-orderness bound covers it, none is late."""
    rows = records(tmp_path / "purchases.jsonl")
    truth = Counter((r["user"], r["ts"] // 5000 * 5000) for r in rows if r["amount"] > 20)
    app = tmp_path / "windows.py"
    app.write_text(f"DATA = {str(tmp_path / 'purchases.jsonl')!r}\nOUT = {str(tmp_path / 'out-py')!r}\n" + WINDOW_APP)
    spec = tmp_path / "windows.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "windows", "attributes": {"STREAMING_WINDOW_SIZE_MILLIS": 200},
        "operators": {
            "read_jsonl": {"class": "stram.operators.io:JsonLinesReader", "properties": {
                "path": str(tmp_path / "purchases.jsonl"), "timestamp_field": "ts", "out_of_orderness_ms": 60_000,
                "records_per_window": 500}},
            "filter": {"class": "stram.flow.ops:Filter",
                       "properties": {"fn": pickled.dumps(lambda r: r["amount"] > 20)}},
            "count": {"class": "stram.operators.window:WindowedAggregate", "partitions": 2, "properties": {
                "key_field": "user", "timestamp_field": "ts", "window": {"kind": "tumbling", "size_ms": 5000},
                "aggregate": "count"}},
            "write_jsonl": {"class": "stram.operators.io:JsonLinesOutput",
                            "properties": {"path": str(tmp_path / "out-yaml")}}},
        "streams": {"read_jsonl": {"from": "read_jsonl.output", "to": ["filter.input"]},
                    "filter": {"from": "filter.output", "to": ["count.input"]},
                    "count": {"from": "count.output", "to": ["write_jsonl.input"]}}}, sort_keys=False))
    dags = [stram("launch", "--print-dag", "--json", str(path)) for path in (app, spec)]
    assert [d.returncode for d in dags] == [0, 0], [d.stderr for d in dags]
    assert json.loads(dags[0].stdout) == json.loads(dags[1].stdout)
    answers = []
    for path, out in ((app, "out-py"), (spec, "out-yaml")):
        run = stram("launch", str(path), cwd=tmp_path)
        assert run.returncode == 0 and "SUCCEEDED" in run.stderr, run.stderr
        got = Counter()
        for row in jsonl_rows(tmp_path / out):
            assert row["window_end"] - row["window_start"] == 5000
            got[(row["key"], row["window_start"])] += row["value"]
        answers.append(got)
    assert answers[0] == truth and answers[1] == truth


def expected_dag(spec: dict) -> dict:
    """What --print-dag --json should say of a spec's plain data, worked out here from the data itself."""
    return {"name": spec["name"],
            "operators": [{"name": n, "class": o["class"], "partitions": o.get("partitions", 1)}
                          for n, o in spec["operators"].items()],
            "streams": [{"name": n, "from": s["from"], "to": list(s["to"]), "locality": s.get("locality")}
                        for n, s in spec.get("streams", {}).items()]}


def test_print_dag_of_a_yaml_spec_and_of_an_app_file(tmp_path):
    wordcount = yaml.safe_load((ROOT / "specs" / "wordcount.yaml").read_text())
    run = stram("launch", "--print-dag", "--json", "specs/wordcount.yaml", "-D", "operators.count.partitions=3")
    assert run.returncode == 0, run.stderr
    wordcount["operators"]["count"]["partitions"] = 3
    assert json.loads(run.stdout) == expected_dag(wordcount)

    run = stram("launch", "--print-dag", "--json", "specs/wordcount_flow.py")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "name": "wordcount-flow",
        "operators": [{"name": "reader", "class": "stram.operators.io:LineReader", "partitions": 1},
                      {"name": "split", "class": "stram.flow.ops:FlatMap", "partitions": 1},
                      {"name": "count", "class": "stram.flow.ops:KeyedReduce", "partitions": 2},
                      {"name": "out", "class": "stram.operators.io:JsonLinesOutput", "partitions": 1}],
        "streams": [{"name": "reader", "from": "reader.output", "to": ["split.input"], "locality": "CONTAINER_LOCAL"},
                    {"name": "split", "from": "split.output", "to": ["count.input"], "locality": None},
                    {"name": "count", "from": "count.output", "to": ["out.input"], "locality": None}]}

    text = stram("launch", "--print-dag", "specs/wordcount_flow.py")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "wordcount-flow: 4 operators, 3 streams"
    assert any(line.split() == ["count", "stram.flow.ops:KeyedReduce", "partitions=2"] for line in lines)
    assert any(line.split() == ["reader", "reader.output", "->", "split.input", "[CONTAINER_LOCAL]"] for line in lines)
    # nothing was launched
    assert stram_apps.local_apps() == []
