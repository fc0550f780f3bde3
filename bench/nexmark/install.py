"""``--setup`` for the NEXMark peers: Bytewax and PyFlink in their own venvs, Flink's format jars from Maven.

The venvs are bench.peers.bench_peers's (``$STRAM_BENCH_VENVS``, the same requirements); Bytewax's
also gets pyarrow and numpy (its job reads the Parquet files). PyFlink bundles the JSON format but not
Parquet's: ``flink-sql-parquet`` of the installed Flink version, the Hadoop client it needs
(hadoop-client-api and -runtime, shaded) and zstd-jni (the data set is zstd-compressed) are copied from
Maven Central with ``mvn dependency:copy`` into ``$STRAM_CACHE/flink-nexmark-<version>/jars`` (default
``~/.cache/stram``); ``flink-json`` too if a PyFlink lacks it. A piece that is missing makes its system
skipped with a line saying why, never a crash.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from bench.peers.bench_peers import PEERS, VENVS
from bench.peers.bench_peers import setup as install_peers
from bench.peers.bench_peers import venv_python

#: Python packages each peer's job needs beside the peer itself.
EXTRA = {"bytewax": ["pyarrow", "numpy"], "flink": []}
HADOOP_VERSION = "3.3.6"
ZSTD_JNI_VERSION = "1.5.6-4"


def flink_version() -> str | None:
    """The installed PyFlink's version (None: no flink venv, or no PyFlink in it)."""
    python = venv_python("flink")
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('apache-flink'))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def jar_dir(version: str) -> str:
    cache = os.path.abspath(os.path.expanduser(os.environ.get("STRAM_CACHE") or "~/.cache/stram"))
    return os.path.join(cache, f"flink-nexmark-{version}", "jars")


def pyflink_has_json(version: str) -> bool:
    """Whether PyFlink's own lib/ has the JSON format of ``version``."""
    lib = VENVS / "flink" / "lib" / "python3*" / "site-packages" / "pyflink" / "lib"
    return bool(glob.glob(str(lib / f"flink-json-{version}.jar")))


def artifacts(version: str) -> list[str]:
    """The Maven coordinates the Flink job needs for Parquet (and JSON, when PyFlink lacks it)."""
    wanted = [f"org.apache.flink:flink-sql-parquet:{version}",
              f"org.apache.hadoop:hadoop-client-api:{HADOOP_VERSION}",
              f"org.apache.hadoop:hadoop-client-runtime:{HADOOP_VERSION}",
              f"com.github.luben:zstd-jni:{ZSTD_JNI_VERSION}"]
    if not pyflink_has_json(version):
        wanted.append(f"org.apache.flink:flink-json:{version}")
    return wanted


def jar_name(coordinate: str) -> str:
    _, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def flink_jars() -> tuple[list[str], str]:
    """(the jars for the Flink job, "") or ([], why Flink cannot run)."""
    version = flink_version()
    if version is None:
        return [], f"no PyFlink in {VENVS / 'flink'}; run with --setup"
    home = jar_dir(version)
    missing = [jar_name(c) for c in artifacts(version) if not os.path.exists(os.path.join(home, jar_name(c)))]
    if missing:
        return [], f"Flink {version}'s format jars ({', '.join(missing)}) are not in {home}; run with --setup"
    return [os.path.join(home, jar_name(c)) for c in artifacts(version)], ""


def fetch_jars(version: str) -> str:
    """Copy the jars from Maven Central into the cache; returns "" or why it could not."""
    mvn = shutil.which("mvn")
    if mvn is None:
        return "Maven (mvn) is not on PATH (apt-get install maven)"
    home = jar_dir(version)
    os.makedirs(home, exist_ok=True)
    for coordinate in artifacts(version):
        if os.path.exists(os.path.join(home, jar_name(coordinate))):
            continue
        proc = subprocess.run([mvn, "-B", "-q", "dependency:copy", f"-Dartifact={coordinate}",
                               f"-DoutputDirectory={home}"], capture_output=True, text=True, cwd=home)
        if proc.returncode != 0 or not os.path.exists(os.path.join(home, jar_name(coordinate))):
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return f"mvn could not fetch {coordinate}: {' / '.join(tail)}"
    return ""


def setup(systems: list[str]) -> None:
    """Install the peers among ``systems`` (each failure printed, the others still installed)."""
    for name in [s for s in systems if s in PEERS]:
        try:
            install_peers([name])
            if EXTRA.get(name):
                subprocess.run([str(venv_python(name)), "-m", "pip", "install", "--quiet", *EXTRA[name]], check=True)
                print(f"{name}: installed {', '.join(EXTRA[name])} into {VENVS / name}")
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"{name}: setup failed ({e}); it will be skipped")
            continue
        if name == "flink":
            version = flink_version()
            why = fetch_jars(version) if version else "PyFlink is not importable in its venv"
            if why:
                print(f"flink: format jars not fetched ({why}); it will be skipped")
            else:
                print(f"flink: Flink {version}'s format jars in {jar_dir(version)}")
