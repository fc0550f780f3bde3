"""The mini cluster of several nodes (``./scripts/minicluster start --nodes 3``, the ``multinode`` fixture).

Three NodeManager processes on 127.0.0.2-4 in racks /rack1 /rack2 /rack1, HDFS
with two DataNodes, nothing listening on a wildcard address; ``kill-node`` takes
a node (and every process of its containers) away until the ResourceManager
has it LOST, ``start-node`` brings it back, ``restart-rm`` restarts the
ResourceManager and the nodes register again. The expected hosts and racks are
computed here from the rule (node k: 127.0.0.(k+1), rack 1 + (k-1) % 2), not
read from the cluster. Each test leaves every node RUNNING: the cluster is the
session's.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys

import pytest

pytestmark = pytest.mark.yarn

COUNT = 3
HOSTS = [f"127.0.0.{k + 1}" for k in range(1, COUNT + 1)]
RACKS = {f"127.0.0.{k + 1}": f"/rack{1 + (k - 1) % 2}" for k in range(1, COUNT + 1)}
GONE = {"LOST", "UNHEALTHY", "SHUTDOWN"}


@pytest.fixture
def cluster(multinode):
    """The session's cluster, every node up again after the test."""
    yield multinode
    for host in multinode.hosts:
        if multinode.node_pid(host) is None:
            multinode.start_node(host)
    multinode.wait_nodes({h: {"RUNNING"} for h in HOSTS})


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _marked(state) -> list[int]:
    marker = f"STRAM_MINICLUSTER={state}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found


def _listening(pids: list[int]) -> dict[int, set[str]]:
    """pid -> the addresses its TCP sockets listen on (from /proc/net/tcp and tcp6)."""
    where = {}
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # LISTEN
                    continue
                raw = bytes.fromhex(fields[1].split(":")[0])
                # the kernel prints the address as 32-bit words in host (little-endian) order
                raw = b"".join(struct.pack("<I", w) for w in struct.unpack(f">{len(raw) // 4}I", raw))
                addr = socket.inet_ntop(family, raw)
                where[fields[9]] = addr.removeprefix("::ffff:")
    out = {}
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes = {m[1] for m in (re.fullmatch(r"socket:\[(\d+)\]", link) for link in links) if m}
        out[pid] = {where[i] for i in inodes if i in where}
    return out


def test_three_nodes_two_racks_two_datanodes(cluster):
    """3 RUNNING nodes 127.0.0.2-4 in 2 racks, 2 live DataNodes, every server on its own 127.0.0.x address."""
    rows = cluster.nodes()
    assert sorted(r["host"] for r in rows) == HOSTS, rows
    assert all(r["state"] == "RUNNING" for r in rows), rows
    assert {r["host"]: r["rack"] for r in rows} == RACKS
    assert len(set(RACKS.values())) == 2
    assert cluster.hosts == HOSTS and cluster.exports["STRAM_MINICLUSTER_NODES"] == " ".join(HOSTS)

    report = cluster.run("hdfs", "dfsadmin", "-report", "-live")
    assert re.search(r"^Live datanodes \(2\):", report, re.M), report

    listening = _listening(_marked(cluster.state))
    everything = set().union(*listening.values())
    assert everything and not everything & {"0.0.0.0", "::"}, listening
    for host in HOSTS:
        assert listening[cluster.node_pid(host)] == {host}, (host, listening)


def test_kill_node_then_start_it(cluster):
    """kill-node: the NodeManager and its containers' processes die, the node goes LOST; start-node: RUNNING."""
    host, other = HOSTS[1], HOSTS[0]
    pid = cluster.node_pid(host)
    assert pid
    # stand-ins for container processes: YARN gives a container NM_HOST, its children inherit it
    env = dict(os.environ, STRAM_MINICLUSTER=str(cluster.state))
    sleepers = {h: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                    env=dict(env, NM_HOST=h)) for h in (host, other)}
    try:
        report = cluster.kill_node(host)
        assert f"killed node {host}" in report, report
        assert cluster.node_pid(host) is None and not _alive(pid)
        assert sleepers[host].wait(timeout=30) == -9
        assert sleepers[other].poll() is None  # another node's container lives on
        rows = cluster.wait_nodes({host: GONE, other: {"RUNNING"}}, timeout=120)
        assert {r["host"] for r in rows} == set(HOSTS), rows
    finally:
        sleepers[other].kill()
        sleepers[other].wait()

    cluster.start_node(host)
    again = cluster.node_pid(host)
    assert again and again != pid
    rows = cluster.nodes()
    assert {r["host"]: r["state"] for r in rows} == {h: "RUNNING" for h in HOSTS}, rows


def test_restart_rm(cluster):
    """restart-rm: the ResourceManager answers on its address again and all 3 nodes registered again."""
    pids = {h: cluster.node_pid(h) for h in HOSTS}
    report = cluster.restart_rm()
    assert re.search(rf"{COUNT} NodeManager\(s\) RUNNING again", report), report
    rows = cluster.wait_nodes({h: {"RUNNING"} for h in HOSTS}, timeout=60)
    assert sorted(r["host"] for r in rows) == HOSTS
    assert {h: cluster.node_pid(h) for h in HOSTS} == pids  # the same NodeManagers, re-registered
    cluster.run("yarn", "application", "-list", "-appStates", "ALL")  # the RM answers a client
