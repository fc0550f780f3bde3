"""The master's journal: a versioned JSON document a new master attempt resumes from.

Pure round trips (state → journal bytes → restored state) on a MasterState driven
by hand-written heartbeats (the removal tests' harness), the file through
``pyarrow.fs`` on ``tmp_path``, and refusals of what this stram cannot read.
Windows are written ``k`` for ``base + k``; ``●`` a saved checkpoint, ``|`` the
window an operator shut down at.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys

import pytest
from test_removal import PARTITIONED, Run  # the removal tests' harness

from stram import wire as proto
from stram.master.core.plan import ContainerState, OperatorState, PhysicalPlan
from stram.master.core.state import ErrorReport, MasterState, ShutdownRequest
from stram.master.journal import document as journal
from stram.master.journal.document import JournalVersionError
from stram.master.process.master import AppMaster
from stram.master.spec import AppSpec

#: What restore() sets afresh (the clock of the new attempt), not what the journal restores.
RESTARTED_CONTAINER_FIELDS = {"last_heartbeat_millis", "launch_at"}
RESTARTED_OPERATOR_FIELDS = {"window_advanced_millis"}


def journaled_run() -> Run:
    """PARTITIONED (src[0..1] ──▶ unifier+up ──▶ out) with something in every journaled field.

    window k:            60    70        120
      src[0]  (c1)       ●─────●|                  shut down at 70: parked (committed 60)
      src[1]  (c2)       ●───────────────●
      unifier+up (c3)    ●───────────────●
      out     (c4)       ●                         its container exits: redeployed, restart 1
    then: an error report, and a shutdown request.
    """
    run = Run(PARTITIONED)
    run.deploy()
    run.everyone(65, 60)
    run.heartbeat(run.cid("src[0]"), run.ended("src[0]", 70, 70))
    run.heartbeat(run.cid("src[1]"), run.report("src[1]", 125, 120))
    run.heartbeat(run.cid("up"), run.report("unifier", 125, 120), run.report("up", 125, 120))
    run.exited(run.cid("out"), 137)
    run.state.handle(ErrorReport(run.cid("up"), (run.id("up"),), "Traceback...\nValueError: boom", run.now))
    run.state.handle(ShutdownRequest(run.now))
    assert run.state.committed == run.w(60) and run.parked() == {70: {"src[0]"}}
    assert run.op("out").restarts == 1 and run.op("out").state == OperatorState.PENDING_DEPLOY
    return run


def fields(obj, skip=()) -> dict:  # noqa: ANN001
    return {k: v for k, v in dataclasses.asdict(obj).items() if k not in skip}


def test_round_trip_restores_what_a_new_attempt_needs():
    run = journaled_run()
    state = run.state
    data = journal.encode(state.snapshot())
    doc = json.loads(data)                         # plain JSON: no pickled classes
    assert doc["version"] == journal.VERSION == 1
    assert doc["plan"]["containers"][0]["state"] in {s.value for s in ContainerState}
    restored = MasterState.restore(AppSpec.from_yaml(PARTITIONED), journal.decode(data), state.app_path,
                                   state.token, run.now + 5_000)

    assert restored.attempt == state.attempt + 1 == 2
    assert restored.committed == state.committed == run.w(60)
    assert restored.shutdown_operators == state.shutdown_operators == {run.w(70): [run.id("src[0]")]}
    assert restored.shutdown_requested is True
    assert (restored.state, restored.diagnostics, restored.started_millis) == \
        (state.state, state.diagnostics, state.started_millis)
    assert restored.removed == state.removed
    assert list(restored.errors) == list(state.errors) and restored.errors[-1]["operators"] == [run.id("up")]
    # the plan: every field of every operator and container (but the new attempt's clock)
    assert restored.plan.operators.keys() == state.plan.operators.keys()
    for op_id, op in state.plan.operators.items():
        assert fields(restored.plan.operators[op_id], RESTARTED_OPERATOR_FIELDS) == \
            fields(op, RESTARTED_OPERATOR_FIELDS), op.label
    for cid, container in state.plan.containers.items():
        assert fields(restored.plan.containers[cid], RESTARTED_CONTAINER_FIELDS) == \
            fields(container, RESTARTED_CONTAINER_FIELDS), cid
    unifier = restored.plan.operators[run.id("unifier")].label
    assert {op.label: op.checkpoints for op in restored.plan.operators.values()} == \
        {"src[0]": [run.w(60), run.w(70)], "src[1]": [run.w(60), run.w(120)],
         unifier: [run.w(60), run.w(120)], "up": [run.w(60), run.w(120)], "out": [run.w(60)]}
    assert {op.label: op.restarts for op in restored.plan.operators.values() if op.restarts} == {"out": 1}
    assert restored.plan.operators[run.id("src[0]")].state == OperatorState.SHUTDOWN
    assert isinstance(restored.plan.containers[run.cid("up")].state, ContainerState)
    # new ids continue where the old attempt stopped
    assert restored.plan.new_container_id() == state.plan.new_container_id()
    restored.validate_state()

    # and the new attempt carries on: the replacement container deploys out from its checkpoint
    out = restored.plan.operators[run.id("out")]
    hb = proto.ContainerHeartbeat(container_id=out.container, buffer_server_host="127.0.0.1",
                                  buffer_server_port=45000)
    response, _ = restored.heartbeat(hb, run.now + 6_000)
    (deploy,) = response.deploy_request
    assert (deploy.id, deploy.checkpoint.window_id) == (out.id, run.w(60))
    restored.validate_state()


def test_plan_document_round_trip_keeps_every_field():
    run = journaled_run()
    plan = run.state.plan
    doc = json.loads(json.dumps(journal.plan_to_doc(plan)))
    again = journal.plan_from_doc(doc)
    assert journal.plan_to_doc(again) == doc
    assert {i: fields(op) for i, op in again.operators.items()} == {i: fields(op) for i, op in plan.operators.items()}
    assert {c: fields(x) for c, x in again.containers.items()} == {c: fields(x) for c, x in plan.containers.items()}
    # restored objects are laid out as constructed ones: slots, no dict of their own (a dict of
    # their own is 3x the size, and attribute reads took twice as long: CPython 3.11)
    for x in [*again.operators.values(), *again.containers.values(), *(i for op in again.operators.values()
                                                                      for i in op.inputs)]:
        twin = type(x)(**{f.name: getattr(x, f.name) for f in dataclasses.fields(x)})
        assert not hasattr(x, "__dict__") and not hasattr(twin, "__dict__")
        assert sys.getsizeof(x) == sys.getsizeof(twin)
    (up,) = [op for op in again.operators.values() if op.name == "up"]
    assert isinstance(up.inputs[0].partition_keys, tuple) and isinstance(up.state, OperatorState)
    assert any(c.buffer_server == ("127.0.0.1", 40000 + int(c.id.rsplit("_", 1)[1]))
               for c in again.containers.values())


def test_the_journal_file_is_json_written_atomically(tmp_path):
    run = journaled_run()
    app_path = f"file://{tmp_path}"
    assert journal.read_journal(app_path) is None
    journal.write_journal(app_path, run.state.snapshot())
    journal.write_journal(app_path, run.state.snapshot())   # replaced, not appended
    assert [p.name for p in (tmp_path / "journal").iterdir()] == ["snapshot"]   # no temporary left
    assert json.loads((tmp_path / "journal" / "snapshot").read_text())["version"] == 1
    assert journal.read_journal(app_path) == json.loads(journal.encode(run.state.snapshot()))


@pytest.mark.parametrize("data, message", [
    (json.dumps({"version": 2, "plan": {}}).encode(),
     r"journal version 2 \(written by a newer stram\); this stram reads journal version 1"),
    (json.dumps({"version": "1"}).encode(), r"journal version '1'; this stram reads journal version 1"),
    (json.dumps({"version": 0}).encode(), r"journal version 0; this stram reads journal version 1"),
    (pickle.dumps({"version": 1, "plan": PhysicalPlan()}, protocol=pickle.HIGHEST_PROTOCOL),
     r"a pickle written by an older stram \(before journal version 1\); this stram reads journal version 1"),
    (b"\x00\x01 not a journal \xff", r"not a stram journal \(not JSON: .*\); this stram reads journal version 1"),
    (b"[1, 2, 3]", r"not a stram journal \(a JSON list, not an object\); this stram reads journal version 1"),
    (b'{"plan": {}}', r"not a stram journal \(no \"version\"\); this stram reads journal version 1"),
])
def test_what_this_stram_cannot_read_is_refused(data, message):
    with pytest.raises(JournalVersionError, match=message):
        journal.decode(data)


def test_a_broken_plan_of_the_right_version_is_refused():
    doc = json.loads(journal.encode(journaled_run().state.snapshot()))
    doc["plan"]["operators"][0]["colour"] = "blue"
    with pytest.raises(JournalVersionError, match="does not match journal version 1 .*PTOperator has no field colour"):
        MasterState.restore(AppSpec.from_yaml(PARTITIONED), doc, "file:///tmp/x", "tok", 0)
    with pytest.raises(JournalVersionError, match="journal version 7"):
        MasterState.restore(AppSpec.from_yaml(PARTITIONED), {**doc, "version": 7}, "file:///tmp/x", "tok", 0)


def test_a_master_refuses_to_resume_from_a_newer_journal(tmp_path):
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "snapshot").write_text(json.dumps({"version": 2}))
    with pytest.raises(JournalVersionError, match=rf"journal file://{tmp_path}/journal/snapshot is journal "
                                                  rf"version 2 .*this stram reads journal version 1"):
        AppMaster(AppSpec.from_yaml(PARTITIONED), "app-j", f"file://{tmp_path}", "tok", launcher=None)


def test_a_plan_document_without_a_field_that_has_a_default_gets_the_default():
    doc = json.loads(journal.encode({"version": 1, "plan": journal.plan_to_doc(journaled_run().state.plan)}))
    plan = doc["plan"]
    del plan["operators"][0]["restarts"]
    del plan["containers"][0]["pending_deploy"]
    again = journal.plan_from_doc(plan)
    first_op, first_container = next(iter(again.operators.values())), next(iter(again.containers.values()))
    assert first_op.restarts == 0 and first_container.pending_deploy == set()
    del plan["operators"][1]["name"]   # no default: refused
    with pytest.raises(JournalVersionError, match="does not match journal version 1 .*name"):
        journal.plan_from_doc(plan)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30, 2**64 - 1, -(2**63), 12345678901234567890123])
def test_integers_past_64_bits_are_read_back_exactly(value):
    """orjson reads an integer past 64 bits as a float: the journal's reader must not."""
    data = journal.encode({"version": 1, "big": value, "in": [{"v": value}], "s": "12345678901234567890123"})
    doc = journal.decode(data)
    assert doc["big"] == value and type(doc["big"]) is int and doc["in"][0]["v"] == value
    assert journal.loads(b'{"a": %d, "b": NaN}' % value)["a"] == value


def test_the_gc_paused_while_a_master_builds_its_state_runs_again_once_tuned():
    import gc

    from stram.master.process.housekeeping import pause_gc, tune_gc
    was = gc.get_threshold()
    try:
        pause_gc()
        assert not gc.isenabled()
        tune_gc()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.set_threshold(*was)
        gc.enable()
