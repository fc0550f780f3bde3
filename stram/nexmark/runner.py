"""``python -m stram.nexmark run``: one query on stram, launched locally as ``stram launch`` would, to its end.

:func:`build` makes the query's :class:`~stram.flow.Flow`; :func:`run_query` compiles it (``-D``
overrides applied), launches it locally (:func:`stram.client.commands.launch_local`), follows it to
its end and returns the summary: events in the data set, result rows written, wall seconds from
launch to end (startup included) and events per second.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any, Iterable

from stram.flow import Flow
from stram.nexmark.queries import QUERIES, add_query

__all__ = ["ATTRIBUTES", "build", "run_query", "count_rows", "format_summary"]

#: A batch run's attributes: exactly-once output, checkpoints every 10 s (``-D`` changes them).
ATTRIBUTES = {"STREAMING_WINDOW_SIZE_MILLIS": 500, "CHECKPOINT_WINDOW_COUNT": 20, "PROCESSING_MODE": "EXACTLY_ONCE"}


def build(query: str, data_dir: str, out_dir: str, partitions: int = 1) -> Flow:
    """The flow running ``query`` over the data set in ``data_dir``, its results under ``out_dir``."""
    flow = Flow(f"nexmark-{query}", attributes=dict(ATTRIBUTES),
                description=f"NEXMark {query} over {data_dir} ({partitions} partition(s))")
    add_query(query, flow, os.path.abspath(data_dir), os.path.abspath(out_dir), partitions)
    return flow


def count_rows(out_dir: str) -> int:
    """Lines of the ``*.jsonl`` files under ``out_dir``."""
    total = 0
    for path in pathlib.Path(out_dir).rglob("*.jsonl"):
        with open(path, "rb") as f:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return total


def events_of(data_dir: str) -> int:
    """The data set's event count (its meta.json, else the rows of its three files)."""
    try:
        with open(os.path.join(data_dir, "meta.json")) as f:
            return int(json.load(f)["events"])
    except (OSError, ValueError, KeyError):
        import pyarrow.parquet as pq
        return sum(pq.ParquetFile(os.path.join(data_dir, f"{k}.parquet")).metadata.num_rows
                   for k in ("person", "auction", "bid"))


def run_query(query: str, data_dir: str, out_dir: str, partitions: int = 1, defines: Iterable[str] = (),
              progress: bool = True) -> dict[str, Any]:
    """Run ``query`` on stram to its end; its summary (``state`` SUCCEEDED unless it failed).

    Raises
    ------
    ValueError
        An unknown query, a data set that is not there, or an output directory that is not empty.
    """
    from stram.client.commands import launch_local
    from stram.client.follow import follow
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; stram runs {', '.join(QUERIES)}")
    for kind in ("person", "auction", "bid"):
        if not os.path.isfile(os.path.join(data_dir, f"{kind}.parquet")):
            raise ValueError(f"{data_dir} holds no {kind}.parquet (make a data set with "
                             f"'python -m stram.nexmark generate')")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ValueError(f"{out_dir} is not empty: results are counted from it; give a new or empty directory")
    os.makedirs(out_dir, exist_ok=True)
    spec = build(query, data_dir, out_dir, partitions).compile(list(defines))
    started = time.monotonic()
    run = launch_local(spec)
    if progress:
        follow(run)
    else:
        while run.poll() is None:
            run.wait_end(0.2)
    seconds = time.monotonic() - started
    state, diagnostics = run.outcome()
    events = events_of(data_dir)
    return {"query": query, "events": events, "rows": count_rows(out_dir), "seconds": round(seconds, 3),
            "events_per_second": round(events / seconds, 1) if seconds > 0 else None, "partitions": partitions,
            "state": state, "diagnostics": diagnostics, "app_id": run.app_id, "out": out_dir}


def format_summary(s: dict[str, Any]) -> str:
    """The summary as one line."""
    line = (f"nexmark {s['query']}: {s['events']:,} events, {s['rows']:,} result rows in {s['seconds']:.1f} s: "
            f"{s['events_per_second'] or 0:,.0f} events/s ({s['partitions']} partition(s), {s['app_id']} "
            f"{s['state']})")
    return line + (f": {s['diagnostics']}" if s.get("diagnostics") else "")
