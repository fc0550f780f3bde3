"""Containers keep pyarrow from importing pandas when no operator of theirs uses it.

Each case runs in a fresh interpreter: pyarrow checks for pandas once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("pandas")

REPORT = """
import json, sys
import pyarrow as pa, pyarrow.compute as pc
pc.equal(pa.array([1, 2]), 1)            # conversions that make pyarrow look for pandas
loaded = "pandas" in sys.modules
import pandas as pd
first_series_nulls = pa.array(pd.Series([1.0, None])).null_count
table = pa.Table.from_pandas(pd.DataFrame({"a": [1.0, None]}))   # pyarrow's explicit pandas functions
print(json.dumps({"pandas_loaded": loaded, "settled": settled, "from_pandas": table.column("a").to_pylist(),
                  "to_pandas": table.to_pandas()["a"].isna().tolist(),
                  "first_series_nulls": first_series_nulls, "series_null_count": pa.array(pd.Series([1.0, None])).null_count}))
"""


def run(before: str, env: dict | None = None) -> dict:
    code = "from stram.agent.engine import arrowprobe\n" + before + REPORT
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, **(env or {})))
    return json.loads(out.stdout)


def test_settled_after_pyarrow_was_imported_pandas_stays_out():
    got = run("import pyarrow\nsettled = arrowprobe.settle()\n")
    assert got["settled"] is True and got["pandas_loaded"] is False
    assert got["from_pandas"] == [1.0, None] and got["to_pandas"] == [False, True]
    assert got["first_series_nulls"] == 0  # the documented difference: a Series read as its NumPy array
    assert got["series_null_count"] == 1  # until a pandas function of pyarrow ran: then as usual


def test_settled_before_pyarrow_is_imported_it_settles_right_after():
    got = run("settled = arrowprobe.settle()\nimport sys; assert 'pyarrow' not in sys.modules\n")
    assert got["settled"] is False and got["pandas_loaded"] is False
    assert got["from_pandas"] == [1.0, None]


def test_an_operator_that_imported_pandas_keeps_pyarrows_pandas_integration():
    got = run("import pandas, pyarrow\nsettled = arrowprobe.settle()\n")
    assert got["settled"] is False and got["pandas_loaded"] is True
    assert got["first_series_nulls"] == 1


def test_the_environment_can_keep_it():
    got = run("import pyarrow\nsettled = arrowprobe.settle()\n", env={"STRAM_PYARROW_PANDAS": "1"})
    assert got["settled"] is False and got["pandas_loaded"] is True
    assert got["first_series_nulls"] == 1
