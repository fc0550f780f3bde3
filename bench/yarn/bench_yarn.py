"""stram on YARN: submit -> first processed window, and recovery after a container kill beside local.

    eval "$(./scripts/minicluster start)"      # or any cluster: HADOOP_CONF_DIR set
    python -m bench.yarn.bench_yarn [--submits 3] [--kills 3]

Without HADOOP_CONF_DIR the bench starts the repository's mini cluster (``./scripts/minicluster``)
in a private directory and stops it at the end. It times a word count's ``stram launch --yarn``
from the command to its first processed window, and its recovery from a container kill on YARN
beside the local launcher, alternated: what YARN adds to a launch and to a recovery. The steps
timed, and the latest figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Callable

from stram.client.adminhttp import request_json as _request_json
from stram.common.errors import StramError

#: The repository: where specs/ and scripts/minicluster lie, and the launches' working directory.
ROOT = pathlib.Path(__file__).resolve().parents[2]
#: admin base URL -> the application's token (the admin API refuses calls without it).
TOKENS: dict[str, str] = {}


def request_json(url: str, path: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`stram.client.adminhttp.request_json` with the token of the application at ``url``."""
    return _request_json(url, path, *args, token=TOKENS.get(url), **kwargs)


MOBY = ROOT / "specs" / "data" / "moby-dick.txt"
WORDCOUNT = ROOT / "specs" / "wordcount.yaml"
RECOVERY = ["-D", "operators.reader.lines_per_window=20", "-D", "STREAMING_WINDOW_SIZE_MILLIS=100",
            "-D", "HEARTBEAT_INTERVAL_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=10"]


def stram(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "stram.client.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"stram {' '.join(args)}: {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def wait(what: str, check: Callable[[], Any], timeout: float = 300, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (StramError, OSError, KeyError, ValueError):
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"no {what} in {timeout:g}s")


class Cluster:
    """The cluster named by HADOOP_CONF_DIR, or the mini cluster started for this run."""

    def __init__(self) -> None:
        self.started_dir: str | None = None
        self.env = dict(os.environ)
        if not self.env.get("HADOOP_CONF_DIR"):
            self.started_dir = tempfile.mkdtemp(prefix="stram-bench-yarn-")
            self.env["STRAM_MINICLUSTER_DIR"] = self.started_dir
            print("starting the mini cluster (./scripts/minicluster start) ...", flush=True)
            out = subprocess.run([str(ROOT / "scripts" / "minicluster"), "start"], env=self.env,
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                if line.startswith("export "):
                    key, _, value = line[len("export "):].partition("=")
                    self.env[key] = shlex.split(value)[0]
        hadoop = os.path.join(self.env.get("HADOOP_HOME", ""), "bin", "hadoop")
        if "CLASSPATH" not in self.env and os.path.exists(hadoop):
            self.env["CLASSPATH"] = subprocess.run([hadoop, "classpath", "--glob"], env=self.env,
                                                   capture_output=True, text=True, check=True).stdout.strip()
            self.env.setdefault("ARROW_LIBHDFS_DIR", os.path.join(self.env["HADOOP_HOME"], "lib", "native"))
        self.env.setdefault("STRAM_HOME", tempfile.mkdtemp(prefix="stram-bench-home-"))
        self.env["STRAM_LOG_LEVEL"] = "WARNING"
        self.fs = subprocess.run(["hdfs", "getconf", "-confKey", "fs.defaultFS"], env=self.env,
                                 capture_output=True, text=True, check=True).stdout.strip()
        self.base = f"/tmp/stram-bench-{uuid.uuid4().hex[:8]}"
        subprocess.run(["hdfs", "dfs", "-mkdir", "-p", self.base], env=self.env, check=True)
        subprocess.run(["hdfs", "dfs", "-put", "-f", str(MOBY), f"{self.base}/moby.txt"], env=self.env, check=True)
        self.input = f"{self.fs}{self.base}/moby.txt"

    def admin_url(self, app_id: str) -> str:
        os.environ.update(self.env)  # the skein driver reads the cluster's configuration from here
        from stram.client import yarn
        with yarn.connect() as client:
            return wait("a RUNNING application", lambda: yarn.admin_url_for(app_id, client), interval=0.1)

    def kill(self, app_id: str) -> None:
        subprocess.run(["yarn", "application", "-kill", app_id], env=self.env, capture_output=True)

    def stop(self) -> None:
        if self.started_dir:
            subprocess.run([str(ROOT / "scripts" / "minicluster"), "stop"], env=self.env, capture_output=True)


def operators(url: str) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in request_json(url, "operators", timeout=5)["operators"]}


def submit_once(cluster: Cluster) -> dict[str, float]:
    out = f"{cluster.fs}{cluster.base}/out-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    app_id = stram("launch", "--yarn", "--detach", str(WORDCOUNT), "-D", f"operators.reader.path={cluster.input}",
                   "-D", "operators.reader.lines_per_window=50", "-D", f"operators.out.path={out}", env=cluster.env)
    marks = {"accepted": time.monotonic() - t0}
    try:
        url = cluster.admin_url(app_id)
        wait("admin API", lambda: request_json(url, "info", timeout=2))
        marks["master up"] = time.monotonic() - t0
        wait("all operators ACTIVE", lambda: (ops := operators(url)) and all(
            o["state"] == "ACTIVE" for o in ops.values()))
        marks["all ACTIVE"] = time.monotonic() - t0
        wait("a processed window", lambda: (c := operators(url)["count"]) and c["state"] == "ACTIVE"
             and c["current_window"] > c["recovery_checkpoint"])
        marks["first window"] = time.monotonic() - t0
    finally:
        cluster.kill(app_id)
    return marks


def recovery_time(url: str, pid_of: Callable[[dict], int], containers: Callable[[], list[dict]]) -> float:
    """SIGKILL the count operator's container; seconds until the new one processed a window past its checkpoint."""
    wait("all operators ACTIVE", lambda: (ops := operators(url)) and len(ops) == 4 and all(
        o["state"] == "ACTIVE" for o in ops.values()), timeout=300)
    time.sleep(2.0)
    target = next(c for c in containers() if c["state"] == "RUNNING" and "count" in c["operators"])
    t0 = time.monotonic()
    os.kill(pid_of(target), signal.SIGKILL)
    wait("count recovered", lambda: (c := operators(url).get("count")) and c["container"] != target["id"]
         and c["state"] == "ACTIVE" and c["current_window"] > c["recovery_checkpoint"], timeout=300, interval=0.02)
    return time.monotonic() - t0


def recoveries(cluster: Cluster, on_yarn: bool, kills: int) -> list[float]:
    out = f"{cluster.fs}{cluster.base}/rec-{uuid.uuid4().hex[:6]}" if on_yarn else tempfile.mkdtemp() + "/out"
    source = cluster.input if on_yarn else str(MOBY)
    args = ["launch", "--yarn" if on_yarn else "--local", "--detach", str(WORDCOUNT),
            "-D", f"operators.reader.path={source}", "-D", f"operators.out.path={out}", *RECOVERY]
    app_id = stram(*args, env=cluster.env)
    if on_yarn:
        url = cluster.admin_url(app_id)
    else:
        os.environ.update(cluster.env)
        from stram.common.apps import find_app
        url = wait("admin URL", lambda: find_app(app_id).get("admin_url"))
    from stram.common.apps import read_token
    TOKENS[url] = read_token(app_id, yarn=on_yarn) or ""
    try:
        wait("admin API", lambda: request_json(url, "info", timeout=2))
        pid = lambda c: int(c["process"].split("@", 1)[0])  # noqa: E731 - every container runs on this machine
        listing = lambda: request_json(url, "containers", timeout=5)["containers"]  # noqa: E731
        return [recovery_time(url, pid, listing) for _ in range(kills)]
    finally:
        if on_yarn:
            cluster.kill(app_id)
        else:
            subprocess.run([sys.executable, "-m", "stram.client.cli", "kill-app", app_id], cwd=ROOT, env=cluster.env,
                           capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.yarn.bench_yarn", description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=3, help="submissions timed (default 3)")
    parser.add_argument("--kills", type=int, default=3, help="container kills per launcher (default 3)")
    args = parser.parse_args()
    cluster = Cluster()
    try:
        runs = [submit_once(cluster) for _ in range(args.submits)]
        for mark in runs[0]:
            values = [r[mark] for r in runs]
            print(f"submit -> {mark:12s}: median {statistics.median(values):5.1f}s  "
                  f"({', '.join(f'{v:.1f}' for v in values)})", flush=True)
        yarn_times: list[float] = []
        local_times: list[float] = []
        for _ in range(2):  # alternated, so drift on a noisy machine hits both alike
            yarn_times += recoveries(cluster, True, max(1, args.kills // 2))
            local_times += recoveries(cluster, False, max(1, args.kills // 2))
        y, lo = statistics.median(yarn_times), statistics.median(local_times)
        print(f"recovery (kill -> first window after the checkpoint): YARN median {y:.2f}s "
              f"({', '.join(f'{t:.2f}' for t in yarn_times)}); local median {lo:.2f}s "
              f"({', '.join(f'{t:.2f}' for t in local_times)}); YARN/local {y / lo:.1f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
