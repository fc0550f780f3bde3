"""The one door into the master's state: events in, instructions out, nothing dropped.

:class:`stram.master.process.master.Dispatcher` takes the lock, has ``MasterState.handle``
decide, writes the journal, then carries out the instructions. Pure: fake states
and recorded actions; the AppMaster tests use a fake launcher and ``tmp_path``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest

from stram.master.core import state as state_mod
from stram.master.core.state import (Instruction, KillContainer, LaunchContainer, MasterEvent, MasterState, Note, Reply,
                                     SplitCheckpoints, Tick, UnknownEvent, UnknownInstruction)
from stram.master.process.master import AppMaster, Dispatcher
from stram.master.spec import AppSpec

SPEC = """
name: door
operators:
  reader: {class: "stram.operators.io:LineReader", properties: {path: x.txt}}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/x}}
streams:
  lines: {from: reader.output, to: [out.input]}
"""


@dataclass(frozen=True)
class Bogus(Instruction):
    """An instruction no action carries out."""


@dataclass(frozen=True)
class Stray(MasterEvent):
    """An event no handler knows."""


class ScriptedState:
    """A stand-in for MasterState: answers each event type with a scripted list of instructions."""

    def __init__(self, script) -> None:  # noqa: ANN001
        self.script = script
        self.handled: list[MasterEvent] = []

    def handle(self, event: MasterEvent) -> list[Instruction]:
        self.handled.append(event)
        return list(self.script[type(event)])


def door(script, **kw):  # noqa: ANN001, ANN003
    """A Dispatcher over a scripted state; (dispatcher, what happened in order)."""
    log: list = []
    actions = {LaunchContainer: lambda ins: log.append(("launch", ins.container_id)),
               KillContainer: lambda ins: log.append(("kill", ins.container_id)),
               **kw.pop("actions", {})}
    dispatcher = Dispatcher(ScriptedState(script), kw.pop("lock", threading.RLock()), actions,
                            journal=lambda: log.append(("journal",)))
    return dispatcher, log


def test_journal_is_written_before_anything_is_carried_out_and_the_reply_returned():
    dispatcher, log = door({Tick: [LaunchContainer("c1", 1024, 1), Reply("answer"), KillContainer("c2")]})
    assert dispatcher.dispatch(Tick(5)) == "answer"
    assert log == [("journal",), ("launch", "c1"), ("kill", "c2")]
    assert dispatcher.state.handled == [Tick(5)]


def test_an_unknown_instruction_raises_and_nothing_is_carried_out():
    dispatcher, log = door({Tick: [LaunchContainer("c1", 1024, 1), Bogus()]})
    with pytest.raises(UnknownInstruction, match=r"no action carries out Bogus \(Bogus\(\)\); known: "
                                                 r"KillContainer, LaunchContainer"):
        dispatcher.dispatch(Tick(5))
    assert log == []  # not even the launch before it, and no journal


def test_an_unknown_event_raises_in_the_state_and_through_the_door():
    state = MasterState(AppSpec.from_yaml(SPEC), "app-door", "file:///tmp/app-door", "tok", 0, 0)
    with pytest.raises(UnknownEvent, match="MasterState has no handler for Stray"):
        state.handle(Stray())
    with pytest.raises(UnknownEvent, match="no handler for object"):
        state.handle(object())  # type: ignore[arg-type]
    journaled = []
    dispatcher = Dispatcher(state, threading.RLock(), {}, journal=lambda: journaled.append(1))
    with pytest.raises(UnknownEvent):
        dispatcher.dispatch(Stray())
    assert journaled == []


def test_every_event_has_a_handler_and_every_instruction_an_action(tmp_path):
    events = {cls for cls in vars(state_mod).values()
              if isinstance(cls, type) and issubclass(cls, MasterEvent) and cls is not MasterEvent}
    assert events == set(state_mod.MasterState.HANDLERS)
    master = AppMaster(AppSpec.from_yaml(SPEC), "app-door", f"file://{tmp_path}", "tok", FakeLauncher())
    instructions = {cls for cls in vars(state_mod).values()
                    if isinstance(cls, type) and issubclass(cls, Instruction) and cls is not Instruction}
    assert instructions - {Reply} == set(master.dispatcher.actions)


def test_split_checkpoints_runs_under_the_lock_before_the_event_it_names():
    lock = threading.Lock()
    seen = []
    then = Note(7, "scale", "written")
    dispatcher, log = door({Tick: [SplitCheckpoints(change="the change", then=then)],
                            Note: [LaunchContainer("c3", 1024, 1), Reply("done")]},
                           lock=lock,
                           actions={SplitCheckpoints: lambda ins: seen.append((ins.change, lock.locked()))})
    assert dispatcher.dispatch(Tick(5)) == "done"
    assert seen == [("the change", True)]
    assert dispatcher.state.handled == [Tick(5), then]
    assert log == [("journal",), ("launch", "c3")]


def test_a_failing_action_is_logged_and_the_others_still_run(caplog):
    def broken(ins):  # noqa: ANN001, ANN202
        raise OSError("launcher down")
    dispatcher, log = door({Tick: [LaunchContainer("c1", 1024, 1), KillContainer("c2")]},
                           actions={LaunchContainer: broken})
    with caplog.at_level(logging.ERROR, logger="stram.master"):
        assert dispatcher.dispatch(Tick(5)) is None
    assert log == [("journal",), ("kill", "c2")]
    assert "could not carry out LaunchContainer" in caplog.text


class FakeLauncher:
    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, request) -> None:  # noqa: ANN001
        self.launched.append(request.container_id)

    def kill(self, container_id: str) -> None:
        pass


def test_the_master_refuses_an_unknown_instruction(tmp_path):
    master = AppMaster(AppSpec.from_yaml(SPEC), "app-door", f"file://{tmp_path}", "tok", FakeLauncher())
    master.state.handle = lambda event: [LaunchContainer("container_000001", 1024, 1), Bogus()]
    with pytest.raises(UnknownInstruction, match="no action carries out Bogus"):
        master.dispatch(Tick(5))
    assert master.launcher.launched == []
    # the real events go through
    master.state.handle = MasterState.handle.__get__(master.state)
    master.dispatch(state_mod.Start(0))
    assert sorted(master.launcher.launched) == sorted(master.state.plan.containers)


def test_while_the_master_starts_other_threads_events_are_refused_as_paused(tmp_path):
    """A new attempt adopts its containers before anything else: 2,000 agents heartbeating the
    moment heartbeatUri appeared kept the lock from the adoption for 30 s (the lock is not fair).
    Until Start or AdoptContainers is handled, other threads' events are refused ``paused:``
    (agents retry those); once it is, its actions (launches) run with every thread served."""
    import time

    from stram.master.core.events import MasterPaused

    class Local(FakeLauncher):
        tls_by_default = False

    master = AppMaster(AppSpec.from_yaml(SPEC), "app-door", f"file://{tmp_path}", "tok", Local(),
                       host="127.0.0.1")
    during_launch: list[str] = []
    real = FakeLauncher.launch

    def launch(self, request) -> None:  # noqa: ANN001 - an action of Start: the gate is open
        def other() -> None:
            try:
                master.dispatch(Tick(3))
                during_launch.append("served")
            except MasterPaused as exc:
                during_launch.append(str(exc))
        t = threading.Thread(target=other)
        t.start()
        t.join(5)
        real(self, request)

    master.launcher.launch = launch.__get__(master.launcher)
    with master.lock:  # the starting thread waits for the lock, as it did behind 2,000 heartbeats
        starter = threading.Thread(target=master.start)
        starter.start()
        deadline = time.monotonic() + 10
        while master._starting is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(MasterPaused, match="paused: starting"):
            master.dispatch(Tick(1))
    starter.join(10)
    try:
        assert not starter.is_alive() and master._starting is None
        assert sorted(master.launcher.launched) == sorted(master.state.plan.containers)
        assert during_launch and set(during_launch) == {"served"}
        master.dispatch(Tick(2))  # once started, every thread is served
    finally:
        master.stop()


def test_a_batch_is_handled_in_order_under_one_lock_with_one_journal_write_then_carried_out():
    """dispatch_many: what each event decided leaves the master after the batch's one journal write;
    an event that raises is that event's answer, and the others are handled and carried out."""
    holds: list[int] = []
    lock = threading.RLock()

    class CountingLock:
        def __enter__(self):  # noqa: ANN204
            lock.acquire()
            holds.append(1)

        def __exit__(self, *exc):  # noqa: ANN002, ANN204
            lock.release()

    dispatcher, log = door({Tick: [LaunchContainer("c1", 1024, 1), Reply("tick")],
                            Note: [KillContainer("c2"), Reply("note")],
                            Stray: [Bogus()]}, lock=CountingLock())
    answers = dispatcher.dispatch_many([Tick(1), Stray(), Note(2, "x", "y"), Tick(3)])
    assert answers[0] == "tick" and answers[2] == "note" and answers[3] == "tick"
    assert isinstance(answers[1], UnknownInstruction)
    assert dispatcher.state.handled == [Tick(1), Stray(), Note(2, "x", "y"), Tick(3)]
    assert holds == [1]  # one hold of the lock
    assert log == [("journal",), ("launch", "c1"), ("kill", "c2"), ("launch", "c1")]


def test_a_paused_master_refuses_the_whole_batch_and_handles_none_of_it():
    dispatcher, log = door({Tick: [Reply("tick")]})
    dispatcher.refusing = lambda: "paused: no space left on device"
    from stram.master.core.events import MasterPaused
    with pytest.raises(MasterPaused, match="no space left"):
        dispatcher.dispatch_many([Tick(1), Tick(2)])
    assert dispatcher.state.handled == [] and log == []


def test_prepare_sees_every_instruction_about_to_be_carried_out_first_and_cannot_stop_them(caplog):
    """The hook gets a batch's instructions at once, after the journal and before the first action;
    one that raises is logged and everything is carried out all the same."""
    dispatcher, log = door({Tick: [LaunchContainer("c1", 1024, 1), LaunchContainer("c2", 1024, 1), Reply("t")],
                            Note: [KillContainer("c3"), Reply("n")]})
    dispatcher.prepare = lambda instructions: log.append(("prepare", [type(i).__name__ for i in instructions]))
    dispatcher.dispatch_many([Tick(1), Note(2, "x", "y")])
    assert log == [("journal",), ("prepare", ["LaunchContainer", "LaunchContainer", "KillContainer"]),
                   ("launch", "c1"), ("launch", "c2"), ("kill", "c3")]
    log.clear()
    dispatcher.dispatch(Note(3, "x", "y"))  # one instruction: nothing to share
    assert log == [("journal",), ("kill", "c3")]

    def broken(instructions):  # noqa: ANN001, ANN202
        raise OSError("the NameNode is away")

    dispatcher.prepare = broken
    log.clear()
    with caplog.at_level(logging.ERROR, logger="stram.master"):
        assert dispatcher.dispatch(Tick(4)) == "t"
    assert log == [("journal",), ("launch", "c1"), ("launch", "c2")]
    assert "could not prepare 2 instructions" in caplog.text
