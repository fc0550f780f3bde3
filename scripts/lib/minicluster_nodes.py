"""The NodeManagers of a mini cluster of several nodes (``./scripts/minicluster start --nodes N``).

With ``--nodes N`` (2 or more) the cluster's JVM runs HDFS (two DataNodes) and
the ResourceManager alone, and each NodeManager k = 1..N is a JVM of its own
(Hadoop's ``NodeManager`` main class on the cached jars) bound to the loopback
address 127.0.0.(k+1): ``yarn.nodemanager.hostname`` is that address, so the
NodeId's host, a container's NM_HOST and ``yarn node -list`` all show e.g.
``127.0.0.3``. Each node has fixed ports (picked at the cluster's start), its
own local, log and recovery directories under ``work/yarn/nodes/<host>/`` and
its configuration in ``work/yarn/nodes/<host>/conf/yarn-site.xml`` (the
client's yarn-site.xml plus the node's settings; that directory comes first on
its classpath, the cluster's conf/ second). NodeManager recovery is on and
supervised: a node started again finds the containers it ran.
Node k is in rack ``/rack<1 + (k-1) % 2>`` (``conf/topology.table``, a
TableMapping file the ResourceManager and the clients read).

``kill-node HOST`` is a machine lost: SIGKILL to the NodeManager and to every
process it launched (found by ``/proc/PID/environ``: the cluster's marker and
``NM_HOST=HOST``, which YARN gives every container and its children inherit).
The ResourceManager marks the node LOST after its liveness expiry (10 s).
``start-node HOST`` starts it again (same configuration, same ports) and
returns when it has registered. ``restart-rm`` stops the ResourceManager and
starts it again on the same ports (its applications come back from its state
store, work-preserving) and returns when every node that is up has registered
again. The NodeManager processes carry the cluster's marker too, so ``stop``
finds what is left of them.

What this module needs of the cluster (its state directory, the java command,
the nodes' environment) the command module passes in a :class:`Cluster`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import time
from collections.abc import Callable
from xml.etree import ElementTree

from . import jvm
from .jvm import Error

NM_CLASS = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
#: Marks a NodeManager's process with its host (containers do not inherit it: they have NM_HOST).
NODE_VAR = "STRAM_MINICLUSTER_NODE"
#: Environment variable with which YARN tells a container the host of its NodeManager.
NM_HOST = "NM_HOST"
NM_HEAP = "384m"
#: How long the ResourceManager waits for a silent node before it is LOST (MiniCluster.java sets it).
EXPIRY_SECONDS = 10
#: The most nodes a cluster may have (each one is a JVM).
MAX_NODES = 20
#: NodeManager's line when it is registered (its logger is at INFO in the node's log4j.properties).
REGISTERED = "Registered with ResourceManager as "


@dataclasses.dataclass
class Cluster:
    """A running cluster as the node commands need it."""
    state: str                       #: the state directory
    info: dict[str, str]             #: conf/cluster.properties
    java: list[str]                  #: java and its options, up to the classpath
    conf: str                        #: the client configuration directory (HADOOP_CONF_DIR)
    jars: str                        #: the jars' directory
    env: dict[str, str]              #: a NodeManager's environment (containers inherit parts of it)
    alive: Callable[[], bool]        #: whether the cluster's JVM still runs
    say: Callable[[str], None]

    @property
    def hosts(self) -> list[str]:
        return self.info.get("nodes", "").split()


def hosts(count: int) -> list[str]:
    """The nodes' hosts: 127.0.0.2, 127.0.0.3, ..."""
    return [f"127.0.0.{k + 1}" for k in range(1, count + 1)]


def rack(host: str) -> str:
    """Node k (host 127.0.0.(k+1)) is in /rack1, /rack2, /rack1, ..."""
    k = int(host.rsplit(".", 1)[1]) - 1
    return f"/rack{1 + (k - 1) % 2}"


def write_topology(path: str, count: int) -> None:
    """The TableMapping file: ``host rack`` lines."""
    with open(path + ".tmp", "w") as f:
        f.writelines(f"{h} {rack(h)}\n" for h in hosts(count))
    os.replace(path + ".tmp", path)


def node_dir(state: str, host: str) -> str:
    return os.path.join(state, "work", "yarn", "nodes", host)


def log_path(state: str, host: str) -> str:
    return os.path.join(state, "logs", f"nodemanager-{host}.log")


def node_pid(state: str, host: str) -> int | None:
    """The NodeManager's pid when it runs."""
    pid = jvm.read_pid(node_dir(state, host))
    return pid if pid and jvm.alive(pid) else None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _read_site(path: str) -> dict[str, str]:
    out = {}
    for prop in ElementTree.parse(path).getroot().iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name:
            out[name] = value or ""
    return out


def _write_site(path: str, values: dict[str, str]) -> None:
    root = ElementTree.Element("configuration")
    for name, value in values.items():
        prop = ElementTree.SubElement(root, "property")
        ElementTree.SubElement(prop, "name").text = name
        ElementTree.SubElement(prop, "value").text = value
    ElementTree.indent(root)
    with open(path + ".tmp", "wb") as f:
        ElementTree.ElementTree(root).write(f, encoding="utf-8", xml_declaration=True)
    os.replace(path + ".tmp", path)


def configure(c: Cluster, host: str, memory_mb: int, vcores: int, log4j: str) -> str:
    """The node's directories and conf/ (yarn-site.xml with new free ports, log4j.properties); its address."""
    home = node_dir(c.state, host)
    for sub in ("conf", "local", "logs", "recovery", "tmp"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    site = _read_site(os.path.join(c.conf, "yarn-site.xml"))
    address = f"{host}:{_free_port(host)}"
    site.update({
        "yarn.nodemanager.hostname": host,
        "yarn.nodemanager.address": address,
        "yarn.nodemanager.localizer.address": f"{host}:{_free_port(host)}",
        "yarn.nodemanager.webapp.address": f"{host}:{_free_port(host)}",
        "yarn.nodemanager.local-dirs": os.path.join(home, "local"),
        "yarn.nodemanager.log-dirs": os.path.join(home, "logs"),
        "yarn.nodemanager.resource.memory-mb": str(memory_mb),
        "yarn.nodemanager.resource.cpu-vcores": str(vcores),
        # a node started again finds its containers (supervised: a stopped one leaves them running)
        "yarn.nodemanager.recovery.enabled": "true",
        "yarn.nodemanager.recovery.dir": os.path.join(home, "recovery"),
        "yarn.nodemanager.recovery.supervised": "true",
    })
    _write_site(os.path.join(home, "conf", "yarn-site.xml"), site)
    with open(os.path.join(home, "conf", "log4j.properties"), "w") as f:
        f.write(log4j + "log4j.logger.org.apache.hadoop.yarn.server.nodemanager.NodeStatusUpdaterImpl=INFO\n")
    return address


def address(c: Cluster, host: str) -> str:
    """The node's NodeManager address (host:port) from its yarn-site.xml."""
    return _read_site(os.path.join(node_dir(c.state, host), "conf", "yarn-site.xml"))["yarn.nodemanager.address"]


def spawn(c: Cluster, host: str) -> tuple[subprocess.Popen, int]:
    """Start the node's NodeManager: (its process, the offset of its log where this start begins)."""
    home = node_dir(c.state, host)
    log = log_path(c.state, host)
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    cmd = [*c.java, f"-Xmx{NM_HEAP}", f"-Djava.io.tmpdir={os.path.join(home, 'tmp')}",
           f"-Dyarn.log.dir={os.path.join(home, 'logs')}",
           "-cp", os.pathsep.join([os.path.join(home, "conf"), c.conf, os.path.join(c.jars, "*")]), NM_CLASS]
    return jvm.spawn(cmd, home, log, env=dict(c.env, **{NODE_VAR: host})), offset


def _logged(log: str, offset: int, text: str) -> bool:
    """Whether the log past ``offset`` has ``text``."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return text.encode() in f.read()
    except OSError:
        return False


def wait_registered(c: Cluster, started: dict[str, tuple[subprocess.Popen, int]], deadline: float,
                    respawn: Callable[[str], tuple[subprocess.Popen, int]] | None = None) -> None:
    """Until every node of ``started`` (host -> (process, log offset)) registered and is RUNNING.

    ``respawn(host)``: start a node again that exited because a port picked for it was taken
    before it bound it (another process's, in between); at most twice a node.
    """
    waiting = dict(started)
    tries = dict.fromkeys(started, 0)
    while waiting:
        for host, (proc, offset) in list(waiting.items()):
            log = log_path(c.state, host)
            if proc.poll() is not None and respawn and tries[host] < 2 and _logged(log, offset, "BindException"):
                tries[host] += 1
                c.say(f"a port picked for node {host} was taken before it bound; starting it on new ones")
                waiting[host] = respawn(host)
                continue
            if proc.poll() is not None:
                raise Error(f"the NodeManager of {host} exited with code {proc.returncode}; the end of {log}:\n  "
                            + "\n  ".join(jvm.tail(log, 20)))
            if _logged(log, offset, f"{REGISTERED}{host}:"):
                del waiting[host]
        if not waiting:
            break
        if not c.alive():
            raise Error("the cluster's JVM exited while its nodes started")
        if time.monotonic() > deadline:
            raise Error(f"node(s) {' '.join(waiting)} did not register with the ResourceManager in time; see "
                        + " ".join(log_path(c.state, h) for h in waiting))
        time.sleep(0.2)
    want = set(started)
    while True:
        states = {h: s for h, (s, _) in rm_nodes(c, deadline).items() if h in want}
        if all(states.get(h) == "RUNNING" for h in want):
            return
        if time.monotonic() > deadline:
            raise Error(f"the ResourceManager does not show the nodes RUNNING: {states}")
        time.sleep(0.3)


def start_all(c: Cluster, count: int, memory_mb: int, vcores: int, log4j: str, deadline: float) -> dict[str, str]:
    """Configure and start ``count`` NodeManagers; the cluster.properties entries that name them."""
    props = {"nodes": " ".join(hosts(count))}

    def launch(host: str) -> tuple[subprocess.Popen, int]:
        props[f"nodemanager.{host}.address"] = configure(c, host, memory_mb, vcores, log4j)
        props[f"nodemanager.{host}.rack"] = rack(host)
        return spawn(c, host)

    wait_registered(c, {host: launch(host) for host in hosts(count)}, deadline, launch)
    return props


def processes(state: str, host: str) -> list[int]:
    """The node's processes: its NodeManager and every process of its containers."""
    marker = f"STRAM_MINICLUSTER={state}".encode()
    mine = {f"{NM_HOST}={host}".encode(), f"{NODE_VAR}={host}".encode()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if marker in env and env & mine and jvm.alive(int(entry)):
            found.append(int(entry))
    return found


def stop_all(state: str, hosts_: list[str], grace: float, say: Callable[[str], None]) -> None:
    """SIGTERM the NodeManagers (then SIGKILL after ``grace``); their containers are the caller's leftovers."""
    for host in hosts_:
        pid = node_pid(state, host)
        if pid:
            jvm.stop_pid(pid, grace)
            say(f"stopped the NodeManager of {host} (pid {pid})")
        jvm.remove(os.path.join(node_dir(state, host), "pid"))


# ====================================================================== talking to the cluster's JVM

def ask(c: Cluster, command: str, timeout: float, what: str) -> str:
    """Run ``command`` in the cluster's JVM (a control file, see MiniCluster.java); its answer after "ok"."""
    control = c.info.get("control.dir")
    if not control:
        raise Error("this cluster's JVM takes no commands (started by an older ./scripts/minicluster): "
                    "restart it with ./scripts/minicluster stop; ./scripts/minicluster start")
    name = f"{time.time_ns()}-{os.getpid()}"
    cmd, done = os.path.join(control, name + ".cmd"), os.path.join(control, name + ".done")
    with open(cmd + ".tmp", "w") as f:
        f.write(command + "\n")
    os.replace(cmd + ".tmp", cmd)
    started = time.monotonic()
    log = os.path.join(c.state, "logs", "minicluster.log")
    while not os.path.isfile(done):
        if not c.alive():
            raise Error(f"the mini cluster's JVM exited while {what}; see {log}")
        if time.monotonic() > started + timeout:
            jvm.remove(cmd)
            raise Error(f"no answer after {time.monotonic() - started:.0f}s while {what}; see {log}")
        time.sleep(0.1)
    with open(done) as f:
        answer = f.read().strip()
    jvm.remove(done)
    word, _, detail = answer.partition(" ")
    if word != "ok":
        raise Error(f"{what} failed: {detail}")
    return detail


def rm_nodes(c: Cluster, deadline: float | None = None) -> dict[str, tuple[str, str]]:
    """The ResourceManager's nodes: host -> (state, rack)."""
    timeout = 60.0 if deadline is None else max(5.0, deadline - time.monotonic())
    out = {}
    for line in ask(c, "nodes", timeout, "asking the ResourceManager for its nodes").splitlines():
        if line.strip():
            node, state, rack_ = line.split()
            out[node.rsplit(":", 1)[0]] = (state, rack_)
    return out


# ====================================================================== the commands

def _check_host(c: Cluster, host: str) -> None:
    if not c.hosts:
        raise Error("this mini cluster has one node, in its JVM: start one with several, "
                    "./scripts/minicluster start --nodes 3")
    if host not in c.hosts:
        raise Error(f"no node {host!r} in this cluster; its nodes: {' '.join(c.hosts)}")


def kill_node(c: Cluster, host: str) -> None:
    """SIGKILL the node's NodeManager and every process of its containers (a lost machine)."""
    _check_host(c, host)
    pid = node_pid(c.state, host)
    if not pid:
        raise Error(f"node {host} is already down: ./scripts/minicluster start-node {host}")
    victims = sorted(set(processes(c.state, host)) | {pid})
    for p in victims:
        jvm.kill(p)
    deadline = time.monotonic() + 30
    while any(jvm.alive(p) for p in victims) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in victims:
        jvm.reap(p)
    left = [p for p in victims if jvm.alive(p)]
    if left:
        raise Error(f"process(es) {' '.join(map(str, left))} of node {host} survived SIGKILL")
    jvm.remove(os.path.join(node_dir(c.state, host), "pid"))
    c.say(f"killed node {host}: NodeManager pid {pid} and {len(victims) - 1} container process(es); "
          f"the ResourceManager marks it LOST after {EXPIRY_SECONDS}s without a heartbeat")


def start_node(c: Cluster, host: str, timeout: float) -> None:
    """Start the node's NodeManager again (same configuration and ports); returns when it is RUNNING."""
    _check_host(c, host)
    pid = node_pid(c.state, host)
    if pid:
        raise Error(f"node {host} is already up (NodeManager pid {pid})")
    started = time.monotonic()
    proc, offset = spawn(c, host)
    try:
        wait_registered(c, {host: (proc, offset)}, started + timeout)
    except BaseException:
        jvm.stop_pid(proc.pid, 10)
        raise
    c.say(f"node {host} ({address(c, host)}, {rack(host)}) RUNNING again after {time.monotonic() - started:.1f}s "
          f"(NodeManager pid {proc.pid})")


def restart_rm(c: Cluster, timeout: float) -> None:
    """Restart the ResourceManager on its ports; returns when the nodes that are up have registered again."""
    up = [h for h in c.hosts if node_pid(c.state, h)]
    started = time.monotonic()
    c.say(f"restarting the ResourceManager {c.info.get('resourcemanager.address')}; {len(up)} node(s) up")
    detail = ask(c, f"restart-rm {len(up)} {int(timeout * 1000)}", timeout + 60, "restarting the ResourceManager")
    c.say(f"{detail}; {time.monotonic() - started:.1f}s in all")


def status_lines(c: Cluster) -> list[str]:
    """One line per node: host, rack, up/killed, the NodeManager's pid, the ResourceManager's view."""
    try:
        seen = rm_nodes(c)
    except Error as exc:
        seen = {}
        c.say(f"cannot ask the ResourceManager: {exc}")
    lines = []
    for host in c.hosts:
        pid = node_pid(c.state, host)
        lines.append(f"    {host:<12} {rack(host):<7} {'up' if pid else 'killed':<7} pid {pid or '-':<8} "
                     f"{address(c, host):<18} ResourceManager: {seen.get(host, ('unknown',))[0]}")
    return lines


def add_commands(sub, cluster: Callable[[], Cluster]) -> None:
    """kill-node, start-node and restart-rm as subcommands of ``sub``; ``cluster()``: the running cluster."""
    def run(args) -> int:
        c = cluster()
        if args.command == "kill-node":
            kill_node(c, args.node)
        elif args.command == "start-node":
            start_node(c, args.node, args.timeout)
        elif not c.hosts:
            raise Error("restart-rm needs a cluster of several nodes: ./scripts/minicluster start --nodes 3")
        else:
            restart_rm(c, args.timeout)
        return 0

    p = sub.add_parser("kill-node", help="a node lost: SIGKILL its NodeManager and its containers' processes",
                       description="SIGKILL the NodeManager of NODE and every process of its containers (a lost "
                       f"machine); the ResourceManager marks it LOST after {EXPIRY_SECONDS}s.")
    p.add_argument("node", help="the node's host as `yarn node -list` shows it, e.g. 127.0.0.3")
    p.set_defaults(func=run)
    p = sub.add_parser("start-node", help="start a killed node again (same ports, NodeManager recovery)",
                       description="Start the NodeManager of NODE again with its configuration and ports; "
                       "returns when the ResourceManager has it RUNNING.")
    p.add_argument("node", help="the node's host, e.g. 127.0.0.3")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it (default 120)")
    p.set_defaults(func=run)
    p = sub.add_parser("restart-rm", help="stop the ResourceManager and start it again on the same ports",
                       description="Restart the ResourceManager of a cluster of several nodes (work-preserving "
                       "recovery); returns when every node that is up has registered again, saying how long it took.")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for the nodes to register again (default 120)")
    p.set_defaults(func=run)
