"""DataGenerator in process: its records against a plain-Python oracle, restarts, partitions, watermarks."""

from __future__ import annotations

import pickle
import random

import pytest

from stram.common.watermarks import MAX_WATERMARK
from stram.operator import FatalError, OperatorContext, ShutdownException
from stram.operators.generate import DataGenerator


def oracle(n: int, seed: int = 0, keys: int = 100, start_ms: int = 0, interval_ms: int = 10,
           disorder_ms: int = 0) -> dict:
    """Record n as the operator's documentation defines it, computed step by step."""
    mask = 2 ** 64 - 1
    z = (seed * 1_000_003 + n) * 0x9E3779B97F4A7C15 % 2 ** 64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % 2 ** 64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % 2 ** 64
    h = (z ^ (z >> 31)) & mask
    back = (h >> 44) % (disorder_ms + 1) if disorder_ms else 0
    return {"key": "k" + str(h % keys), "value": (h >> 32) % 1000, "ts": start_ms + n * interval_ms - back, "seq": n}


class Run:
    """A generator driven window by window, as the engine would, with its watermarks (monotone, as the
    engine keeps them) noted per window."""

    def __init__(self, part: int = 0, parts: int = 1, state: dict | None = None, **props) -> None:
        self.op = DataGenerator()
        for k, v in props.items():
            setattr(self.op, k, v)
        if state is not None:
            self.op.set_state(state)
        self.out: list = []
        self.windows: list[tuple[list, int | None]] = []  # (records, watermark after the window)
        self._wm: int | None = None
        self.ended = False
        self.op.output.emit_batch = self.out.extend
        self.op.setup(OperatorContext(id=1, name="gen", partition_index=part, partition_count=parts,
                                      emit_watermark=self._watermark))

    def _watermark(self, value: int) -> None:
        if self._wm is None or value > self._wm:
            self._wm = value

    def window(self, calls: int = 3) -> list:
        before = len(self.out)
        self.op.begin_window(len(self.windows) + 1)
        try:
            for _ in range(calls):
                self.op.emit_tuples()
        except ShutdownException:
            self.ended = True
        self.op.end_window()
        got = self.out[before:]
        self.windows.append((got, self._wm))
        return got

    def state(self) -> dict:
        return pickle.loads(pickle.dumps(self.op.get_state()))


def test_records_are_the_documented_function_of_seed_and_sequence():
    props = dict(count=5000, seed=42, keys=7, start_ms=1_000, interval_ms=3, disorder_ms=25)
    run = Run(batch=333, **props)
    while not run.ended:
        run.window()
    expected = [oracle(n, **{k: v for k, v in props.items() if k != "count"}) for n in range(5000)]
    assert run.out == expected
    assert run.windows[-1][1] == MAX_WATERMARK
    assert {r["key"] for r in run.out} <= {f"k{i}" for i in range(7)}


def test_a_restart_from_a_checkpoint_emits_exactly_the_same_records():
    rng = random.Random(5)
    props = dict(count=20_000, seed=3, disorder_ms=40, records_per_window=700, batch=256)
    whole = Run(**props)
    while not whole.ended:
        whole.window()
    got: list = []
    state = None
    for _ in range(30):
        run = Run(state=state, **props)
        since: list = []
        for _ in range(rng.randrange(1, 5)):
            since += run.window(calls=rng.randrange(1, 4))
            if run.ended:
                break
            if rng.random() < 0.5:
                state, got, since = run.state(), got + since, []
        if run.ended:
            got += since
            break
    else:
        pytest.fail("the generator did not end")
    assert got == whole.out


def test_no_record_is_older_than_a_watermark_already_declared():
    run = Run(count=30_000, disorder_ms=300, interval_ms=1, records_per_window=500, batch=128)
    declared = None
    while not run.ended:
        for rec in run.window():
            assert declared is None or rec["ts"] >= declared, (rec, declared)
        declared = run.windows[-1][1]
    shifts = [r["seq"] * 1 - r["ts"] for r in run.out]
    assert min(shifts) >= 0 and max(shifts) <= 300 and len(set(shifts)) > 100  # disorder used, and bounded


def test_partitions_emit_disjoint_parts_of_the_same_sequence():
    count, parts = 10_001, 3
    seen = []
    for index in range(parts):
        run = Run(part=index, parts=parts, count=count, seed=9)
        while not run.ended:
            run.window()
        assert all(r["seq"] % parts == index for r in run.out)
        seen += run.out
    assert sorted(seen, key=lambda r: r["seq"]) == [oracle(n, seed=9) for n in range(count)]


def test_rate_limits_records_to_the_wall_clock(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("stram.operators.generate.time.monotonic", lambda: clock[0])
    run = Run(rate=1000.0, count=None)
    assert run.window() == []
    clock[0] += 0.25
    assert len(run.window()) == 250
    clock[0] += 0.0105
    assert len(run.window()) == 10
    assert [r["seq"] for r in run.out] == list(range(260))


def test_count_zero_ends_at_once_with_the_end_watermark():
    run = Run(count=0)
    assert run.window() == [] and run.ended and run.windows[-1][1] == MAX_WATERMARK


@pytest.mark.parametrize("name, value", [("keys", 0), ("disorder_ms", -1), ("rate", 0.0), ("batch", 0),
                                         ("interval_ms", -5)])
def test_bad_properties_are_fatal_and_named(name, value):
    with pytest.raises(FatalError, match=name):
        Run(**{name: value})
