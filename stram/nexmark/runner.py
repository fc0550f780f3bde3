"""``python -m stram.nexmark run``: one query on stram, launched locally as ``stram launch`` would, to its end.

:func:`build` makes the query's :class:`~stram.flow.Flow`; :func:`run_query` compiles it (``-D``
overrides applied), launches it locally (:func:`stram.client.commands.launch_local`), follows it to
its end and returns the summary: events in the data set, result rows written, wall seconds from
launch to end (startup included) and events per second. With a ``rate`` the sources replay the data
set at that many events per second of wall time, and the summary lists when each source partition
emitted its first row (``sources``: the moments the replay's schedule counts from).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any, Iterable

from stram.flow import Flow
from stram.nexmark.queries import QUERIES, Sources, add_query

__all__ = ["ATTRIBUTES", "build", "run_query", "count_rows", "format_summary", "source_starts"]

#: A batch run's attributes: exactly-once output, checkpoints every 10 s (``-D`` changes them). Windows of
#: 100 ms: a join or window operator holds its input until the window's end brings the watermark, so a
#: source running ahead fills the state with a window's worth of rows (bench/README.md, nexmark).
#: A buffer server keeps 16 MiB of a publisher in memory (the rest spills) and lets it run at most 16 MiB
#: ahead of its subscribers: a source that races ahead holds less, at no cost in throughput.
ATTRIBUTES = {"STREAMING_WINDOW_SIZE_MILLIS": 100, "CHECKPOINT_WINDOW_COUNT": 100, "PROCESSING_MODE": "EXACTLY_ONCE",
              "BUFFER_MEMORY_MB": 16, "BUFFER_LAG_MB": 16}


def build(query: str, data_dir: str, out_dir: str, partitions: int = 1, rate: float | None = None,
          start_report: str | None = None) -> Flow:
    """The flow running ``query`` over the data set in ``data_dir``, its results under ``out_dir``;
    ``rate``: replayed at that many events per second (``start_report``: see :class:`Sources`)."""
    paced = f", replayed at {rate:g} events/s" if rate else ""
    flow = Flow(f"nexmark-{query}", attributes=dict(ATTRIBUTES),
                description=f"NEXMark {query} over {data_dir} ({partitions} partition(s){paced})")
    data_dir = os.path.abspath(data_dir)
    sources = Sources(flow, data_dir, partitions, rate=rate, start_report=start_report)
    add_query(query, flow, data_dir, os.path.abspath(out_dir), partitions, sources)
    return flow


def source_starts(report_dir: str) -> list[dict[str, Any]]:
    """The start notes the paced sources wrote into ``report_dir`` (operator, partition, path, rate,
    ``started`` in epoch seconds), by operator and partition."""
    notes = []
    for path in sorted(pathlib.Path(report_dir).glob("*.json")):
        with open(path) as f:
            notes.append(json.load(f))
    return sorted(notes, key=lambda n: (n["operator"], n["partition"]))


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
              progress: bool = True, poll_seconds: float = 0.1, rate: float | None = None) -> dict[str, Any]:
    """Run ``query`` on stram to its end; its summary (``state`` SUCCEEDED unless it failed). ``rate``:
    replay the data set at that many events per second of wall time (None: as fast as it goes).

    Raises
    ------
    ValueError
        An unknown query, a data set that is not there, an output directory that is not empty, or a
        spec that ``stram launch`` refused (its message).
    """
    from stram.common.apps import TERMINAL, find_app
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; stram runs {', '.join(QUERIES)}")
    for kind in ("person", "auction", "bid"):
        if not os.path.isfile(os.path.join(data_dir, f"{kind}.parquet")):
            raise ValueError(f"{data_dir} holds no {kind}.parquet (make a data set with "
                             f"'python -m stram.nexmark generate')")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ValueError(f"{out_dir} is not empty: results are counted from it; give a new or empty directory")
    if rate is not None and not rate > 0:
        raise ValueError(f"the replay rate must be > 0 events per second, not {rate}")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stram-nexmark-") as tmp:
        reports = os.path.join(tmp, "starts")
        spec = build(query, data_dir, out_dir, partitions, rate, reports if rate else None).compile()
        path = os.path.join(tmp, f"nexmark-{query}.yaml")
        with open(path, "w") as f:
            f.write(spec.to_yaml())
        args = [a for d in defines for a in ("-D", d)]
        started = time.monotonic()
        app_id = _launch_detached([path, *args])
        shown = 0.0
        while (app := find_app(app_id)).get("state") not in TERMINAL:
            time.sleep(poll_seconds)
            elapsed = time.monotonic() - started
            if progress and elapsed - shown >= 5:
                shown = elapsed
                print(f"[{elapsed:6.1f}s] {app_id} {app.get('state')}", file=sys.stderr, flush=True)
        seconds = time.monotonic() - started
        starts = source_starts(reports) if os.path.isdir(reports) else []
        shutil.rmtree(reports, ignore_errors=True)
    events = events_of(data_dir)
    summary = {"query": query, "events": events, "rows": count_rows(out_dir), "seconds": round(seconds, 3),
               "events_per_second": round(events / seconds, 1) if seconds > 0 else None, "partitions": partitions,
               "state": app.get("state"), "diagnostics": app.get("diagnostics") or "", "app_id": app_id,
               "out": out_dir}
    if rate is not None:
        summary.update(rate=rate, sources=starts)
    return summary


def _launch_detached(args: list[str]) -> str:
    """``stram launch ARGS --detach`` in this process (no second interpreter to start); the application id."""
    import contextlib
    import io

    from stram.client import cli
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["launch", *args, "--detach"])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code if isinstance(exc.code, int) else 2
    lines = out.getvalue().strip().splitlines()
    if code != 0 or not lines:
        raise ValueError(f"stram launch refused the query: {err.getvalue().strip() or out.getvalue().strip()}")
    return lines[-1]


def format_summary(s: dict[str, Any]) -> str:
    """The summary as one line."""
    paced = f", replayed at {s['rate']:,g} events/s" if s.get("rate") else ""
    line = (f"nexmark {s['query']}: {s['events']:,} events, {s['rows']:,} result rows in {s['seconds']:.1f} s: "
            f"{s['events_per_second'] or 0:,.0f} events/s ({s['partitions']} partition(s){paced}, {s['app_id']} "
            f"{s['state']})")
    return line + (f": {s['diagnostics']}" if s.get("diagnostics") else "")
