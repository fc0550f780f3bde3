"""stram on a YARN cluster of three nodes (``./scripts/minicluster start --nodes 3``).

Every NodeManager has an address of its own (127.0.0.2-4), so a container's host differs from
the master's and buffer servers are reached across "nodes". The word count (EXACTLY_ONCE, over
Moby-Dick on HDFS) runs as a user launches it, and each test compares its output with a count
made here from the input:

- spread by an anti-affinity rule over the three nodes: every address stram publishes is the
  node's own; then the node of a counting container is lost (its NodeManager and containers
  killed): the master asks for the containers again elsewhere, blacklists the node, and the
  output is exact;
- the ResourceManager restarts mid-run: the containers keep running, the application ends
  SUCCEEDED;
- the master's node is lost: YARN starts the second attempt on another node, which resumes from
  the journal;
- NODE_LOCAL and RACK_LOCAL streams put their containers on one node / in one rack; a rule the
  cluster cannot satisfy is refused at launch, saying why.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from typing import Iterator

import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until
from hadoop import collect_logs, launch_following, running_operators, stram, stram_json

pytestmark = pytest.mark.yarn

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
WORDS = ROOT / "specs" / "data" / "words.txt"


def wordcount_spec(tmp_path, attributes: str = "", words_locality: str = "", counts_locality: str = "",
                   count_partitions: int = 1) -> str:
    """specs/wordcount.yaml with a slow reader released by a signal file, and placement settings."""
    spec = tmp_path / "wordcount.yaml"
    lines = f"locality: {words_locality}" if words_locality else ""
    counts = f"locality: {counts_locality}" if counts_locality else ""
    spec.write_text(f"""
name: wordcount-nodes
attributes:
  STREAMING_WINDOW_SIZE_MILLIS: 100
  HEARTBEAT_INTERVAL_MILLIS: 300
  CHECKPOINT_WINDOW_COUNT: 5
  PROCESSING_MODE: EXACTLY_ONCE
  CONTAINER_MEMORY_MB: 256
{attributes}
operators:
  reader:
    class: tests.kits.e2e_ops:SlowUntilSignal
    properties: {{lines_per_window: 20}}
  split: {{class: stram.operators.text:WordSplitter}}
  count: {{class: stram.operators.aggregate:KeyCounter, partitions: {count_partitions}}}
  out: {{class: stram.operators.io:JsonLinesOutput}}
streams:
  lines: {{from: reader.output, to: [split.input], locality: CONTAINER_LOCAL}}
  words: {{from: split.output, to: [count.input], {lines}}}
  counts: {{from: count.output, to: [out.input], {counts}}}
""")
    return str(spec)


def host_of(address: str) -> str:
    """``host`` of ``host:port`` (an IPv6 address in brackets too)."""
    return address.rsplit(":", 1)[0].strip("[]")


def app_path_of(app_id: str) -> str:
    return stram_json("get-app-info", app_id)["app_path"]


def master_host(cluster, app_path: str) -> str:
    """The master's host as the application publishes it (its heartbeatUri on HDFS under APP_PATH)."""
    return host_of(cluster.hdfs("-cat", f"{app_path}/heartbeatUri").strip())


def containers_by_operator(app_id: str) -> dict[str, dict]:
    """Operator name -> its RUNNING container's row (``stram list-containers``)."""
    out = {}
    for row in stram_json("list-containers", app_id):
        if row["state"] == "RUNNING":
            for name in row["operators"]:
                out[name] = row
    return out


def subscriptions(cluster, app_id: str, dest) -> dict[str, str]:
    """Operator name -> ``host:port`` it subscribed to, from its container's log (the latest line)."""
    found = {}
    for f in sorted(collect_logs(cluster, app_id, dest).rglob("*.log")):
        if f.is_file():
            for m in re.finditer(r"operator (\S+) subscribes to \S+ at (\S+) from window", f.read_text(errors="replace")):
                found[m[1]] = m[2]
    return found


def finish_exact(cluster, proc, app_id: str, base: str, signal_file, tmp_path, started: float, what: str) -> None:
    """Release the reader; the launch must end SUCCEEDED with output equal to a count of the input."""
    signal_file.touch()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    assert f"{app_id} SUCCEEDED" in err
    print(f"{what}: submit to SUCCEEDED in {time.monotonic() - started:.1f}s")
    truth = word_truth(MOBY)
    sums, maxima, _ = read_counts(cluster.get(f"{base}/out", tmp_path / "out"))
    assert maxima == dict(truth), "running totals differ from the input's counts"
    assert sums == truth, "EXACTLY_ONCE: per-window counts differ from the input's counts"


def launch(cluster, tmp_path, name: str, spec: str, *extra: str):
    base = cluster.new_dir(name)
    moby = cluster.put(MOBY, f"{base}/moby.txt")
    signal_file = tmp_path / "release"
    proc, app_id = launch_following(spec, "-D", f"operators.reader.path={moby}",
                                    "-D", f"operators.reader.signal={signal_file}",
                                    "-D", f"operators.out.path={cluster.uri(base)}/out", *extra)
    return proc, app_id, base, signal_file


def on_failure(cluster, proc, app_id: str, tmp_path) -> None:
    print(stram("get-app-info", app_id).stdout)
    master_log = stram("logs", app_id).stdout
    print("master log (containers, nodes):", "\n".join(
        line for line in master_log.splitlines()
        if re.search(r"(?i)lost|exited|ended|blacklist|node|placed|replaced|heartbeat", line))[-6000:])
    print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@contextlib.contextmanager
def watched(cluster, proc, app_id: str, tmp_path) -> Iterator[list[str]]:
    """While a test drives an application: on a failure, print why and stop the launch; at the end,
    start again every node the test killed (the list it appends to), for the tests after it."""
    killed: list[str] = []
    try:
        yield killed
    except BaseException:
        on_failure(cluster, proc, app_id, tmp_path)
        raise
    finally:
        for host in killed:
            cluster.start_node(host)


def test_spread_over_nodes_with_node_addresses_and_a_lost_node(on_multinode, tmp_path):
    cluster = on_multinode
    started = time.monotonic()
    spec = wordcount_spec(tmp_path, attributes="""
  AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [reader, count, out]}]
  MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST: 1
  PLACEMENT_TIMEOUT_MILLIS: 5000""")
    proc, app_id, base, signal_file = launch(cluster, tmp_path, "spread", spec)
    with watched(cluster, proc, app_id, tmp_path) as killed:
        wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="every operator ACTIVE")
        app_path = app_path_of(app_id)
        master = master_host(cluster, app_path)
        hosts = set(cluster.hosts)
        assert master in hosts, (master, hosts)
        admin = json.loads(cluster.hdfs("-cat", f"{app_path}/admin.json"))
        assert host_of(admin["url"].split("://", 1)[1].split("/", 1)[0]) == master, admin

        # every container's address is its node's: the containers API, the buffer servers it publishes
        rows = containers_by_operator(app_id)
        placed = {name: rows[name]["host"] for name in ("reader", "split", "count", "out")}
        assert set(placed.values()) <= hosts, placed
        for name, row in rows.items():
            assert host_of(row["buffer_server"]) == row["host"], row
        assert len({placed["reader"], placed["count"], placed["out"]}) == 3, placed  # the anti-affinity rule
        assert placed["split"] == placed["reader"]                                   # CONTAINER_LOCAL
        assert len({h for h in placed.values() if h != master}) >= 2, (master, placed)
        # what each subscriber was deployed with (its container's log says): the publisher's node
        # address, another node's than its own -- data crosses between nodes
        subscribed = subscriptions(cluster, app_id, tmp_path / "logs-running")
        assert host_of(subscribed["count"]) == placed["split"] != placed["count"], (subscribed, placed)
        assert host_of(subscribed["out"]) == placed["count"] != placed["out"], (subscribed, placed)
        print("placement:", placed, "master:", master, "subscriptions:", subscribed)

        # the node of a counting container (not the master's) is lost with all its containers
        lost = next(placed[n] for n in ("count", "out") if placed[n] != master)
        victims = [n for n, h in placed.items() if h == lost]
        killed.append(lost)
        cluster.kill_node(lost)
        cluster.wait_nodes({lost: {"LOST", "SHUTDOWN", "UNHEALTHY"}}, timeout=120)

        def moved() -> dict | None:
            now = containers_by_operator(app_id)
            ok = all(n in now and now[n]["host"] != lost for n in victims)
            return now if ok and running_operators(app_id) else None
        now = wait_until(moved, timeout=240, interval=2, what=f"{victims} running again on another node")
        # its containers' ends reach the master (from YARN, once it gives them up): the node is blacklisted
        info = wait_until(lambda: (i := stram_json("get-app-info", app_id)) and
                          any(b["host"] == lost for b in i.get("blacklistedNodes", [])) and i,
                          timeout=120, interval=2, what=f"{lost} blacklisted")
        text = stram("get-app-info", app_id).stdout
        assert lost in text and "blacklist" in text.lower(), text
        print("after the loss:", {n: r["host"] for n, r in now.items()}, "blacklisted:", info["blacklistedNodes"])
        finish_exact(cluster, proc, app_id, base, signal_file, tmp_path, started, "lost node")


def test_resourcemanager_restart_mid_run_keeps_the_containers(on_multinode, tmp_path):
    cluster = on_multinode
    started = time.monotonic()
    proc, app_id, base, signal_file = launch(cluster, tmp_path, "rm-restart", wordcount_spec(tmp_path))
    with watched(cluster, proc, app_id, tmp_path):
        wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="every operator ACTIVE")
        before = {r["id"]: r["process"] for r in stram_json("list-containers", app_id) if r["state"] == "RUNNING"}
        report = cluster.restart_rm()
        print("restart-rm:", report.splitlines()[-1] if report else "")
        # the application is still RUNNING on the new ResourceManager, as the same attempt
        wait_until(lambda: "State : RUNNING" in cluster.run("yarn", "application", "-status", app_id),
                   timeout=120, interval=1, what="the application RUNNING on the new ResourceManager")
        wait_until(lambda: running_operators(app_id), timeout=120, interval=2, what="operators ACTIVE after it")
        after = {r["id"]: r["process"] for r in stram_json("list-containers", app_id) if r["state"] == "RUNNING"}
        assert after == before, "containers were replaced across the restart"
        assert not (stram_json("get-app-info", app_id).get("restarts") or {})
        finish_exact(cluster, proc, app_id, base, signal_file, tmp_path, started, "RM restart")
        attempts = cluster.run("yarn", "applicationattempt", "-list", app_id)
        assert attempts.count("appattempt_") == 1, attempts


def test_master_node_lost_the_second_attempt_resumes_elsewhere(on_multinode, tmp_path):
    cluster = on_multinode
    started = time.monotonic()
    proc, app_id, base, signal_file = launch(cluster, tmp_path, "master-node", wordcount_spec(tmp_path))
    with watched(cluster, proc, app_id, tmp_path) as killed:
        wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="every operator ACTIVE")
        time.sleep(2)  # a few checkpoints and journal writes
        app_path = app_path_of(app_id)
        lost = master_host(cluster, app_path)
        killed.append(lost)
        cluster.kill_node(lost)
        wait_until(lambda: master_host(cluster, app_path) != lost and running_operators(app_id), timeout=300,
                   interval=3, what="the second attempt's master on another node, its operators ACTIVE")
        assert set(r["host"] for r in stram_json("list-containers", app_id) if r["state"] == "RUNNING") \
            <= set(cluster.hosts) - {lost}
        finish_exact(cluster, proc, app_id, base, signal_file, tmp_path, started, "master's node lost")
        logs = stram("logs", app_id).stdout
        assert "master attempt 2 resumed from the journal" in logs


def test_node_and_rack_local_streams_and_an_impossible_rule(on_multinode, tmp_path):
    cluster = on_multinode
    racks = {n["host"]: n["rack"] for n in cluster.nodes()}
    spec = wordcount_spec(tmp_path, words_locality="NODE_LOCAL", counts_locality="RACK_LOCAL")
    proc, app_id, base, signal_file = launch(cluster, tmp_path, "local", spec)
    started = time.monotonic()
    with watched(cluster, proc, app_id, tmp_path):
        wait_until(lambda: running_operators(app_id), timeout=240, interval=2, what="every operator ACTIVE")
        rows = containers_by_operator(app_id)
        assert rows["split"]["id"] != rows["count"]["id"]
        assert rows["split"]["host"] == rows["count"]["host"], rows   # NODE_LOCAL: one node
        assert racks[rows["count"]["host"]] == racks[rows["out"]["host"]], (rows, racks)  # RACK_LOCAL
        finish_exact(cluster, proc, app_id, base, signal_file, tmp_path, started, "NODE_LOCAL/RACK_LOCAL")


def test_a_rule_the_cluster_cannot_satisfy_fails_saying_why(on_multinode, tmp_path):
    """Four partitions on distinct nodes of three, never relaxed: the master fails the application
    before it launches a container, saying why. (Skein lets YARN start a FAILED application's next
    attempt while attempts are left; that one finds the application ended and repeats why.)"""
    cluster = on_multinode
    spec = wordcount_spec(tmp_path, count_partitions=4,
                          attributes="  AFFINITY_RULES: [{type: ANTI_AFFINITY, operators: [count], relax: false}]")
    refused = stram("launch", "--yarn", spec, "-D", f"operators.reader.path={cluster.uri('/nowhere.txt')}",
                    timeout=300)
    app_id = refused.stdout.strip().splitlines()[0] if refused.stdout.strip() else ""
    if "needs 4 nodes" not in refused.stderr:
        print(refused.stdout, refused.stderr)
        if app_id:
            print("container logs:", collect_logs(cluster, app_id, tmp_path / "logs"))
    assert refused.returncode != 0
    assert "needs 4 nodes" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
