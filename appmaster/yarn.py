"""stram on Hadoop YARN through Skein: the application spec, submission, the master's launcher and HDFS checks.

Pieces, in the order a run meets them:

* :func:`application_spec` turns an :class:`~appmaster.spec.AppSpec` into a
  ``skein.ApplicationSpec``: the master is the Skein master script
  (``python -m appmaster --launcher yarn``), containers are instances of the
  ``container`` service that the master adds one by one.
* :func:`submit` (``stram launch --yarn``) starts skein's Java driver with a
  bounded ResourceManager connect wait, submits, and follows the application.
* :class:`YarnLauncher` is the master's :class:`~appmaster.launcher.Launcher`
  inside YARN, on ``skein.ApplicationClient``.
* :func:`check_hdfs` names what ``pyarrow``'s HadoopFileSystem is missing on a
  node (JAVA_HOME, libhdfs, CLASSPATH) and how to fix it.
* :func:`list_apps`, :func:`kill_app` and :func:`admin_url_for` serve the CLI.

``python -m appmaster.yarn prepare-master SPEC`` and ``check-hdfs APP_PATH``
are the small steps the generated scripts run on the nodes before the master
and the container agents start.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes.util
import getpass
import glob
import inspect
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import warnings
import xml.etree.ElementTree as ET
import zipfile
from typing import Any, Iterator, Mapping

from appmaster.launcher import ContainerRequest, Launcher

log = logging.getLogger("appmaster.yarn")

__all__ = [
    "STRAM_TAG", "CONTAINER_SERVICE", "DEFAULT_MAX_ATTEMPTS",
    "application_spec", "submit", "connect", "hadoop_conf_overlay", "find_hadoop_conf_dir",
    "YarnLauncher", "check_hdfs", "find_libhdfs", "list_apps", "kill_app", "admin_url_for",
    "direct_admin_url", "admin_request",
    "current_app_id", "local_path_warnings", "qualify_hdfs", "container_shapes", "application_modules",
    "prepare_master", "follow", "main",
]

#: Every stram application carries this YARN application tag (``list_apps`` filters on it).
STRAM_TAG = "stram"
#: The Skein service whose instances are stram containers (extra shapes: ``container-<MB>mb-<N>vc``).
CONTAINER_SERVICE = "container"
#: YARN attempts of the master: a second attempt resumes from the journal under APP_PATH.
DEFAULT_MAX_ATTEMPTS = 2
#: Where a shipped Python environment archive is unpacked in every container.
ENV_DIR = "environment"
#: Where the application's own modules (and stram's, from a source checkout) are unpacked.
APP_DIR = "app"
#: The resolved spec, as the master's localized file and under APP_PATH.
SPEC_FILE = "spec.yaml"
#: stram's own top-level packages (never shipped as "the application's modules").
STRAM_PACKAGES = ("appmaster", "container", "proto", "scripts")
#: Suffixes YARN (through Skein) unpacks as archives.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
#: Default bound on the driver's wait for an unreachable ResourceManager (ms).
DEFAULT_CONNECT_WAIT_MS = 30000
#: Exit code of ``prepare-master`` when an earlier attempt already ended the application.
ALREADY_ENDED = 3
#: Seconds between two application reports while following a submission.
FOLLOW_INTERVAL = 2.0

_FINAL = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "KILLED": "KILLED"}
_DONE_STATES = ("SUCCEEDED", "FAILED", "KILLED")
_ACTIVE_STATES = ("WAITING", "REQUESTED", "RUNNING")
_YARN_TERMINAL = ("FINISHED", "FAILED", "KILLED")


def _cli_error(message: str) -> Exception:
    """A ``scripts.cli.CLIError`` (imported late: the CLI imports this module late too)."""
    from scripts.cli import CLIError
    return CLIError(message)


# ====================================================================== the application spec

def application_spec(spec: Any, spec_path: str | None = None, *, python_env: str | None = None,
                     queue: str | None = None, principal: str | None = None,
                     keytab: str | None = None, app_path: str | None = None,
                     node_label: str | None = None, staging_dir: str | None = None,
                     ship_stram: bool | None = None, token: str | None = None,
                     max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Any:
    """The ``skein.ApplicationSpec`` that runs ``spec`` on YARN.

    Parameters
    ----------
    spec:
        A validated :class:`appmaster.spec.AppSpec` (``-D`` overrides already applied).
    spec_path:
        The spec file it came from (only used in messages).
    python_env:
        The Python environment of the master and the containers: a
        ``.tar.gz``/``.tgz``/``.zip`` archive made by venv-pack or conda-pack
        (local or ``hdfs://``; shipped and unpacked as ``environment/``), or the
        absolute path of an environment that exists on every node (its
        ``bin/python``, or the interpreter itself). Default: ``$STRAM_PYTHON_ENV``,
        else this interpreter's ``sys.prefix`` (which then must exist on the nodes).
    queue:
        YARN queue; default: the spec's ``QUEUE`` attribute.
    principal, keytab:
        Kerberos principal and keytab. The keytab is shipped to the master and
        the containers, which ``kinit`` with it so HDFS access outlives
        delegation tokens; the principal's short name also picks the default
        APP_PATH user.
    app_path:
        The application directory URI (``APP_PATH``). Default:
        ``$STRAM_YARN_APPS_DIR/<name>-<uuid>``, with the apps directory
        defaulting to ``hdfs:///user/<user>/.stram/apps``. An ``hdfs:///``
        path gets the NameNode of ``fs.defaultFS`` (:func:`qualify_hdfs`).
    node_label:
        YARN node label expression for the master and the containers
        (default ``$STRAM_YARN_NODE_LABEL``).
    staging_dir:
        Local directory for the generated files (the resolved spec, the archive
        of the application's modules). Default: a new directory under
        ``$STRAM_HOME/yarn/``.
    ship_stram:
        Ship stram's own packages with the application's modules. Default: only
        when stram runs from a source checkout (an editable install), which the
        nodes cannot import.
    token:
        The application's secret (``STRAM_TOKEN``); default: a new random one.
    max_attempts:
        YARN attempts of the master (default 2: the second resumes from the
        master's journal under APP_PATH).

    Returns
    -------
    skein.ApplicationSpec
        Valid by skein's own model; ``from_yaml(to_yaml())`` gives it back.

    Raises
    ------
    scripts.cli.CLIError
        The Python environment archive or the keytab does not exist.
    """
    import skein

    name = spec.name
    uid = uuid.uuid4().hex[:12]
    staging = staging_dir or os.path.join(_stram_home(), "yarn", f"{name}-{uid}")
    os.makedirs(staging, exist_ok=True)
    app_path = qualify_hdfs(app_path or _default_app_path(name, uid, principal))
    token = token or secrets.token_hex(16)
    node_label = node_label if node_label is not None else os.environ.get("STRAM_YARN_NODE_LABEL", "")
    queue = queue or spec.attribute("QUEUE") or "default"
    tags = {str(t) for t in (spec.attribute("APPLICATION_TAGS") or [])} | {STRAM_TAG}

    env_files, activate = _python_environment(python_env, skein)
    files: dict[str, Any] = dict(env_files)
    modules = application_modules(spec)
    stram_dirs = _stram_sources() if (ship_stram if ship_stram is not None else _stram_from_source()) else []
    app_archive = None
    if modules or stram_dirs:
        app_archive = _zip_modules(os.path.join(staging, "stram-app.zip"), [*stram_dirs, *modules])
        files[APP_DIR] = skein.File(app_archive, type="archive")
    if keytab is not None:
        if not os.path.isfile(keytab):
            raise _cli_error(f"keytab {keytab} does not exist; give the path of the keytab "
                             f"for {principal or 'your principal'}")
        files["stram.keytab"] = skein.File(os.path.abspath(keytab), type="file")

    spec_file = os.path.join(staging, SPEC_FILE)
    with open(spec_file, "w") as f:
        f.write(spec.to_yaml())
    master_files = dict(files)
    master_files[SPEC_FILE] = skein.File(spec_file, type="file")

    common_env = {"PYTHONUNBUFFERED": "1"}
    if principal and keytab:
        common_env["STRAM_PRINCIPAL"] = principal
    master_env = dict(common_env, STRAM_APP_PATH=app_path, STRAM_TOKEN=token, STRAM_LAUNCHER="yarn")
    preamble = _script_preamble(activate, bool(app_archive), bool(principal and keytab))
    master_script = "\n".join([
        preamble,
        "# the application id is only known once YARN accepted the submission",
        'export STRAM_APP_ID="${STRAM_APP_ID:-$SKEIN_APPLICATION_ID}"',
        'export STRAM_LOG_DIR="${STRAM_LOG_DIR:-${LOG_DIRS%%,*}}"',
        "# checks HDFS, stages the spec under APP_PATH; exits 3 when an earlier attempt ended the app",
        f"python -m appmaster.yarn prepare-master {SPEC_FILE}",
        "exec python -m appmaster --launcher yarn",
        ""])
    container_script = "\n".join([
        preamble,
        'python -m appmaster.yarn check-hdfs "$STRAM_APP_PATH"',
        "exec python -m container",
        ""])

    master = skein.Master(
        resources=skein.Resources(memory=int(spec.attribute("MASTER_MEMORY_MB")),
                                  vcores=int(spec.attribute("MASTER_VCORES"))),
        script=master_script, files=master_files, env=master_env)
    services = {}
    for service, (memory, vcores) in container_shapes(spec).items():
        services[service] = skein.Service(
            resources=skein.Resources(memory=memory, vcores=vcores),
            script=container_script, instances=0, files=dict(files), env=dict(common_env),
            # the master recovers lost containers itself: skein must neither
            # restart them nor end the application when one fails
            max_restarts=0, allow_failures=True)
    file_systems = []
    if app_path.startswith(("hdfs://", "viewfs://")):
        authority = app_path.split("://", 1)[1].split("/", 1)[0]
        if authority:
            file_systems.append(app_path.split("://", 1)[0] + "://" + authority)
    return skein.ApplicationSpec(
        name=name, queue=queue, tags=tags, max_attempts=max_attempts, node_label=node_label,
        file_systems=file_systems, master=master, services=services)


def container_shapes(spec: Any) -> dict[str, tuple[int, int]]:
    """Skein service name -> (memory MB, vcores) for the containers ``spec`` can need.

    ``container`` has the DAG's CONTAINER_MEMORY_MB and VCORES. Operators (or
    groups of container-local operators) that ask for another size get a
    service ``container-<MB>mb-<N>vc`` each, because Skein 0.8 sizes
    containers per service, not per ``add_container`` call.
    """
    default = (int(spec.attribute("CONTAINER_MEMORY_MB")), int(spec.attribute("VCORES")))
    shapes = {default}
    for op in spec.operators:
        shapes.add((int(spec.attribute("CONTAINER_MEMORY_MB", op)), int(spec.attribute("VCORES", op))))
    try:
        from appmaster.plan import PhysicalPlan
        plan = PhysicalPlan.from_spec(spec)
        for c in plan.containers.values():
            shapes.add((int(c.memory_mb or default[0]), int(c.vcores or default[1])))
    except Exception:  # noqa: BLE001 - per-operator shapes are enough to start with
        log.debug("physical plan not available for container shapes", exc_info=True)
    out = {CONTAINER_SERVICE: default}
    for memory, vcores in sorted(shapes - {default}):
        out[f"{CONTAINER_SERVICE}-{memory}mb-{vcores}vc"] = (memory, vcores)
    return out


def application_modules(spec: Any) -> list[str]:
    """Files and package directories of the operator modules that are not stram's or installed.

    Operator classes are ``module:Class``; the module's top-level package is
    shipped unless it is part of stram or lives in the Python installation
    (site-packages, the standard library), which the environment provides.
    """
    import importlib.util

    installed = _installed_roots()
    found: dict[str, None] = {}
    for op in spec.operators.values():
        top = op.class_name.split(":", 1)[0].split(".", 1)[0]
        if top in STRAM_PACKAGES:
            continue
        mod_spec = importlib.util.find_spec(top)
        if mod_spec is None:
            continue
        if mod_spec.submodule_search_locations:
            path = list(mod_spec.submodule_search_locations)[0]
        elif mod_spec.origin and mod_spec.origin.endswith(".py"):
            path = mod_spec.origin
        else:
            continue  # built-in or compiled: comes with the environment
        path = os.path.realpath(path)
        if any(path.startswith(root + os.sep) for root in installed):
            continue
        found[path] = None
    return list(found)


def local_path_warnings(spec: Any) -> list[str]:
    """Operator properties that look like local paths (containers run on other machines)."""
    out = []
    for name, op in spec.operators.items():
        for key, value in op.properties.items():
            if (key == "path" or key.endswith("_path")) and isinstance(value, str) and value \
                    and "://" not in value:
                out.append(f"operators.{name}.{key} is the local path {value!r}; on YARN the "
                           f"operator runs on a cluster node: use an hdfs:// URI "
                           f"(-D operators.{name}.{key}=hdfs:///...)")
    return out


def _stram_home() -> str:
    return os.path.abspath(os.path.expanduser(os.environ.get("STRAM_HOME", "~/.stram")))


def _hadoop_user(principal: str | None) -> str:
    if principal:
        return re.split(r"[/@]", principal, maxsplit=1)[0]
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def _default_app_path(name: str, uid: str, principal: str | None) -> str:
    root = os.environ.get("STRAM_YARN_APPS_DIR") or f"hdfs:///user/{_hadoop_user(principal)}/.stram/apps"
    return f"{root.rstrip('/')}/{name}-{uid}"


def qualify_hdfs(uri: str, conf_dir: str | None = None) -> str:
    """``hdfs:///path`` with the NameNode of ``fs.defaultFS`` filled in, when the configuration names one.

    pyarrow turns a URI without an authority into the NameNode ``hdfs://``,
    which Hadoop rejects; the cluster's default file system (from
    core-site.xml in the Hadoop configuration directory) makes it explicit:
    ``hdfs://nn.example.com:8020/path`` or, with HA, ``hdfs://nameservice/path``.
    Other URIs come back unchanged.
    """
    if not uri.startswith("hdfs:///"):
        return uri
    conf_dir = conf_dir or find_hadoop_conf_dir()
    default_fs = _read_site(os.path.join(conf_dir, "core-site.xml")).get("fs.defaultFS", "") if conf_dir else ""
    authority = default_fs.split("://", 1)[1].split("/", 1)[0] if default_fs.startswith("hdfs://") else ""
    return f"hdfs://{authority}/{uri[len('hdfs:///'):]}" if authority else uri


def _python_environment(python_env: str | None, skein: Any) -> tuple[dict[str, Any], str]:
    """(files to ship, shell lines that put the environment's ``python`` first on PATH)."""
    env = python_env or os.environ.get("STRAM_PYTHON_ENV") or sys.prefix
    if env.endswith(ARCHIVE_SUFFIXES):
        if "://" not in env or env.startswith("file://"):
            local = env[len("file://"):] if env.startswith("file://") else env
            if not os.path.isfile(local):
                raise _cli_error(f"Python environment archive {local} does not exist; build it with "
                                 f"`venv-pack -o {local}` (in the venv) or `conda pack -o {local}`, "
                                 f"or give an environment path that exists on every node")
            env = os.path.abspath(local)
        activate = (f"# the Python environment, shipped as an archive ({os.path.basename(env)})\n"
                    f"source {ENV_DIR}/bin/activate")
        return {ENV_DIR: skein.File(env, type="archive")}, activate
    if "://" in env:
        raise _cli_error(f"Python environment {env}: a remote environment must be an archive "
                         f"({', '.join(ARCHIVE_SUFFIXES)}); an environment directory must be a "
                         f"path that exists on every node")
    if not os.path.isabs(env):
        raise _cli_error(f"Python environment {env}: give an absolute path that exists on every "
                         f"node, or an archive made by venv-pack/conda-pack")
    base = os.path.basename(env)
    if base.startswith("python") and os.path.basename(os.path.dirname(env)) == "bin":
        env = os.path.dirname(os.path.dirname(env))  # the interpreter itself was named
    activate = (f"# the Python environment, already on the nodes at {env}\n"
                f'export PATH="{env}/bin:$PATH"')
    return {}, activate


def _script_preamble(activate: str, app_archive: bool, kinit: bool) -> str:
    lines = ["set -e", activate]
    if app_archive:
        lines += ["# the application's own modules", 'export PYTHONPATH="$PWD/app${PYTHONPATH:+:$PYTHONPATH}"']
    lines += [
        "# pyarrow's HDFS client (libhdfs) needs the Hadoop jars on CLASSPATH, globbed",
        'if [ -z "${HADOOP_HOME:-}" ] && [ -n "${HADOOP_COMMON_HOME:-}" ]; then export HADOOP_HOME="$HADOOP_COMMON_HOME"; fi',
        'STRAM_HADOOP_BIN="$(command -v hadoop || true)"',
        'if [ -z "$STRAM_HADOOP_BIN" ] && [ -n "${HADOOP_HOME:-}" ] && [ -x "$HADOOP_HOME/bin/hadoop" ]; then STRAM_HADOOP_BIN="$HADOOP_HOME/bin/hadoop"; fi',
        'if [ -z "${STRAM_KEEP_CLASSPATH:-}" ] && [ -n "$STRAM_HADOOP_BIN" ]; then export CLASSPATH="$("$STRAM_HADOOP_BIN" classpath --glob || true)"; fi',
        'export STRAM_HOST="${STRAM_HOST:-${NM_HOST:-$(hostname -f)}}"',
    ]
    if kinit:
        lines += ["# Kerberos: a ticket from the shipped keytab, private to this container",
                  'export KRB5CCNAME="FILE:$PWD/krb5cc_stram"',
                  'kinit -kt stram.keytab "$STRAM_PRINCIPAL"']
    return "\n".join(lines)


def _installed_roots() -> list[str]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path))
    for path in sys.path:
        if path and os.path.basename(path) in ("site-packages", "dist-packages"):
            roots.add(os.path.realpath(path))
    return sorted(roots)


def _stram_from_source() -> bool:
    """True when stram's packages are not inside the Python installation (a checkout/editable install)."""
    import appmaster
    here = os.path.realpath(os.path.dirname(appmaster.__file__))
    return not any(here.startswith(root + os.sep) for root in _installed_roots())


def _stram_sources() -> list[str]:
    import appmaster
    root = os.path.dirname(os.path.dirname(os.path.realpath(appmaster.__file__)))
    return [os.path.join(root, p) for p in STRAM_PACKAGES if os.path.isdir(os.path.join(root, p))]


def _zip_modules(target: str, paths: list[str]) -> str:
    """Zip module files and package directories at the top level of ``target``."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in paths:
            if os.path.isfile(path):
                zf.write(path, os.path.basename(path))
                continue
            base = os.path.dirname(path)
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
                for fn in sorted(filenames):
                    if fn.endswith((".pyc", ".pyo")) or fn.startswith("."):
                        continue
                    full = os.path.join(dirpath, fn)
                    zf.write(full, os.path.relpath(full, base))
    return target


# ====================================================================== the driver and the ResourceManager

def find_hadoop_conf_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The Hadoop configuration directory: HADOOP_CONF_DIR, YARN_CONF_DIR, $HADOOP_HOME/etc/hadoop, /etc/hadoop/conf."""
    env = os.environ if env is None else env
    for candidate in (env.get("HADOOP_CONF_DIR"), env.get("YARN_CONF_DIR"),
                      os.path.join(env["HADOOP_HOME"], "etc", "hadoop") if env.get("HADOOP_HOME") else None,
                      "/etc/hadoop/conf"):
        if candidate and os.path.isfile(os.path.join(candidate, "yarn-site.xml")):
            return candidate
    return None


def _read_site(path: str) -> dict[str, str]:
    """name -> value of a Hadoop ``*-site.xml`` (empty when missing or unreadable)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name:
            out[name.strip()] = (value or "").strip()
    return out


def _rm_address(conf_dir: str) -> str:
    site = _read_site(os.path.join(conf_dir, "yarn-site.xml"))
    if site.get("yarn.resourcemanager.address"):
        return site["yarn.resourcemanager.address"]
    ids = [i.strip() for i in site.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    if ids:
        return ", ".join(site.get(f"yarn.resourcemanager.address.{i}")
                         or f"{site.get(f'yarn.resourcemanager.hostname.{i}', '?')}:8032" for i in ids)
    return f"{site.get('yarn.resourcemanager.hostname', '0.0.0.0')}:8032"


def hadoop_conf_overlay(conf_dir: str, dest: str, *, connect_wait_ms: int | None = None) -> str:
    """Copy a Hadoop configuration directory with a bounded ResourceManager connect wait.

    Hadoop's client waits up to 15 minutes (``yarn.resourcemanager.connect.max-wait.ms``)
    for a ResourceManager, each attempt retrying the socket 10 times
    (``ipc.client.connect.max.retries``). The copy adds to ``yarn-site.xml``
    the settings the original does not make: a total wait of
    ``connect_wait_ms`` (default ``$STRAM_YARN_CONNECT_WAIT_MS``, else 30 s),
    a retry interval of a fifth of it (at most 5 s), and one socket retry
    after 500 ms. An explicit ``connect_wait_ms`` or environment value replaces
    the original's wait.

    Parameters
    ----------
    conf_dir:
        The cluster's configuration (``$HADOOP_CONF_DIR``).
    dest:
        Directory to write the copy into (created).
    connect_wait_ms:
        Total wait for the ResourceManager.

    Returns
    -------
    str
        ``dest``, for ``HADOOP_CONF_DIR`` of the driver.
    """
    try:
        shutil.copytree(conf_dir, dest, dirs_exist_ok=True, ignore_dangling_symlinks=True)
    except shutil.Error as exc:  # e.g. a keytab only its owner may read: not needed by the client
        log.debug("parts of %s were not copied: %s", conf_dir, exc)
    site_path = os.path.join(dest, "yarn-site.xml")
    if os.path.isfile(os.path.join(conf_dir, "yarn-site.xml")) and not os.path.isfile(site_path):
        raise _cli_error(f"cannot read {conf_dir}/yarn-site.xml; check its permissions")
    user = {**_read_site(os.path.join(dest, "core-site.xml")), **_read_site(site_path)}
    forced = connect_wait_ms if connect_wait_ms is not None else (
        int(os.environ["STRAM_YARN_CONNECT_WAIT_MS"]) if os.environ.get("STRAM_YARN_CONNECT_WAIT_MS") else None)
    wait = forced if forced is not None else int(user.get("yarn.resourcemanager.connect.max-wait.ms")
                                                 or DEFAULT_CONNECT_WAIT_MS)
    settings: dict[str, str] = {}
    if forced is not None or "yarn.resourcemanager.connect.max-wait.ms" not in user:
        settings["yarn.resourcemanager.connect.max-wait.ms"] = str(wait)
    defaults = {"yarn.resourcemanager.connect.retry-interval.ms": str(max(100, min(5000, wait // 5))),
                "ipc.client.connect.max.retries": "1",
                "ipc.client.connect.retry.interval": "500"}
    for key, value in defaults.items():
        if key not in user:
            settings[key] = value
    try:
        tree = ET.parse(site_path)
        root = tree.getroot()
    except (OSError, ET.ParseError):
        root = ET.Element("configuration")
        tree = ET.ElementTree(root)
    for prop in list(root.iter("property")):
        if (prop.findtext("name") or "").strip() in settings:
            root.remove(prop)
    for key, value in settings.items():
        prop = ET.SubElement(root, "property")
        ET.SubElement(prop, "name").text = key
        ET.SubElement(prop, "value").text = value
    tree.write(site_path, encoding="utf-8", xml_declaration=True)
    return dest


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java")


_env_lock = threading.Lock()


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration (skein's driver reads ``os.environ``)."""
    with _env_lock:
        old = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _preflight() -> str:
    """Check what skein's driver needs; return the Hadoop configuration directory."""
    if os.environ.get("JAVA_HOME") and _java() is None:
        raise _cli_error(f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java; skein's YARN client is a "
                         f"Java process: export JAVA_HOME=/path/to/jdk (Java 8 or newer)")
    if _java() is None:
        raise _cli_error("Java was not found (no JAVA_HOME, no `java` on PATH); skein's YARN client is a "
                         "Java process: install a JDK (8 or newer) and export JAVA_HOME=/path/to/jdk")
    if shutil.which("yarn") is None:
        raise _cli_error("the `yarn` command is not on PATH; skein builds its classpath with "
                         "`yarn classpath --glob`: install the Hadoop client of your cluster and "
                         "export PATH=$HADOOP_HOME/bin:$PATH")
    conf_dir = find_hadoop_conf_dir()
    if conf_dir is None:
        where = os.environ.get("HADOOP_CONF_DIR")
        raise _cli_error((f"HADOOP_CONF_DIR={where} has no yarn-site.xml" if where else
                          "HADOOP_CONF_DIR is not set and no Hadoop configuration was found "
                          "($HADOOP_HOME/etc/hadoop, /etc/hadoop/conf)")
                         + "; export HADOOP_CONF_DIR=/etc/hadoop/conf (the directory with your "
                           "cluster's yarn-site.xml and core-site.xml)")
    return conf_dir


@contextlib.contextmanager
def connect(principal: str | None = None, keytab: str | None = None, *,
            log_path: str | None = None, connect_wait_ms: int | None = None) -> Iterator[Any]:
    """A ``skein.Client`` on a new driver whose ResourceManager wait is bounded.

    Parameters
    ----------
    principal, keytab:
        Kerberos login of the driver (default: the ticket cache, after ``kinit``).
    log_path:
        File for the driver's own log (default: a file in a temporary directory).
    connect_wait_ms:
        Total wait for an unreachable ResourceManager, see :func:`hadoop_conf_overlay`.

    Yields
    ------
    skein.Client

    Raises
    ------
    scripts.cli.CLIError
        Java, ``yarn`` or the Hadoop configuration is missing, or the driver did not start.
    """
    conf_dir = _preflight()
    if (principal is None) != (keytab is None):
        raise _cli_error("give both a Kerberos principal and a keytab, or neither (then the driver "
                         "uses your ticket cache: run `kinit` first)")
    if keytab is not None and not os.path.isfile(keytab):
        raise _cli_error(f"keytab {keytab} does not exist")
    import skein

    work = tempfile.mkdtemp(prefix="stram-yarn-driver-")
    overlay = hadoop_conf_overlay(conf_dir, os.path.join(work, "conf"), connect_wait_ms=connect_wait_ms)
    log_path = log_path or os.path.join(work, "driver.log")
    client = None
    try:
        conf_vars = {"HADOOP_CONF_DIR": overlay}
        if os.environ.get("YARN_CONF_DIR"):  # only where set: Hadoop 3's scripts warn about it
            conf_vars["YARN_CONF_DIR"] = overlay
        with _environ(**conf_vars):
            try:
                client = skein.Client(principal=principal, keytab=keytab, log=log_path)
            except Exception as exc:  # noqa: BLE001 - every way the driver fails gets one message
                raise _translate(exc, "starting skein's YARN client (the Java driver)", conf_dir,
                                 log_path) from None
        yield client
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        shutil.rmtree(work, ignore_errors=True)


def _log_tail(path: str | None, lines: int = 15) -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as f:
            tail = [ln.rstrip() for ln in f.readlines()[-lines:] if ln.strip()]
    except OSError:
        return ""
    return ("\n  driver log (" + path + "):\n    " + "\n    ".join(tail)) if tail else ""


def _translate(exc: BaseException, doing: str, conf_dir: str | None = None,
               log_path: str | None = None) -> Exception:
    """One place that turns skein/driver/Hadoop failures into stram's clear errors."""
    text = str(exc).strip()
    conf = conf_dir or find_hadoop_conf_dir() or "$HADOOP_CONF_DIR"
    if isinstance(exc, FileNotFoundError) and "yarn" in text:
        return _cli_error(f"{doing}: the `yarn` command could not be run ({text}); put the Hadoop "
                          f"client's bin directory on PATH")
    if isinstance(exc, subprocess.CalledProcessError) and "classpath" in str(exc.cmd):
        return _cli_error(f"{doing}: `{' '.join(exc.cmd)}` failed with exit code {exc.returncode}; "
                          f"check that the `yarn` on PATH belongs to a working Hadoop client "
                          f"(try running it yourself)")
    if isinstance(exc, FileNotFoundError) and "java" in text:
        return _cli_error(f"{doing}: Java could not be run ({text}); export JAVA_HOME=/path/to/jdk")
    if re.search(r"ConnectException|Connection refused|UnknownHost|NoRouteToHost|"
                 r"failed on connection exception|ConnectTimeout", text):
        return _cli_error(
            f"no ResourceManager answers at {_rm_address(conf)} (yarn.resourcemanager.address in "
            f"{conf}/yarn-site.xml) while {doing}. Check that the address is right and the "
            f"ResourceManager is up, or point HADOOP_CONF_DIR at your cluster's configuration. "
            f"({text.splitlines()[-1] if text else type(exc).__name__})")
    if re.search(r"(?i)kerberos|GSS|ticket|SIMPLE authentication is not enabled", text):
        return _cli_error(f"{doing}: Kerberos authentication failed ({text.splitlines()[-1]}); run "
                          f"`kinit` first, or set STRAM_YARN_PRINCIPAL and STRAM_YARN_KEYTAB")
    if "Failed to start java process" in text or "Failed to read in client port" in text:
        return _cli_error(f"{doing}: skein's Java driver exited before it was ready; is `yarn "
                          f"classpath --glob` giving the Hadoop client jars, and is Java 8+ "
                          f"installed?{_log_tail(log_path)}")
    name = type(exc).__name__
    first = text.splitlines()[0] if text else name
    return _cli_error(f"{doing} failed: {first} ({name}){_log_tail(log_path)}")


# ====================================================================== submission

def _option(args: Any, name: str, env: str) -> str | None:
    return getattr(args, name, None) or os.environ.get(env) or None


def _kerberos() -> tuple[str | None, str | None]:
    return os.environ.get("STRAM_YARN_PRINCIPAL") or None, os.environ.get("STRAM_YARN_KEYTAB") or None


def submit(spec: Any, args: Any) -> int:
    """``stram launch --yarn``: submit ``spec`` and follow it unless ``--detach``.

    Options come from ``args`` where the CLI has them, else from the
    environment: ``python_env`` (``STRAM_PYTHON_ENV``), ``principal``/``keytab``
    (``STRAM_YARN_PRINCIPAL``/``STRAM_YARN_KEYTAB``), ``node_label``
    (``STRAM_YARN_NODE_LABEL``), ``app_path`` (``STRAM_YARN_APP_PATH``).

    Parameters
    ----------
    spec:
        The validated :class:`~appmaster.spec.AppSpec`.
    args:
        The parsed ``launch`` arguments (``.spec``, ``.detach``, ``.duration``).

    Returns
    -------
    int
        0 when detached after a successful submission, or when the
        application ended SUCCEEDED; 1 when it ended otherwise; 130 on Ctrl-C
        (the application is killed).

    Raises
    ------
    scripts.cli.CLIError
        Something needed is missing or YARN refused: what, and how to fix it.
    """
    principal = _option(args, "principal", "STRAM_YARN_PRINCIPAL")
    keytab = _option(args, "keytab", "STRAM_YARN_KEYTAB")
    for warning in local_path_warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)
    staging = tempfile.mkdtemp(prefix=f"stram-yarn-{spec.name}-")
    try:
        aspec = application_spec(
            spec, getattr(args, "spec", None), python_env=_option(args, "python_env", "STRAM_PYTHON_ENV"),
            principal=principal, keytab=keytab, app_path=_option(args, "app_path", "STRAM_YARN_APP_PATH"),
            node_label=_option(args, "node_label", "STRAM_YARN_NODE_LABEL"), staging_dir=staging)
        app_path = aspec.master.env["STRAM_APP_PATH"]
        with connect(principal, keytab, log_path=os.path.join(staging, "driver.log")) as client:
            try:
                app_id = client.submit(aspec)
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, f"submitting {spec.name} to YARN queue {aspec.queue!r}",
                                 log_path=os.path.join(staging, "driver.log")) from None
            tracking = ""
            with contextlib.suppress(Exception):
                tracking = client.application_report(app_id).tracking_url
            print(f"submitted {spec.name} to YARN as {app_id} (queue {aspec.queue})", file=sys.stderr)
            print(f"  app path: {app_path}", file=sys.stderr)
            print(f"  tracking URL: {tracking or '(assigned when the master starts)'}", file=sys.stderr)
            print(app_id)
            sys.stdout.flush()
            if getattr(args, "detach", False):
                return 0
            return follow(client, app_id, getattr(args, "duration", None))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def follow(client: Any, app_id: str, duration: float | None = None,
           interval: float | None = None) -> int:
    """Show a YARN application's progress until it ends; Ctrl-C kills it.

    Parameters
    ----------
    client:
        A ``skein.Client`` (or anything with ``application_report`` and ``kill_application``).
    app_id:
        The YARN application id.
    duration:
        After this many seconds ask the master (through the YARN proxy) to shut
        the application down gracefully.
    interval:
        Seconds between reports (default :data:`FOLLOW_INTERVAL`).

    Returns
    -------
    int
        0 if the application SUCCEEDED, 130 after Ctrl-C, else 1.
    """
    interval = FOLLOW_INTERVAL if interval is None else interval
    started = time.monotonic()
    shutdown_sent = False
    last = ""
    try:
        while True:
            try:
                report = client.application_report(app_id)
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, f"following {app_id}") from None
            state = str(report.state)
            if state in _YARN_TERMINAL:
                break
            elapsed = time.monotonic() - started
            if duration is not None and elapsed >= duration and not shutdown_sent and state == "RUNNING":
                shutdown_sent = True
                print(f"--duration {duration:g}s reached: shutting {app_id} down", file=sys.stderr)
                try:
                    admin_request(app_id, client, "shutdown", "POST")
                except Exception as exc:  # noqa: BLE001
                    print(f"warning: graceful shutdown failed ({exc}); killing the application",
                          file=sys.stderr)
                    client.kill_application(app_id)
            line = f"[{elapsed:6.1f}s] {state} progress={report.progress:.0%}"
            if state == "RUNNING" and report.tracking_url:
                with contextlib.suppress(Exception):
                    info = admin_request(app_id, client, "info", timeout=3.0)
                    line += (f" operators={info.get('operators')} containers={info.get('containers')}"
                             f" committed={info.get('committed_window_hex')}")
            if line != last:
                print(line, file=sys.stderr, flush=True)
                last = line
            time.sleep(interval)
    except KeyboardInterrupt:
        print(f"\ninterrupted: killing {app_id}", file=sys.stderr)
        with contextlib.suppress(Exception):
            client.kill_application(app_id)
        return 130
    final = str(report.final_status)
    if final == "UNDEFINED":
        final = state
    diagnostics = (report.diagnostics or "").strip()
    print(f"{app_id} {final}" + (f": {diagnostics}" if diagnostics and final != "SUCCEEDED" else ""),
          file=sys.stderr)
    return 0 if final == "SUCCEEDED" else 1


def _admin(base: str, path: str, method: str = "GET", timeout: float = 10.0,
           body: dict | None = None) -> Any:
    data = json.dumps(body or {}).encode() if method != "GET" else None
    req = urllib.request.Request(base.rstrip("/") + "/ws/v2/stram/" + path, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def direct_admin_url(app_id: str, client: Any) -> str | None:
    """The master's own admin URL (``http://node:port``), from the Skein web UI's page ``stram``.

    Asks the Skein application master over its gRPC address (``client.connect``);
    None when it cannot be reached or the page is not registered yet.
    """
    try:
        app = client.connect(app_id, wait=False)
        page = app.ui.get_pages().get("stram")
    except Exception as exc:  # noqa: BLE001
        log.debug("no direct admin URL for %s: %s", app_id, exc)
        return None
    return getattr(page, "target", None)


def admin_request(app_id: str, client: Any, path: str, method: str = "GET", body: dict | None = None,
                  timeout: float = 10.0) -> Any:
    """Call a YARN application's admin API (``/ws/v2/stram/<path>``); the parsed JSON answer.

    GET goes through the YARN web proxy (:func:`admin_url_for`). YARN's proxy
    forwards only GET and PUT, so POST and DELETE go to the master directly
    (:func:`direct_admin_url`), falling back to the proxy.

    Raises
    ------
    scripts.cli.CLIError
        The application is not running, or neither route answered.
    """
    proxied = admin_url_for(app_id, client)
    routes = [proxied] if method == "GET" else [u for u in (direct_admin_url(app_id, client), proxied) if u]
    problems = []
    for base in routes:
        try:
            return _admin(base, path, method, timeout=timeout, body=body)
        except urllib.error.HTTPError as exc:
            if exc.code == 405 and base == proxied:
                problems.append(f"{base}: the YARN web proxy does not forward {method}")
                continue
            try:
                detail = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                detail = exc.reason
            raise _cli_error(f"{method} {path} on {app_id}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            problems.append(f"{base}: {getattr(exc, 'reason', exc)}")
    raise _cli_error(f"the master of {app_id} did not answer {method} {path} ("
                     + "; ".join(problems) + "); is the node reachable from here?")


# ====================================================================== list / kill / admin URL

def list_apps(client: Any = None, states: list[str] | None = None) -> list[dict[str, Any]]:
    """stram applications on the cluster (YARN tag ``stram``).

    Parameters
    ----------
    client:
        A ``skein.Client``; default: a new one through :func:`connect`.
    states:
        YARN application states to list (default: SUBMITTED, ACCEPTED, RUNNING).

    Returns
    -------
    list of dict
        One per application, newest first: ``id``, ``name``, ``state`` (the
        final status once finished, else the YARN state), ``yarn_state``,
        ``final_status``, ``user``, ``queue``, ``progress``, ``tracking_url``,
        ``started_millis``, ``finished_millis``, ``diagnostics``, ``tags``.
    """
    if client is None:
        with connect(*_kerberos()) as c:
            return list_apps(c, states)
    try:
        reports = client.get_applications(states=states) if states else client.get_applications()
    except Exception as exc:  # noqa: BLE001
        raise _translate(exc, "listing YARN applications") from None
    rows = []
    for r in reports:
        if STRAM_TAG not in set(r.tags or ()):
            continue
        yarn_state, final = str(r.state), str(r.final_status)
        rows.append({
            "id": r.id, "name": r.name,
            "state": final if yarn_state in _YARN_TERMINAL and final != "UNDEFINED" else yarn_state,
            "yarn_state": yarn_state, "final_status": final, "user": r.user, "queue": r.queue,
            "progress": r.progress, "tracking_url": r.tracking_url,
            "started_millis": _millis(r.start_time), "finished_millis": _millis(r.finish_time),
            "diagnostics": r.diagnostics, "tags": sorted(r.tags or ())})
    rows.sort(key=lambda row: row["id"], reverse=True)
    return rows


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def kill_app(app_id: str, client: Any = None) -> None:
    """Kill a YARN application at once (YARN does not retry a killed application).

    Raises
    ------
    scripts.cli.CLIError
        YARN refused (unknown application, no permission) or cannot be reached.
    """
    if client is None:
        with connect(*_kerberos()) as c:
            return kill_app(app_id, c)
    try:
        client.kill_application(app_id)
    except Exception as exc:  # noqa: BLE001
        raise _translate(exc, f"killing {app_id}") from None
    return None


def admin_url_for(app_id: str, client: Any) -> str:
    """The base URL of a running master's admin API, behind the YARN web proxy.

    The master registers its admin server as the Skein web UI page ``stram``;
    the application's tracking URL leads to that UI, whose pages live under
    ``/pages/<route>``. Append ``/ws/v2/stram/...`` as for a local master.

    Raises
    ------
    scripts.cli.CLIError
        The application is not running (or YARN gives no tracking URL).
    """
    try:
        report = client.application_report(app_id)
    except Exception as exc:  # noqa: BLE001
        raise _translate(exc, f"asking YARN about {app_id}") from None
    state = str(report.state)
    if state != "RUNNING" or not report.tracking_url:
        final = str(report.final_status)
        raise _cli_error(f"application {app_id} is {final if state in _YARN_TERMINAL else state}; "
                         f"its master is not running" + ("" if state in _YARN_TERMINAL else
                                                         " yet (try again once it is RUNNING)"))
    url = report.tracking_url
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/") + "/pages/stram"


# ====================================================================== the master's launcher

#: YARN's diagnostics: "Container exited with a non-zero exit code 1", "Exit code: 1",
#: "Container killed on request. Exit code is 137".
_EXIT_CODE_RE = re.compile(r"(?i)exit(?:ed with a non-zero exit)? code(?: is)?[: ]+(-?\d+)")


def _exit_code(container: Any) -> int | None:
    state = str(container.state)
    if state == "SUCCEEDED":
        return 0
    match = _EXIT_CODE_RE.search(container.exit_message or "")
    return int(match.group(1)) if match else None


def _accepts(fn: Any, param: str) -> bool:
    try:
        return param in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class YarnLauncher(Launcher):
    """Containers as instances of the Skein ``container`` service, from inside the master.

    Parameters
    ----------
    app_client:
        A ``skein.ApplicationClient``, or any object with its methods
        (``add_container``, ``kill_container``, ``get_containers``,
        ``set_progress``, ``shutdown``, ``ui.add_page``, optionally
        ``get_specification``).
    services:
        Service name -> (memory MB, vcores) of the container services; default:
        read from ``app_client.get_specification()`` (services named
        ``container`` or ``container-*``).
    defer_shutdown:
        Report the final status when the process exits instead of at
        :meth:`finish`, so the master's last writes are not cut short by the
        Skein application master stopping the master script.
    """

    honours_hosts = False  # skein 0.8 places containers per service, not per request

    def __init__(self, app_client: Any, services: Mapping[str, tuple[int, int]] | None = None, *,
                 defer_shutdown: bool = False) -> None:
        self.app_client = app_client
        self.services = dict(services) if services else self._services_from_spec(app_client)
        self.defer_shutdown = defer_shutdown
        #: skein container id (``container_3``) -> stram container id
        self._live: dict[str, str] = {}
        #: stram container id -> skein container id
        self._skein_ids: dict[str, str] = {}
        #: containers that could not be requested: reported as ended by the next poll
        self._failed: list[tuple[str, int | None]] = []
        self._lock = threading.Lock()
        self._ui_done = False
        self._final: tuple[str, str] | None = None
        self._shutdown_sent = False
        self.ui_address: str | None = None

    @classmethod
    def from_current(cls) -> "YarnLauncher":
        """The launcher of a master running as the Skein master script.

        Raises
        ------
        scripts.cli.CLIError
            Not inside a Skein container (``SKEIN_APPLICATION_ID`` unset).
        """
        import skein
        try:
            client = skein.ApplicationClient.from_current()
        except Exception as exc:  # noqa: BLE001
            raise _cli_error(f"the YARN launcher runs inside the Skein master container, but {exc} "
                             f"(SKEIN_APPLICATION_ID={os.environ.get('SKEIN_APPLICATION_ID')!r}); "
                             f"launch with `stram launch --yarn`") from None
        return cls(client, defer_shutdown=True)

    @staticmethod
    def _services_from_spec(app_client: Any) -> dict[str, tuple[int, int]]:
        try:
            spec = app_client.get_specification()
            found = {name: (int(s.resources.memory), int(s.resources.vcores))
                     for name, s in spec.services.items()
                     if name == CONTAINER_SERVICE or name.startswith(CONTAINER_SERVICE + "-")}
            if found:
                return found
        except Exception:  # noqa: BLE001
            log.warning("could not read the Skein application spec; using service %r", CONTAINER_SERVICE,
                        exc_info=True)
        return {CONTAINER_SERVICE: (0, 0)}

    def service_for(self, memory_mb: int, vcores: int) -> str:
        """The smallest container service that fits; the largest (with a warning) when none does."""
        fits = [(m, v, name) for name, (m, v) in self.services.items()
                if (m >= memory_mb or m == 0) and (v >= vcores or v == 0)]
        if fits:
            if CONTAINER_SERVICE in self.services and self.services[CONTAINER_SERVICE] == (memory_mb, vcores):
                return CONTAINER_SERVICE
            return min(fits)[2]
        name = max((m, v, n) for n, (m, v) in self.services.items())[2]
        log.warning("no container service has %d MB/%d vcores; using %s %s", memory_mb, vcores, name,
                    self.services[name])
        return name

    # -------------------------------------------------------------- Launcher
    def launch(self, request: ContainerRequest) -> None:
        """Add a container to the fitting service with the request's environment."""
        self._maybe_register_ui(request.env.get("STRAM_APP_PATH"))
        service = self.service_for(request.memory_mb, request.vcores)
        kwargs: dict[str, Any] = {"env": dict(request.env)}
        if _accepts(self.app_client.add_container, "resources"):
            import skein
            kwargs["resources"] = skein.Resources(memory=request.memory_mb, vcores=request.vcores)
        try:
            container = self.app_client.add_container(service, **kwargs)
        except Exception:  # noqa: BLE001 - the master recovers it like a container that died
            log.exception("could not request a container for %s", request.container_id)
            with self._lock:
                self._failed.append((request.container_id, None))
            return
        with self._lock:
            self._live[container.id] = request.container_id
            self._skein_ids[request.container_id] = container.id
        log.info("requested %s as skein %s (%s, %d MB, %d vcores)", request.container_id, container.id,
                 service, request.memory_mb, request.vcores)

    def kill(self, container_id: str) -> None:
        """Kill a container (YARN stops its process); :meth:`poll` reports it ended."""
        skein_id = self._skein_ids.get(container_id)
        if skein_id is None or skein_id not in self._live:
            return
        try:
            self.app_client.kill_container(skein_id)
            log.info("killed %s (skein %s)", container_id, skein_id)
        except Exception as exc:  # noqa: BLE001 - it may have ended already
            log.info("kill %s (skein %s): %s", container_id, skein_id, exc)

    def poll(self) -> list[tuple[str, int | None]]:
        """Containers that ended since the last call: (stram id, exit code or None)."""
        with self._lock:
            ended, self._failed = self._failed, []
            if not self._live:
                return ended
        try:
            done = self.app_client.get_containers(services=list(self.services), states=list(_DONE_STATES))
        except Exception as exc:  # noqa: BLE001 - try again at the next poll
            log.warning("could not ask the Skein application master for containers: %s", exc)
            return ended
        with self._lock:
            for c in done:
                cid = self._live.pop(c.id, None)
                if cid is None:
                    continue
                self._skein_ids.pop(cid, None)
                code = _exit_code(c)
                if str(c.state) != "SUCCEEDED":
                    log.info("%s (skein %s) ended %s: %s", cid, c.id, c.state,
                             (c.exit_message or "").strip()[:500])
                ended.append((cid, code))
        return ended

    def stop_all(self, grace: float = 5.0) -> None:
        """Kill every container still held and wait up to ``grace`` seconds for YARN to confirm."""
        with self._lock:
            live = dict(self._live)
        for skein_id in live:
            with contextlib.suppress(Exception):
                self.app_client.kill_container(skein_id)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            try:
                active = {c.id for c in self.app_client.get_containers(services=list(self.services),
                                                                       states=list(_ACTIVE_STATES))}
            except Exception:  # noqa: BLE001
                break
            if not active & set(live):
                break
            time.sleep(0.1)
        with self._lock:
            self._live.clear()
            self._skein_ids.clear()

    def set_progress(self, fraction: float) -> None:
        """Show progress in the YARN UI (clamped to [0, 1])."""
        try:
            self.app_client.set_progress(min(1.0, max(0.0, float(fraction))))
        except Exception as exc:  # noqa: BLE001
            log.debug("set_progress: %s", exc)

    def register_ui(self, admin_url: str) -> str | None:
        """Put the master's admin pages into the Skein web UI (route and link ``stram``).

        Returns the proxied address, or None (with a warning) when it failed:
        the application runs on without the link.
        """
        self._ui_done = True
        try:
            page = self.app_client.ui.add_page("stram", admin_url, link_name="stram")
        except Exception as exc:  # noqa: BLE001
            message = f"could not add the stram admin page {admin_url} to the Skein web UI: {exc}"
            log.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return None
        self.ui_address = getattr(page, "address", None)
        log.info("admin API in the YARN web UI: %s", self.ui_address or admin_url)
        return self.ui_address

    def _maybe_register_ui(self, app_path: str | None) -> None:
        """Register the admin page once, from ``APP_PATH/admin.json`` the master wrote at start."""
        if self._ui_done or not app_path:
            return
        self._ui_done = True
        try:
            from container import fs
            url = json.loads(fs.read_bytes(fs.join(app_path, "admin.json")))["url"]
        except Exception as exc:  # noqa: BLE001
            log.warning("no admin URL to put into the Skein web UI (%s)", exc)
            return
        self.register_ui(url)

    def finish(self, state: str, diagnostics: str) -> None:
        """Report the final state to YARN: SUCCEEDED, FAILED or KILLED (anything else: FAILED)."""
        self._final = (_FINAL.get(state, "FAILED"), (diagnostics or f"stram application {state}")[:4000])
        if self.defer_shutdown:
            atexit.register(self._shutdown)
        else:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._final is None or self._shutdown_sent:
            return
        self._shutdown_sent = True
        status, diagnostics = self._final
        try:
            self.app_client.shutdown(status, diagnostics)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not report %s to YARN: %s", status, exc)


# ====================================================================== on the nodes

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
    scripts.cli.CLIError
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
        raise _cli_error(f"{app_path} is on HDFS, which stram reaches through pyarrow's HadoopFileSystem "
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
        already ended the application, else None.
    """
    from container import fs
    app_path = app_path or os.environ.get("STRAM_APP_PATH", "")
    if not app_path:
        raise _cli_error("STRAM_APP_PATH is not set; the master is started by `stram launch --yarn`")
    check_hdfs(app_path)
    status_uri = fs.join(app_path, "status.json")
    if fs.exists(status_uri):
        try:
            status = json.loads(fs.read_bytes(status_uri))
        except ValueError:
            status = {}
        if status.get("state") in _DONE_STATES:
            return status["state"]
    target = fs.join(app_path, SPEC_FILE)
    if not fs.exists(target):
        with open(spec_file, "rb") as f:
            fs.write_atomic(target, f.read())
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m appmaster.yarn prepare-master SPEC | check-hdfs APP_PATH | app-id``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m appmaster.yarn",
                                     description="steps the stram YARN scripts run on the nodes")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare-master", help="check HDFS, stage the spec under APP_PATH [env: STRAM_APP_PATH]")
    p.add_argument("spec_file")
    p = sub.add_parser("check-hdfs", help="check what pyarrow's HDFS client needs on this node")
    p.add_argument("app_path")
    sub.add_parser("app-id", help="print this container's YARN application id")
    args = parser.parse_args(argv)
    from scripts.cli import CLIError
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
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.command == "prepare-master":
            _shutdown_current("FAILED", str(exc))
        return 1
    if ended is not None:
        message = f"an earlier attempt already ended this application {ended}"
        print(message, file=sys.stderr)
        _shutdown_current(ended, message)
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
