"""Live repartitioning (``stram scale``) and the stats listener hook.

In process: :mod:`stram.master.core.scaling` on a :class:`MasterState` driven by
hand-written heartbeats, ``validate_state()`` after every step; windows are
written ``k`` for ``base + k`` (``base`` = the initial window), ``●`` a saved
checkpoint. End to end (test_scale_e2e.py): word count over Moby-Dick with
real processes, scaled while it runs, exact counts at the end.

The word-count plan (``WORDCOUNT``, count × 3)::

    reader ═CONTAINER_LOCAL═▶ split ──▶ count[0..2] ──▶ unifier ═THREAD_LOCAL═▶ out
    (c1: reader + split)               (c2, c3, c4)     (c5: unifier + out)
"""

from __future__ import annotations

import pickle
from collections import Counter

import pytest
from statekit import FakeLauncher, StateRun, wordcount

from stram.common.partition import owner_of
from stram.master.core import scaling
from stram.master.core.plan import PUBLISHER_TAG_MASK, OperatorState
from stram.master.core.reports import WindowSample
from stram.master.core.state import DeleteCheckpoints, LaunchContainer
from stram.master.journal import document as journal
from stram.master.spec import AppSpec

TOKEN = "scale-token"


#   split ──▶ count[0..2] ──▶ total[0..1] ──▶ out      (a partitioned downstream: no unifier)
TWO_STAGE = """
name: two-stage
operators:
  reader: {class: "stram.operators.io:LineReader", properties: {path: x.txt}}
  split: {class: "stram.operators.text:WordSplitter"}
  count: {class: "stram.operators.aggregate:KeyCounter", partitions: 3}
  total: {class: "stram.operators.aggregate:KeyCounter", partitions: 2}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/x}}
streams:
  lines: {from: reader.output, to: [split.input], locality: CONTAINER_LOCAL}
  words: {from: split.output, to: [count.input]}
  counts: {from: count.output, to: [total.input]}
  totals: {from: total.output, to: [out.input]}
"""


class Run(StateRun):
    def __init__(self, text: str) -> None:
        super().__init__(text, "app-scale", TOKEN)


def covered_once(run: Run, name: str, source: str) -> dict[int, int]:
    """Masked hash value -> how many partitions of ``name`` receive it from ``source``."""
    src_ids = {op.id for op in run.ops(source)}
    inputs = [i for op in run.ops(name) for i in op.inputs if i.source_id in src_ids]
    width = max(i.partition_mask for i in inputs)
    per_source: dict[int, Counter] = {}
    for i in inputs:
        per_source.setdefault(i.source_id, Counter()).update(
            v for v in range(width + 1) if not i.partition_mask or (v & i.partition_mask) in i.partition_keys)
    (first, *rest) = per_source.values()
    assert all(c == first for c in rest), "every upstream partition feeds the same keys"
    return dict(first)


def running_at(run: Run, cw: int, *saved: int) -> None:
    """Deploy what is pending (new containers first), then everyone reports ``cw``."""
    run.deploy()
    run.everyone(cw, *saved)


# ================================================================ pure: 3 → 5 → 2 → 1

def test_scale_three_to_five_to_two_to_one():
    # window k:               5     10        15    20
    #   reader+split (c1)     ●─────●─────────●─────●
    #   count[0..2]  (c2-c4)  ●─────●
    #   unifier+out  (c5)     ●                          (lags: recovery 5)
    # count's recovery is 5 (bounded by its downstream); 10 is newer than out's 5,
    # so the new partitions start after window 5: c = 5.
    run = Run(wordcount(3))
    run.deploy()
    old = [op.id for op in run.ops("count")]
    old_unifier = run.op("unifier").id
    out_container = run.op("out").container
    old_containers = {op.container for op in run.ops("count")}
    run.everyone(12, 5, 10, skip=("out", "count.output.unifier"))
    run.heartbeat(out_container, *(run.report(o, 12, 5) for o in sorted(
        run.state.plan.containers[out_container].operators)))
    assert run.state.committed == run.w(5)
    assert [op.recovery_checkpoint for op in run.ops("count")] == [run.w(5)] * 3

    words = ["the", "whale", "ishmael", "sea", "ahab", "ship", "call", "me", "white", "a"]
    states = {oid: {"totals": {w: n + 1 for n, w in enumerate(words) if owner_of(3)(w) == k}}
              for k, oid in enumerate(old)}
    states[old_unifier] = {"seen": 42}
    result, instructions, written = run.scale("count", 5, states)

    # what was done
    assert result["window"] == run.w(5) and result["from"] == 3 and result["to"] == 5
    assert [r["id"] for r in result["removed"]] == old
    new = [op.id for op in run.ops("count")]
    assert [r["id"] for r in result["added"]] == new and not set(new) & set(old)
    assert [op.label for op in run.ops("count")] == [f"count[{k}]" for k in range(5)]
    assert sorted(result["containers_released"]) == sorted(old_containers)
    launched = [i.container_id for i in instructions if isinstance(i, LaunchContainer)]
    assert launched == result["containers_launched"] and len(launched) == 5
    assert {op.container for op in run.ops("count")} == set(launched)
    assert {i.operator_id for i in instructions if isinstance(i, DeleteCheckpoints)} >= set(old)
    assert result["upstream_redeployed"] == []          # split's publisher tags 4 bits: room for 5
    assert [r["label"] for r in result["redeployed"]] == ["out"]

    # keys: every masked hash value goes to exactly one new partition
    assert covered_once(run, "count", "split") == {v: 1 for v in range(8)}
    assert all(i.partition_mask == 7 for op in run.ops("count") for i in op.inputs)
    # a new unifier, THREAD_LOCAL with out in out's container; out rewired to it
    (unifier,) = run.ops("unifier")
    assert unifier.id != old_unifier and old_unifier not in run.state.plan.operators
    assert unifier.container == out_container and unifier.source_ids == set(new)
    out = run.op("out")
    assert out.source_ids == {unifier.id} and out.inputs[0].locality == "THREAD_LOCAL" and out.kind == "OIO"
    assert unifier.recovery_checkpoint == out.recovery_checkpoint == run.w(5)
    # split (upstream) untouched, now feeding the new partitions
    split = run.op("split")
    assert split.state == OperatorState.ACTIVE and sorted(run.state.plan.downstream(split.id)) == new
    # state: every key moved to its owner among 5, totals kept
    moved = {}
    for k, oid in enumerate(new):
        totals = written[(oid, run.w(5))]["totals"]
        assert all(owner_of(5)(w) == k for w in totals)
        moved.update(totals)
    assert moved == {w: n + 1 for n, w in enumerate(words)}
    assert written[(unifier.id, run.w(5))] == {"seen": 42}   # the old unifier's state, at out's window
    # the journal carries the new plan
    assert run.state.snapshot()["plan"] == journal.plan_to_doc(run.state.plan)

    # old containers: undeploy + shutdown in their next heartbeat; out's container: undeploy now
    for cid in sorted(old_containers):
        response, _ = run.heartbeat(cid)
        assert response.shutdown and len(response.undeploy_request) == 1 and response.undeploy_request[0] in old
        assert run.state.plan.containers[cid].state == "RELEASED"
    response, _ = run.heartbeat(out_container)
    assert sorted(response.undeploy_request) == sorted([old_unifier, out.id])
    assert not response.deploy_request                   # waits for the new partitions to run
    running_at(run, 14)
    # the new partitions subscribe from c + 1 with their own keys; out's group from its checkpoint
    info = {op.id: run.state.deploy_info(op) for op in run.ops("count")}
    assert {i.checkpoint.window_id for i in info.values()} == {run.w(5)}
    assert sorted(k for i in info.values() for k in i.inputs[0].partition_keys) == list(range(8))
    assert run.state.deploy_info(split).outputs[0].partition_mask == 7 | PUBLISHER_TAG_MASK

    # 5 → 2 once everyone has checkpointed 15 and 20: c = 20 (out has 20 too now)
    run.everyone(22, 15, 20)
    assert run.state.committed == run.w(20)
    five = [op.id for op in run.ops("count")]
    result, instructions, written = run.scale("count", 2)
    assert result["window"] == run.w(20) and [r["id"] for r in result["removed"]] == five
    assert covered_once(run, "count", "split") == {0: 1, 1: 1}
    (unifier,) = run.ops("unifier")
    assert unifier.source_ids == {op.id for op in run.ops("count")}
    assert len(result["containers_released"]) == 5 and len(result["containers_launched"]) == 2
    running_at(run, 24)

    # 2 → 1: no unifier left; out subscribes to the one partition directly
    run.everyone(27, 25)
    result, _, _ = run.scale("count", 1)
    assert run.ops("unifier") == [] and result["unifiers_added"] == [] and len(result["unifiers_removed"]) == 1
    (single,) = run.ops("count")
    assert single.label == "count" and single.inputs[0].partition_mask == 0
    out = run.op("out")
    assert out.source_ids == {single.id} and out.kind == "GENERIC" and out.inputs[0].locality is None
    running_at(run, 29)
    assert run.state.committed <= min(op.recovery_checkpoint for op in run.state.plan.operators.values())
    events = [e["text"] for e in run.state.info()["events"] if e["kind"] == "scale"]
    assert any("count: 3 → 5 partitions from window" in t for t in events)
    assert any("count: 2 → 1 partitions" in t for t in events)


def test_same_count_changes_nothing():
    run = Run(wordcount(3))
    run.deploy()
    result, instructions, written = run.scale("count", 3)
    assert result["changed"] is False and instructions == [] and written == {}


def test_scaling_up_from_one_partition_redeploys_the_upstream_publisher():
    #   split publishes unpartitioned (tag mask 0): 3 partitions need tags, so split
    #   (and reader, in its container) are redeployed with a wider tag mask.
    run = Run(wordcount(1))
    run.deploy()
    run.everyone(7, 5)
    split = run.op("split")
    assert split.publisher_masks == {"output": 0}
    result, _, _ = run.scale("count", 3)
    assert result["upstream_redeployed"] == ["split"]
    assert sorted(r["label"] for r in result["redeployed"]) == ["out", "reader", "split"]
    split = run.op("split")  # the plan is a new one (built on a copy)
    assert split.state == OperatorState.PENDING_DEPLOY
    new = run.ops("count")
    assert len(run.ops("unifier")) == 1 and run.op("out").kind == "OIO"
    response, _ = run.heartbeat(split.container)
    assert sorted(response.undeploy_request) == sorted([run.op("reader").id, split.id])
    assert sorted(response.reset_publishers) == sorted([f"{split.id}.output", f"{run.op('reader').id}.output"])
    running_at(run, 9)
    assert split.publisher_masks == {"output": 3 | PUBLISHER_TAG_MASK}
    assert covered_once(run, "count", "split") == {v: 1 for v in range(4)}
    assert all(op.state == OperatorState.ACTIVE for op in new)


def test_partitioned_upstream_and_downstream():
    #   split × 2 ──▶ count × 2 ──▶ out   with lines across containers
    # 2 → 1: the one count partition gets a unifier of split's partitions, THREAD_LOCAL;
    # 1 → 3: that unifier goes, the partitions subscribe to both split partitions.
    run = Run(wordcount(2, split=2, lines_locality=""))
    run.deploy()
    run.everyone(7, 5)
    result, _, written = run.scale("count", 1)
    (single,) = run.ops("count")
    (split_unifier,) = [u for u in run.ops("unifier") if u.unifies == "split"]
    assert single.kind == "OIO" and single.source_ids == {split_unifier.id}
    assert split_unifier.container == single.container and split_unifier.source_ids == {
        op.id for op in run.ops("split")}
    assert written[(split_unifier.id, run.w(5))] == {}
    assert not [u for u in run.ops("unifier") if u.unifies == "count"]
    running_at(run, 9)
    run.everyone(12, 10)
    result, _, _ = run.scale("count", 3)
    assert sorted(result["unifiers_removed"])[0].startswith("split.output.unifier")
    assert not [u for u in run.ops("unifier") if u.unifies == "split"]
    assert covered_once(run, "count", "split") == {v: 1 for v in range(4)}
    running_at(run, 14)


def test_partitioned_downstream_keeps_its_own_keys():
    run = Run(TWO_STAGE)
    run.deploy()
    run.everyone(7, 5)
    keys_before = {op.id: sorted({(i.partition_mask, tuple(i.partition_keys)) for i in op.inputs})
                   for op in run.ops("total")}
    result, _, _ = run.scale("count", 5)
    assert [u.unifies for u in run.ops("unifier")] == ["total"]    # none for count: total is partitioned
    new = {op.id for op in run.ops("count")}
    for op in run.ops("total"):
        assert op.source_ids == new
        assert sorted({(i.partition_mask, tuple(i.partition_keys)) for i in op.inputs}) == keys_before[op.id]
    assert sorted(r["label"].split("#")[0] for r in result["redeployed"]) == [
        "out", "total.output.unifier", "total[0]", "total[1]"]
    assert covered_once(run, "total", "count") == {0: 1, 1: 1}
    running_at(run, 9)


#   reader[0..1] ──▶ unifier ═THREAD_LOCAL═▶ split ──▶ out      (a Kafka input, scalable)
KAFKA = """
name: kafka-wc
attributes: {PROCESSING_MODE: EXACTLY_ONCE}
operators:
  reader: {class: "stram.connectors.kafka:KafkaInput", properties: {topics: lines}, partitions: 2}
  split: {class: "stram.operators.text:WordSplitter"}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/x}}
streams:
  lines: {from: reader.output, to: [split.input]}
  words: {from: split.output, to: [out.input]}
"""


def test_an_input_restarts_together_with_what_it_feeds():
    # window k:               5     10
    #   reader[0..1]          ●                 (their heartbeats with 10 are late)
    #   unifier + split       ●─────●
    #   out                   ●─────●
    # New Kafka readers put other records in windows 6..10 than the old ones did, and so does split
    # after them: everything downstream keeps recovery checkpoint 5 with the readers, the new
    # partitions start after 5 and split and out restart from 5, taking every replayed window.
    # (Restarting split or out from 10 lost records: what the new readers put in 6..10 beyond the
    # old ones' share.)
    run = Run(KAFKA)
    run.deploy()
    run.everyone(7, 5)
    run.everyone(12, 10, skip=("reader",))
    assert [run.rec(n) for n in ("reader[0]", "reader[1]", "unifier", "split", "out")] == [5] * 5
    result, _, written = run.scale("reader", 3, {op.id: {"offsets": {f"lines:{k}": 100 + k for k in (0, 2)}}
                                                 if op.partition_index == 0 else {"offsets": {"lines:1": 101}}
                                                 for op in run.ops("reader")})
    assert result["window"] == run.w(5) and (result["from"], result["to"]) == (2, 3)
    assert sorted(r["label"].split("#")[0] for r in result["redeployed"]) == ["out", "split"]
    assert run.rec("split") == run.rec("out") == 5 and run.op("split").state == OperatorState.PENDING_DEPLOY
    assert {k: v for st in written.values() for k, v in st.get("offsets", {}).items()} == {
        "lines:0": 100, "lines:1": 101, "lines:2": 102}
    running_at(run, 9)


def test_an_input_is_not_repartitioned_at_a_window_what_it_feeds_has_passed():
    # A plan journaled by a master that let split's recovery checkpoint pass the readers' (before
    # connected operators shared theirs): refused until they meet again.
    run = Run(KAFKA)
    run.deploy()
    run.everyone(7, 5)
    run.everyone(12, 10, skip=("reader",))
    for name in ("unifier", "split", "out"):
        run.op(name).recovery_checkpoint = run.w(10)
    with pytest.raises(scaling.ScaleRefused, match=r"what reader feeds does not restart from window \w+ as "
                                                   r"reader would; try again in a few seconds") as exc:
        scaling.plan_scale(run.state, "reader", 3)
    assert exc.value.transient


# ================================================================ refusals

@pytest.mark.parametrize("text, name, count, message", [
    (wordcount(3), "nope", 2, "no operator 'nope' in application wc (operators: reader, split, count, out)"),
    (wordcount(3), "count.output.unifier", 2,
     "'count.output.unifier' is a unifier (it merges the partitions of 'count'); unifiers follow their "
     "operator: scale 'count' instead"),
    (wordcount(3), "count", 0, "partition count must be at least 1, got 0"),
    (wordcount(3), "count", 1000, "partition count must be at most 256, got 1000"),
    (wordcount(3), "reader", 2, "operator reader is an input operator and LineReader does not define "
                                "split_state(); input operators are repartitioned only when their class "
                                "says how to split their state"),
    (wordcount(3), "split", 2, "operator split is CONTAINER_LOCAL with its upstream reader (stream lines); "
                               "only operators whose streams cross containers can be repartitioned"),
    (wordcount(1, counts_locality="THREAD_LOCAL"), "count", 2,
     "operator count is THREAD_LOCAL with its downstream out (stream counts); only operators whose "
     "streams cross containers can be repartitioned"),
    (wordcount(3), "count", 2, "no common checkpoint of count yet; try again in a few seconds"),
    (wordcount(3, extra=", CONTAINERS_MAX_COUNT: 3"), "count", 2,
     "partition count[0] (3) of count shares container container_000002 with out, count.output.unifier#7; "
     "only operators in containers of their own can be repartitioned"),
])
def test_refusals_say_why(text, name, count, message):
    run = Run(text)
    run.deploy()
    with pytest.raises(scaling.ScaleRefused) as exc:
        run.scale(name, count)
    assert str(exc.value) == message
    run.state.validate_state()


def test_refused_while_partitions_deploy_or_the_application_ended():
    run = Run(wordcount(3))
    with pytest.raises(ValueError, match=r"partition count\[0\] \(\d+\) of count is PENDING_DEPLOY; "
                                         r"try again when every partition is running"):
        run.scale("count", 2)
    run.deploy()
    run.everyone(7, 5)
    run.scale("count", 2)
    # a second request before the new partitions run: refused, nothing changes
    with pytest.raises(ValueError, match="of count is PENDING_DEPLOY"):
        run.scale("count", 4)
    run.state.kill(run.now)
    with pytest.raises(ValueError, match="application app-scale is KILLED; only a running application"):
        run.scale("count", 4)


def test_refused_when_a_downstream_operator_is_not_running():
    run = Run(wordcount(3))
    run.deploy()
    run.everyone(7, 5)
    out = run.op("out")
    run.state.container_exited(out.container, 1, run.now)      # out's container lost: recovering
    with pytest.raises(ValueError, match=r"operator out \(\d+\), which repartitioning "
                                         r"count redeploys, is PENDING_DEPLOY; try again once it runs"):
        run.scale("count", 2)


def test_split_state_errors_refuse_without_changing_anything():
    run = Run(wordcount(3))
    run.deploy()
    run.everyone(7, 5)
    change = scaling.plan_scale(run.state, "count", 2)
    plan = run.state.plan
    with pytest.raises(ValueError, match="KeyCounter.split_state failed: AttributeError"):
        scaling.split_states(change, {key: {"totals": None} for key in change.reads})
    assert run.state.plan is plan and len(run.ops("count")) == 3


# ================================================================ the stats listener

def test_stats_view_is_a_read_only_snapshot_and_the_example_listener_scales_count(monkeypatch):
    from specs import autoscale
    run = Run(wordcount(1))
    run.deploy()
    (count,) = run.ops("count")
    for k in range(1, 6):  # 5 windows of 3000 words in 0.5 s each: 6000 words/s in
        run.state.window_history[count.id].append(WindowSample(run.w(k), 3000, 1000, k * 500, 0, {}))
    view = scaling.stats_view(run.state)
    stats = view["count"]
    assert (stats.partitions, stats.active, stats.input_tuples_per_sec) == (1, 1, 6000.0)
    assert stats.tuples_per_sec == run.state.throughput(count.id) == 2000.0
    with pytest.raises(TypeError):
        view["count"] = stats  # type: ignore[index]
    with pytest.raises(AttributeError):
        stats.partitions = 9  # type: ignore[misc]
    monkeypatch.setattr(autoscale, "WORDS_PER_PARTITION", 1500.0)
    assert autoscale.scale_count(view) == {"count": 4}
    assert scaling.listener_requests(view, autoscale.scale_count(view)) == [("count", 4)]
    assert scaling.listener_requests(view, {"count": 1}) == []   # what it has already
    with pytest.raises(ValueError, match="expected {operator: partition count} or None"):
        scaling.listener_requests(view, [("count", 2)])
    with pytest.raises(ValueError, match="asked for '2' partitions of 'count'; expected an integer"):
        scaling.listener_requests(view, {"count": "2"})


def test_master_applies_the_listener_through_the_scale_path(tmp_path, monkeypatch):
    """AppMaster without processes: checkpoint files in, listener called, files and launches out."""
    from specs import autoscale
    from stram.master.process import master as master_mod
    text = wordcount(1, extra=", STATS_LISTENER: 'specs.autoscale:scale_count'")
    app_path = f"file://{tmp_path}"
    m = master_mod.AppMaster(AppSpec.from_yaml(text), "app-listen", app_path, TOKEN, FakeLauncher())
    assert m.stats_listener is autoscale.scale_count
    run = Run.around(m.state)
    run.deploy()
    (count,) = run.ops("count")
    run.everyone(7, 5)
    ckpt = tmp_path / "checkpoints" / str(count.id) / str(run.w(5))
    ckpt.parent.mkdir(parents=True)
    totals = {w: i + 1 for i, w in enumerate(["call", "me", "ishmael", "whale", "sea"])}
    ckpt.write_bytes(pickle.dumps({"totals": totals}))
    for k in range(1, 6):
        m.state.window_history[count.id].append(WindowSample(run.w(k), 3000, 1000, k * 500, 0, {}))
    monkeypatch.setattr(autoscale, "WORDS_PER_PARTITION", 2500.0)
    done = m.poll_stats_listener()
    assert [(d["operator"], d["from"], d["to"]) for d in done] == [("count", 1, 3)]
    assert m.poll_stats_listener() == []          # at most once a second
    new = run.ops("count")
    assert m.launcher.launched == [op.container for op in new]
    merged = {}
    for k, op in enumerate(new):
        state = pickle.loads((tmp_path / "checkpoints" / str(op.id) / str(run.w(5))).read_bytes())
        assert all(owner_of(3)(w) == k for w in state["totals"])
        merged.update(state["totals"])
    assert merged == totals
    assert m.purger.drain(10)                     # deleted by the master's purger thread
    assert not ckpt.exists()                      # the old partition's checkpoints are deleted
    assert (tmp_path / "journal" / "snapshot").exists()
    events = [e["text"] for e in m.state.info()["events"] if e["kind"] == "scale"]
    assert any("(asked by the stats listener)" in t for t in events)

    # a listener that raises is reported once, never fatal
    def broken(stats):
        raise RuntimeError("boom")
    m.stats_listener, m._listener_millis = broken, 0
    run.heartbeat(run.op("split").container)
    assert m.poll_stats_listener() == []
    assert any("failed: RuntimeError: boom" in e["text"] for e in m.state.info()["events"]
               if e["kind"] == "listener")
    # a request the master refuses is logged, not raised
    m.stats_listener, m._listener_millis = (lambda stats: {"nope": 2}), 0
    run.heartbeat(run.op("split").container)
    assert m.poll_stats_listener() == []
    assert any("no operator 'nope'" in e["text"] for e in m.state.info()["events"] if e["kind"] == "listener")


def test_admin_api_returns_what_was_done_and_refusals(tmp_path):
    from stram.master.admin.rest import create_app
    from stram.master.process import master as master_mod
    m = master_mod.AppMaster(AppSpec.from_yaml(wordcount(3)), "app-admin", f"file://{tmp_path}", TOKEN,
                             FakeLauncher())
    run = Run.around(m.state)
    run.deploy()
    m.scale_wait = 0.3
    client = create_app(m).test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    r = client.post("/ws/v2/stram/operators/count/partitions", json={"count": 2})
    assert r.status_code == 400
    assert r.get_json() == {"error": "no common checkpoint of count yet; try again in a few seconds"}
    run.everyone(7, 5)
    for op in run.ops("count") + run.ops("unifier"):
        path = tmp_path / "checkpoints" / str(op.id) / str(run.w(5))
        path.parent.mkdir(parents=True)
        path.write_bytes(pickle.dumps({"totals": {}}))
    r = client.post("/ws/v2/stram/operators/count/partitions", json={"count": 2})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert (body["from"], body["to"], body["window"]) == (3, 2, run.w(5))
    assert len(body["added"]) == 2 and len(body["containers_launched"]) == 2
    assert any("refused count → 2: no common checkpoint" in e["text"] for e in m.state.info()["events"])
    # one consistent snapshot: info, operators and containers of the same moment
    snap = client.get("/ws/v2/stram/snapshot").get_json()
    assert set(snap) == {"info", "operators", "containers"}
    assert snap["info"]["operators"] == len(snap["operators"]) == len(m.state.plan.operators)
    assert {r["id"] for r in snap["operators"]} == set(m.state.plan.operators)
    assert {c["id"] for c in snap["containers"]} == set(m.state.plan.containers)


# ================================================================ end to end
