"""Nodes that lose containers: counted, blacklisted, back in use; never every node; shown and journaled.

Pure: a MasterState driven by hand-written heartbeats and container ends (tests/kits/statekit.py);
the expected blacklist comes from :class:`Oracle`, the rule written out plainly.
"""

from __future__ import annotations

import json
import random

import pytest
from statekit import FakeLauncher, StateRun

from stram.client import cli
from stram.master.core.events import ContainerExited, KillContainerRequest
from stram.master.core.instructions import LaunchContainer
from stram.master.core.lifecycle import launch
from stram.master.core.nodes import container_ended, fine_after_millis
from stram.master.core.state import MasterState
from stram.master.journal import document as journal
from stram.master.launch.local import NODE_LOST_EXIT
from stram.master.process import placing
from stram.master.spec import AppSpec

LIMIT, REMOVAL = 3, 86_400_000  # a day: longer than every test's clock runs
SPEC = f"""
name: nodes
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_TIMEOUT_MILLIS: 3000,
             MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST: {LIMIT},
             BLACKLISTED_NODE_REMOVAL_TIME_MILLIS: {REMOVAL}}}
operators:
  src: {{class: spec_fixture_ops:Source}}
  out: {{class: spec_fixture_ops:Sink}}
streams:
  a: {{from: src.output, to: [out.input]}}
"""
NODES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def run(nodes=NODES) -> StateRun:
    r = StateRun(SPEC)
    r.state.cluster_nodes = [(h, "/rack1") for h in nodes]
    r.deploy()
    return r


def end(r: StateRun, node: str | None, code: int | None = 1, name: str = "src", unplaceable: str = ""):
    """The container of ``name`` ends on ``node``; its replacement is launched (the backoff passes)."""
    r.now += 1000
    instructions = r.state.handle(ContainerExited(r.cid(name), code, r.now, node=node, unplaceable=unplaceable))
    r.state.validate_state()
    r.now += 120_000
    r.state.tick(r.now)
    return instructions


def blacklist(r: StateRun) -> set[str]:
    return set(r.state.blacklist)


class Oracle:
    """The rule: a failure counts for its node unless it is blacklisted; LIMIT in a row blacklist it
    unless every known node would be, then the one blacklisted longest goes back; a clean end resets."""

    def __init__(self, known: list[str]) -> None:
        self.known = set(known)
        self.count: dict[str, int] = {}
        self.order: list[str] = []  # blacklisted, oldest first

    def failure(self, node: str) -> None:
        self.known.add(node)
        if node in self.order:
            return
        self.count[node] = self.count.get(node, 0) + 1
        if self.count[node] >= LIMIT:
            self.order.append(node)
            if set(self.order) >= self.known:
                self.count.pop(self.order.pop(0))

    def clean(self, node: str) -> None:
        if node not in self.order:
            self.count.pop(node, None)


def test_consecutive_failures_blacklist_a_node_and_it_becomes_avoided():
    r = run()
    for n in range(LIMIT - 1):
        end(r, "127.0.0.3")
        end(r, "127.0.0.2")  # another node's failure does not reset this one's count
    assert blacklist(r) == set() and r.state.node_failures == {"127.0.0.3": LIMIT - 1, "127.0.0.2": LIMIT - 1}
    end(r, "127.0.0.3")
    assert blacklist(r) == {"127.0.0.3"}
    assert any(e.text.startswith(f"node 127.0.0.3 blacklisted after {LIMIT} container failures")
               for e in r.state.events)
    info = r.state.info()
    assert info["blacklistedNodes"] == [{"host": "127.0.0.3", "failures": LIMIT,
                                         "until": r.state.blacklist["127.0.0.3"]}]
    until = r.state.blacklist["127.0.0.3"]
    assert until - r.now <= REMOVAL and until > r.now
    # the next launch request avoids it (the planner puts the blacklist among the hosts to avoid)
    ins = launch(r.state, r.state.plan.containers[r.cid("out")], r.now)
    assert placing.container_request(ins, {}).avoid == ("127.0.0.3",)
    own = LaunchContainer("c", 1, 1, (), racks=("/r",), node_label="gpu", avoid=("127.0.0.4",), relax=False)
    req = placing.container_request(own, {})
    assert (req.avoid, req.racks, req.node_label, req.relax) == (("127.0.0.4",), ("/r",), "gpu", False)


def test_random_failures_and_clean_ends_follow_the_rule():
    rng = random.Random(51)
    r = run()
    oracle = Oracle(NODES)
    for _ in range(60):
        node = rng.choice(NODES)
        if rng.random() < 0.2:
            # a container the master stopped (a scale-down, the end) exits cleanly: the node ran it fine
            container_ended(r.state, r.state.plan.containers[r.cid("out")], node, 0, r.now, stopped_by_master=True)
            oracle.clean(node)
        else:
            end(r, node)
            oracle.failure(node)
        assert blacklist(r) == set(oracle.order)
        assert {h: n for h, n in r.state.node_failures.items() if n} == \
            {h: n for h, n in oracle.count.items() if n}


def test_a_container_counts_once_and_an_end_without_a_code_counts():
    r = run()
    cid = r.cid("src")
    r.state.handle(ContainerExited(cid, 1, r.now, node="127.0.0.2"))  # lost and recovered: counts once
    assert r.state.node_failures == {"127.0.0.2": 1}
    r.state.handle(ContainerExited(cid, 137, r.now, node="127.0.0.2"))  # the same container again: gone
    assert r.state.node_failures == {"127.0.0.2": 1}
    r.now += 120_000
    r.state.tick(r.now)
    r.deploy()
    killed = r.cid("src")
    r.state.handle(ContainerExited(killed, None, r.now, node="127.0.0.3"))
    r.state.validate_state()
    assert "127.0.0.3" in r.state.node_failures  # not stopped by the master: counted though no code


def test_a_container_lost_with_its_node_counts_even_after_the_master_gave_it_up():
    r = run()
    cid = r.cid("src")
    r.now += 10_000  # no heartbeat for longer than HEARTBEAT_TIMEOUT_MILLIS: the master kills and replaces it
    r.state.tick(r.now)
    assert r.state.plan.containers[cid].state == "LOST" and r.state.node_failures == {}
    # it went silent on its node (as when the node is lost): its end counts, whatever the kill's code
    r.state.handle(ContainerExited(cid, 137, r.now, node="127.0.0.4"))
    assert r.state.node_failures == {"127.0.0.4": 1}
    other = r.state.plan.containers[r.cid("out")]
    r.state.handle(ContainerExited(other.id, NODE_LOST_EXIT, r.now, node="127.0.0.4"))
    assert r.state.node_failures == {"127.0.0.4": 2}


def test_a_kill_asked_for_is_not_the_nodes_failure():
    r = run()
    cid = r.cid("src")
    r.state.handle(KillContainerRequest(cid, r.now))  # `stram kill-container`: the master stops it
    r.state.handle(ContainerExited(cid, 137, r.now, node="127.0.0.2"))
    assert r.state.node_failures == {}


def test_a_container_running_fine_resets_its_nodes_count():
    r = run()
    end(r, "127.0.0.2")
    end(r, "127.0.0.2")
    assert r.state.node_failures == {"127.0.0.2": 2}
    r.deploy()
    replacement = r.state.plan.containers[r.cid("src")]
    replacement.host = "127.0.0.2"  # its heartbeats' host
    r.now = replacement.launch_at + fine_after_millis(r.state) - 1
    r.deploy()
    r.state.tick(replacement.launch_at + fine_after_millis(r.state) - 1)
    assert r.state.node_failures == {"127.0.0.2": 2}
    r.state.tick(replacement.launch_at + fine_after_millis(r.state))
    assert r.state.node_failures == {}


def test_the_blacklist_expires():
    r = run()
    for _ in range(LIMIT):
        end(r, "127.0.0.4")
    until = r.state.blacklist["127.0.0.4"]
    r.state.tick(until - 1)
    assert blacklist(r) == {"127.0.0.4"}
    r.state.tick(until)
    assert blacklist(r) == set() and r.state.node_failures == {} and r.state.info()["blacklistedNodes"] == []
    assert any(e.text.startswith("node 127.0.0.4 back in use") for e in r.state.events)


def test_never_every_known_node():
    r = run(NODES[:2])
    for _ in range(LIMIT):
        end(r, "127.0.0.2")
    for _ in range(LIMIT):
        end(r, "127.0.0.3")
    assert blacklist(r) == {"127.0.0.3"}  # 127.0.0.2, blacklisted longest, is let out
    assert any("node 127.0.0.2 back in use: every known node would be blacklisted" in e.text for e in r.state.events)
    # one node (locally: no cluster nodes, every container on 127.0.0.1): never blacklisted
    r = run([])
    for _ in range(2 * LIMIT):
        end(r, "127.0.0.1")
    assert blacklist(r) == set()
    assert any(e.text.startswith(f"node 127.0.0.1 not blacklisted after {LIMIT} container failures")
               for e in r.state.events)


def test_the_blacklist_survives_a_new_master_attempt_and_old_journals_have_none():
    r = run()
    for _ in range(LIMIT):
        end(r, "127.0.0.3")
    end(r, "127.0.0.2")
    spec = AppSpec.from_yaml(SPEC)
    snapshot = journal.decode(journal.encode(r.state.snapshot()))
    restored = MasterState.restore(spec, snapshot, "file:///tmp/nodes", "tok", r.now)
    assert restored.blacklist == r.state.blacklist and restored.node_failures == r.state.node_failures
    for key in ("blacklist", "node_failures"):
        del snapshot[key]
    old = MasterState.restore(spec, snapshot, "file:///tmp/nodes", "tok", r.now)
    assert old.blacklist == {} and old.node_failures == {}


def test_an_unplaceable_container_fails_the_application_naming_its_operators():
    r = run()
    end(r, None, None, unplaceable="YARN gave container_000001 no container on host 127.0.0.9 within 30000 ms")
    assert r.state.state == "FAILED"
    assert "host 127.0.0.9" in r.state.diagnostics and "src" in r.state.diagnostics


def test_the_rest_info_and_get_app_info_show_the_blacklist(tmp_path, monkeypatch, capsys):
    from stram.master.admin.auth import AdminAuth
    from stram.master.admin.rest import create_app
    from stram.master.process import master as master_mod

    m = master_mod.AppMaster(AppSpec.from_yaml(SPEC), "app-nodes", f"file://{tmp_path}", "tok", FakeLauncher())
    r = StateRun.around(m.state)
    r.state.cluster_nodes = [(h, "/rack1") for h in NODES]
    r.deploy()
    for _ in range(LIMIT):
        end(r, "127.0.0.3")
    until = m.state.blacklist["127.0.0.3"]
    client = create_app(m, AdminAuth("tok")).test_client()
    info = client.get("/ws/v2/stram/info", headers={"Authorization": "Bearer tok"}).get_json()
    assert info["blacklistedNodes"] == [{"host": "127.0.0.3", "failures": LIMIT, "until": until}]
    monkeypatch.setattr(cli, "find_app", lambda app: {"id": app})
    monkeypatch.setattr(cli, "app_info", lambda app: info)
    assert cli.main(["get-app-info", "app-nodes"]) == 0
    text = capsys.readouterr().out
    assert f"blacklisted node 127.0.0.3: {LIMIT} container failures, until {cli.utc_time(until)}" in text
    assert cli.main(["get-app-info", "--json", "app-nodes"]) == 0
    assert json.loads(capsys.readouterr().out)["blacklistedNodes"] == info["blacklistedNodes"]


@pytest.mark.parametrize("millis, text", [(0, "1970-01-01 00:00:00 UTC"),
                                         (86_400_000 + 61_000, "1970-01-02 00:01:01 UTC")])
def test_utc_time(millis, text):
    assert cli.utc_time(millis) == text


def test_prepare_takes_the_launchers_nodes_its_timeout_and_the_clients_note(monkeypatch):
    from stram.common.skeinkeys import PLACEMENT_NOTE_ENV

    class Placing(FakeLauncher):
        placement_timeout_millis = 1

        def nodes(self):
            return [("127.0.0.2", "/rack1"), ("127.0.0.3", "/rack2")]

    spec = AppSpec.from_yaml(SPEC.replace("STREAMING_WINDOW_SIZE_MILLIS: 100,",
                                          "STREAMING_WINDOW_SIZE_MILLIS: 100, PLACEMENT_TIMEOUT_MILLIS: 4321,"))
    state = MasterState(spec, "app", "file:///tmp/app", "tok", 0, 0)
    launcher = Placing()
    monkeypatch.setenv(PLACEMENT_NOTE_ENV, "the cluster has 101 RUNNING nodes")
    placing.prepare(state, launcher, spec, 5)
    assert state.cluster_nodes == launcher.nodes() and launcher.placement_timeout_millis == 4321
    assert [(e.kind, e.text) for e in state.events][-1] == ("placement", "warning: the cluster has 101 RUNNING nodes")
    monkeypatch.delenv(PLACEMENT_NOTE_ENV)
    plain = MasterState(spec, "app", "file:///tmp/app", "tok", 0, 0)
    placing.prepare(plain, FakeLauncher(), spec, 5)  # a launcher without placement: none, and no note
    assert plain.cluster_nodes == [] and all(e.kind != "placement" for e in plain.events)


@pytest.mark.parametrize("silent_millis, counted", [(20_000, True), (500, False)])
def test_a_container_given_up_for_another_reason_counts_when_it_was_silent_too(silent_millis, counted):
    """An operator found blocked (or failed) in a container that had also stopped heartbeating (its
    node died) is the node's failure; in a container still heartbeating it is not."""
    from stram.master.core.recovery import recover
    r = run()
    container = r.state.plan.containers[r.cid("src")]
    container.last_heartbeat_millis = r.now - silent_millis  # three heartbeat intervals: 3000 ms here
    recover(r.state, [container.id], r.now, "operator src blocked", kill=True)
    r.state.handle(ContainerExited(container.id, 137, r.now, node="127.0.0.3"))
    assert r.state.node_failures == ({"127.0.0.3": 1} if counted else {})
