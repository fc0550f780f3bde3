"""A system's NEXMark result files read back and checked against the oracle's answer, as multisets.

The expected answer is ``stram.nexmark.oracle.answer_frame(query, DIR)`` (the frame behind
``oracle.answer``). A result is every regular file under the system's output directory whose name starts
with neither ``.`` nor ``_`` (in-progress and marker files), each JSON lines, each line an object with
exactly the answer's fields. Fields a system writes as timestamps (``timestamps``: Flink's
TIMESTAMP(3) in UTC) are read back as epoch ms. The rows are compared exactly, order aside: both sides
sorted by a hash of the whole row, then compared column by column.
"""

from __future__ import annotations

import dataclasses
import io
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj

#: examples of missing and unexpected rows shown for a wrong answer
EXAMPLES = 2


@dataclasses.dataclass
class Verdict:
    ok: bool
    rows: int          # rows the system wrote
    detail: str = ""   # why it is wrong


def result_files(out_dir: str, suffix: str = "") -> list[str]:
    """The result files under ``out_dir`` (recursively, names ending in ``suffix``), in name order."""
    found = []
    for root, dirs, files in os.walk(out_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [os.path.join(root, f) for f in sorted(files) if not f.startswith((".", "_")) and f.endswith(suffix)]
    return found


def _arrow_type(dtype) -> pa.DataType:
    if pd.api.types.is_integer_dtype(dtype):
        return pa.int64()
    if pd.api.types.is_float_dtype(dtype):
        return pa.float64()
    return pa.string()


def read_result(out_dir: str, expected: pd.DataFrame, timestamps: tuple = (), suffix: str = "") -> pd.DataFrame:
    """The rows under ``out_dir`` as a frame with ``expected``'s columns and types (ValueError: a file does
    not parse, or has other fields)."""
    fields = [pa.field(c, pa.string() if c in timestamps else _arrow_type(expected[c].dtype)) for c in expected]
    schema = pa.schema(fields)
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    tables = []
    if not os.path.isdir(out_dir):
        raise ValueError(f"no output directory {out_dir}")
    for path in result_files(out_dir, suffix):
        with open(path, "rb") as f:
            data = f.read()
        if not data.strip():
            continue
        try:
            tables.append(pj.read_json(io.BytesIO(data), parse_options=parse))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ValueError(f"{os.path.relpath(path, out_dir)}: {e}") from None
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    frame = table.to_pandas()
    for name in expected.columns:
        if frame[name].isna().any():
            raise ValueError(f"field {name!r} is missing or null in {int(frame[name].isna().sum())} rows")
        if name in timestamps:
            stamps = pd.to_datetime(frame[name], format="ISO8601", utc=True)
            frame[name] = (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return frame


def normalized(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with Python-object strings and a plain index (the same types on both sides)."""
    out = {}
    for name in frame.columns:
        col = frame[name]
        if pd.api.types.is_integer_dtype(col.dtype):
            out[name] = col.to_numpy(dtype=np.int64)
        elif pd.api.types.is_float_dtype(col.dtype):
            out[name] = col.to_numpy(dtype=np.float64)
        else:
            out[name] = col.astype(object).to_numpy()
    return pd.DataFrame(out, columns=list(frame.columns))


def _by_hash(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    hashes = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    order = np.argsort(hashes, kind="stable")
    return frame.iloc[order].reset_index(drop=True), hashes[order]


def compare(expected: pd.DataFrame, got: pd.DataFrame) -> Verdict:
    """Whether ``got`` holds exactly ``expected``'s rows, as many times each (order aside)."""
    want, wh = _by_hash(normalized(expected))
    have, hh = _by_hash(normalized(got[list(expected.columns)]))
    if len(want) == len(have) and np.array_equal(wh, hh) and want.equals(have):
        return Verdict(True, len(have))
    detail = [f"{len(have):,} rows, want {len(want):,}"]
    missing = np.setdiff1d(wh, hh)
    extra = np.setdiff1d(hh, wh)
    if len(missing):
        rows = want[np.isin(wh, missing[:EXAMPLES])].head(EXAMPLES).to_dict("records")
        detail.append(f"{len(missing):,} missing, e.g. {rows}")
    if len(extra):
        rows = have[np.isin(hh, extra[:EXAMPLES])].head(EXAMPLES).to_dict("records")
        detail.append(f"{len(extra):,} unexpected, e.g. {rows}")
    if not len(missing) and not len(extra):
        detail.append("the same rows, but not as many times each")
    return Verdict(False, len(have), "; ".join(detail))


def check(out_dir: str, expected: pd.DataFrame, timestamps: tuple = (), suffix: str = "") -> Verdict:
    """Read the result under ``out_dir`` (files ending in ``suffix``) and compare it with ``expected``."""
    try:
        got = read_result(out_dir, expected, timestamps, suffix)
    except (ValueError, OSError) as e:
        return Verdict(False, 0, f"unreadable result: {e}")
    return compare(expected, got)
