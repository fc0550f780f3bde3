"""The mini Hadoop cluster of the test session (``./scripts/minicluster``) and helpers to use it.

``minicluster`` (session scope) starts HDFS and YARN once, in a private state
directory, for the tests that ask for it, and stops it at the end of the
session, checking that no process of the cluster is left. ``multinode``
(session scope too, a state directory of its own) is a cluster of three
NodeManager processes on 127.0.0.2-4 (``start --nodes 3``) with its faults:
``kill_node(host)``, ``start_node(host)``, ``restart_rm()``, and ``nodes()``;
``on_multinode`` is ``on_minicluster`` for it. A test that kills a node or
restarts the ResourceManager leaves all nodes RUNNING at its end (others share
the cluster). ``on_minicluster``
(per test) puts the cluster into the test's environment as a user's shell would
have it after ``eval "$(./scripts/minicluster start)"`` -- HADOOP_CONF_DIR,
JAVA_HOME, HADOOP_HOME, PATH with ``yarn`` and ``hdfs`` -- plus a globbed
CLASSPATH and ARROW_LIBHDFS_DIR for pyarrow's HadoopFileSystem, and a private
SKEIN_CONFIG.

When Java, Maven, gcc or the jars cannot be had, the tests that need the
cluster are skipped with the reason; with ``CI=true`` they fail with it
instead, so that a CI run proves the real path.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Iterator

import pytest
from needs import missing

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "minicluster"
#: Seconds to wait for the cluster (the first start also fetches the jars and builds libhdfs).
START_TIMEOUT = float(os.environ.get("STRAM_TEST_MINICLUSTER_TIMEOUT", "500"))


def _parse_exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


class MiniCluster:
    """A running mini cluster: its environment, addresses, and the ``hdfs``/``yarn`` commands."""

    def __init__(self, state: pathlib.Path, env: dict[str, str], start_seconds: float) -> None:
        self.state = state
        self.exports = env
        self.start_seconds = start_seconds
        self.conf_dir = pathlib.Path(env["HADOOP_CONF_DIR"])
        self.hadoop_home = pathlib.Path(env["HADOOP_HOME"])
        props = {}
        for line in (self.conf_dir / "cluster.properties").read_text().splitlines():
            key, _, value = line.partition("=")
            props[key] = value
        self.properties = props
        #: ``hdfs://localhost:<port>``
        self.fs = props["fs.defaultFS"]
        self.rm_web = props["resourcemanager.webapp"]
        self.classpath = subprocess.run([str(self.hadoop_home / "bin" / "hadoop"), "classpath", "--glob"],
                                        env=self.env(), capture_output=True, text=True,
                                        check=True).stdout.strip()

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default os.environ) with the cluster's exports."""
        env = dict(os.environ if base is None else base)
        env.update(self.exports)
        return env

    def uri(self, path: str) -> str:
        """``hdfs://localhost:<port>/path``."""
        return self.fs + "/" + path.lstrip("/")

    def run(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> str:
        """``yarn ...``/``hdfs ...``/``hadoop ...`` of the cluster; stdout."""
        proc = subprocess.run([str(self.hadoop_home / "bin" / tool), *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def hdfs(self, *args: str, check: bool = True) -> str:
        return self.run("hdfs", "dfs", *args, check=check)

    def put(self, local: str | os.PathLike, path: str) -> str:
        """Copy a local file to HDFS (parents made); its full URI."""
        parent = path.rsplit("/", 1)[0] or "/"
        self.hdfs("-mkdir", "-p", parent)
        self.hdfs("-put", "-f", str(local), path)
        return self.uri(path)

    def get(self, path: str, local: str | os.PathLike) -> pathlib.Path:
        """Copy an HDFS directory tree to ``local`` (which must not exist yet)."""
        self.hdfs("-get", path, str(local))
        return pathlib.Path(local)

    def script(self, *args: str, timeout: float = 180) -> str:
        """``./scripts/minicluster ARGS`` for this cluster; its report (stderr). AssertionError when it fails."""
        env = dict(os.environ, STRAM_MINICLUSTER_DIR=str(self.state))
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"{args[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc.stderr.strip()

    def restart_namenode(self, down_seconds: float = 0.0, timeout: float = 180) -> str:
        """``./scripts/minicluster restart-namenode --down-seconds S``: back on the same port; its report."""
        return self.script("restart-namenode", "--down-seconds", str(down_seconds), timeout=timeout)

    def new_dir(self, prefix: str = "test") -> str:
        """A new, empty HDFS directory path (no scheme) for one test."""
        path = f"/tests/{prefix}-{uuid.uuid4().hex[:8]}"
        self.hdfs("-mkdir", "-p", path)
        return path


class MultiNode(MiniCluster):
    """A cluster of several NodeManager processes (``./scripts/minicluster start --nodes N``) and its faults."""

    def __init__(self, state: pathlib.Path, env: dict[str, str], start_seconds: float) -> None:
        super().__init__(state, env, start_seconds)
        #: the nodes' hosts, ``127.0.0.2 ...`` (STRAM_MINICLUSTER_NODES of the exports)
        self.hosts = env["STRAM_MINICLUSTER_NODES"].split()

    def kill_node(self, host: str) -> str:
        """``kill-node HOST``: its NodeManager and container processes SIGKILLed; the report."""
        return self.script("kill-node", host)

    def start_node(self, host: str) -> str:
        """``start-node HOST``: returns when the ResourceManager has it RUNNING; the report."""
        return self.script("start-node", host)

    def restart_rm(self) -> str:
        """``restart-rm``: returns when the nodes that are up have registered again; the report."""
        return self.script("restart-rm")

    def node_pid(self, host: str) -> int | None:
        """The pid of the node's NodeManager when it runs."""
        try:
            pid = int((self.state / "work" / "yarn" / "nodes" / host / "pid").read_text())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def nodes(self) -> list[dict[str, str]]:
        """``yarn node -list -all``: [{host, port, state, rack}] (rack from the ResourceManager's REST API)."""
        out = self.run("yarn", "node", "-list", "-all")
        rows = [{"host": m[1], "port": m[2], "state": m[3]}
                for m in re.finditer(r"^\s*(\S+):(\d+)\s+([A-Z_]+)\s", out, re.M)]
        with urllib.request.urlopen(f"{self.rm_web}/ws/v1/cluster/nodes", timeout=30) as resp:
            listed = (json.load(resp).get("nodes") or {}).get("node") or []
        racks = {n["id"]: n.get("rack") for n in listed}
        for row in rows:
            row["rack"] = racks.get(f"{row['host']}:{row['port']}")
        return rows

    def wait_nodes(self, states: dict[str, set[str]], timeout: float = 120) -> list[dict[str, str]]:
        """Until each host of ``states`` is in one of its states in ``nodes()``; the last rows."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.nodes()
            now = {r["host"]: r["state"] for r in rows}
            if all(now.get(h) in want for h, want in states.items()):
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes not in {states} after {timeout:.0f}s: {now}")
            time.sleep(1)


def _processes_with_marker(state: pathlib.Path) -> list[str]:
    marker = f"STRAM_MINICLUSTER={state}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry}: {cmdline[:200]}")
        except OSError:
            continue
    return found


def start_cluster(state: pathlib.Path, *args: str, kind: type[MiniCluster] = MiniCluster,
                  **settings: str) -> tuple[MiniCluster, dict[str, str]]:
    """``./scripts/minicluster start ARGS`` with its state in ``state`` and ``settings`` in its
    environment: (the cluster, the env that stops it); skips (fails with CI=true) when the cluster
    cannot start here."""
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        missing("the mini Hadoop cluster", "Java is not installed (the cluster and skein's driver are JVMs): "
                "apt-get install openjdk-17-jdk-headless")
    env = dict(os.environ, STRAM_MINICLUSTER_DIR=str(state), **settings)
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "CLASSPATH", "HADOOP_HOME"):
        env.pop(var, None)
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), "start", "--timeout", str(START_TIMEOUT), *args],
                              env=env, capture_output=True, text=True, timeout=START_TIMEOUT + 600)
    except subprocess.TimeoutExpired as exc:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        missing("the mini Hadoop cluster", f"./scripts/minicluster start did not finish: {exc}")
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        missing("the mini Hadoop cluster", f"./scripts/minicluster start failed:\n{proc.stderr.strip()[-3000:]}")
    sys.stderr.write(proc.stderr)
    return kind(state, _parse_exports(proc.stdout), elapsed), env


def stop_cluster(cluster: MiniCluster, env: dict[str, str]) -> None:
    """``./scripts/minicluster stop``; fails if a process of the cluster is left."""
    stop = subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, text=True,
                          timeout=180)
    left = _processes_with_marker(cluster.state)
    assert stop.returncode == 0, stop.stderr
    assert not left, "processes of the mini cluster still run after stop:\n" + "\n".join(left)


@pytest.fixture(scope="session")
def minicluster(tmp_path_factory) -> Iterator[MiniCluster]:
    """HDFS + YARN for the whole session (started on first use), stopped at its end."""
    cluster, env = start_cluster(tmp_path_factory.mktemp("minicluster"))
    try:
        yield cluster
    finally:
        stop_cluster(cluster, env)


@pytest.fixture(scope="session")
def multinode(tmp_path_factory) -> Iterator[MultiNode]:
    """A cluster of 3 NodeManager processes, 127.0.0.2-4 on racks /rack1 /rack2 /rack1 (started on first
    use, stopped at the session's end); ``kill_node``, ``start_node``, ``restart_rm``, ``nodes``."""
    cluster, env = start_cluster(tmp_path_factory.mktemp("multinode"), "--nodes", "3", kind=MultiNode)
    try:
        yield cluster
    finally:
        stop_cluster(cluster, env)


@pytest.fixture(scope="session")
def minicluster_driver(minicluster, tmp_path_factory) -> Iterator[pathlib.Path]:
    """A standing skein driver (``stram driver start``) for the session's cluster: its ``$STRAM_HOME/driver``.

    Each stram command on YARN would otherwise start a Java driver of its own (3-4 s and 6 s of CPU
    on this machine, beside the application under test)."""
    yield from _standing_driver(minicluster, tmp_path_factory)


@pytest.fixture(scope="session")
def multinode_driver(multinode, tmp_path_factory) -> Iterator[pathlib.Path]:
    """``minicluster_driver`` for the ``multinode`` cluster."""
    yield from _standing_driver(multinode, tmp_path_factory)


def _standing_driver(cluster: MiniCluster, tmp_path_factory) -> Iterator[pathlib.Path]:
    home = tmp_path_factory.mktemp("driver-home")
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env.update(_user_env(cluster, tmp_path_factory), STRAM_HOME=str(home))
    started = subprocess.run([sys.executable, "-m", "stram.client.cli", "driver", "start"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    try:
        yield home / "driver"
    finally:
        stopped = subprocess.run([sys.executable, "-m", "stram.client.cli", "driver", "stop"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr


@pytest.fixture
def on_minicluster(minicluster, minicluster_driver, monkeypatch, tmp_path_factory) -> MiniCluster:
    """The test runs as a user after ``eval "$(./scripts/minicluster start)"`` (plus pyarrow's HDFS
    settings) and ``stram driver start``."""
    return _as_user_with_driver(minicluster, minicluster_driver, monkeypatch, tmp_path_factory)


@pytest.fixture
def on_multinode(multinode, multinode_driver, monkeypatch, tmp_path_factory) -> MultiNode:
    """``on_minicluster`` for the ``multinode`` cluster."""
    return _as_user_with_driver(multinode, multinode_driver, monkeypatch, tmp_path_factory)


def _as_user_with_driver(cluster, driver: pathlib.Path, monkeypatch, tmp_path_factory):
    cluster = as_user_of(cluster, monkeypatch, tmp_path_factory)
    home = pathlib.Path(os.environ["STRAM_HOME"])  # the test's own (conftest's _stram_home)
    if not (home / "driver").exists():
        home.mkdir(parents=True, exist_ok=True)
        (home / "driver").symlink_to(driver, target_is_directory=True)
    return cluster


#: What a user of a cluster has not set (as_user_of removes them from the test's environment).
_UNSET = ("YARN_CONF_DIR", "STRAM_YARN_APPS_DIR", "STRAM_YARN_APP_PATH", "STRAM_PYTHON_ENV",
          "STRAM_YARN_PRINCIPAL", "STRAM_YARN_KEYTAB", "STRAM_KEEP_CLASSPATH", "KRB5_CONFIG",
          "KRB5CCNAME", "JAVA_TOOL_OPTIONS")


def _user_env(cluster: MiniCluster, tmp_path_factory) -> dict[str, str]:
    """The variables a user of ``cluster`` has set (its exports, pyarrow's HDFS settings, skein's)."""
    return {**cluster.exports, "CLASSPATH": cluster.classpath,
            "ARROW_LIBHDFS_DIR": str(cluster.hadoop_home / "lib" / "native"),
            "SKEIN_CONFIG": str(tmp_path_factory.getbasetemp() / "skein"),
            # every stram command on YARN without the standing driver starts skein's Java driver: C1
            # and one GC thread start it about twice as fast on a small, busy machine
            "SKEIN_DRIVER_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


def as_user_of(cluster: MiniCluster, monkeypatch, tmp_path_factory) -> MiniCluster:
    """Make this test's environment a user's of ``cluster`` (its exports, pyarrow's HDFS settings)."""
    for var in _UNSET:
        monkeypatch.delenv(var, raising=False)
    for key, value in _user_env(cluster, tmp_path_factory).items():
        monkeypatch.setenv(key, value)
    if "skein.core" in sys.modules:
        # skein reads SKEIN_CONFIG once, at import: a test that imported it earlier left this process
        # with other credentials than the stram commands it starts, and its TLS to their application
        # masters fails (CERTIFICATE_VERIFY_FAILED)
        import skein
        import skein.core
        fresh = skein.core.Properties()
        monkeypatch.setattr(skein.core, "properties", fresh)
        monkeypatch.setattr(skein, "properties", fresh)
    return cluster


# ====================================================================== stram as a user types it

def stram(*args: str | os.PathLike, timeout: float = 600) -> subprocess.CompletedProcess:
    """``stram ARGS`` in the test's environment (on_minicluster's); the finished process."""
    return subprocess.run([sys.executable, "-m", "stram.client.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def stram_json(*args: str, timeout: float = 120):
    """``stram ARGS --json``, parsed; AssertionError with stderr when it fails."""
    proc = stram(*args, "--json", timeout=timeout)
    assert proc.returncode == 0, f"stram {' '.join(args)}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def launch_following(*args: str | os.PathLike) -> tuple[subprocess.Popen, str]:
    """``stram launch --yarn ARGS`` without --detach, in the background: (process, application id).

    The process follows the application until it ends and exits 0 only if it
    SUCCEEDED; its stdout's first line is the application id.
    """
    proc = subprocess.Popen([sys.executable, "-m", "stram.client.cli", "launch", "--yarn", *map(str, args)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not re.fullmatch(r"application_\d+_\d+", line):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"stram launch --yarn printed {line!r}:\n{err[-4000:]}")
    return proc, line


def running_operators(app_id: str) -> list[dict] | None:
    """The operator rows when every operator of the application is deployed and ACTIVE."""
    proc = stram("list-operators", app_id, "--json", timeout=120)
    if proc.returncode != 0:
        return None
    rows = json.loads(proc.stdout)
    return rows if rows and all(r["state"] == "ACTIVE" for r in rows) else None


def yarn_container_id(process: str) -> str:
    """YARN's id of the container whose stram process is ``pid@host`` (this machine: its CONTAINER_ID)."""
    pid = int(process.split("@", 1)[0])
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    return env[b"CONTAINER_ID"].decode()


def collect_logs(cluster: MiniCluster, app_id: str, dest: pathlib.Path) -> pathlib.Path:
    """Copy an application's container logs from the NodeManager's log directories to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for app_dir in (cluster.state / "work").glob(f"yarn/**/{app_id}"):
        for container in app_dir.iterdir():
            if container.is_dir():
                shutil.copytree(container, dest / container.name, dirs_exist_ok=True)
    return dest


def aggregated_containers(cluster: MiniCluster, app_id: str, at_least: int, timeout: float = 90) -> set[str]:
    """The containers whose logs ``yarn logs`` shows once the NodeManager aggregated them into HDFS."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline:
        out = cluster.run("yarn", "logs", "-applicationId", app_id, check=False)
        seen = set(re.findall(r"^Container: (container_\S+)", out, re.M))
        if len(seen) >= at_least:
            return seen
        time.sleep(2)
    return seen
