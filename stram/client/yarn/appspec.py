"""What ``stram launch --yarn`` submits: the ``skein.ApplicationSpec`` of an application, built on the CLI side.

:func:`application_spec` turns an :class:`~stram.master.spec.AppSpec` into a
``skein.ApplicationSpec``: the master is the Skein master script
(``python -m stram.master --launcher yarn``), containers are instances of the
``container`` service (one service per container shape) that the master adds
one by one. It ships the Python environment, the application's own modules
(and stram's, from a source checkout) and a keytab, and writes the scripts
that prepare each node (:mod:`stram.master.launch.yarnnode`).
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import secrets
import sys
import sysconfig
import uuid
import zipfile
from typing import Any

from stram.common.apps import stram_home
from stram.common.errors import UserError
from stram.common.hadoopconf import qualify_hdfs
from stram.common.skeinkeys import CONTAINER_SERVICE, PLACEMENT_NOTE_ENV, RACK_ENV, parse_service, pinned_service

log = logging.getLogger("stram.client.yarn")

__all__ = ["STRAM_TAG", "CONTAINER_SERVICE", "DEFAULT_MAX_ATTEMPTS", "SPEC_FILE", "TOKEN_FILE", "application_spec",
           "add_pinned_services", "running_nodes", "container_shapes", "application_modules", "local_path_warnings"]

#: Every stram application carries this YARN application tag (``list_apps`` filters on it).
STRAM_TAG = "stram"
#: YARN attempts of the master: a second attempt resumes from the journal under APP_PATH.
DEFAULT_MAX_ATTEMPTS = 2
#: Where a shipped Python environment archive is unpacked in every container.
ENV_DIR = "environment"
#: Where the application's own modules (and stram's, from a source checkout) are unpacked.
APP_DIR = "app"
#: The resolved spec, as the master's localized file and under APP_PATH.
SPEC_FILE = "spec.yaml"
#: The localized file holding the application's token (``STRAM_TOKEN_FILE``).
TOKEN_FILE = "stram.token"
#: stram's own top-level package (never shipped as "the application's modules").
STRAM_PACKAGES = ("stram",)
#: The packages whose folders make up stram in a checkout (``setup.cfg``'s ``package_dir``).
_STRAM_ROOTS = ("stram", "stram.master", "stram.agent", "stram.wire")
#: Suffixes YARN (through Skein) unpacks as archives.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
#: The options of Skein's application master, a JVM in the master's container (``$JAVA_HOME/bin/java
#: ... com.anaconda.skein.ApplicationMaster``, with the master's environment). Its web UI -- what the
#: application's tracking URL shows -- renders the overview page with Mustache, which reads the
#: registered service pages (stram's console) from a ``java.util.TreeMap`` entry by reflection: on
#: Java 17 that is an ``InaccessibleObjectException`` (HTTP 500) unless ``java.util`` is open to the
#: unnamed module. The ``java`` launcher of Java 9 and later reads ``JDK_JAVA_OPTIONS`` (where
#: ``--add-opens`` is valid, and harmless before 17); Java 8's ignores it. The master script unsets
#: it, so that no other ``java`` (``hadoop classpath``) picks it up.
AM_JAVA_OPTIONS = "--add-opens=java.base/java.util=ALL-UNNAMED"


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
        A validated :class:`stram.master.spec.AppSpec` (``-D`` overrides already applied).
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
        The application's secret; default: a new random one. It is written to a
        ``0600`` file in the staging directory and reaches the master and the
        containers as the localized file ``stram.token`` (application visibility;
        ``STRAM_TOKEN_FILE`` names it), never in the environment or the spec.
    max_attempts:
        YARN attempts of the master (default 2: the second resumes from the
        master's journal under APP_PATH).

    Returns
    -------
    skein.ApplicationSpec
        Valid by skein's own model; ``from_yaml(to_yaml())`` gives it back.

    Raises
    ------
    UserError
        The Python environment archive or the keytab does not exist.
    """
    import skein

    name = spec.name
    uid = uuid.uuid4().hex[:12]
    staging = staging_dir or os.path.join(stram_home(), "yarn", f"{name}-{uid}")
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
            raise UserError(f"keytab {keytab} does not exist; give the path of the keytab "
                             f"for {principal or 'your principal'}")
        files["stram.keytab"] = skein.File(os.path.abspath(keytab), type="file")

    spec_file = os.path.join(staging, SPEC_FILE)
    with open(spec_file, "w") as f:
        f.write(spec.to_yaml())
    token_file = os.path.join(staging, TOKEN_FILE)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    # the master's alone: each container reads a credential of its own the master writes under APP_PATH
    master_files = dict(files)
    master_files[TOKEN_FILE] = skein.File(token_file, type="file", visibility="application")
    master_files[SPEC_FILE] = skein.File(spec_file, type="file")

    common_env = {"PYTHONUNBUFFERED": "1"}
    if principal and keytab:
        common_env["STRAM_PRINCIPAL"] = principal
        if os.environ.get("STRAM_KINIT_INTERVAL"):  # how often the nodes renew their tickets
            common_env["STRAM_KINIT_INTERVAL"] = os.environ["STRAM_KINIT_INTERVAL"]
    master_env = dict(common_env, STRAM_TOKEN_FILE=TOKEN_FILE, STRAM_APP_PATH=app_path, STRAM_LAUNCHER="yarn",
                      STRAM_USER=_hadoop_user(principal),  # the admin API's modify ACL
                      JDK_JAVA_OPTIONS=AM_JAVA_OPTIONS)  # for Skein's application master (its web UI)
    preamble = _script_preamble(activate, bool(app_archive), bool(principal and keytab))
    master_script = "\n".join([
        "# JDK_JAVA_OPTIONS is for Skein's application master, the JVM that started this script",
        "unset JDK_JAVA_OPTIONS",
        preamble,
        "# the application id is only known once YARN accepted the submission",
        'export STRAM_APP_ID="${STRAM_APP_ID:-$SKEIN_APPLICATION_ID}"',
        'export STRAM_LOG_DIR="${STRAM_LOG_DIR:-${LOG_DIRS%%,*}}"',
        "# checks HDFS, stages the spec under APP_PATH; exits 3 when an earlier attempt ended the app",
        f"python -m stram.master.launch.yarnnode prepare-master {SPEC_FILE}",
        "exec python -m stram.master --launcher yarn",
        ""])
    container_script = "\n".join([
        preamble,
        'export STRAM_LOG_DIR="${STRAM_LOG_DIR:-${LOG_DIRS%%,*}}"',
        'python -m stram.master.launch.yarnnode check-hdfs "$STRAM_APP_PATH"',
        "exec python -m stram.agent",
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
    aspec = skein.ApplicationSpec(
        name=name, queue=queue, tags=tags, max_attempts=max_attempts, node_label=node_label,
        file_systems=file_systems, master=master, services=services)
    # the services pinned to a node label; those pinned to nodes and racks need the cluster's nodes,
    # which submit() adds once connected (a dry run has no cluster: it shows none)
    add_pinned_services(aspec, spec, None)
    return aspec


def running_nodes(client: Any) -> list[tuple[str, str, frozenset[str]]]:
    """(host, rack, node labels) of the cluster's RUNNING nodes, from the ResourceManager (``skein.Client``)."""
    reports = client.get_nodes(states=["RUNNING"])
    return sorted({(r.host, r.rack_name or "", frozenset(r.labels or ())) for r in reports})


def add_pinned_services(aspec: Any, spec: Any, nodes: list[tuple[str, str, frozenset[str]]] | None) -> str:
    """Add to ``aspec`` the pinned services (:mod:`stram.common.skeinkeys`) the master places containers with.

    For each container shape's service: one per node label the spec's operators ask for
    (NODE_LABEL), and -- when the cluster has 2 to PLACEMENT_MAX_NODES RUNNING ``nodes``
    (:func:`running_nodes`) -- one per node (``nodes=[host]``) and, with two racks or more, one
    per rack (``racks=[rack]``), all with ``relax_locality=False``: YARN gives such a service
    containers only where it names. With the application's node label set, only nodes having it
    are pinned. ``nodes`` None (``launch --yarn --dry-run``: no cluster to ask) adds no node or
    rack service. Returns why none was added though the cluster has nodes ("": they were, or
    one node needs none), which the master notes in its events (PLACEMENT_NOTE_ENV).
    """
    import skein

    general = {name: svc for name, svc in aspec.services.items() if not parse_service(name)[1]}
    labels = sorted(_operator_labels(spec))
    if aspec.node_label:
        nodes = [n for n in nodes or [] if aspec.node_label in n[2]]
    cap = int(spec.attribute("PLACEMENT_MAX_NODES"))
    note = ""
    if nodes is not None and len(nodes) > cap:
        note = (f"the cluster has {len(nodes)} RUNNING nodes, more than PLACEMENT_MAX_NODES={cap}: no service "
                f"pinned to a node or rack; containers go where YARN puts them (placement and the blacklist "
                f"are not applied)")
        log.warning(note)
        nodes = []
    hosts = sorted({host for host, _, _ in nodes or []}) if len(nodes or []) > 1 else []
    racks = sorted({rack for _, rack, _ in nodes or [] if rack})
    racks = racks if len(racks) > 1 else []
    rack_of = {host: rack for host, rack, _ in nodes or []}
    for name, svc in general.items():
        def pinned(env: dict[str, str] | None = None, **where: Any) -> Any:
            return skein.Service(resources=svc.resources, script=svc.script, instances=0, files=dict(svc.files),
                                 env={**svc.env, **(env or {})}, max_restarts=0, allow_failures=True,
                                 relax_locality=False, **where)
        for host in hosts:  # the node's rack in its env: the master's launcher learns the racks from it
            aspec.services[pinned_service(name, host=host)] = pinned({RACK_ENV: rack_of[host]}, nodes=[host])
        for rack in racks:
            aspec.services[pinned_service(name, rack=rack)] = pinned(racks=[rack])
        for label in labels:
            aspec.services[pinned_service(name, label=label)] = pinned(node_label=label)
    if note:
        aspec.master.env[PLACEMENT_NOTE_ENV] = note
    return note


def _operator_labels(spec: Any) -> set[str]:
    """The node labels the spec's operators ask for (NODE_LABEL; none when stram has no such attribute)."""
    out = set()
    for op in spec.operators:
        try:
            label = spec.attribute("NODE_LABEL", op)
        except Exception:  # noqa: BLE001 - an attribute this stram does not know: no label
            return set()
        if label:
            out.add(str(label))
    return out


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
        from stram.master.core.plan import PhysicalPlan
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


def _hadoop_user(principal: str | None) -> str:
    if principal:
        return re.split(r"[/@]", principal, maxsplit=1)[0]
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def _default_app_path(name: str, uid: str, principal: str | None) -> str:
    root = os.environ.get("STRAM_YARN_APPS_DIR") or f"hdfs:///user/{_hadoop_user(principal)}/.stram/apps"
    return f"{root.rstrip('/')}/{name}-{uid}"


def _python_environment(python_env: str | None, skein: Any) -> tuple[dict[str, Any], str]:
    """(files to ship, shell lines that put the environment's ``python`` first on PATH)."""
    env = python_env or os.environ.get("STRAM_PYTHON_ENV") or sys.prefix
    if env.endswith(ARCHIVE_SUFFIXES):
        if "://" not in env or env.startswith("file://"):
            local = env[len("file://"):] if env.startswith("file://") else env
            if not os.path.isfile(local):
                raise UserError(f"Python environment archive {local} does not exist; build it with "
                                 f"`venv-pack -o {local}` (in the venv) or `conda pack -o {local}`, "
                                 f"or give an environment path that exists on every node")
            env = os.path.abspath(local)
        activate = (f"# the Python environment, shipped as an archive ({os.path.basename(env)})\n"
                    f"source {ENV_DIR}/bin/activate")
        return {ENV_DIR: skein.File(env, type="archive")}, activate
    if "://" in env:
        raise UserError(f"Python environment {env}: a remote environment must be an archive "
                         f"({', '.join(ARCHIVE_SUFFIXES)}); an environment directory must be a "
                         f"path that exists on every node")
    if not os.path.isabs(env):
        raise UserError(f"Python environment {env}: give an absolute path that exists on every "
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
        lines += ["# Kerberos: a ticket from the shipped keytab, private to this container, which the",
                  "# process renews from the keytab; HDFS sees the ticket, not YARN's delegation tokens",
                  "# (they die at their maximum lifetime, the application need not)",
                  'export KRB5CCNAME="FILE:$PWD/krb5cc_stram" STRAM_KEYTAB="$PWD/stram.keytab"',
                  'kinit -kt "$STRAM_KEYTAB" "$STRAM_PRINCIPAL"',
                  "unset HADOOP_TOKEN_FILE_LOCATION"]
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
    import stram
    here = os.path.realpath(os.path.dirname(stram.__file__))
    return not any(here.startswith(root + os.sep) for root in _installed_roots())


def _stram_sources() -> list[tuple[str, str]]:
    """``(folder, name in the archive)`` of each of stram's package roots, wherever a checkout maps them."""
    import importlib
    return [(os.path.realpath(list(importlib.import_module(name).__path__)[0]), name.replace(".", "/"))
            for name in _STRAM_ROOTS]


def _zip_modules(target: str, paths: list[str | tuple[str, str]]) -> str:
    """Zip module files and package directories into ``target``: at its top level, or under the
    name given with a folder as ``(folder, name)``."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for entry in paths:
            path, arc = entry if isinstance(entry, tuple) else (entry, os.path.basename(entry))
            if os.path.isfile(path):
                zf.write(path, arc)
                continue
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
                for fn in sorted(filenames):
                    if fn.endswith((".pyc", ".pyo")) or fn.startswith("."):
                        continue
                    full = os.path.join(dirpath, fn)
                    zf.write(full, os.path.join(arc, os.path.relpath(full, path)))
    return target
