"""What a Spark file sink committed: the files its ``_spark_metadata`` log lists, read as one table."""

from __future__ import annotations

import json
import re
from typing import Any

from stram.common import fs

__all__ = ["read_file_sink"]


def read_file_sink(path: str) -> Any:
    """What a Spark file sink committed under ``path``, as one ``pyarrow.Table``.

    Reads the files the sink's ``_spark_metadata`` log lists (so files of a
    batch that was being written when a query died, and written again after
    it resumed, count once), or every data file when there is no log.

    Parameters
    ----------
    path : str
        The sink's output directory (local path or URI).

    Returns
    -------
    pyarrow.Table
        Empty (no columns) when nothing was committed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = fs.join(path, "_spark_metadata")
    files: dict[str, bool] = {}
    entries = [i for i in fs.list_dir(meta) if re.fullmatch(r"\d+(\.compact)?", i.base_name)]
    if entries:
        for info in sorted(entries, key=lambda i: int(i.base_name.split(".")[0])):
            for line in fs.read_bytes(fs.join(meta, info.base_name)).decode().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("isDir"):
                    continue
                files[entry["path"]] = entry.get("action", "add") != "delete"
        paths = [p for p, alive in files.items() if alive]
    else:
        paths = [fs.join(path, i.base_name) for i in fs.list_dir(path)
                 if i.base_name.endswith(".parquet") and not i.base_name.startswith((".", "_"))]
    tables = []
    for p in sorted(paths):
        local = p[len("file:"):] if p.startswith("file:") and not p.startswith("file://") else p
        filesystem, inner = fs.resolve(local)
        tables.append(pq.read_table(inner, filesystem=filesystem))
    tables = [t for t in tables if t.num_columns]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")
