"""The mini Hadoop cluster of the test session (``./scripts/minicluster``) and helpers to use it.

``minicluster`` (session scope) starts HDFS and YARN once, in a private state
directory, for the tests that ask for it, and stops it at the end of the
session, checking that no process of the cluster is left. ``on_minicluster``
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

import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "minicluster"
#: Seconds to wait for the cluster (the first start also fetches the jars and builds libhdfs).
START_TIMEOUT = float(os.environ.get("STRAM_TEST_MINICLUSTER_TIMEOUT", "500"))


def unavailable(reason: str) -> None:
    """Skip the test, or fail it under CI (CI=true must run every YARN/HDFS test for real)."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the mini Hadoop cluster is needed and CI=true: {reason}", pytrace=False)
    pytest.skip(f"no mini Hadoop cluster: {reason}")


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

    def new_dir(self, prefix: str = "test") -> str:
        """A new, empty HDFS directory path (no scheme) for one test."""
        path = f"/tests/{prefix}-{uuid.uuid4().hex[:8]}"
        self.hdfs("-mkdir", "-p", path)
        return path


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


@pytest.fixture(scope="session")
def minicluster(tmp_path_factory) -> Iterator[MiniCluster]:
    """HDFS + YARN for the whole session (started on first use), stopped at its end."""
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        unavailable("Java is not installed (the cluster and skein's driver are JVMs): "
                    "apt-get install openjdk-17-jdk-headless")
    state = tmp_path_factory.mktemp("minicluster")
    env = dict(os.environ, STRAM_MINICLUSTER_DIR=str(state))
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "CLASSPATH", "HADOOP_HOME"):
        env.pop(var, None)
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), "start", "--timeout", str(START_TIMEOUT)],
                              env=env, capture_output=True, text=True, timeout=START_TIMEOUT + 600)
    except subprocess.TimeoutExpired as exc:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        unavailable(f"./scripts/minicluster start did not finish: {exc}")
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        unavailable(f"./scripts/minicluster start failed:\n{proc.stderr.strip()[-3000:]}")
    sys.stderr.write(proc.stderr)
    cluster = MiniCluster(state, _parse_exports(proc.stdout), elapsed)
    try:
        yield cluster
    finally:
        stop = subprocess.run([sys.executable, str(SCRIPT), "stop"], env=env, capture_output=True, text=True,
                              timeout=180)
        left = _processes_with_marker(state)
        assert stop.returncode == 0, stop.stderr
        assert not left, "processes of the mini cluster still run after stop:\n" + "\n".join(left)


@pytest.fixture
def on_minicluster(minicluster, monkeypatch, tmp_path_factory) -> MiniCluster:
    """The test runs as a user after ``eval "$(./scripts/minicluster start)"`` (plus pyarrow's HDFS settings)."""
    for var in ("YARN_CONF_DIR", "STRAM_YARN_APPS_DIR", "STRAM_YARN_APP_PATH", "STRAM_PYTHON_ENV",
                "STRAM_YARN_PRINCIPAL", "STRAM_YARN_KEYTAB", "STRAM_KEEP_CLASSPATH"):
        monkeypatch.delenv(var, raising=False)
    for key, value in minicluster.exports.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CLASSPATH", minicluster.classpath)
    monkeypatch.setenv("ARROW_LIBHDFS_DIR", str(minicluster.hadoop_home / "lib" / "native"))
    monkeypatch.setenv("SKEIN_CONFIG", str(tmp_path_factory.getbasetemp() / "skein"))
    return minicluster
