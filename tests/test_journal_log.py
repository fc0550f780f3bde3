"""The journal's snapshot and log (appmaster/journallog.py) restore the live state.

Pure tests on the local file system: drawn applications and event sequences
(tests/randomplans.py) drive a MasterState; the :class:`JournalWriter`
journals after every event, as the master does before answering. After every
prefix of the sequence, the journal read back (snapshot, then its log)
equals the live state's full snapshot, and a restarted master attempt resumes
from it. Compaction, a write cut short and a failed write are covered.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "specdata"))

from randomplans import Driver, handle, new_state, random_spec  # noqa: E402
from appmaster import journal, journallog  # noqa: E402
from appmaster.spec import AppSpec  # noqa: E402
from appmaster.state import MasterState, Start  # noqa: E402


def _live(state: MasterState) -> dict:
    return json.loads(journal.encode(state.snapshot()))


def _read(app_path: str) -> dict:
    doc = journallog.read_journal(app_path)
    assert doc is not None
    doc.pop("log_generation")
    return doc


def _drive(seed: int, events: int, app_path: str, compact: int | None = None):
    """(state, writer, text) after each event, journaled."""
    rng = random.Random(seed)
    text = random_spec(rng)
    state = new_state(text)
    writer = journallog.JournalWriter(app_path)
    if compact is not None:
        writer.min_compact_bytes = writer.compact_bytes = compact
    handle(state, Start(0))
    writer.write(state)
    yield state, writer, text
    driver = Driver(state, rng)
    for _ in range(events):
        for event in driver.events():
            out = handle(state, event)
            if out is not None:
                driver.follow(event, out)
        writer.write(state)
        yield state, writer, text


@pytest.mark.parametrize("block", range(3))
def test_journal_replayed_after_every_prefix_restores_the_live_state(tmp_path, block: int) -> None:
    """150 drawn applications (fixed seeds), 60 events each; a third compact often."""
    lines = snapshots = 0
    for seed in range(block * 50, block * 50 + 50):
        app_path = f"file://{tmp_path}/app-{seed}"
        for step, (state, writer, text) in enumerate(_drive(seed, 60, app_path, 4096 if seed % 3 == 0 else None)):
            assert _read(app_path) == _live(state), f"seed {seed}, after event {step}\n{text}"
        lines, snapshots = lines + writer.lines, snapshots + writer.snapshots
        writer.close()
        # a new master attempt resumes from it
        restored = MasterState.restore(AppSpec.from_yaml(text), _read(app_path), app_path, "tok", 10**9)
        assert restored.committed == state.committed
        assert {i: (op.recovery_checkpoint, op.checkpoints, op.container)
                for i, op in restored.plan.operators.items()} == \
            {i: (op.recovery_checkpoint, op.checkpoints, op.container) for i, op in state.plan.operators.items()}
    assert lines > 5 * snapshots  # most writes are log lines, not snapshots


def test_a_line_cut_short_is_ignored(tmp_path) -> None:
    """A write cut off mid-line (the master died writing it) was never acknowledged: the journal
    reads as it was before it."""
    app_path = f"file://{tmp_path}/app"
    drive = _drive(7, 40, app_path)
    for state, writer, _ in drive:
        before = _read(app_path)
        if writer.lines >= 3:
            break
    with open(f"{tmp_path}/app/journal/log-{writer.generation}", "ab") as f:
        f.write(b'{"top":{"committed":12')
    assert _read(app_path) == before


def test_a_failed_write_leaves_no_torn_line_and_is_written_again(tmp_path, monkeypatch) -> None:
    """A write that fails (a full disk) is cut off the log again; the retry journals the change."""
    app_path = f"file://{tmp_path}/app"
    drive = _drive(11, 200, app_path)
    state = writer = None
    for state, writer, _ in drive:
        if writer.lines >= 2:
            break
    real_write = os.write
    failing = {"on": True}

    def short_write(fd: int, data: bytes) -> int:
        if failing["on"]:
            real_write(fd, data[: len(data) // 2])  # half the line reaches the disk
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(journallog.os, "write", short_write)
    op = next(iter(state.plan.operators.values()))  # a change: its write fails
    op.current_window += 1
    with pytest.raises(OSError):
        writer.write(state)
    assert _read(app_path) != _live(state)  # the half line is gone: the journal is as before
    failing["on"] = False
    assert writer.write(state) > 0
    assert _read(app_path) == _live(state)


def test_compaction_starts_a_new_generation_and_removes_the_old_log(tmp_path) -> None:
    app_path = f"file://{tmp_path}/app"
    generations = set()
    for state, writer, _ in _drive(3, 150, app_path, compact=2048):
        generations.add(writer.generation)
        logs = sorted(os.listdir(f"{tmp_path}/app/journal"))
        assert [name for name in logs if name.startswith("log-")] in ([], [f"log-{writer.generation}"])
    assert len(generations) >= 3
    assert _read(app_path) == _live(state)
