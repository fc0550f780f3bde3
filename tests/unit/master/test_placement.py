"""Placement planning: what each container launch asks for, on a fake cluster of 3 hosts in 2 racks.

The pure MasterState is started; its LaunchContainer instructions are checked against what the rules
say, computed here from the plan (which containers hold which operators), not copied from the code.
"""

from __future__ import annotations

import collections

import pytest

from stram.master.core.events import Start
from stram.master.core.instructions import Finish, LaunchContainer
from stram.master.core.lifecycle import launch
from stram.master.core.plan import ContainerState
from stram.master.core.state import MasterState
from stram.master.spec import AppSpec, SpecError

START_MILLIS = 1_700_000_000_000
NODES = [("h1", "/rack1"), ("h2", "/rack2"), ("h3", "/rack1")]
RACK = dict(NODES)
NOW = 1000

READER = '{class: "stram.operators.io:LineReader", properties: {path: x.txt}}'
SPLIT = '{class: "stram.operators.text:WordSplitter"'
COUNT = '{class: "stram.operators.aggregate:KeyCounter"'
OUT = '{class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/x}'


def spec_text(split: int = 1, count: int = 1, lines: str = "", words: str = "", counts: str = "",
              attributes: str = "", split_attrs: str = "", count_attrs: str = "", reader_attrs: str = "") -> str:
    def loc(value: str) -> str:
        return f", locality: {value}" if value else ""
    reader = READER[:-1] + (f", attributes: {{{reader_attrs}}}}}" if reader_attrs else "}")
    return f"""
name: placed
attributes: {{{attributes}}}
operators:
  reader: {reader}
  split: {SPLIT}, partitions: {split}, attributes: {{{split_attrs}}}}}
  count: {COUNT}, partitions: {count}, attributes: {{{count_attrs}}}}}
  out: {OUT}}}
streams:
  lines: {{from: reader.output, to: [split.input]{loc(lines)}}}
  words: {{from: split.output, to: [count.input]{loc(words)}}}
  counts: {{from: count.output, to: [out.input]{loc(counts)}}}
"""


def started(text: str, nodes=NODES, blacklist=None):  # noqa: ANN001, ANN201
    state = MasterState(AppSpec.from_yaml(text), "app-place", "file:///tmp/app-place", "tok", START_MILLIS, 0)
    state.cluster_nodes = list(nodes)
    if blacklist is not None:
        state.blacklist = dict(blacklist)
    out = state.handle(Start(NOW))
    return state, {i.container_id: i for i in out if isinstance(i, LaunchContainer)}, out


def containers(state: MasterState, name: str) -> list[str]:
    """The containers of operator ``name``'s partitions, by partition index."""
    return [op.container for op in state.plan.partitions(name)]


def hosts_of(launches: dict[str, LaunchContainer], cids) -> list[str]:  # noqa: ANN001
    return [launches[c].hosts[0] if launches[c].hosts else "" for c in cids]


def test_node_local_stream_puts_both_ends_on_one_known_host():
    state, launches, _ = started(spec_text(lines="NODE_LOCAL"))
    (reader,), (split,) = containers(state, "reader"), containers(state, "split")
    assert reader != split
    assert launches[reader].hosts and launches[reader].hosts == launches[split].hosts
    assert launches[reader].hosts[0] in RACK
    # the containers no rule touches ask for nothing
    for name in ("count", "out"):
        (cid,) = containers(state, name)
        assert launches[cid].hosts == () and launches[cid].racks == ()


def test_node_local_groups_spread_over_the_least_loaded_nodes():
    # partition-parallel NODE_LOCAL pairs: each pair one group; 3 groups on 3 nodes: one each
    text = spec_text(split=3, count=3, words="NODE_LOCAL").replace(
        "partitions: 3, attributes: {}}\n  out", "partitions: 3, attributes: {}, "
        "port_attributes: {input: {PARTITION_PARALLEL: true}}}\n  out")
    state, launches, _ = started(text)
    splits, counts = containers(state, "split"), containers(state, "count")
    pairs = [(hosts_of(launches, [s])[0], hosts_of(launches, [c])[0]) for s, c in zip(splits, counts)]
    assert all(a == b and a for a, b in pairs), pairs
    assert sorted(a for a, _ in pairs) == sorted(RACK)


def test_node_local_follows_the_running_peer():
    state, launches, _ = started(spec_text(lines="NODE_LOCAL"))
    (reader,), (split,) = containers(state, "reader"), containers(state, "split")
    wanted = launches[reader].hosts[0]
    other = next(h for h in RACK if h != wanted)
    # the reader ended up elsewhere (YARN relaxed it) and runs there: the split follows it
    peer = state.plan.containers[reader]
    peer.state, peer.host = ContainerState.RUNNING, other
    again = launch(state, state.plan.containers[split], NOW + 1)
    assert again.hosts == (other,)


def test_rack_local_asks_for_the_peers_rack():
    state, launches, _ = started(spec_text(counts="RACK_LOCAL"))
    (count,), (out,) = containers(state, "count"), containers(state, "out")
    assert launches[count].racks and launches[count].racks == launches[out].racks
    assert launches[count].hosts == () and launches[out].hosts == ()
    peer = state.plan.containers[count]
    peer.state, peer.host = ContainerState.RUNNING, "h2"
    assert launch(state, state.plan.containers[out], NOW + 1).racks == (RACK["h2"],)


def test_affinity_rule_puts_unconnected_operators_on_one_node():
    rules = "AFFINITY_RULES: [{type: AFFINITY, operators: [reader, out]}]"
    state, launches, _ = started(spec_text(attributes=rules))
    (reader,), (out,) = containers(state, "reader"), containers(state, "out")
    assert launches[reader].hosts and launches[reader].hosts == launches[out].hosts


def test_container_local_affinity_shares_a_container():
    rules = "AFFINITY_RULES: [{type: AFFINITY, locality: CONTAINER_LOCAL, operators: [reader, out]}]"
    state, _, _ = started(spec_text(attributes=rules))
    assert containers(state, "reader") == containers(state, "out")
    plain, _, _ = started(spec_text())
    assert containers(plain, "reader") != containers(plain, "out")


def test_anti_affinity_of_partitions_takes_distinct_hosts():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    state, launches, _ = started(spec_text(count=3, attributes=rules))
    cids = containers(state, "count")
    hosts = hosts_of(launches, cids)
    assert sorted(hosts) == sorted(RACK)
    for cid, host in zip(cids, hosts):
        others = {h for c, h in zip(cids, hosts) if c != cid}
        # a partition avoids the hosts its peers were asked for before it
        assert host not in launches[cid].avoid
        assert set(launches[cid].avoid) <= others


def test_anti_affinity_between_operators():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, regex: 'reader|out'}]"
    state, launches, _ = started(spec_text(attributes=rules))
    (reader,), (out,) = containers(state, "reader"), containers(state, "out")
    assert launches[reader].hosts and launches[out].hosts
    assert launches[reader].hosts[0] != launches[out].hosts[0]


def test_too_few_nodes_relaxed_rule_places_the_rest_anyhow():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    state, launches, out = started(spec_text(count=4, attributes=rules))
    assert not [i for i in out if isinstance(i, Finish)] and state.state == "RUNNING"
    hosts = hosts_of(launches, containers(state, "count"))
    # as far apart as 3 nodes allow: every node used, the fourth on one of them
    assert all(hosts) and set(hosts) == set(RACK) and max(collections.Counter(hosts).values()) == 2
    assert all(launches[c].relax for c in containers(state, "count"))
    assert any("needs 4 nodes, the cluster has 3" in e.text for e in state.events if e.kind == "placement")


def test_too_few_nodes_strict_rule_fails_before_launching():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count], relax: false}]"
    state, launches, out = started(spec_text(count=4, attributes=rules))
    assert launches == {}
    assert [i.state for i in out if isinstance(i, Finish)] == ["FAILED"]
    assert "ANTI_AFFINITY of 'count' needs 4 nodes, the cluster has 3" in state.diagnostics
    # with enough nodes the same rule holds strictly
    state, launches, out = started(spec_text(count=3, attributes=rules))
    assert state.state == "RUNNING" and all(not launches[c].relax for c in containers(state, "count"))


def test_strict_rule_that_stops_holding_at_a_launch_fails_the_application():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count], relax: false}]"
    state, launches, _ = started(spec_text(count=3, attributes=rules))
    cids = containers(state, "count")
    for cid in cids[1:]:
        state.plan.containers[cid].state, state.plan.containers[cid].host = ContainerState.RUNNING, \
            launches[cid].hosts[0]
    state.blacklist = {launches[cids[0]].hosts[0]: START_MILLIS * 2}  # its own node is gone now
    launch(state, state.plan.containers[cids[0]], NOW + 1)
    assert state.state == "FAILED" and "needs 3 nodes, the cluster has 2" in state.diagnostics


def test_anti_affinity_avoids_a_peers_node_even_when_it_is_the_least_loaded():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    state, _, _ = started(spec_text(count=2, attributes=rules))
    first, second = containers(state, "count")
    running = {first: "h1"}
    # every other container runs on h2 or h3, so h1 is the least loaded node
    others = [c for c in state.plan.containers if c not in (first, second)]
    running.update({c: ("h2", "h3")[i % 2] for i, c in enumerate(others)})
    for cid, host in running.items():
        state.plan.containers[cid].state, state.plan.containers[cid].host = ContainerState.RUNNING, host
    load = collections.Counter(running.values())
    assert min(RACK, key=lambda h: load[h]) == "h1"
    again = launch(state, state.plan.containers[second], NOW + 1)
    assert again.hosts and again.hosts[0] != "h1" and "h1" in again.avoid


def test_blacklisted_nodes_do_not_count_for_a_strict_rule():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count], relax: false}]"
    state, launches, _ = started(spec_text(count=3, attributes=rules), blacklist={"h2": NOW + 10})
    assert launches == {} and "needs 3 nodes, the cluster has 2 (1 blacklisted)" in state.diagnostics


def test_blacklisted_hosts_are_avoided_until_their_time():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    state, launches, _ = started(spec_text(count=2, attributes=rules), blacklist={"h1": NOW + 10, "h3": NOW - 1})
    for cid, launched in launches.items():
        assert "h1" in launched.avoid and "h3" not in launched.avoid, cid
    assert sorted(hosts_of(launches, containers(state, "count"))) == ["h2", "h3"]


def test_no_known_nodes_relaxes_everything_but_locality_host():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    text = spec_text(count=2, lines="NODE_LOCAL", attributes=rules, reader_attrs="LOCALITY_HOST: pinned")
    state, launches, _ = started(text, nodes=[])
    (reader,) = containers(state, "reader")
    assert launches[reader].hosts == ("pinned",)
    assert all(i.hosts == () and i.racks == () and i.relax for c, i in launches.items() if c != reader)
    assert any("knows no nodes" in e.text for e in state.events)


def test_locality_host_comes_after_the_chosen_host_and_node_label_passes():
    text = spec_text(lines="NODE_LOCAL", reader_attrs="LOCALITY_HOST: h9, NODE_LABEL: gpu")
    state, launches, _ = started(text)
    (reader,), (split,) = containers(state, "reader"), containers(state, "split")
    assert launches[reader].hosts[1:] == ("h9",) and launches[reader].hosts[0] == launches[split].hosts[0]
    assert launches[reader].node_label == "gpu" and launches[split].node_label is None


@pytest.mark.parametrize("attributes, reason", [
    ("AFFINITY_RULES: [{type: AFFINITY, operators: [reader, out]}, {type: ANTI_AFFINITY, operators: [out, reader]}]",
     "attributes.AFFINITY_RULES[1]: ANTI_AFFINITY of 'out', 'reader' contradicts itself: 'out' and 'reader' must "
     "share a node (attributes.AFFINITY_RULES[0] is AFFINITY of 'reader', 'out')"),
    ("AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [reader, split]}]",
     "'reader' and 'split' must share a node (stream 'lines' is NODE_LOCAL)"),
    ("AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [reader, nope]}]",
     "attributes.AFFINITY_RULES[0].operators: unknown operator 'nope'"),
    ("AFFINITY_RULES: [{type: ANTI_AFFINITY, regex: 'x.*'}]",
     "attributes.AFFINITY_RULES[0].regex: the regex matches no operator"),
    ("AFFINITY_RULES: [{type: AFFINITY, operators: [reader]}]",
     "AFFINITY needs two operators or more"),
    ("AFFINITY_RULES: [{type: ANTI_AFFINITY, locality: CONTAINER_LOCAL, operators: [reader, out]}]",
     "ANTI_AFFINITY is between nodes"),
    ("AFFINITY_RULES: [{type: AFFINITY, locality: CONTAINER_LOCAL, operators: [count, out]}]",
     "they need the same partition count, got 'count' 2, 'out' 1"),
    ("AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}, {type: AFFINITY, operators: [count, out]}]",
     "wants its 2 partitions on distinct nodes, but 'out' (1 partition) shares their nodes"),
    ("AFFINITY_RULES: [{type: SAME, operators: [a]}]",
     "attributes.AFFINITY_RULES: rule 0: 'type' must be one of AFFINITY, ANTI_AFFINITY, got 'SAME'"),
    ("AFFINITY_RULES: [{type: AFFINITY, operators: [a, b], regex: c}]",
     "give either 'operators' (a list of operator names) or 'regex', not both or neither"),
])
def test_spec_refuses_rules_that_cannot_hold(attributes: str, reason: str):
    with pytest.raises(SpecError) as info:
        AppSpec.from_yaml(spec_text(count=2, lines="NODE_LOCAL", attributes=attributes))
    assert reason in str(info.value)


def test_spec_refuses_different_labels_on_one_node():
    with pytest.raises(SpecError) as info:
        AppSpec.from_yaml(spec_text(lines="CONTAINER_LOCAL", reader_attrs="NODE_LABEL: gpu",
                                    split_attrs="NODE_LABEL: ssd"))
    assert "operators.split.attributes.NODE_LABEL: 'split' asks for node label 'ssd' but 'reader'" in str(info.value)
    AppSpec.from_yaml(spec_text(reader_attrs="NODE_LABEL: gpu", split_attrs="NODE_LABEL: ssd"))  # apart: fine


def test_rules_from_an_override_string():
    spec = AppSpec.from_yaml(spec_text(count=2), overrides=[
        "AFFINITY_RULES=[{type: anti_affinity, operators: [count], relax: false}]"])
    assert spec.attribute("AFFINITY_RULES") == [
        {"type": "ANTI_AFFINITY", "locality": "NODE_LOCAL", "operators": ["count"], "relax": False}]
    assert AppSpec.from_dict(spec.to_dict()) == spec


def test_picks_are_spread_and_stay_deterministic():
    rules = "AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count]}]"
    first = started(spec_text(count=3, attributes=rules))[1]
    second = started(spec_text(count=3, attributes=rules))[1]
    assert first == second
    load = collections.Counter(i.hosts[0] for i in first.values() if i.hosts)
    assert max(load.values()) == 1


def test_anti_affine_partitions_packed_into_one_container_fail_a_strict_rule():
    rules = "CONTAINERS_MAX_COUNT: 1, AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count], relax: false}]"
    state, launches, _ = started(spec_text(count=2, attributes=rules))
    (cid,) = set(containers(state, "count"))
    assert launches == {} and f"{cid} holds more than one of them" in state.diagnostics
    relaxed, launches, _ = started(spec_text(count=2, attributes=rules.replace("false", "true")))
    assert relaxed.state == "RUNNING" and len(launches) == 1
