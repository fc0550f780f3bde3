"""The journal's snapshot and log (appmaster/journal/log.py) restore the live state.

Pure tests on the local file system: drawn applications and event sequences
(tests/kits/randomplans.py) drive a MasterState; the :class:`JournalWriter`
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


from randomplans import Driver, handle, new_state, random_spec  # noqa: E402

from stram.master.core import changes
from stram.master.core.state import MasterState, Start  # noqa: E402
from stram.master.journal import compactor  # noqa: E402
from stram.master.journal import document as journal
from stram.master.journal import log as journallog
from stram.master.spec import AppSpec  # noqa: E402


def _live(state: MasterState) -> dict:
    return json.loads(journal.encode(state.snapshot()))


def _durable(doc: dict) -> dict:
    """``doc`` without the figures the journal keeps only as of an object's last other change."""
    doc = json.loads(json.dumps(doc))
    for kind in ("operators", "containers"):
        for obj in doc["plan"][kind]:
            for name in changes.VOLATILE:
                obj.pop(name, None)
    return doc


def _same_but_progress(journaled: dict, live: dict, where: str) -> None:
    """The journal equals the live state but for :data:`~stram.master.core.changes.VOLATILE` figures, and
    its current windows are lower bounds of the live ones (what a new master attempt relies on)."""
    assert _durable(journaled) == _durable(live), where
    windows = {op["id"]: op["current_window"] for op in live["plan"]["operators"]}
    for op in journaled["plan"]["operators"]:
        assert op["current_window"] <= windows[op["id"]], f"{where}: operator {op['id']}"


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
    writer = journallog.JournalWriter(app_path, compactor=journallog.compact_here)
    if compact is not None:
        writer.min_compact_bytes = writer.compact_bytes = compact
        writer.compact_ratio = 0.0
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
    lines = snapshots = compactions = 0
    for seed in range(block * 50, block * 50 + 50):
        app_path = f"file://{tmp_path}/app-{seed}"
        for step, (state, writer, text) in enumerate(_drive(seed, 60, app_path, 4096 if seed % 3 == 0 else None)):
            _same_but_progress(_read(app_path), _live(state), f"seed {seed}, after event {step}\n{text}")
        lines, snapshots = lines + writer.lines, snapshots + writer.snapshots
        compactions += writer.compactions
        writer.close()
        # a new master attempt resumes from it
        restored = MasterState.restore(AppSpec.from_yaml(text), _read(app_path), app_path, "tok", 10**9)
        assert restored.committed == state.committed
        assert {i: (op.recovery_checkpoint, op.checkpoints, op.container)
                for i, op in restored.plan.operators.items()} == \
            {i: (op.recovery_checkpoint, op.checkpoints, op.container) for i, op in state.plan.operators.items()}
    assert lines > 5 * snapshots  # most writes are log lines, not snapshots
    assert compactions >= 10  # and the compactions were made from the writers' caches


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
    op.restarts += 1
    with pytest.raises(OSError):
        writer.write(state)
    assert _durable(_read(app_path)) != _durable(_live(state))  # the half line is gone: as before
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
    assert len(generations) >= 3 and writer.compactions >= 2
    _same_but_progress(_read(app_path), _live(state), "after compactions")


def test_a_compaction_that_fails_is_followed_by_a_snapshot_of_the_live_state(tmp_path, monkeypatch) -> None:
    """The compactor cannot write its snapshot (a full disk): the line is in the next log all the
    same, the journal (snapshot, its log, the next log) is the live state, and the next write is a
    snapshot of the live state that removes both logs."""
    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(5, 300, app_path):
        if writer.lines >= 3:
            break
    writer.compact_bytes = 0  # the next change compacts the log
    snapshots, generation = writer.snapshots, writer.generation

    def no_space(uri: str, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journallog.fs, "replace_file", no_space)
    next(iter(state.plan.operators.values())).restarts += 1
    assert writer.write(state) > 0
    monkeypatch.undo()
    assert writer.compactions == 0 and writer.generation == generation + 1
    assert sorted(n for n in os.listdir(f"{tmp_path}/app/journal") if n.startswith("log-")) == \
        [f"log-{generation}", f"log-{generation + 1}"]
    assert _read(app_path) == _live(state)  # both logs replayed
    next(iter(state.plan.operators.values())).restarts += 1
    assert writer.write(state) > 0
    assert writer.snapshots == snapshots + 1 and writer.compactions == 0  # of the live state
    assert [n for n in os.listdir(f"{tmp_path}/app/journal") if n.startswith("log-")] == []
    assert _read(app_path) == _live(state)


def test_while_the_compactor_runs_readers_replay_both_logs_and_a_snapshot_stops_it(tmp_path) -> None:
    """A compaction under way (here one that has not started): the writer appends to the next log,
    the journal read meanwhile is the live state, and a snapshot of the live state (the plan's
    shape changed) stops the compaction first and removes both logs."""
    started: list[tuple[str, int]] = []

    class Pending:
        killed = False

        def poll(self):
            return None

        def kill(self):
            Pending.killed = True

        def wait(self, timeout=None):
            return -9

    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(7, 300, app_path):
        if writer.lines >= 3:
            break
    writer.compactor = lambda path, generation: started.append((path, generation)) or Pending()
    writer.compact_bytes = 0
    generation = writer.generation
    for step in range(3):
        next(iter(state.plan.operators.values())).restarts += 1
        assert writer.write(state) > 0
        assert _read(app_path) == _live(state), step
    assert started == [(app_path, generation)]  # one compaction at a time
    assert journallog.read_journal(app_path)["log_generation"] == generation + 1
    writer._plan = None  # as a change of the plan's shape does
    writer.write(state)
    assert Pending.killed and writer.generation == generation + 2
    assert [n for n in os.listdir(f"{tmp_path}/app/journal") if n.startswith("log-")] == []
    assert _read(app_path) == _live(state)


def test_the_compactor_process_writes_the_snapshot_of_the_next_generation(tmp_path) -> None:
    """The real path: ``python -m stram.master.journal.compactor`` makes snapshot g+1 of snapshot g and its
    log while the writer appends to log g+1; once it ended the writer deletes log g."""
    import time

    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(9, 300, app_path):
        if writer.lines >= 5:
            break
    writer.compactor = compactor.start
    writer.compact_bytes = 0
    generation = writer.generation
    next(iter(state.plan.operators.values())).restarts += 1
    writer.write(state)
    process = writer._compacting
    assert process is not None and process.wait(timeout=60) == 0
    assert journal.read_journal(app_path)["log_generation"] == generation + 1
    _same_but_progress(_read(app_path), _live(state), "compacted by the process")
    deadline = time.monotonic() + 5
    next(iter(state.plan.operators.values())).restarts += 1
    writer.write(state)  # finds the compaction ended
    assert writer.compactions == 1 and time.monotonic() < deadline
    assert sorted(n for n in os.listdir(f"{tmp_path}/app/journal") if n.startswith("log-")) == \
        [f"log-{generation + 1}"]
    _same_but_progress(_read(app_path), _live(state), "compacted by the process")
    writer.close()


def test_progress_alone_is_not_journaled_and_rides_with_the_next_change(tmp_path) -> None:
    """A heartbeat that only moves current windows and clocks writes nothing; the operator's next
    other change (a checkpoint) carries its current window; a snapshot has them all."""
    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(5, 30, app_path):
        pass
    writer.write(state)
    op = next(op for op in state.plan.operators.values() if op.container)
    container = state.plan.containers[op.container]
    op.current_window += 5
    op.window_advanced_millis += 1000
    container.last_heartbeat_millis += 1000
    container.memory_used_mb += 1
    assert writer.write(state) == 0  # nothing durable changed
    assert {o["id"]: o["current_window"] for o in _read(app_path)["plan"]["operators"]}[op.id] == \
        op.current_window - 5
    op.checkpoints = [*op.checkpoints, op.current_window]
    assert writer.write(state) > 0
    journaled = {o["id"]: o for o in _read(app_path)["plan"]["operators"]}[op.id]
    assert journaled["current_window"] == op.current_window and journaled["checkpoints"] == op.checkpoints
    writer.close()
    writer2 = journallog.JournalWriter(app_path)  # a new attempt's first write is a snapshot
    writer2.write(state)
    assert _read(app_path)["plan"] == _live(state)["plan"]


def test_a_compactor_never_puts_its_snapshot_in_the_place_of_a_newer_one(tmp_path, monkeypatch) -> None:
    """A master that wrote a snapshot of its own while the compactor read (or that ended before the
    compactor began) keeps its snapshot."""
    import subprocess

    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(11, 300, app_path):
        if writer.lines >= 3:
            break
    generation = writer.generation
    read = journal.read_journal

    def read_then_master_writes(path: str):
        doc = read(path)
        writer._plan = None  # the master snapshots its live state meanwhile
        writer.write(state)
        return doc

    monkeypatch.setattr(journallog.journal, "read_journal", read_then_master_writes)
    with pytest.raises(ValueError, match="replaced while it was being compacted"):
        journallog.compact(app_path, generation)
    monkeypatch.undo()
    assert journal.read_journal(app_path)["log_generation"] == generation + 1  # the master's
    assert _read(app_path) == _live(state)
    orphan = subprocess.run([sys.executable, "-m", "stram.master.journal.compactor", app_path, str(generation + 1), "1"],
                            capture_output=True, text=True, timeout=60)
    assert orphan.returncode == 1 and "has ended: no compaction" in orphan.stderr
    assert journal.read_journal(app_path)["log_generation"] == generation + 1


@pytest.mark.parametrize("seed", range(12))
def test_a_snapshot_of_the_plans_objects_is_the_bytes_of_its_documents(tmp_path, seed) -> None:
    """The writer encodes the operators and containers themselves (orjson writes their fields):
    the same bytes as their documents, after every event of a drawn application, and through the
    standard encoder too (an integer past 64 bits in a property)."""
    for step, (state, _, _) in enumerate(_drive(seed, 40, f"file://{tmp_path}/app")):
        assert journal.encode(state.snapshot(objects=True)) == journal.encode(state.snapshot()), step
    op = next(iter(state.plan.operators.values()))
    op.properties = {**op.properties, "huge": 1 << 70}
    slow = journal.encode(state.snapshot(objects=True))
    assert slow == journal.encode(state.snapshot()) and json.loads(slow)["plan"]["operators"][0]["properties"]["huge"] \
        == 1 << 70


def test_a_compactor_that_cannot_start_is_followed_by_a_snapshot_of_the_live_state(tmp_path, caplog) -> None:
    """No process for the compaction (fork refused): the line goes to the next log, the journal is
    the live state, and the next write is a snapshot that removes both logs (never a chain of three)."""
    app_path = f"file://{tmp_path}/app"
    for state, writer, _ in _drive(13, 300, app_path):
        if writer.lines >= 3:
            break

    def refused(path: str, generation: int):
        raise OSError(12, "Cannot allocate memory")

    writer.compactor = refused
    writer.compact_bytes = 0
    generation, snapshots = writer.generation, writer.snapshots
    next(iter(state.plan.operators.values())).restarts += 1
    assert writer.write(state) > 0
    assert "could not start the compaction" in caplog.text
    assert writer.generation == generation + 1 and _read(app_path) == _live(state)
    next(iter(state.plan.operators.values())).restarts += 1
    writer.write(state)
    assert writer.snapshots == snapshots + 1 and writer.generation == generation + 2
    assert [n for n in os.listdir(f"{tmp_path}/app/journal") if n.startswith("log-")] == []
    assert _read(app_path) == _live(state)
