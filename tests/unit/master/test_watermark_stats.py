"""Each operator's event-time watermark, from the agent's heartbeat to the master's operators page.

The agent sends a window's watermark (WindowStats.watermark) in its OperatorStats; the master
keeps the newest window's and the page shows it as epoch millis, "idle", "end" or null, with
its lag behind the master's clock. The expected rows follow the heartbeats the tests sent and
:func:`stram.common.watermarks.describe`.
"""

from __future__ import annotations

import collections
import time
import types

from statekit import StateRun, wordcount

from stram import wire as proto
from stram.agent.agent import Agent
from stram.agent.engine.node import NodeState, WindowStats
from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK, describe
from stram.master.core.reports import watermark_view

NOW = 1_700_000_005_000
SPECIAL = {"none": None, "idle": "idle", "end": "end"}


def shown(watermark: int | None) -> int | str | None:
    """What the page shows of a watermark: describe()'s word, or its millis as a number."""
    text = describe(watermark)
    return SPECIAL[text] if text in SPECIAL else int(text)


VALUES = [None, MIN_WATERMARK, IDLE, MAX_WATERMARK, 0, -1, 1_700_000_000_123, NOW + 60_000, IDLE + 2,
          MAX_WATERMARK - 1]


def test_the_page_shows_a_watermark_as_describe_words_it_and_its_lag_behind_now():
    for value in VALUES:
        want = shown(value)
        assert watermark_view(value, NOW) == (want, NOW - want if isinstance(want, int) else None), value


def _stats(window: int, watermark: int | None) -> WindowStats:
    return WindowStats(window_id=window, checkpoint=0, input_counts={"input": 1}, output_counts={"output": 1},
                       end_window_timestamp=NOW, cpu_nanos=1, queue_size=0, watermark=watermark)


def test_the_agent_sends_a_windows_watermark_and_nothing_for_an_operator_without_event_time():
    agent = Agent.__new__(Agent)
    agent.interval = 1.0
    node = types.SimpleNamespace(id=3, state=NodeState.ACTIVE, current_window=len(VALUES), saved_checkpoints=[],
                                 stats=collections.deque(_stats(w, v) for w, v in enumerate(VALUES)))
    wire = agent._operator_heartbeat(node, NOW).SerializeToString()
    got = proto.OperatorHeartbeat.FromString(wire).window_stats
    assert [(ws.has_watermark, ws.watermark) for ws in got] == [
        (False, 0) if v is None else (True, v) for v in VALUES]
    # no bytes for them without event time: the wire of an operator without it is as before
    plain = proto.OperatorStats.FromString(got[0].SerializeToString())
    assert {f.name for f, _ in plain.ListFields()}.isdisjoint({"watermark", "has_watermark"})


class Run(StateRun):
    def windows(self, name: str, first: int, *watermarks: int | None) -> proto.OperatorHeartbeat:
        """``name``'s report of windows first, first + 1, ... with these watermarks (None: none)."""
        ohb = self.report(name, first + len(watermarks) - 1)
        for k, wm in enumerate(watermarks):
            ws = ohb.window_stats.add(window_id=self.w(first + k), tuples_in=1, tuples_out=1, end_window_millis=NOW)
            if wm is not None:
                ws.watermark, ws.has_watermark = wm, True
        return ohb


def _rows(run: Run) -> tuple[dict[str, dict], int, int]:
    before = int(time.time() * 1000)
    rows = {r["label"]: r for r in run.state.operator_rows()}
    return rows, before, int(time.time() * 1000)


def _check(run: Run, sent: dict[str, int | None]) -> None:
    """Each operator's row shows the newest watermark ``sent``, its lag within the read's clock."""
    rows, before, after = _rows(run)
    for label, wm in sent.items():
        row, want = rows[label], shown(wm)
        assert row["watermark"] == want, (label, row)
        if isinstance(want, int):
            assert before - want <= row["watermark_lag_millis"] <= after - want, (label, row)
        else:
            assert row["watermark_lag_millis"] is None, (label, row)


def test_the_operators_page_shows_each_operators_newest_watermark():
    run = Run(wordcount(1))
    run.deploy()
    labels = ["reader", "split", "count", "out"]
    assert {r["label"]: (r["watermark"], r["watermark_lag_millis"]) for r in run.state.operator_rows()} == {
        label: (None, None) for label in labels}
    sent = {label: None for label in labels}

    def report(first: int, marks: dict[str, list[int | None]]) -> None:
        by_container = collections.defaultdict(list)
        for label, watermarks in marks.items():
            by_container[run.cid(label)].append(run.windows(label, first, *watermarks))
            if watermarks:
                sent[label] = watermarks[-1]
        for cid, reports in by_container.items():
            run.heartbeat(cid, *reports)
        _check(run, sent)

    t0 = 1_700_000_000_000
    report(1, {"reader": [t0, t0 + 500, t0 + 1000], "split": [t0, t0 + 500], "count": [None, None, None],
               "out": [MIN_WATERMARK]})
    report(4, {"reader": [IDLE], "split": [t0 + 1000, IDLE], "count": [t0 - 1], "out": [None]})
    report(6, {"reader": [], "split": [], "count": [], "out": []})  # no windows: the newest stays
    report(6, {"reader": [MAX_WATERMARK], "split": [MAX_WATERMARK], "count": [MAX_WATERMARK, None],
               "out": [t0, MAX_WATERMARK]})
    assert {label: shown(wm) for label, wm in sent.items()} == {
        "reader": "end", "split": "end", "count": None, "out": "end"}
