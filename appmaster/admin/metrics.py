"""Prometheus metrics of a running application, served at the admin server's ``/metrics``.

:class:`StramCollector` is a ``prometheus_client`` custom collector: at each
scrape it takes one consistent snapshot of the master's state (one hold of
the master's lock, through the same rows the admin API serves, so the two
agree) and turns it into metric families. Nothing is counted twice: the
counters are the master's own (:class:`~stram.master.core.reports.OperatorTotals`,
``recoveries``, ``restarts``). Counters belong to the master attempt: a new
attempt (the master restarted) starts them from zero, which Prometheus's
``rate()`` and ``increase()`` treat as a counter reset. The names and labels
are documented in ``docs/metrics.md``.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from stram.common.windows import window_index, window_millis
from stram.master.core.reports import in_chunks, operator_rows

__all__ = ["StramCollector", "metrics_snapshot", "families", "registry_for", "exposition", "CONTENT_TYPE"]

#: Labels of every per-operator series.
OPERATOR_LABELS = ["app", "operator", "partition", "id"]


def metrics_snapshot(state: Any, now_millis: int) -> dict[str, Any]:
    """What one scrape shows but the operators, read from ``state`` (the caller holds the master's
    lock): plain data. ``operators`` is the list of operator objects, to be copied a chunk at a
    time (:func:`~stram.master.core.reports.in_chunks`) and turned into rows without the lock."""
    return {"app": state.app_id, "name": state.spec.name, "state": state.state, "attempt": state.attempt,
            "started_millis": state.started_millis, "committed": state.committed,
            "window_millis": int(state.attr("STREAMING_WINDOW_SIZE_MILLIS")),
            "recoveries": state.recoveries, "heartbeats": state.heartbeats, "now_millis": now_millis,
            "operators": list(state.plan.operators.values()), "containers": state.container_rows()}


def _operator_labels(app: str, row: dict[str, Any]) -> list[str]:
    partition = "" if row.get("partition") is None else str(row["partition"])
    return [app, row["name"], partition, str(row["id"])]


def families(snap: dict[str, Any]) -> Iterator[Metric]:
    """The metric families of one snapshot (:func:`metrics_snapshot`)."""
    app = snap["app"]
    now = snap["now_millis"]
    info = InfoMetricFamily("stram_application", "The application: its name, state and master attempt.",
                            labels=["app"])
    info.add_metric([app], {"name": snap["name"], "state": snap["state"], "attempt": str(snap["attempt"])})
    yield info
    g = GaugeMetricFamily("stram_application_start_time_seconds", "When the application started (Unix time).",
                          labels=["app"])
    g.add_metric([app], snap["started_millis"] / 1000)
    yield g
    committed, size = snap["committed"], snap["window_millis"]
    g = GaugeMetricFamily("stram_committed_window",
                          "The committed window's index (windows since the start; -1: none committed yet). "
                          "It never goes backward.", labels=["app"])
    g.add_metric([app], -1 if window_index(committed) == 0xFFFFFFFF else window_index(committed))
    yield g
    g = GaugeMetricFamily("stram_committed_window_lag_seconds",
                          "Seconds between the end of the committed window and now.", labels=["app"])
    g.add_metric([app], max(0.0, (now - window_millis(committed + 1, size)) / 1000))
    yield g
    c = CounterMetricFamily("stram_recoveries", "Containers lost or restarted whose operators were redeployed.",
                            labels=["app"])
    c.add_metric([app], snap["recoveries"])
    yield c
    c = CounterMetricFamily("stram_heartbeats", "Container heartbeats the master processed.", labels=["app"])
    c.add_metric([app], snap["heartbeats"])
    yield c
    yield from _operator_families(app, snap["operators"])
    yield from _container_families(app, snap["containers"], now)


def _operator_families(app: str, rows: list[dict[str, Any]]) -> Iterator[Metric]:
    counters = [
        ("stram_operator_tuples_processed", "tuples_processed_total",
         "Tuples the operator took in on its input ports (an operator without input streams: tuples it emitted)."),
        ("stram_operator_tuples_in", "tuples_in_total", "Tuples taken in on all input ports."),
        ("stram_operator_tuples_emitted", "tuples_out_total", "Tuples emitted on all output ports."),
        ("stram_operator_windows", "windows_total", "Streaming windows the operator finished."),
        ("stram_operator_cpu_seconds", "cpu_seconds_total", "CPU time of the operator's thread."),
        ("stram_operator_restarts", "restarts", "Times the operator was redeployed after a failure."),
    ]
    for name, key, doc in counters:
        c = CounterMetricFamily(name, doc + " Replayed windows count again.", labels=OPERATOR_LABELS)
        for row in rows:
            c.add_metric(_operator_labels(app, row), row[key])
        yield c
    gauges = [
        ("stram_operator_tuples_per_second", lambda r: r["tuples_per_sec"],
         "Throughput over the operator's last reported windows."),
        ("stram_operator_current_window", lambda r: window_index(r["current_window"]),
         "Index of the last window the operator finished."),
        ("stram_operator_blocked", lambda r: 1 if r["blocked"] else 0,
         "1 while the operator is blocked (no window finished for TIMEOUT_WINDOW_COUNT windows)."),
    ]
    for name, value, doc in gauges:
        g = GaugeMetricFamily(name, doc, labels=OPERATOR_LABELS)
        for row in rows:
            g.add_metric(_operator_labels(app, row), value(row))
        yield g
    states = GaugeMetricFamily("stram_operators", "Physical operators by state.", labels=["app", "state"])
    for state in sorted({r["state"] for r in rows}):
        states.add_metric([app, state], sum(1 for r in rows if r["state"] == state))
    yield states


def _container_families(app: str, rows: list[dict[str, Any]], now: int) -> Iterator[Metric]:
    states = GaugeMetricFamily("stram_containers", "Containers by state.", labels=["app", "state"])
    for state in sorted({r["state"] for r in rows}):
        states.add_metric([app, state], sum(1 for r in rows if r["state"] == state))
    yield states
    running = [r for r in rows if r["state"] == "RUNNING"]
    age = GaugeMetricFamily("stram_container_heartbeat_age_seconds",
                            "Seconds since the container's last heartbeat (running containers).",
                            labels=["app", "container"])
    memory = GaugeMetricFamily("stram_container_memory_used_bytes", "Resident memory of the container process.",
                               labels=["app", "container"])
    held = GaugeMetricFamily("stram_buffer_server_bytes",
                             "Bytes a container's buffer server holds for a publisher, in memory or spilled to disk.",
                             labels=["app", "container", "publisher", "tier"])
    windows = GaugeMetricFamily("stram_buffer_server_windows", "Windows a buffer server holds for a publisher.",
                                labels=["app", "container", "publisher"])
    for r in running:
        age.add_metric([app, r["id"]], max(0.0, (now - r["last_heartbeat_millis"]) / 1000))
        memory.add_metric([app, r["id"]], (r["memory_mb_used"] or 0) * (1 << 20))
        for publisher, p in sorted((r["buffer_server_publishers"] or {}).items()):
            held.add_metric([app, r["id"], publisher, "memory"], p["memory_bytes"])
            held.add_metric([app, r["id"], publisher, "spilled"], p["spilled_bytes"])
            windows.add_metric([app, r["id"], publisher], p["windows"])
    yield from (age, memory, held, windows)


class StramCollector(Collector):
    """Reads the master's state at each scrape (no second copy of any counter).

    Parameters
    ----------
    master:
        Anything with ``lock`` (the master's lock) and ``state`` (its
        :class:`~stram.master.core.state.MasterState`): the :class:`~stram.master.process.master.AppMaster`.
    clock:
        Wall-clock milliseconds (tests pass their own).
    """

    def __init__(self, master: Any, clock: Any = None) -> None:
        self.master = master
        self.clock = clock or (lambda: int(time.time() * 1000))

    def collect(self) -> Iterator[Metric]:
        master = self.master
        with master.lock:
            snap = metrics_snapshot(master.state, self.clock())
        # copied a chunk at a time (20,000 operators at once held the lock 0.1-0.2 s), rows without it
        snap["operators"] = [row for copies in in_chunks(master.lock, snap["operators"], master.state.operator_copies)
                             for row in operator_rows(copies)]
        return families(snap)

    def describe(self) -> list[Metric]:
        return []  # registering must not take the master's lock


def registry_for(master: Any, clock: Any = None, process: bool = True) -> CollectorRegistry:
    """A registry with the application's collector (and the master process's own metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StramCollector(master, clock))
    if process:
        from prometheus_client import PlatformCollector, ProcessCollector
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus's text format."""
    return generate_latest(registry)
