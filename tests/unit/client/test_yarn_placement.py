"""Placement on YARN: the services pinned to nodes, racks and labels at submit, and the master's launcher choosing them.

The application spec is skein's own model (checked by a YAML round trip); the launcher talks to
:class:`PlacingClient`, an object with ``skein.ApplicationClient``'s calls whose containers get a
node when the test says so.
"""

from __future__ import annotations

import pathlib

import pytest
import skein
import yaml

from stram.client import cli, yarn
from stram.client.yarn.appspec import add_pinned_services, running_nodes
from stram.common.skeinkeys import PLACEMENT_NOTE_ENV, RACK_ENV, parse_service, pinned_service
from stram.master.launch import yarn as yarnlauncher
from stram.master.launch.local import NODE_LOST_EXIT, ContainerRequest
from stram.master.spec import AppSpec

#: host -> rack of the cluster the tests pretend to have
CLUSTER = {"127.0.0.2": "/rack1", "127.0.0.3": "/rack2", "127.0.0.4": "/rack1"}


def nodes(cluster: dict[str, str] = CLUSTER, labels: dict[str, set[str]] | None = None):
    return [(h, r, frozenset((labels or {}).get(h, ()))) for h, r in sorted(cluster.items())]


def small_spec(tmp_path: pathlib.Path, attributes: dict | None = None) -> AppSpec:
    data = {"name": "small", "attributes": attributes or {},
            "operators": {"reader": {"class": "stram.operators.io:LineReader", "properties": {"path": "hdfs:///in"}},
                          "count": {"class": "stram.operators.aggregate:KeyCounter",
                                    "attributes": {"MEMORY_MB": 2048, "VCORES": 2}}},
            "streams": {"lines": {"from": "reader.output", "to": ["count.input"]}}}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return AppSpec.from_file(path)


def app_spec(tmp_path, attributes=None, cluster_nodes=None, **kwargs):
    spec = small_spec(tmp_path, attributes)
    aspec = yarn.application_spec(spec, None, staging_dir=str(tmp_path / "staging"), **kwargs)
    note = add_pinned_services(aspec, spec, cluster_nodes)
    again = skein.ApplicationSpec.from_yaml(aspec.to_yaml())
    assert again == aspec  # skein's own model takes it back
    return again, note


@pytest.fixture(autouse=True)
def _no_cluster_env(monkeypatch):
    for var in ("STRAM_PYTHON_ENV", "STRAM_YARN_APPS_DIR", "STRAM_YARN_NODE_LABEL"):
        monkeypatch.delenv(var, raising=False)


# ====================================================================== pinned services at submit

def test_pinned_services_per_node_and_rack_for_each_shape(tmp_path):
    aspec, note = app_spec(tmp_path, cluster_nodes=nodes())
    assert note == "" and PLACEMENT_NOTE_ENV not in aspec.master.env
    general = sorted(n for n in aspec.services if not parse_service(n)[1])
    assert len(general) == 2  # the default shape and the 2048 MB/2 vcores one
    racks = sorted(set(CLUSTER.values()))
    expected = set(general)
    for base in general:
        expected |= {pinned_service(base, host=h) for h in CLUSTER} | {pinned_service(base, rack=r) for r in racks}
    assert set(aspec.services) == expected
    for base in general:
        shape = aspec.services[base]
        for host, rack in CLUSTER.items():
            svc = aspec.services[f"{base}@{host}"]
            assert (svc.nodes, svc.racks, svc.relax_locality) == ([host], [], False)
            assert svc.resources == shape.resources and svc.script == shape.script
            assert svc.env == {**shape.env, RACK_ENV: rack}
            assert (svc.instances, svc.max_restarts, svc.allow_failures) == (0, 0, True)
        for rack in racks:
            svc = aspec.services[f"{base}@rack={rack}"]
            assert (svc.nodes, svc.racks, svc.relax_locality) == ([], [rack], False)
    # Skein's driver refuses a service name with ":" (it becomes part of HDFS path names)
    assert not [name for name in aspec.services if ":" in name]


def test_no_pinned_service_without_a_cluster_one_node_or_beyond_the_cap(tmp_path):
    for cluster_nodes in (None, [], nodes({"127.0.0.2": "/rack1"})):
        aspec, note = app_spec(tmp_path, cluster_nodes=cluster_nodes)
        assert all(not parse_service(n)[1] for n in aspec.services) and note == ""
    aspec, note = app_spec(tmp_path, {"PLACEMENT_MAX_NODES": 2}, cluster_nodes=nodes())
    assert all(not parse_service(n)[1] for n in aspec.services)
    assert "3 RUNNING nodes, more than PLACEMENT_MAX_NODES=2" in note
    assert aspec.master.env[PLACEMENT_NOTE_ENV] == note


def test_one_rack_gets_no_rack_service_and_the_node_label_keeps_its_nodes(tmp_path):
    one_rack = {h: "/default-rack" for h in CLUSTER}
    aspec, _ = app_spec(tmp_path, cluster_nodes=nodes(one_rack))
    assert {parse_service(n)[1] for n in aspec.services} == {"", "host"}
    labelled = {"127.0.0.3": {"gpu"}, "127.0.0.4": {"gpu"}}
    aspec, _ = app_spec(tmp_path, cluster_nodes=nodes(labels=labelled), node_label="gpu")
    assert {parse_service(n)[2] for n in aspec.services if parse_service(n)[1] == "host"} == set(labelled)


def test_dry_run_prints_no_pinned_service(tmp_path, capsys):
    spec = small_spec(tmp_path)
    assert cli.main(["launch", "--yarn", "--dry-run", str(tmp_path / "small.yaml")]) == 0
    printed = skein.ApplicationSpec.from_yaml(capsys.readouterr().out)
    assert set(printed.services) == set(yarn.container_shapes(spec))


def test_running_nodes_asks_the_resourcemanager_for_running_nodes():
    asked = []

    class Client:
        def get_nodes(self, states=None):
            asked.append(states)
            return [skein.model.NodeReport(f"{h}:45454", f"{h}:8042", r, set(), "RUNNING", "",
                                           skein.Resources(8192, 8), skein.Resources(0, 0))
                    for h, r in CLUSTER.items()]

    assert running_nodes(Client()) == nodes()
    assert asked == [["RUNNING"]]


# ====================================================================== the launcher's choice

class PlacingClient:
    """``skein.ApplicationClient``'s calls: containers wait until :meth:`allocate` puts them on a node."""

    def __init__(self, aspec) -> None:
        self.spec = aspec
        self.added: list[str] = []  # skein ids, in order
        self.state: dict[str, tuple[str, str, str]] = {}  # skein id -> (state, node address, exit message)
        self.killed: list[str] = []

    def get_specification(self):
        return self.spec

    def add_container(self, service, env=None):
        n = sum(1 for cid in self.added if cid.rsplit("_", 1)[0] == service)
        cid = f"{service}_{n}"
        self.added.append(cid)
        self.state[cid] = ("REQUESTED", "", "")
        return skein.model.Container(service, n, "REQUESTED", "", "", None, None, "")

    def allocate(self, cid, host):
        self.state[cid] = ("RUNNING", f"{host}:8042", "")

    def end(self, cid, state, message):
        self.state[cid] = (state, self.state[cid][1], message)

    def kill_container(self, cid):
        self.killed.append(cid)
        self.end(cid, "KILLED", "Container killed on request. Exit code is 137")

    def get_containers(self, services=None, states=None):
        out = []
        for cid in self.added:
            service, n = cid.rsplit("_", 1)
            state, address, message = self.state[cid]
            if (services is None or service in services) and (states is None or state in states):
                out.append(skein.model.Container(service, int(n), state, f"c_{n}" if address else "", address,
                                                 None, None, message))
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def launcher_on(tmp_path, timeout_ms=1000):
    aspec, _ = app_spec(tmp_path, cluster_nodes=nodes())
    client = PlacingClient(aspec)
    launcher = yarnlauncher.YarnLauncher(client)
    launcher.clock = Clock()
    launcher.placement_timeout_millis = timeout_ms
    launcher.node_refresh_seconds = 0.0
    return launcher, client


def ask(cid, hosts=(), racks=(), avoid=(), relax=True, memory=1024, vcores=1):
    return ContainerRequest(cid, memory, vcores, tuple(hosts), {"STRAM_CONTAINER_ID": cid}, racks=tuple(racks),
                            avoid=tuple(avoid), relax=relax)


def expected_service(hosts, racks, avoid, usage, base="container"):
    """The rule of the launcher's choice, written out plainly (an oracle)."""
    for h in hosts:
        if h not in avoid and h in CLUSTER:
            return f"{base}@{h}"
    for r in racks:
        in_rack = [h for h, rr in sorted(CLUSTER.items()) if rr == r]
        if set(in_rack) & set(avoid):
            free = [h for h in in_rack if h not in avoid]
            if free:
                return f"{base}@{min(free, key=lambda h: usage.get(h, 0))}"
        else:
            return f"{base}@rack={r}"
    if avoid:
        free = [h for h in sorted(CLUSTER) if h not in avoid]
        if free:
            return f"{base}@{min(free, key=lambda h: usage.get(h, 0))}"
    return base


@pytest.mark.parametrize("hosts, racks, avoid", [
    ((), (), ()), (("127.0.0.3",), (), ()), (("127.0.0.9", "127.0.0.4"), (), ()),
    (("127.0.0.3",), (), ("127.0.0.3",)), ((), ("/rack1",), ()), ((), ("/rack1",), ("127.0.0.2",)),
    ((), ("/rack2",), ("127.0.0.3",)), ((), (), ("127.0.0.2",)), ((), (), tuple(CLUSTER)),
])
def test_the_launcher_picks_the_pinned_service_of_a_request(tmp_path, hosts, racks, avoid):
    launcher, client = launcher_on(tmp_path)
    client.add_container("container@127.0.0.4")  # another container of this app already runs there
    client.allocate("container@127.0.0.4_0", "127.0.0.4")
    launcher._live["container@127.0.0.4_0"] = "c0"
    usage = {"127.0.0.4": 1}
    launcher.launch(ask("c1", hosts, racks, avoid))
    assert client.added[-1].rsplit("_", 1)[0] == expected_service(hosts, racks, avoid, usage)
    assert launcher.nodes() == sorted(CLUSTER.items())


def test_a_bigger_shape_gets_its_own_pinned_service(tmp_path):
    launcher, client = launcher_on(tmp_path)
    launcher.launch(ask("c1", hosts=("127.0.0.2",), memory=2048, vcores=2))
    assert client.added == ["container-2048mb-2vc@127.0.0.2_0"]


def test_node_of_is_where_yarn_put_the_container_also_after_it_ended(tmp_path):
    launcher, client = launcher_on(tmp_path)
    launcher.launch(ask("c1"))
    assert launcher.node_of("c1") is None  # not allocated yet
    client.allocate("container_0", "127.0.0.3")
    assert launcher.node_of("c1") == "127.0.0.3"
    client.end("container_0", "FAILED", "Container released on a *lost* node")
    assert launcher.poll() == [("c1", NODE_LOST_EXIT)]
    assert launcher.node_of("c1") == "127.0.0.3"


@pytest.mark.parametrize("message, code", [
    ("Container released on a *lost* node", NODE_LOST_EXIT),
    ("Exception from container-launch.\nExit code: 3\n", 3),
    ("Container killed on request. Exit code is 137", 137),
    ("Container released by application. Exit code is -100", None),
])
def test_exit_codes_of_yarn_diagnostics(tmp_path, message, code):
    launcher, client = launcher_on(tmp_path)
    launcher.launch(ask("c1"))
    client.end("container_0", "FAILED", message)
    assert launcher.poll() == [("c1", code)]


def test_a_pinned_request_not_allocated_in_time_is_asked_again_anywhere(tmp_path):
    launcher, client = launcher_on(tmp_path, timeout_ms=1000)
    launcher.launch(ask("c1", hosts=("127.0.0.3",)))
    launcher.launch(ask("c2", hosts=("127.0.0.2",)))
    client.allocate("container@127.0.0.2_0", "127.0.0.2")
    launcher.clock.now = 0.999
    assert launcher.poll() == [] and client.killed == []
    launcher.clock.now = 1.0
    assert launcher.poll() == []
    assert client.killed == ["container@127.0.0.3_0"]  # the allocated one stays
    assert client.added[-1] == "container_0" and launcher.running() == ["c2", "c1"]
    launcher.clock.now = 10.0
    assert launcher.poll() == [] and launcher.unplaceable("c1") is None  # the general service has no timeout


def test_a_pinned_request_that_may_not_be_relaxed_is_reported_unplaceable(tmp_path):
    launcher, client = launcher_on(tmp_path, timeout_ms=500)
    launcher.launch(ask("c1", hosts=("127.0.0.3",), relax=False))
    launcher.clock.now = 0.5
    assert launcher.poll() == [("c1", None)]
    assert client.killed == ["container@127.0.0.3_0"] and launcher.running() == []
    reason = launcher.unplaceable("c1")
    assert "host 127.0.0.3" in reason and "PLACEMENT_TIMEOUT_MILLIS" in reason
    assert launcher.poll() == []


def test_a_request_only_steering_away_from_the_blacklist_is_always_relaxed(tmp_path):
    launcher, client = launcher_on(tmp_path, timeout_ms=500)
    launcher.launch(ask("c1", avoid=("127.0.0.2",), relax=False))
    assert client.added == ["container@127.0.0.3_0"]
    launcher.clock.now = 0.5
    assert launcher.poll() == [] and client.added[-1] == "container_0" and launcher.unplaceable("c1") is None
