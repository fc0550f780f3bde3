"""What ./scripts/minicluster and ./scripts/kafka share: a Java server on this machine, from Maven's jars.

Both commands (lib/minicluster.py, lib/kafka.py) run one JVM from jars that
Maven fetches once into the cache, with a state directory of their own that
records the JVM's pid, and stop it again. What they do alike is here, once:

- :class:`Error` (one ``error:`` line) and :func:`run`, which turns a command's
  outcome into its exit code; ``NOT_RUNNING``, the exit code of ``status``
  when nothing runs;
- where things are: the cache (``$STRAM_CACHE``, default ``~/.cache/stram``), a
  command's state directory, a version from a pom.xml;
- Java: ``java`` and a JDK's home (JAVA_HOME, else PATH), and ``JAVA_LIGHT``,
  the options that start a small JVM faster;
- the jars: ``mvn dependency:copy-dependencies`` on a pom.xml into
  ``<home>/jars``, once per pom.xml (its hash is stamped beside them);
- the process: start a JVM in a session of its own with its pid file, wait
  until it is up, whether a pid is alive, stop it (SIGTERM, then SIGKILL);
  free ports, properties files and the end of a log.

Only the Python standard library.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

#: The exit code of ``status`` when the server is not running.
NOT_RUNNING = 3
#: Short-lived or lightly loaded JVMs: C1 only and one GC thread start faster on a small machine.
JAVA_LIGHT = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]

#: How a command reports progress: one line on stderr, with the command's name in front.
Say = Callable[[str], None]


class Error(Exception):
    """What went wrong and how to fix it: printed as one ``error:`` line."""


def run(args: argparse.Namespace) -> int:
    """``args.func(args)``'s exit code: an :class:`Error` is an ``error:`` line and 1, Ctrl-C 130."""
    try:
        return args.func(args)
    except Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# ====================================================================== where things are

def cache_root() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("STRAM_CACHE") or "~/.cache/stram"))


def state_dir(variable: str, name: str) -> str:
    """A command's state directory: ``$variable``, else ``name`` in the cache."""
    return os.path.abspath(os.path.expanduser(os.environ.get(variable) or os.path.join(cache_root(), name)))


def pom_property(pom: str, name: str) -> str:
    """``<name>`` of a pom.xml's properties (the version its jars are fetched at)."""
    with open(pom) as f:
        match = re.search(f"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", f.read())
    if not match:
        raise Error(f"{pom} has no <{name}>")
    return match.group(1).strip()


def sha256(*paths: str) -> str:
    """The hash of the files' contents, one after the other."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


# ====================================================================== Java

def _java_home_env(recommend: str) -> str | None:
    """JAVA_HOME when it is set (it must have bin/java), else None."""
    home = os.environ.get("JAVA_HOME")
    if home and not os.access(os.path.join(home, "bin", "java"), os.X_OK):
        raise Error(f"JAVA_HOME={home} has no bin/java: export JAVA_HOME=/path/to/jdk ({recommend})")
    return home or None


def java(recommend: str) -> str:
    """``java``: JAVA_HOME's, else the one on PATH (as found there). ``recommend``: the Java
    versions an error suggests, e.g. "17 or newer"."""
    home = _java_home_env(recommend)
    if home:
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise Error("Java was not found (no JAVA_HOME, no java on PATH): install one, e.g. "
                    "apt-get install openjdk-17-jdk-headless")
    return found


def jdk_home(recommend: str) -> str:
    """A JDK (javac included): JAVA_HOME, else the one `javac`/`java` on PATH belongs to."""
    home = _java_home_env(recommend)
    if home:
        return home
    for tool in ("javac", "java"):
        found = shutil.which(tool)
        if found:
            return os.path.dirname(os.path.dirname(os.path.realpath(found)))
    raise Error("Java was not found (no JAVA_HOME, no java on PATH): install a JDK, e.g. "
                "apt-get install openjdk-17-jdk-headless, or export JAVA_HOME=/path/to/jdk")


# ====================================================================== the jars

def fetch_jars(pom: str, home: str, project: str, what: str, size: str, say: Say) -> str:
    """``home/jars``: ``pom``'s runtime dependency tree, fetched by Maven once per pom.xml.

    ``project`` names whose jars they are in errors ("Hadoop"), ``what`` and ``size`` describe
    them in the progress lines ("the Hadoop 3.5.0 minicluster jars", "about 120 MB").
    """
    jars = os.path.join(home, "jars")
    stamp = os.path.join(jars, ".pom-sha256")
    want = sha256(pom)
    try:
        with open(stamp) as f:
            if f.read().strip() == want:
                return jars
    except OSError:
        pass
    mvn = shutil.which("mvn")
    if mvn is None:
        raise Error(f"Maven (mvn) is not on PATH; it fetches {project}'s jars from Maven Central once: "
                    "apt-get install maven")
    os.makedirs(home, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="jars-", dir=home)
    say(f"fetching {what} from Maven Central into {jars} (once; {size})")
    started = time.monotonic()
    cmd = [mvn, "-B", "-f", pom, "dependency:copy-dependencies", f"-DoutputDirectory={tmp}",
           "-DincludeScope=runtime"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=home)
    tail_lines: list[str] = []
    files, kbytes, last = 0, 0.0, 0.0
    assert proc.stdout is not None
    for line in proc.stdout:
        tail_lines = (tail_lines + [line.rstrip()])[-40:]
        match = re.search(r"Downloaded from \S+: \S+ \(([\d.]+) (B|kB|MB)", line)
        if match:
            files += 1
            kbytes += float(match.group(1)) * {"B": 1 / 1024, "kB": 1, "MB": 1024}[match.group(2)]
            now = time.monotonic()
            if now - last >= 2:
                say(f"  ... {files} files, {kbytes / 1024:.0f} MB ({now - started:.0f}s)")
                last = now
    if proc.wait() != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Error(f"fetching {project}'s jars with Maven failed (is Maven Central reachable?):\n  "
                    + "\n  ".join(tail_lines[-25:]))
    with open(os.path.join(tmp, ".pom-sha256"), "w") as f:
        f.write(want + "\n")
    shutil.rmtree(jars, ignore_errors=True)
    os.replace(tmp, jars)
    count = len(glob.glob(os.path.join(jars, "*.jar")))
    say(f"  {count} jars ready ({files} files downloaded, {kbytes / 1024:.0f} MB) in "
        f"{time.monotonic() - started:.0f}s")
    return jars


# ====================================================================== files

def read_properties(path: str) -> dict[str, str]:
    """``key=value`` lines (``#`` comments skipped); empty when the file is missing."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    key, _, value = line.rstrip("\n").partition("=")
                    out[key] = value
    except OSError:
        pass
    return out


def write_properties(path: str, values: dict[str, str]) -> None:
    """``key=value`` lines, replacing ``path`` at once."""
    with open(path + ".tmp", "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in values.items())
    os.replace(path + ".tmp", path)


def tail(path: str, n: int) -> list[str]:
    """The last ``n`` lines of a log (none when it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return [ln.rstrip() for ln in f.readlines()[-n:]]
    except OSError:
        return []


def remove(path: str) -> None:
    """Remove a file if it is there."""
    try:
        os.remove(path)
    except OSError:
        pass


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ====================================================================== the JVM's process

def read_pid(state: str) -> int | None:
    """The pid in ``state/pid``, if any."""
    try:
        with open(os.path.join(state, "pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


def spawn(cmd: list[str], state: str, log_path: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in ``state``, in a session of its own, its output appended to ``log_path``
    (``env``: its environment, default this one's); its pid in ``state/pid``."""
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(cmd, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, cwd=state, env=env,
                                start_new_session=True)
    with open(os.path.join(state, "pid"), "w") as f:
        f.write(f"{proc.pid}\n")
    return proc


def wait_up(proc: subprocess.Popen, ready: Callable[[], bool], deadline: float, timeout: float, log_path: str,
            what: str) -> None:
    """Until ``ready()``; an :class:`Error` with the end of the log when the JVM exits first or
    ``deadline`` (``timeout`` seconds after the start) passes. ``what``: "the Kafka broker"."""
    while True:
        if proc.poll() is not None:
            raise Error(f"{what}'s JVM exited with code {proc.returncode} before it was up; "
                        f"the end of {log_path}:\n  " + "\n  ".join(tail(log_path, 25)))
        if ready():
            return
        if time.monotonic() > deadline:
            raise Error(f"{what} was not up after {timeout:.0f}s (stopped it); the end of "
                        f"{log_path}:\n  " + "\n  ".join(tail(log_path, 25)))
        time.sleep(0.2)


def kill(pid: int) -> None:
    """SIGKILL, if ``pid`` is still there."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is an exited child of this process."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_pid(pid: int, grace: float) -> bool:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL its process group. True if it stopped by itself."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            reap(pid)
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill(pid)
    while alive(pid) and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    reap(pid)
    return False


def stop_jvm(state: str, grace: float, say: Say) -> None:
    """``stop``: the JVM of ``state/pid`` (see :func:`stop_pid`), saying how; no pid file after."""
    pid = read_pid(state)
    if pid and alive(pid):
        started = time.monotonic()
        clean = stop_pid(pid, grace)
        say(f"stopped (pid {pid}) in {time.monotonic() - started:.1f}s"
            + ("" if clean else f": it did not stop within {grace:.0f}s and was killed"))
    else:
        say("not running")
    remove(os.path.join(state, "pid"))
