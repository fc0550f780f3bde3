"""What runs on the YARN nodes before stram does: HDFS checks, staging the spec, the application id.

The scripts :mod:`stram.client.yarn.appspec` writes run ``python -m stram.master.launch.yarnnode
prepare-master SPEC`` before the master and ``check-hdfs APP_PATH`` before every
container agent. :func:`check_hdfs` names each piece pyarrow's
HadoopFileSystem (libhdfs over JNI) is missing on the node and how to fix it.
"""

from __future__ import annotations

import ctypes.util
import glob
import json
import os
import re
import sys
from typing import Mapping

from stram.common.apps import TERMINAL
from stram.common.errors import StramError, UserError

__all__ = ["ALREADY_ENDED", "current_app_id", "find_libhdfs", "check_hdfs", "prepare_master", "main"]

#: Exit code of ``prepare-master`` when an earlier attempt already ended the application.
ALREADY_ENDED = 3


def current_app_id(env: Mapping[str, str] | None = None) -> str | None:
    """The YARN application id of this process: STRAM_APP_ID, SKEIN_APPLICATION_ID, or from CONTAINER_ID.

    YARN container ids embed it: ``container_[e<epoch>_]<clusterTs>_<appSeq>_<attempt>_<n>``
    belongs to ``application_<clusterTs>_<appSeq>``.
    """
    env = os.environ if env is None else env
    for key in ("STRAM_APP_ID", "SKEIN_APPLICATION_ID"):
        if env.get(key):
            return env[key]
    match = re.match(r"container_(?:e\d+_)?(\d+)_(\d+)_\d+_\d+$", env.get("CONTAINER_ID", ""))
    return f"application_{match.group(1)}_{match.group(2)}" if match else None


def find_libhdfs(env: Mapping[str, str] | None = None) -> str | None:
    """Where pyarrow will find ``libhdfs.so``: ARROW_LIBHDFS_DIR, $HADOOP_HOME/lib/native, the loader path."""
    env = os.environ if env is None else env
    dirs = [env.get("ARROW_LIBHDFS_DIR"),
            os.path.join(env["HADOOP_HOME"], "lib", "native") if env.get("HADOOP_HOME") else None,
            *env.get("LD_LIBRARY_PATH", "").split(os.pathsep)]
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, "libhdfs.so")):
            return os.path.join(d, "libhdfs.so")
    return ctypes.util.find_library("hdfs")


def _find_libjvm(java_home: str) -> str | None:
    for rel in ("lib/server/libjvm.so", "jre/lib/amd64/server/libjvm.so", "lib/amd64/server/libjvm.so",
                "jre/lib/server/libjvm.so", "jre/lib/aarch64/server/libjvm.so"):
        if os.path.isfile(os.path.join(java_home, rel)):
            return os.path.join(java_home, rel)
    found = glob.glob(os.path.join(java_home, "**", "libjvm.so"), recursive=True)
    return found[0] if found else None


_HADOOP_JAR_RE = re.compile(r"hadoop-(common|hdfs|hdfs-client|client|client-api|client-runtime)-\d.*\.jar$")


def check_hdfs(app_path: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Check what pyarrow's HadoopFileSystem needs for ``app_path``; explain what is missing.

    Nothing to check for other schemes (``file://``, local paths, ``s3://``...).

    Parameters
    ----------
    app_path:
        The application directory URI.
    env:
        Environment to check (default ``os.environ``).

    Returns
    -------
    dict
        What was found: ``java_home``, ``libjvm``, ``libhdfs``, ``classpath_jars`` (count).

    Raises
    ------
    UserError
        Naming every missing piece and its fix: JAVA_HOME (libhdfs starts a
        JVM in the Python process), libhdfs (ARROW_LIBHDFS_DIR or HADOOP_HOME),
        CLASSPATH with the Hadoop jars *globbed* (``export
        CLASSPATH=$(hadoop classpath --glob)``; the embedded JVM does not expand
        ``dir/*``), and for ``hdfs:///`` paths a core-site.xml on CLASSPATH.
    """
    scheme = app_path.split("://", 1)[0].lower() if "://" in app_path else "file"
    if scheme not in ("hdfs", "viewfs"):
        return {}
    env = os.environ if env is None else env
    problems: list[str] = []
    found: dict[str, str] = {}
    java_home = env.get("JAVA_HOME", "")
    if not java_home:
        problems.append("JAVA_HOME is not set (libhdfs starts a JVM inside Python and finds it there): "
                        "export JAVA_HOME=/path/to/jdk, e.g. "
                        "export JAVA_HOME=$(dirname $(dirname $(readlink -f $(which java))))")
    else:
        libjvm = _find_libjvm(java_home)
        if libjvm is None:
            problems.append(f"JAVA_HOME={java_home} has no lib/server/libjvm.so: point JAVA_HOME at a JDK")
        else:
            found.update(java_home=java_home, libjvm=libjvm)
    libhdfs = find_libhdfs(env)
    if libhdfs is None:
        problems.append("libhdfs.so was not found in ARROW_LIBHDFS_DIR, $HADOOP_HOME/lib/native or the "
                        "library path: export HADOOP_HOME=/path/to/hadoop (it ships lib/native/libhdfs.so) "
                        "or export ARROW_LIBHDFS_DIR=/directory/with/libhdfs.so")
    else:
        found["libhdfs"] = libhdfs
    entries = [e for e in env.get("CLASSPATH", "").split(os.pathsep) if e]
    jars = [e for e in entries if _HADOOP_JAR_RE.search(os.path.basename(e))]
    if not entries:
        problems.append("CLASSPATH is not set (libhdfs loads the Hadoop client from it): "
                        "export CLASSPATH=$(hadoop classpath --glob)")
    elif not jars:
        if any(e.endswith("*") for e in entries):
            problems.append("CLASSPATH has only wildcard entries (dir/*), which the JVM that libhdfs "
                            "starts does not expand: export CLASSPATH=$(hadoop classpath --glob)")
        else:
            problems.append("CLASSPATH has no Hadoop jars (hadoop-common, hadoop-hdfs or hadoop-client-*): "
                            "export CLASSPATH=$(hadoop classpath --glob)")
    else:
        found["classpath_jars"] = str(len(jars))
    if app_path.lower().startswith(f"{scheme}:///") and entries and not any(
            os.path.isfile(os.path.join(e, "core-site.xml")) for e in entries if os.path.isdir(e)):
        problems.append(f"{app_path} names no NameNode, so fs.defaultFS comes from core-site.xml, but no "
                        f"directory on CLASSPATH has one: add $HADOOP_CONF_DIR to CLASSPATH (`hadoop "
                        f"classpath --glob` does) or write hdfs://<namenode>:<port>/...")
    if problems:
        raise UserError(f"{app_path} is on HDFS, which stram reaches through pyarrow's HadoopFileSystem "
                         f"(libhdfs), but on this node: " + "; ".join(problems))
    return found


def prepare_master(spec_file: str, app_path: str | None = None) -> str | None:
    """Before the master starts in YARN: check HDFS, stage the spec, detect a finished application.

    Copies the localized spec to ``APP_PATH/spec.yaml`` unless an earlier
    attempt already did (the journal belongs to that spec).

    Returns
    -------
    str or None
        The final state (SUCCEEDED, FAILED, KILLED) when an earlier attempt
        already ended the application, with its diagnostics after ": " when it
        left any, else None.
    """
    from stram.common import apppath, fs
    app_path = app_path or os.environ.get("STRAM_APP_PATH", "")
    if not app_path:
        raise UserError("STRAM_APP_PATH is not set; the master is started by `stram launch --yarn`")
    check_hdfs(app_path)
    status_uri = apppath.file(app_path, apppath.STATUS)
    if fs.exists(status_uri):
        try:
            status = json.loads(fs.read_bytes(status_uri))
        except ValueError:
            status = {}
        if status.get("state") in TERMINAL:
            why = status.get("diagnostics") or ""
            return f"{status['state']}: {why}" if why else status["state"]
    target = apppath.file(app_path, apppath.SPEC)
    if not fs.exists(target):
        with open(spec_file, "rb") as f:
            fs.write_atomic(target, f.read())
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m stram.master.launch.yarnnode prepare-master SPEC | check-hdfs APP_PATH | app-id``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m stram.master.launch.yarnnode",
                                     description="steps the stram YARN scripts run on the nodes")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare-master", help="check HDFS, stage the spec under APP_PATH [env: STRAM_APP_PATH]")
    p.add_argument("spec_file")
    p = sub.add_parser("check-hdfs", help="check what pyarrow's HDFS client needs on this node")
    p.add_argument("app_path")
    sub.add_parser("app-id", help="print this container's YARN application id")
    args = parser.parse_args(argv)
    if args.command == "app-id":
        app_id = current_app_id()
        if app_id:
            print(app_id)
        return 0 if app_id else 1
    try:
        if args.command == "check-hdfs":
            check_hdfs(args.app_path)
            return 0
        ended = prepare_master(args.spec_file)
    except StramError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.command == "prepare-master":
            _shutdown_current("FAILED", str(exc))
        return 1
    if ended is not None:
        message = f"an earlier attempt already ended this application {ended}"
        print(message, file=sys.stderr)
        _shutdown_current(ended.split(":", 1)[0], message)
        return ALREADY_ENDED
    return 0


def _shutdown_current(status: str, diagnostics: str) -> None:
    """Tell the Skein application master the final status (best effort)."""
    try:
        import skein
        skein.ApplicationClient.from_current().shutdown(status, diagnostics[:4000])
    except Exception as exc:  # noqa: BLE001
        print(f"(could not report {status} to YARN: {exc})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
