"""Prometheus metrics and stack traces on demand, on a MasterState driven through events.

Pure: the state is driven with hand-written heartbeats (``tests/kits/statekit.py``),
the collector reads it through a real ``prometheus_client`` registry, and the
text it serves is parsed back with ``prometheus_client``'s own parser. The
expected numbers are computed here from the reports the test sent.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families


from statekit import START_MILLIS, StateRun, container_heartbeat  # noqa: E402

from stram import wire as proto  # noqa: E402
from stram.common.stacks import format_thread, thread_stacks  # noqa: E402
from stram.master.admin import metrics  # noqa: E402
from stram.master.core.events import ContainerNotRunning, StackTraceRequest, UnknownContainer  # noqa: E402
from stram.master.core.state import LaunchContainer, Reply  # noqa: E402

#   src ──▶ up ──▶ out                       (three containers)
LINEAR = """
name: linear
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [out.input]}
"""
ACTIVE = proto.OperatorHeartbeat.ACTIVE
#: Tuples per window in these tests: src emits 3, up takes 3 and emits 3, out takes 3.
PER_WINDOW = 3


def scrape(state, now: int) -> dict:
    """Scrape a state through a real registry; {(sample name, frozenset(labels)): value}."""
    registry = metrics.registry_for(SimpleNamespace(lock=threading.RLock(), state=state), clock=lambda: now,
                                    process=False)
    text = metrics.exposition(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, sample: str, **labels: str) -> float:
    matches = [v for (n, ls), v in samples.items() if n == sample and set(labels.items()) <= ls]
    assert len(matches) == 1, (sample, labels, matches)
    return matches[0]


class Run(StateRun):
    """StateRun on a realistic clock, whose reports carry window stats."""

    def __init__(self, text: str, totals: bool = False) -> None:
        super().__init__(text)
        self.now = START_MILLIS
        #: send each window's totals (as the agent does) and no ports, else only the ports
        self.totals = totals
        #: container id -> when it last heartbeated (what the test sent)
        self.sent: dict[str, int] = {}

    def windows(self, name: str, first: int, last: int, *saved: int) -> proto.OperatorHeartbeat:
        """``name``'s report of windows first..last, PER_WINDOW tuples in (not src) and out (not out)."""
        ohb = self.report(name, last, *saved)
        for k in range(first, last + 1):
            ws = ohb.window_stats.add(window_id=self.w(k), cpu_time_used=1_000_000)
            if self.totals:  # totals only: a master that walked the ports would count nothing
                ws.tuples_in = 0 if name == "src" else PER_WINDOW
                ws.tuples_out = 0 if name == "out" else PER_WINDOW
                ws.end_window_millis = self.now
                continue
            if name != "src":
                ws.input_ports.add(id="input", tuple_count=PER_WINDOW, end_window_timestamp=self.now)
            if name != "out":
                ws.output_ports.add(id="output", tuple_count=PER_WINDOW, end_window_timestamp=self.now)
        return ohb

    def heartbeat(self, container_id: str, *reports: proto.OperatorHeartbeat):
        result = super().heartbeat(container_id, *reports)
        self.sent[container_id] = self.now
        return result


@pytest.mark.parametrize("totals", [False, True], ids=["ports", "totals"])
def test_counters_agree_with_the_admin_rows_and_never_go_backward_across_a_recovery(totals):
    """The same counters whether the agent sends each window's totals or only its ports."""
    run = Run(LINEAR, totals)
    run.deploy()
    c1, c2, c3 = run.cid("src"), run.cid("up"), run.cid("out")
    for name in ("src", "up", "out"):
        run.heartbeat(run.cid(name), run.windows(name, 1, 10, 5))
    assert run.state.committed == run.w(5)
    # a retried heartbeat (the same reports again) counts nothing twice
    run.heartbeat(c2, run.windows("up", 1, 10, 5))
    before = scrape(run.state, run.now)
    for name in ("src", "up", "out"):
        labels = {"operator": name, "app": "app-test"}
        assert value(before, "stram_operator_windows_total", **labels) == 10
        expected_processed = 10 * PER_WINDOW
        assert value(before, "stram_operator_tuples_processed_total", **labels) == expected_processed
        assert value(before, "stram_operator_tuples_emitted_total", **labels) == (0 if name == "out" else 30)
        assert value(before, "stram_operator_cpu_seconds_total", **labels) == pytest.approx(0.010)

    # up's container dies: up moves to a new container, out is redeployed in place; both
    # resume after window 5 and replay 6..12 (the agents' own counts start afresh)
    (launch,) = [i for i in run.exited(c2) if isinstance(i, LaunchContainer)]
    c4 = launch.container_id
    run.heartbeat(c4)
    run.heartbeat(c3)
    run.heartbeat(c4, run.windows("up", 6, 12))
    run.heartbeat(c3, run.windows("out", 6, 12))
    run.heartbeat(c1, run.windows("src", 11, 12))
    after = scrape(run.state, run.now)
    for name, windows in (("src", 12), ("up", 10 + 7), ("out", 10 + 7)):
        labels = {"operator": name}
        assert value(after, "stram_operator_windows_total", **labels) == windows
        assert value(after, "stram_operator_tuples_processed_total", **labels) == windows * PER_WINDOW
        for sample in ("stram_operator_windows_total", "stram_operator_tuples_processed_total",
                       "stram_operator_tuples_emitted_total", "stram_operator_cpu_seconds_total"):
            assert value(after, sample, **labels) >= value(before, sample, **labels), (name, sample)
    assert value(after, "stram_recoveries_total") == 1
    assert value(after, "stram_operator_restarts_total", operator="up") == 1
    assert value(after, "stram_operator_restarts_total", operator="src") == 0

    # the admin API's rows and the scrape are the same numbers
    for row in run.state.operator_rows():
        labels = {"operator": row["name"], "id": str(row["id"]), "partition": str(row["partition"])}
        assert value(after, "stram_operator_tuples_processed_total", **labels) == row["tuples_processed_total"]
        assert value(after, "stram_operator_tuples_emitted_total", **labels) == row["tuples_out_total"]
        assert value(after, "stram_operator_windows_total", **labels) == row["windows_total"]
        assert value(after, "stram_operator_restarts_total", **labels) == row["restarts"]
    assert value(after, "stram_containers", state="LOST") == 1
    assert value(after, "stram_containers", state="RUNNING") == 3


def test_committed_window_its_lag_heartbeat_ages_and_buffer_bytes():
    run = Run(LINEAR)
    samples = scrape(run.state, START_MILLIS + 4_000)
    assert value(samples, "stram_committed_window") == -1  # nothing committed yet
    assert value(samples, "stram_committed_window_lag_seconds") == pytest.approx(4.0)
    run.deploy()
    for name in ("src", "up", "out"):
        run.heartbeat(run.cid(name), run.windows(name, 1, 12, 4, 8))
    hb = container_heartbeat(run.cid("src"), [run.windows("src", 13, 13)])
    hb.publishers.add(publisher=f"{run.id('src')}.output", memory_bytes=12_345, spilled_bytes=678, windows=9)
    run.now += 1000
    run.state.heartbeat(hb, run.now)
    run.sent[run.cid("src")] = run.now
    assert run.state.committed == run.w(8)
    now = run.now + 1_500
    samples = scrape(run.state, now)
    # window w(8) has index 7 and ends 8 windows of 500 ms after the start
    assert value(samples, "stram_committed_window") == 7
    assert value(samples, "stram_committed_window_lag_seconds") == pytest.approx(
        (now - (START_MILLIS + 8 * 500)) / 1000)
    for cid, at in run.sent.items():
        assert value(samples, "stram_container_heartbeat_age_seconds", container=cid) == \
            pytest.approx((now - at) / 1000)
    publisher = {"container": run.cid("src"), "publisher": f"{run.id('src')}.output"}
    assert value(samples, "stram_buffer_server_bytes", tier="memory", **publisher) == 12_345
    assert value(samples, "stram_buffer_server_bytes", tier="spilled", **publisher) == 678
    assert value(samples, "stram_buffer_server_windows", **publisher) == 9
    assert value(samples, "stram_application_info", app="app-test", state="RUNNING", name="linear") == 1


def test_partitions_and_unifiers_are_separate_series():
    run = Run("""
name: parts
operators:
  src: {class: spec_fixture_ops:Source}
  up: {class: spec_fixture_ops:Upper, partitions: 3}
  out: {class: spec_fixture_ops:Sink}
streams:
  a: {from: src.output, to: [up.input]}
  b: {from: up.output, to: [out.input]}
""")
    samples = scrape(run.state, START_MILLIS)
    series = [dict(ls) for (n, ls) in samples if n == "stram_operator_windows_total"]
    keys = [(s["operator"], s["partition"], s["id"]) for s in series]
    assert len(keys) == len(set(keys)) == len(run.state.plan.operators)
    assert sorted(s["partition"] for s in series if s["operator"] == "up") == ["0", "1", "2"]


# ---------------------------------------------------------------- stack traces on demand

def stack_json(*functions: str, operator: int | None = None) -> str:
    return json.dumps({"threads": [{"name": "op", "ident": 1, "daemon": True, "operator": operator,
                                    "frames": [{"file": "/x.py", "line": i + 1, "function": f, "code": ""}
                                               for i, f in enumerate(functions)]}]})


def test_a_stack_trace_request_is_carried_by_responses_until_the_container_answers():
    run = Run(LINEAR)
    with pytest.raises(UnknownContainer):
        run.state.handle(StackTraceRequest("container_999", run.now))
    with pytest.raises(ContainerNotRunning):  # launched, not heartbeating yet
        run.state.handle(StackTraceRequest(run.cid("up"), run.now))
    run.deploy()
    c_up, c_out = run.cid("up"), run.cid("out")
    (reply,) = run.state.handle(StackTraceRequest(c_up, run.now))
    assert isinstance(reply, Reply)
    seq = reply.value
    assert run.state.stack_trace(c_up, seq) is None
    assert not run.heartbeat(c_out, run.report("out"))[0].stack_trace_required  # only that container
    assert run.heartbeat(c_up, run.report("up"))[0].stack_trace_required
    assert run.heartbeat(c_up, run.report("up"))[0].stack_trace_required  # again, until it answers
    hb = container_heartbeat(c_up, [run.report("up")])
    hb.stack_trace = stack_json("run", "process_input", operator=run.id("up"))
    response, _ = run.state.heartbeat(hb, run.now + 10)
    assert not response.stack_trace_required
    trace = run.state.stack_trace(c_up, seq)
    assert trace["container"] == c_up and trace["millis"] == run.now + 10
    assert [f["function"] for f in trace["threads"][0]["frames"]] == ["run", "process_input"]
    assert 'File "/x.py", line 2, in process_input' in format_thread(trace["threads"][0])
    # a new request is not answered by the old trace
    (reply,) = run.state.handle(StackTraceRequest(c_up, run.now))
    assert run.state.stack_trace(c_up, reply.value) is None
    # an agent sending nonsense does not hurt the master
    run.heartbeat(c_up, run.report("up"))
    hb.stack_trace = "{not json"
    run.state.heartbeat(hb, run.now + 20)
    assert "unreadable stack trace" in run.state.stack_trace(c_up, reply.value)["threads"][0]["name"]
    # a container that dies while a request waits will never answer
    (reply,) = run.state.handle(StackTraceRequest(c_out, run.now))
    run.exited(c_out)
    with pytest.raises(ContainerNotRunning):
        run.state.stack_trace(c_out, reply.value)


def test_thread_stacks_show_the_frame_an_operator_thread_sleeps_in():
    started = threading.Event()
    stop = threading.Event()

    def process_input() -> None:
        started.set()
        stop.wait(30)  # the line the stack must show

    thread = threading.Thread(target=process_input, name="op-42-sleepy", daemon=True)
    thread.start()
    started.wait(5)
    try:
        stacks = json.loads(json.dumps(thread_stacks({thread.ident: 42})))
    finally:
        stop.set()
    (mine,) = [t for t in stacks["threads"] if t["operator"] == 42]
    assert mine["name"] == "op-42-sleepy" and mine["daemon"] is True
    functions = [f["function"] for f in mine["frames"]]
    assert "process_input" in functions
    frame = mine["frames"][functions.index("process_input")]
    assert frame["file"] == __file__ and frame["code"] == "stop.wait(30)  # the line the stack must show"
    main = [t for t in stacks["threads"] if t["ident"] == threading.main_thread().ident]
    assert main and main[0]["frames"][-1]["function"] == "thread_stacks"
    assert stacks["threads"][0]["operator"] == 42  # operator threads first
    time.sleep(0)
