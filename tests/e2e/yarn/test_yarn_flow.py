"""``stram launch --yarn app.py``: a flow written in Python on the session's mini YARN cluster, its functions
pickled by value into the shipped spec, its input and output on HDFS; counts checked against a direct count."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, word_truth
from hadoop import stram

pytestmark = pytest.mark.yarn

WORDS = ROOT / "specs" / "data" / "words.txt"


def test_wordcount_app_file_on_yarn(on_minicluster, tmp_path):
    cluster = on_minicluster
    base = cluster.new_dir("wordcount-flow")
    words = cluster.put(WORDS, f"{base}/words.txt")
    proc = stram("launch", "--yarn", ROOT / "specs" / "wordcount_flow.py", "-D", f"operators.reader.path={words}",
                 "-D", f"operators.out.path={cluster.uri(base)}/out")
    assert proc.returncode == 0, proc.stderr[-4000:]
    app_id = proc.stdout.strip().splitlines()[-1]
    assert f"{app_id} SUCCEEDED" in proc.stderr
    out = cluster.get(f"{base}/out", tmp_path / "out")
    running: dict[str, int] = {}
    for f in sorted(out.rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            running[row["key"]] = max(running.get(row["key"], 0), row["value"])
    assert running == dict(word_truth(WORDS))
