"""A mini Hadoop cluster on this machine: HDFS and YARN in one JVM, for trying ``stram launch --yarn``.

    eval "$(./scripts/minicluster start)"   # prints export lines: HADOOP_CONF_DIR, JAVA_HOME, HADOOP_HOME, PATH
    hdfs dfs -put specs/data/words.txt /words.txt
    stram launch --yarn specs/wordcount.yaml -D operators.reader.path=hdfs:///words.txt ...
    yarn application -list -appStates ALL ; yarn logs -applicationId APP
    ./scripts/minicluster status            # exit 0 when running, 3 when not
    ./scripts/minicluster restart-namenode --down-seconds 5   # HDFS trouble, on purpose
    ./scripts/minicluster stop

    eval "$(./scripts/minicluster start --nodes 3)"   # 3 NodeManagers, 127.0.0.2-4; STRAM_MINICLUSTER_NODES
    ./scripts/minicluster kill-node 127.0.0.3     # a machine lost: its NodeManager and containers, SIGKILL
    ./scripts/minicluster start-node 127.0.0.3    # back (same ports, NodeManager recovery)
    ./scripts/minicluster restart-rm              # work-preserving ResourceManager restart

A NameNode + DataNode (``MiniDFSCluster``) and a ResourceManager + NodeManager
(``MiniYARNCluster``) run in one JVM (scripts/minicluster-jvm/MiniCluster.java),
as the current user, on free ports of 127.0.0.1. The first start fetches the
Hadoop jars from Maven Central once (``mvn dependency:copy-dependencies`` on
scripts/minicluster-jvm/pom.xml) into ``~/.cache/stram/hadoop-<version>/``, which
then looks like a Hadoop installation: ``jars/``, ``bin/hadoop``, ``bin/yarn``
and ``bin/hdfs`` (Hadoop's own CLI classes on those jars) and
``lib/native/libhdfs.so`` (built with gcc from the libhdfs C sources in pydoop's
sdist: the Hadoop release's native library is not on Maven Central).

Every start is a new, empty cluster. Its state (pid, configuration, logs,
HDFS and YARN directories) lives in ``$STRAM_MINICLUSTER_DIR`` (default
``~/.cache/stram/minicluster``); the cache in ``$STRAM_CACHE`` (default
``~/.cache/stram``). ``stop`` stops the JVM (the NodeManager kills its
containers first) and then any process the cluster started that is still left.

``start --nodes N`` (N >= 2) makes a cluster of N nodes: the JVM runs HDFS with
two DataNodes and the ResourceManager (work-preserving recovery, its state in
LevelDB under ``work/``, a node silent for 10 s is LOST, racks /rack1 and
/rack2 alternately), and each NodeManager is a process of its own on
127.0.0.(k+1), k = 1..N, with fixed ports; ``kill-node``, ``start-node`` and
``restart-rm`` are the faults of such a cluster, and ``status`` lists its
nodes (lib/minicluster_nodes.py says how). Without ``--nodes`` the cluster is
the one-JVM cluster above. Every server listens on a 127.0.0.x address.

``restart-namenode`` stops the running cluster's NameNode, keeps it down for
``--down-seconds``, and starts it again on the same ports (clients reconnect);
it returns once the NameNode is out of safe mode. It is a command file the JVM
polls (``work/control/*.cmd``, answered in ``*.done``).

Needs: Java 11+ (a JDK: javac), Maven, gcc, and pip (for pydoop's sdist); only
the Python standard library.

This module is the command ./scripts/minicluster runs (``main(argv)``): the
cached Hadoop "installation" (jars, the compiled main class, libhdfs, the
``hadoop``/``yarn``/``hdfs`` commands), the cluster's start and its processes,
and the subcommands. What it shares with ./scripts/kafka (Java, the Maven
fetch, the JVM's pid and stopping it) is in lib/jvm.py.
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from . import jvm, minicluster_nodes
from .jvm import Error

JVM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "minicluster-jvm")
POM = os.path.join(JVM_DIR, "pom.xml")
SOURCE = os.path.join(JVM_DIR, "MiniCluster.java")
MAIN_CLASS = "stram.MiniCluster"
PYDOOP = "pydoop==2.0.0"
LIBHDFS_SOURCES = ("hdfs.c", "jni_helper.c", "exception.c", "common/htable.c", "os/posix/thread.c",
                   "os/posix/thread_local_storage.c", "os/posix/mutexes.c")
#: Environment variable that marks every process of one cluster (the JVM, containers, their children).
MARKER = "STRAM_MINICLUSTER"
#: The Java versions an error about a missing Java suggests.
JAVA_VERSIONS = "17 recommended"

#: Java 17 closes the JDK's internals that Hadoop's servers reflect on (the list of
#: Spark's extraJavaTestArgs and HADOOP-19310).
JAVA_OPENS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
        "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.util.regex",
        "java.security", "jdk.internal.ref", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
        "sun.security.util", "sun.util.calendar")),
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "-Djdk.reflect.useDirectMethodHandle=false",
    "-Dio.netty.tryReflectionSetAccessible=true",
]

LOG4J = """\
# ./scripts/minicluster: warnings and errors on stderr
log4j.rootLogger=WARN,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %-5p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""


def say(message: str) -> None:
    print(f"minicluster: {message}", file=sys.stderr, flush=True)


# ====================================================================== where things are

def hadoop_version() -> str:
    return jvm.pom_property(POM, "hadoop.version")


def hadoop_home() -> str:
    """The cached 'installation': jars/, classes-<hash>/, bin/, lib/native/."""
    return os.path.join(jvm.cache_root(), f"hadoop-{hadoop_version()}")


def state_dir() -> str:
    return jvm.state_dir("STRAM_MINICLUSTER_DIR", "minicluster")


def conf_dir(state: str) -> str:
    return os.path.join(state, "conf")


# ====================================================================== the cache: jars, main class, libhdfs, commands

def ensure_jars(home: str) -> str:
    """``home/jars``: the hadoop-minicluster dependency tree, fetched once per pom.xml."""
    return jvm.fetch_jars(POM, home, "Hadoop", f"the Hadoop {hadoop_version()} minicluster jars", "about 120 MB", say)


def ensure_classes(home: str, jars: str, jhome: str) -> str:
    """``home/classes-<hash>``: MiniCluster.java compiled, and a quiet log4j.properties.

    Named by the hash of the source and the jars, so a changed MiniCluster.java
    is compiled again on the next start while clusters of other checkouts (other
    versions of the source) keep their own classes.
    """
    want = jvm.sha256(SOURCE, os.path.join(jars, ".pom-sha256"))
    classes = os.path.join(home, f"classes-{want[:16]}")
    if os.path.isfile(os.path.join(classes, ".sha256")):
        return classes
    javac = os.path.join(jhome, "bin", "javac")
    if not os.access(javac, os.X_OK):
        raise Error(f"{javac} is missing: JAVA_HOME={jhome} is not a JDK; install one "
                    f"(apt-get install openjdk-17-jdk-headless)")
    tmp = tempfile.mkdtemp(prefix="classes-tmp-", dir=home)
    proc = subprocess.run([javac, "-nowarn", "-XDignore.symbol.file", "-d", tmp, "-cp",
                           os.path.join(jars, "*"), SOURCE], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Error(f"compiling {SOURCE} failed:\n{proc.stdout}{proc.stderr}")
    with open(os.path.join(tmp, "log4j.properties"), "w") as f:
        f.write(LOG4J)
    with open(os.path.join(tmp, ".sha256"), "w") as f:
        f.write(want + "\n")
    try:
        os.rename(tmp, classes)
    except OSError:  # another start compiled the same source meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return classes


def _run_step(cmd: list[str], what: str, **kw) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Error(f"{what}: {exc}") from None
    if proc.returncode != 0:
        tail = "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise Error(f"{what} failed (exit {proc.returncode}):\n  {tail}")


def ensure_libhdfs(home: str, jhome: str) -> str:
    """``home/lib/native/libhdfs.so`` (what pyarrow's HadoopFileSystem loads), built once with gcc.

    The C sources are libhdfs's, as pydoop's sdist carries them (fetched with
    pip); libhdfs only calls Hadoop's Java FileSystem API over JNI, so it works
    with any Hadoop 2/3 jars on CLASSPATH.
    """
    native = os.path.join(home, "lib", "native")
    lib = os.path.join(native, "libhdfs.so")
    if os.path.isfile(lib):
        return lib
    include = os.path.join(jhome, "include")
    if not os.path.isfile(os.path.join(include, "jni.h")):
        raise Error(f"JAVA_HOME={jhome} has no include/jni.h to build libhdfs against: install a JDK "
                    f"(apt-get install openjdk-17-jdk-headless)")
    libjvm = sorted(glob.glob(os.path.join(jhome, "**", "server", "libjvm.so"), recursive=True))
    if not libjvm:
        raise Error(f"no libjvm.so under JAVA_HOME={jhome}")
    if shutil.which("gcc") is None:
        raise Error("gcc is not installed; it builds libhdfs.so (pyarrow's HDFS client) once: apt-get install gcc")
    os.makedirs(native, exist_ok=True)
    work = tempfile.mkdtemp(prefix="libhdfs-", dir=home)
    try:
        say(f"building libhdfs.so (pyarrow's HDFS client) from {PYDOOP}'s sources (once)")
        # pydoop's setup.py needs pkg_resources, which new setuptools dropped: fetch the sdist
        # from a throwaway venv with an older setuptools
        venv = os.path.join(work, "venv")
        _run_step([sys.executable, "-m", "venv", venv], "creating a venv to fetch pydoop's sdist")
        pip = os.path.join(venv, "bin", "pip")
        _run_step([pip, "install", "-q", "--disable-pip-version-check", "setuptools<70", "wheel"],
                  "installing setuptools<70")
        _run_step([pip, "download", "-q", "--disable-pip-version-check", PYDOOP, "--no-deps",
                   "--no-binary", ":all:", "--no-build-isolation", "-d", work],
                  f"downloading the {PYDOOP} sdist")
        sdist = sorted(glob.glob(os.path.join(work, "pydoop-*.tar.gz")))[-1]
        src = os.path.join(work, "src")
        with tarfile.open(sdist) as tf:
            members = [m for m in tf.getmembers() if "/src/libhdfs/" in m.name]
            tf.extractall(src, members=members, filter="data")
        root = glob.glob(os.path.join(src, "*", "src", "libhdfs"))[0]
        _run_step(["gcc", "-shared", "-fPIC", "-O1", "-w", "-o", lib + ".tmp",
                   "-I.", "-Iinclude", "-Iinclude/hdfs", "-Ios/posix", "-Icommon",
                   f"-I{include}", f"-I{os.path.join(include, 'linux')}", *LIBHDFS_SOURCES,
                   f"-L{os.path.dirname(libjvm[0])}", "-ljvm", "-lpthread"], "compiling libhdfs", cwd=root)
        os.replace(lib + ".tmp", lib)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


_WRAPPER = """#!/usr/bin/env bash
# `{name}` of stram's mini Hadoop cluster (./scripts/minicluster): Hadoop's own command-line
# classes on the cached hadoop-minicluster jars, for the cluster $HADOOP_CONF_DIR describes.
set -euo pipefail
HADOOP_HOME={home}
JARS="$HADOOP_HOME/jars"
CONF="${{HADOOP_CONF_DIR:?HADOOP_CONF_DIR is not set: eval \\"\\$(./scripts/minicluster start)\\"}}"
JAVA="${{JAVA_HOME:+$JAVA_HOME/bin/}}java"
classpath() {{  # always literal jars (as --glob): libhdfs and skein's driver take CLASSPATH literally
  local cp="$CONF" jar
  for jar in "$JARS"/*.jar; do cp="$cp:$jar"; done
  printf '%s\\n' "$cp"
}}
run() {{
  exec "$JAVA" -Xmx512m {java_opts} -Dhadoop.home.dir="$HADOOP_HOME" -cp "$CONF:$JARS/*" "$@"
}}
usage() {{
  echo "usage: {name} {usage}" >&2
  exit 1
}}
[ $# -gt 0 ] || usage
cmd="$1"; shift
case "$cmd" in
{cases}
  classpath) classpath ;;
  version) run org.apache.hadoop.util.VersionInfo ;;
  *) echo "{name}: '$cmd' is not one of this mini cluster's commands" >&2; usage ;;
esac
"""

_COMMANDS = {
    "yarn": ("application|applicationattempt|container|logs|node|queue|rmadmin|classpath [--glob]|version", [
        'application|applicationattempt|container) run org.apache.hadoop.yarn.client.cli.ApplicationCLI "$cmd" "$@" ;;',
        'logs) run org.apache.hadoop.yarn.client.cli.LogsCLI "$@" ;;',
        'node) run org.apache.hadoop.yarn.client.cli.NodeCLI "$@" ;;',
        'queue) run org.apache.hadoop.yarn.client.cli.QueueCLI "$@" ;;',
        'rmadmin) run org.apache.hadoop.yarn.client.cli.RMAdminCLI "$@" ;;',
    ]),
    "hdfs": ("dfs|dfsadmin|getconf|classpath [--glob]|version", [
        'dfs) run org.apache.hadoop.fs.FsShell "$@" ;;',
        'dfsadmin) run org.apache.hadoop.hdfs.tools.DFSAdmin "$@" ;;',
        'getconf) run org.apache.hadoop.hdfs.tools.GetConf "$@" ;;',
    ]),
    "hadoop": ("fs|classpath [--glob]|version", [
        'fs) run org.apache.hadoop.fs.FsShell "$@" ;;',
    ]),
}


def ensure_commands(home: str) -> str:
    """``home/bin/{hadoop,yarn,hdfs}``."""
    bin_dir = os.path.join(home, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for name, (usage, cases) in _COMMANDS.items():
        text = _WRAPPER.format(name=name, home=shlex.quote(home), usage=usage,
                               java_opts=" ".join(jvm.JAVA_LIGHT + JAVA_OPENS),
                               cases="\n".join("  " + c for c in cases))
        path = os.path.join(bin_dir, name)
        try:
            with open(path) as f:
                if f.read() == text:
                    continue
        except OSError:
            pass
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)
    return bin_dir


def prepare() -> tuple[str, str, str]:
    """Everything a start needs, fetched/built once: (HADOOP_HOME, JAVA_HOME, the compiled main class's directory)."""
    jhome = jvm.jdk_home(JAVA_VERSIONS)
    home = hadoop_home()
    jars = ensure_jars(home)
    classes = ensure_classes(home, jars, jhome)
    ensure_libhdfs(home, jhome)
    ensure_commands(home)
    return home, jhome, classes


# ====================================================================== the cluster

def running(state: str) -> dict[str, str] | None:
    """The cluster's properties when its JVM is up and ready, else None."""
    info = jvm.read_properties(os.path.join(conf_dir(state), "cluster.properties"))
    pid = jvm.read_pid(state)
    if info and pid and jvm.alive(pid):
        return info
    return None


def kerberos_dir(state: str) -> str:
    return os.path.join(state, "kerberos")


def kerberos_env(state: str) -> dict[str, str]:
    """What a process needs to use the secure cluster's KDC: MIT tools read KRB5_CONFIG, Java
    only its system property (JAVA_TOOL_OPTIONS reaches every JVM, libhdfs's included)."""
    krb5 = os.path.join(kerberos_dir(state), "krb5.conf")
    return {"KRB5_CONFIG": krb5, "JAVA_TOOL_OPTIONS": f"-Djava.security.krb5.conf={krb5}"}


def exports(state: str, home: str, jhome: str) -> str:
    bin_dir = os.path.join(home, "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    lines = [f"export HADOOP_CONF_DIR={shlex.quote(conf_dir(state))}",
             f"export JAVA_HOME={shlex.quote(jhome)}",
             f"export HADOOP_HOME={shlex.quote(home)}",
             f"export PATH={shlex.quote(os.pathsep.join([bin_dir, *path]))}"]
    info = jvm.read_properties(os.path.join(conf_dir(state), "cluster.properties")) or {}
    if info.get("nodes"):
        lines.append(f"export STRAM_MINICLUSTER_NODES={shlex.quote(info['nodes'])}")
    if info.get("kerberos.principal"):  # a secure cluster: its KDC, a ticket cache, the user's keytab
        env = dict(kerberos_env(state), KRB5CCNAME=f"FILE:{os.path.join(kerberos_dir(state), 'ccache')}",
                   STRAM_YARN_PRINCIPAL=info["kerberos.principal"], STRAM_YARN_KEYTAB=info["kerberos.keytab"])
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    return "\n".join(lines)


def node_env(state: str, home: str, jhome: str, secure: bool = False) -> dict[str, str]:
    """The NodeManager's environment, which YARN containers inherit: like a real node's, not the caller's."""
    keep = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SHELL", "TERM")
    env = {k: os.environ[k] for k in keep if os.environ.get(k)}
    env["PATH"] = os.pathsep.join([os.path.join(home, "bin"), os.path.join(jhome, "bin"),
                                   *[p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                                     if p and p != os.path.join(home, "bin")]])
    env.update({"JAVA_HOME": jhome, "HADOOP_HOME": home, "HADOOP_CONF_DIR": conf_dir(state), MARKER: state,
                # the JVM libhdfs starts in every Python process of the master and the containers
                "LIBHDFS_OPTS": os.environ.get("LIBHDFS_OPTS") or " ".join(jvm.JAVA_LIGHT)})
    if secure:
        env.update(kerberos_env(state), STRAM_MINICLUSTER_KERBEROS=kerberos_dir(state))
        if os.environ.get("STRAM_MINICLUSTER_TOKEN_LIFETIME_MS"):
            env["STRAM_MINICLUSTER_TOKEN_LIFETIME_MS"] = os.environ["STRAM_MINICLUSTER_TOKEN_LIFETIME_MS"]
    return env


#: Starts of the JVM when a port it picked was taken before it bound it.
BIND_ATTEMPTS = 3


def java_command(home: str, jhome: str) -> list[str]:
    """java and the options of the cluster's JVMs, up to the classpath."""
    return [os.path.join(jhome, "bin", "java"), *jvm.JAVA_LIGHT, *JAVA_OPENS, f"-Dhadoop.home.dir={home}"]


def cluster_of(state: str, info: dict[str, str] | None = None) -> minicluster_nodes.Cluster:
    """The running cluster as lib/minicluster_nodes.py needs it; an Error when it is not running."""
    info = info or running(state)
    if not info:
        raise Error(f"the mini cluster is not running (state directory {state}): ./scripts/minicluster start")
    home, jhome = hadoop_home(), jvm.jdk_home(JAVA_VERSIONS)
    return minicluster_nodes.Cluster(state, info, java_command(home, jhome), conf_dir(state),
                                     os.path.join(home, "jars"), node_env(state, home, jhome),
                                     lambda: running(state) is not None, say)


def start(args: argparse.Namespace) -> int:
    state = state_dir()
    nodes = 1 if args.nodes is None else args.nodes
    if not 1 <= nodes <= minicluster_nodes.MAX_NODES:
        raise Error(f"--nodes must be 1 to {minicluster_nodes.MAX_NODES}, not {nodes}")
    if nodes > 1 and args.secure:
        raise Error("--secure runs on one node only: leave out --nodes or --secure")
    home, jhome, classes = prepare()
    info = running(state)
    if info:
        have = len(info.get("nodes", "").split()) or 1
        if args.nodes and args.nodes != have:
            raise Error(f"a cluster of {have} node(s) already runs in {state}: ./scripts/minicluster stop first")
        say(f"already running (pid {jvm.read_pid(state)}): {info.get('fs.defaultFS')}, ResourceManager "
            f"{info.get('resourcemanager.address')}")
        print(exports(state, home, jhome))
        return 0
    leftovers(state, kill=True)
    for sub in ("conf", "work", "logs", "kerberos"):
        shutil.rmtree(os.path.join(state, sub), ignore_errors=True)
    if args.secure and not shutil.which("kinit"):
        raise Error("--secure needs MIT Kerberos's kinit (the containers' scripts run it): apt-get install krb5-user")
    jvm.remove(os.path.join(state, "pid"))
    conf = conf_dir(state)
    os.makedirs(conf)
    os.makedirs(os.path.join(state, "logs"))
    with open(os.path.join(conf, "log4j.properties"), "w") as f:
        f.write(LOG4J)
    jars = os.path.join(home, "jars")
    app_classpath = f"{conf},{os.path.join(jars, '*')}"
    cmd = [*java_command(home, jhome), f"-Xmx{args.heap}",
           f"-Djava.io.tmpdir={os.path.join(state, 'work', 'tmp')}",
           "-cp", os.pathsep.join([classes, os.path.join(jars, "*")]), MAIN_CLASS,
           conf, os.path.join(state, "work"), str(args.memory_mb), str(args.vcores), app_classpath]
    if nodes > 1:
        table = os.path.join(conf, "topology.table")
        minicluster_nodes.write_topology(table, nodes)
        cmd += [str(nodes), table]
    os.makedirs(os.path.join(state, "work", "tmp"))
    log_path = os.path.join(state, "logs", "minicluster.log")
    started = time.monotonic()
    say(f"starting HDFS and YARN (log: {log_path})")
    props = os.path.join(conf, "cluster.properties")
    deadline = started + args.timeout
    for attempt in range(1, BIND_ATTEMPTS + 1):
        logged = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        proc = jvm.spawn(cmd, state, log_path, env=node_env(state, home, jhome, args.secure))
        try:
            jvm.wait_up(proc, lambda: os.path.isfile(props), deadline, args.timeout, log_path, "the mini cluster")
            break
        except BaseException as e:
            jvm.stop_pid(proc.pid, 30)
            leftovers(state, kill=True)
            jvm.remove(os.path.join(state, "pid"))
            if not (isinstance(e, Error) and attempt < BIND_ATTEMPTS and _port_taken(log_path, logged)):
                raise
            # the JVM picks free ports and binds them a moment later; another process (a client's
            # outgoing connection, a container) may take one in between: new ports, once more
            say(f"a port picked for the cluster was taken before it bound (BindException); "
                f"starting again ({attempt + 1}/{BIND_ATTEMPTS})")
    info = jvm.read_properties(props)
    if nodes > 1:
        try:
            info.update(minicluster_nodes.start_all(cluster_of(state, info), nodes, args.memory_mb, args.vcores,
                                                    LOG4J, deadline))
        except BaseException:
            stop(argparse.Namespace(grace=10.0))
            raise
        info["startup.seconds"] = f"{time.monotonic() - started:.1f}s"
        jvm.write_properties(props, info)
        where = f"{nodes} NodeManagers {info['nodes']}, each"
    else:
        where = f"NodeManager {info['nodemanager.address']}"
    say(f"up in {time.monotonic() - started:.1f}s: HDFS {info['fs.defaultFS']}, ResourceManager "
        f"{info['resourcemanager.address']} (web {info['resourcemanager.webapp']}), "
        f"{where} {args.memory_mb} MB, {args.vcores} vcores")
    if info.get("kerberos.principal"):  # the user's ticket, in a cache of the cluster's own
        cache = f"FILE:{os.path.join(kerberos_dir(state), 'ccache')}"
        kinit = subprocess.run(["kinit", "-kt", info["kerberos.keytab"], info["kerberos.principal"]],
                               env=dict(os.environ, KRB5CCNAME=cache, **kerberos_env(state)),
                               capture_output=True, text=True)
        if kinit.returncode != 0:
            raise Error(f"kinit as {info['kerberos.principal']} failed: {kinit.stderr.strip()}")
        say(f"Kerberos: realm {info['kerberos.realm']}, KDC {info['kerberos.kdc']}, a ticket for "
            f"{info['kerberos.principal']} (keytab {info['kerberos.keytab']})")
    print(exports(state, home, jhome))
    return 0


def _port_taken(log_path: str, offset: int) -> bool:
    """Whether the JVM's log past ``offset`` says a port was already in use."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        return b"java.net.BindException: Address already in use" in f.read()


def leftovers(state: str, kill: bool) -> list[int]:
    """Processes the cluster started (they carry STRAM_MINICLUSTER=<state dir> in their environment)."""
    marker = f"{MARKER}={state}".encode()
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        found.append(int(entry))
    if kill:
        for pid in found:
            jvm.kill(pid)
        for pid in found:
            jvm.reap(pid)
    return found


def stop(args: argparse.Namespace) -> int:
    state = state_dir()
    info = jvm.read_properties(os.path.join(conf_dir(state), "cluster.properties"))
    minicluster_nodes.stop_all(state, info.get("nodes", "").split(), min(args.grace, 15.0), say)
    jvm.stop_jvm(state, args.grace, say)
    # a container's launch script may still be starting its child while the first sweep runs
    # (NodeManagers under recovery leave their containers running): sweep until none is left
    left: list[int] = []
    for _ in range(10):
        found = leftovers(state, kill=True)
        if not found:
            break
        left += found
        time.sleep(0.2)
    if left:
        say(f"killed {len(left)} leftover process(es) of the cluster: {' '.join(map(str, left))}")
    jvm.remove(os.path.join(conf_dir(state), "cluster.properties"))
    return 0


def status(args: argparse.Namespace) -> int:
    state = state_dir()
    info = running(state)
    if not info:
        print(f"not running (state directory {state})")
        return jvm.NOT_RUNNING
    print(f"running (pid {jvm.read_pid(state)}, state directory {state})")
    for key in ("fs.defaultFS", "namenode.http", "resourcemanager.address", "resourcemanager.webapp",
                "nodemanager.address", "startup.seconds"):
        if key in info:
            print(f"  {key}: {info.get(key)}")
    print(f"  HADOOP_CONF_DIR: {conf_dir(state)}")
    if info.get("nodes"):
        print("  nodes (host, rack, process, NodeManager pid, address, state in the ResourceManager):")
        print("\n".join(minicluster_nodes.status_lines(cluster_of(state, info))))
    return 0


def restart_namenode(args: argparse.Namespace) -> int:
    """Ask the running cluster's JVM (through its control directory) to restart the NameNode."""
    state = state_dir()
    info = running(state)
    if not info:
        raise Error(f"the mini cluster is not running (state directory {state}): ./scripts/minicluster start")
    if args.down_seconds < 0:
        raise Error(f"--down-seconds must be 0 or more, not {args.down_seconds:g}")
    started = time.monotonic()
    say(f"restarting the NameNode of {info.get('fs.defaultFS')}, down for {args.down_seconds:g}s")
    detail = minicluster_nodes.ask(cluster_of(state, info), f"restart-namenode {int(args.down_seconds * 1000)}",
                                   args.down_seconds + args.timeout, "restarting the NameNode")
    say(f"{detail}; {time.monotonic() - started:.1f}s in all")
    return 0


def env_command(args: argparse.Namespace) -> int:
    state = state_dir()
    if not running(state):
        raise Error(f"the mini cluster is not running (state directory {state}): ./scripts/minicluster start")
    print(exports(state, hadoop_home(), jvm.jdk_home(JAVA_VERSIONS)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./scripts/minicluster", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start", help="start HDFS and YARN (or find them running); print export lines for eval")
    p.add_argument("--memory-mb", type=int, default=int(os.environ.get("STRAM_MINICLUSTER_MEMORY_MB", 8192)),
                   help="the NodeManager's memory for containers (default 8192)")
    p.add_argument("--vcores", type=int, default=int(os.environ.get("STRAM_MINICLUSTER_VCORES", 8)),
                   help="the NodeManager's vcores (default 8)")
    p.add_argument("--heap", default="1g", help="the cluster JVM's -Xmx (default 1g)")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="N NodeManagers, each a process on 127.0.0.2, 127.0.0.3, ... (default: 1, in the JVM); "
                        "--memory-mb and --vcores are each node's")
    p.add_argument("--secure", action="store_true",
                   default=os.environ.get("STRAM_MINICLUSTER_SECURE") == "1",
                   help="Kerberos: a MiniKdc, and HDFS and YARN in secure mode; the exports add the "
                        "KDC's krb5.conf, a ticket cache and the user's principal and keytab")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the cluster (default 300)")
    p.set_defaults(func=start)
    p = sub.add_parser("stop", help="stop the cluster and every process it started")
    p.add_argument("--grace", type=float, default=60.0, help="seconds before the JVM is killed (default 60)")
    p.set_defaults(func=stop)
    sub.add_parser("status", help="is it running; its addresses (exit 3 when not running)").set_defaults(func=status)
    p = sub.add_parser("restart-namenode", help="stop the NameNode, keep it down a while, start it again "
                       "on the same ports; returns when it is out of safe mode")
    p.add_argument("--down-seconds", type=float, default=0.0,
                   help="seconds the NameNode stays down (default 0: restart at once)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for it to come back, beyond the down time (default 120)")
    p.set_defaults(func=restart_namenode)
    minicluster_nodes.add_commands(sub, lambda: cluster_of(state_dir()))
    sub.add_parser("env", help="print the export lines of the running cluster").set_defaults(func=env_command)
    sub.add_parser("prepare", help="fetch and build what a start needs, without starting").set_defaults(
        func=lambda a: (prepare(), 0)[1])
    return jvm.run(parser.parse_args(argv))

