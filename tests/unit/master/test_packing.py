"""Operators packed into fewer containers than their locality groups (CONTAINERS_MAX_COUNT).

Pure: a MasterState driven by hand-written heartbeats (tests/kits/statekit.py). Packing puts
partitions of one stage beside partitions of the next, so containers feed each other both ways;
every such plan must deploy, and every tuple must still reach each consumer once: a keyed stream
between partitions in one container goes through that container's buffer server (which picks out
the partition's keys), never inline (which would hand every partition all of them).

The plan of ``PIPELINE`` (a NEXMark q9 shape)::

    auction[0..1] ─┐ keyed
                   ├─▶ join[0..1] ═THREAD_LOCAL═▶ valid[0..1] ──keyed──▶ winner[0..2]
    bid[0..1] ─────┘                                                          ║ THREAD_LOCAL
                                       out ◀═THREAD_LOCAL═ unifier ◀── row[0..2]
"""

from __future__ import annotations

from collections import Counter

import pytest
from statekit import StateRun

from stram import wire as proto
from stram.master.core.plan import PUBLISHER_TAG_MASK, ContainerState, OperatorState

PIPELINE = """
name: packed
attributes: {{PROCESSING_MODE: EXACTLY_ONCE{extra}}}
operators:
  auction: {{class: spec_fixture_ops:Source, partitions: 2}}
  bid: {{class: spec_fixture_ops:Source, partitions: 2}}
  join: {{class: spec_fixture_ops:Join, partitions: 2}}
  valid: {{class: spec_fixture_ops:Upper, partitions: 2}}
  winner: {{class: spec_fixture_ops:Upper, partitions: 3}}
  row: {{class: spec_fixture_ops:Upper, partitions: 3}}
  out: {{class: spec_fixture_ops:Sink}}
streams:
  a: {{from: auction.output, to: [join.left]}}
  b: {{from: bid.output, to: [join.right]}}
  j: {{from: join.output, to: [valid.input], locality: THREAD_LOCAL}}
  v: {{from: valid.output, to: [winner.input]}}
  w: {{from: winner.output, to: [row.input], locality: THREAD_LOCAL}}
  r: {{from: row.output, to: [out.input]}}
"""

#   src ──▶ mid ──▶ out,  src and out in one container (an affinity rule): that container and mid's
#   feed each other, with no packing at all
BOTH_WAYS = """
name: both-ways
attributes: {AFFINITY_RULES: [{type: AFFINITY, locality: CONTAINER_LOCAL, operators: [src, out]}]}
operators:
  src: {class: spec_fixture_ops:Source, partitions: 2}
  mid: {class: spec_fixture_ops:Upper, partitions: 2}
  out: {class: spec_fixture_ops:Sink, partitions: 2}
streams:
  a: {from: src.output, to: [mid.input]}
  b: {from: mid.output, to: [out.input]}
"""

INLINE = (proto.THREAD_LOCAL, proto.CONTAINER_LOCAL)


def pipeline(count: int | None) -> str:
    return PIPELINE.format(extra=f", CONTAINERS_MAX_COUNT: {count}" if count else "")


def deploy_all(run: StateRun) -> dict[int, proto.OperatorDeployInfo]:
    """Every container heartbeats, round after round (as many as there are containers, and two
    more), until nothing waits to deploy; the deploy infos sent, by operator id."""
    plan = run.state.plan
    infos: dict[int, proto.OperatorDeployInfo] = {}
    for _ in range(len(plan.containers) + 2):
        for container in list(plan.containers.values()):
            if container.state not in (ContainerState.LOST, ContainerState.RELEASED):
                response, _ = run.heartbeat(container.id)
                infos.update((info.id, info) for info in response.deploy_request)
        if not any(op.state == OperatorState.PENDING_DEPLOY for op in plan.operators.values()):
            break
    waiting = sorted(op.label for op in plan.operators.values() if op.state == OperatorState.PENDING_DEPLOY)
    assert not waiting, f"never deployed: {waiting}"
    return infos


def deliveries(run: StateRun, infos: dict[int, proto.OperatorDeployInfo]) -> Counter:
    """How many times a tuple of each tag value (its key's hash, masked as wide as any publisher tags)
    from each publisher reaches each consumer: a logical operator's partitions together (a unifier on
    its own), by what the deploy infos tell the agents. An inline input gets every tuple its source
    emits; one through a buffer server the tuples whose tag its mask and keys select there."""
    plan = run.state.plan
    remote_outputs = {(info.id, out.port_name) for info in infos.values() for out in info.outputs if out.remote}
    got: Counter = Counter()
    for info in infos.values():
        op = plan.operators[info.id]
        consumer = op.label if op.kind == "UNIFIER" else op.name
        for inp in info.inputs:
            source = plan.operators[inp.source_node_id]
            if inp.locality in INLINE:
                assert source.container == op.container, (op.label, source.label)
                tags = range(PUBLISHER_TAG_MASK + 1)
            else:  # the source's own buffer server (in this container or not), which it publishes to
                assert (inp.buffer_server_host, inp.buffer_server_port) == \
                    plan.containers[source.container].buffer_server, (op.label, source.label)
                assert (source.id, inp.source_port_name) in remote_outputs, (op.label, source.label)
                tags = [t for t in range(PUBLISHER_TAG_MASK + 1)
                        if not inp.partition_mask or t & inp.partition_mask in inp.partition_keys]
            for tag in tags:
                got[(source.label, inp.source_port_name, consumer, inp.port_name, tag)] += 1
    return got


@pytest.mark.parametrize("count", [1, 2, 3, 5, None])
def test_a_packed_pipeline_deploys_and_every_tuple_reaches_each_consumer_once(count):
    run = StateRun(pipeline(count))
    plan = run.state.plan
    assert len(plan.containers) == (count or 10)
    infos = deploy_all(run)
    assert set(infos) == set(plan.operators)
    got = deliveries(run, infos)
    # every physical stream of the plan, every tag value
    streams = {(plan.operators[i.source_id].label, i.source_port, op.label if op.kind == "UNIFIER" else op.name,
                i.port) for op in plan.operators.values() for i in op.inputs}
    assert {key[:4] for key in got} == streams
    assert len(got) == len(streams) * (PUBLISHER_TAG_MASK + 1)
    assert {key: n for key, n in got.items() if n != 1} == {}


def test_containers_feeding_each_other_without_packing_deploy():
    run = StateRun(BOTH_WAYS)
    plan = run.state.plan
    src, out = plan.partitions("src"), plan.partitions("out")
    assert [s.container for s in src] == [o.container for o in out]
    got = deliveries(run, deploy_all(run))
    assert set(got.values()) == {1}


def test_a_subscriber_waits_until_its_publishers_old_windows_are_reset():
    # packed into 2 containers, auction[0]'s lost: the other container's operators downstream of it
    # redeploy in place (undeploy, publisher reset, deploy); the replacement's operators that
    # subscribe to them wait until that container's heartbeat took the reset, not for their deploy
    run = StateRun(pipeline(2))
    run.deploy()
    plan = run.state.plan
    lost = run.cid("auction[0]")
    (other,) = [c for c in plan.containers if c != lost]
    (launch,) = run.exited(lost)
    new = launch.container_id
    mine = {op.id for op in plan.operators.values() if op.container == new}
    theirs = {op.id for op in plan.operators.values() if op.container == other
              if op.state == OperatorState.PENDING_DEPLOY}
    assert theirs, "nothing redeployed in place"
    subscribers = {op.id for op in plan.operators.values() if op.id in mine
                   and any(i.source_id in theirs for i in op.inputs)}
    assert subscribers, "nothing in the replacement reads from the other container's redeployed operators"
    response, _ = run.heartbeat(new)
    assert not response.deploy_request
    assert all(plan.operators[o].state == OperatorState.PENDING_DEPLOY for o in mine)
    running = [run.report(o, 0) for o in sorted(plan.containers[other].operators)
               if plan.operators[o].state == OperatorState.ACTIVE]
    response, _ = run.heartbeat(other, *running)
    assert set(response.undeploy_request) >= theirs and response.reset_publishers
    assert {info.id for info in response.deploy_request} == theirs  # its publishers: the new container runs
    response, _ = run.heartbeat(new)
    assert {info.id for info in response.deploy_request} == mine
