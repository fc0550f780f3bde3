"""What the processes that do not need them leave unimported (memory and start-up time).

pyarrow (with numpy) is about 30 MB of resident memory and a tenth of a second of
start-up in every process that imports it. The master and the containers reach a
local ``APP_PATH`` through ``os`` (:mod:`stram.common.localfs`) and HDFS through
``pyarrow.fs``; ``stram`` itself validates a spec, which imports the spec's
operator classes, and must not pay for pyarrow on the way, nor for ``ssl`` and
``urllib.request`` (7 MB), which only its admin API calls need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


PROBE = """
import json, sys
import stram.client.cli
from stram.master.spec import AppSpec
spec = AppSpec.from_yaml(open({spec!r}).read())
print(json.dumps(sorted(m for m in ("pyarrow", "numpy", "pyspark", "flask", "grpc", "ssl", "urllib.request")
                        if m in sys.modules)))
"""


def _heavy_modules_after_validating(spec: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(spec=spec)], cwd=ROOT, capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_validating_the_word_count_imports_no_pyarrow() -> None:
    """The built-in file operators import pyarrow only when they run (stram.common.fs is lazy)."""
    assert _heavy_modules_after_validating("specs/wordcount.yaml") == []


def test_the_probe_sees_an_eager_import(tmp_path) -> None:
    """The probe can fail: a spec whose operator module imports pyarrow at the top is seen."""
    (tmp_path / "eager_op.py").write_text(
        "import pyarrow\nfrom stram.operator import Operator, InputPort\n"
        "class Eager(Operator):\n    input = InputPort()\n    def process_input(self, t):\n        pass\n")
    spec = tmp_path / "eager.yaml"
    spec.write_text("name: eager\noperators:\n  reader: {class: 'stram.operators.io:LineReader', "
                    "properties: {path: x.txt}}\n  eager: {class: 'eager_op:Eager'}\n"
                    "streams:\n  s: {from: reader.output, to: [eager.input]}\n")
    probe = PROBE.format(spec=str(spec)).replace("import json, sys", f"import json, sys; sys.path.insert(0, {str(tmp_path)!r})")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    assert "pyarrow" in json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_local_launch_imports_pyarrow_nowhere(tmp_path) -> None:
    """``stram launch`` in the foreground, to the end: the ``stram`` process never imports pyarrow
    (its supervisor file and the spec are local files, written through ``os``), nor do the master
    and the container, which read and write the local APP_PATH through ``os`` too."""
    text = tmp_path / "in.txt"
    text.write_text("a b\nb c\n" * 50)
    out = tmp_path / "out"
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('HEAVY', sorted(m for m in ('pyarrow', 'numpy', 'pyspark') "
            "if m in sys.modules), file=sys.stderr))\n"
            "sys.argv = ['stram'] + sys.argv[1:]\n"
            "runpy.run_module('stram.client.cli', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code, "launch", "specs/wordcount.yaml",
                           "-D", f"operators.reader.path={text}", "-D", f"operators.out.path={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), STRAM_HOME=str(tmp_path / "home"),
                                   PYTHONPROFILEIMPORTTIME="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SUCCEEDED" in proc.stderr
    counts: dict[str, int] = {}
    for f in out.rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            counts[row["key"]] = counts.get(row["key"], 0) + row["count"]
    assert counts == {"a": 50, "b": 100, "c": 50}  # the application ran, and ran right
    assert "HEAVY []" in proc.stderr, proc.stderr[-2000:]
    # every other process of the application printed its imports to its .out file
    imported: dict[str, set[str]] = {}
    for f in (tmp_path / "home").rglob("logs/*.out"):
        imported[f.name] = {line.rsplit("|", 1)[1].strip() for line in f.read_text().splitlines()
                            if line.startswith("import time:") and "|" in line}
    assert {"master.out", "container_000001.out"} <= set(imported), sorted(imported)
    assert all("grpc" in names for names in imported.values())  # the listing is whole
    assert {name: sorted(m for m in names if m.split(".")[0] in ("pyarrow", "numpy"))
            for name, names in imported.items()} == {name: [] for name in imported}
