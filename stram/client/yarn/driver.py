"""skein's Java driver on the client: a bounded ResourceManager wait, preflight checks, error translation.

:func:`connect` starts ``skein.Client`` (the Java driver) with a copy of the
Hadoop configuration whose ResourceManager wait is bounded
(:func:`hadoop_conf_overlay`), after checking what the driver needs (Java,
``yarn`` on PATH, a configuration). :func:`translate` is the one place that
turns skein, driver and Hadoop failures into stram's errors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
import xml.etree.ElementTree as ET
from typing import Any, Iterator

from stram.common import hadoopconf
from stram.common.errors import ClusterUnreachable, StramError, UserError

log = logging.getLogger("stram.client.yarn")

__all__ = ["DEFAULT_CONNECT_WAIT_MS", "hadoop_conf_overlay", "connect", "translate", "max_allocation",
           "check_resources"]

#: Default bound on the driver's wait for an unreachable ResourceManager (ms).
DEFAULT_CONNECT_WAIT_MS = 30000


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
        raise UserError(f"cannot read {conf_dir}/yarn-site.xml; check its permissions")
    user = {**hadoopconf.read_site(os.path.join(dest, "core-site.xml")), **hadoopconf.read_site(site_path)}
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


def preflight() -> str:
    """Check what skein's driver needs; return the Hadoop configuration directory."""
    if os.environ.get("JAVA_HOME") and _java() is None:
        raise UserError(f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java; skein's YARN client is a "
                         f"Java process: export JAVA_HOME=/path/to/jdk (Java 8 or newer)")
    if _java() is None:
        raise UserError("Java was not found (no JAVA_HOME, no `java` on PATH); skein's YARN client is a "
                         "Java process: install a JDK (8 or newer) and export JAVA_HOME=/path/to/jdk")
    if shutil.which("yarn") is None:
        raise UserError("the `yarn` command is not on PATH; skein builds its classpath with "
                         "`yarn classpath --glob`: install the Hadoop client of your cluster and "
                         "export PATH=$HADOOP_HOME/bin:$PATH")
    conf_dir = hadoopconf.find_hadoop_conf_dir()
    if conf_dir is None:
        where = os.environ.get("HADOOP_CONF_DIR")
        raise UserError((f"HADOOP_CONF_DIR={where} has no yarn-site.xml" if where else
                          "HADOOP_CONF_DIR is not set and no Hadoop configuration was found "
                          "($HADOOP_HOME/etc/hadoop, /etc/hadoop/conf)")
                         + "; export HADOOP_CONF_DIR=/etc/hadoop/conf (the directory with your "
                           "cluster's yarn-site.xml and core-site.xml)")
    return conf_dir


@contextlib.contextmanager
def connect(principal: str | None = None, keytab: str | None = None, *,
            log_path: str | None = None, connect_wait_ms: int | None = None,
            standing: bool = True) -> Iterator[Any]:
    """A ``skein.Client`` on a driver whose ResourceManager wait is bounded.

    The standing driver (``stram driver start``, :mod:`stram.client.yarn.standing`) when one
    runs that was started for the same configuration, login, wait and skein credentials
    and it answers; else a new driver, closed on exit.

    Parameters
    ----------
    principal, keytab:
        Kerberos login of the driver (default: the ticket cache, after ``kinit``).
    log_path:
        File for the driver's own log (default: a file in a temporary directory).
    connect_wait_ms:
        Total wait for an unreachable ResourceManager, see :func:`hadoop_conf_overlay`.
    standing:
        False: always a new driver (the standing driver's own holder).

    Yields
    ------
    skein.Client

    Raises
    ------
    UserError
        Java, ``yarn`` or the Hadoop configuration is missing, or the driver did not start.
    """
    conf_dir = preflight()
    if (principal is None) != (keytab is None):
        raise UserError("give both a Kerberos principal and a keytab, or neither (then the driver "
                         "uses your ticket cache: run `kinit` first)")
    if keytab is not None and not os.path.isfile(keytab):
        raise UserError(f"keytab {keytab} does not exist")
    import skein

    if standing and os.environ.get("STRAM_YARN_DRIVER") != "new":
        from stram.client.yarn import standing as standing_driver
        address = standing_driver.find(standing_driver.key(conf_dir, principal, keytab, connect_wait_ms))
        client = None
        if address is not None:
            try:
                client = skein.Client(address=address)  # it pings the driver
            except Exception as exc:  # noqa: BLE001 - a driver of its own does instead
                log.info("the standing driver at %s does not answer (%s): starting a driver", address, exc)
        if client is not None:
            log.debug("using the standing driver at %s", address)
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    client.close()  # the channel only: the driver stays
            return
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
                with warnings.catch_warnings(record=True) as caught:
                    # skein's first use writes its credentials with a UserWarning on stderr
                    warnings.simplefilter("always")
                    client = skein.Client(principal=principal, keytab=keytab, log=log_path)
                for warning in caught:
                    log.info("skein: %s", warning.message)
            except Exception as exc:  # noqa: BLE001 - every way the driver fails gets one message
                raise translate(exc, "starting skein's YARN client (the Java driver)", conf_dir,
                                 log_path) from None
        yield client
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        shutil.rmtree(work, ignore_errors=True)


def max_allocation(client: Any, conf_dir: str | None = None) -> tuple[int | None, int | None]:
    """The most memory (MB) and vcores YARN can give one container, as far as the client can tell.

    The smaller of ``yarn.scheduler.maximum-allocation-mb``/``-vcores`` in the
    client's yarn-site.xml (when it sets them) and the largest running
    NodeManager (a container never spans nodes); None where neither is known.
    """
    conf = conf_dir or hadoopconf.find_hadoop_conf_dir()
    site = hadoopconf.read_site(os.path.join(conf, "yarn-site.xml")) if conf else {}
    limits: list[list[int]] = [[], []]
    for i, key in enumerate(("yarn.scheduler.maximum-allocation-mb", "yarn.scheduler.maximum-allocation-vcores")):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            limits[i].append(int(site[key]))
    try:
        nodes = client.get_nodes(states=["RUNNING"])
    except Exception as exc:  # noqa: BLE001 - only a better message is lost; YARN still checks
        log.debug("cannot list the NodeManagers: %s", exc)
        nodes = []
    if nodes:
        limits[0].append(max(int(n.total_resources.memory) for n in nodes))
        limits[1].append(max(int(n.total_resources.vcores) for n in nodes))
    return (min(limits[0]) if limits[0] else None, min(limits[1]) if limits[1] else None)


def check_resources(client: Any, aspec: Any, queue_note: str = "") -> None:
    """Refuse, before submitting, an application whose master or containers no node could hold.

    YARN refuses such a master at once, but a container only once the master
    asks for it: the application would start, fail and be retried. ``aspec`` is
    the skein ``ApplicationSpec``.

    Raises
    ------
    UserError
        The master's or a container's memory or vcores exceed :func:`max_allocation`.
    """
    max_mb, max_vcores = max_allocation(client)
    asks = [("the application master", "MASTER_MEMORY_MB", "MASTER_VCORES", aspec.master.resources)]
    asks += [(f"an operator container (service {name})", "CONTAINER_MEMORY_MB", "CONTAINER_VCORES", svc.resources)
             for name, svc in sorted(aspec.services.items())]
    for who, mem_attr, cpu_attr, res in asks:
        if max_mb is not None and res.memory > max_mb:
            raise UserError(f"YARN cannot run {aspec.name}{queue_note}: {who} asks for {res.memory} MB, more "
                            f"than one container may have on this cluster ({max_mb} MB: "
                            f"yarn.scheduler.maximum-allocation-mb, or the largest NodeManager); "
                            f"lower {mem_attr}, e.g. -D {mem_attr}={max_mb}")
        if max_vcores is not None and res.vcores > max_vcores:
            raise UserError(f"YARN cannot run {aspec.name}{queue_note}: {who} asks for {res.vcores} vcores, "
                            f"more than one container may have on this cluster ({max_vcores}: "
                            f"yarn.scheduler.maximum-allocation-vcores, or the largest NodeManager); "
                            f"lower {cpu_attr}, e.g. -D {cpu_attr}={max_vcores}")


def _refusal(text: str, doing: str) -> StramError | None:
    """The ResourceManager refused a submission (queue, resources): one line saying why and what to do."""
    match = re.search(r"unknown queue: (\S+)", text)
    if match:
        return UserError(f"YARN refused {doing}: the queue {match.group(1)!r} does not exist; submit to one "
                         f"of the cluster's queues (-D QUEUE=name; `yarn queue -status NAME` shows one)")
    match = re.search(r"Queue (\S+) is (STOPPED|DRAINING)", text)
    if match:
        return UserError(f"YARN refused {doing}: the queue {match.group(1)} is {match.group(2)} and accepts no "
                         f"applications; submit to another queue (-D QUEUE=name) or ask the cluster's "
                         f"administrator to start it")
    match = re.search(r"Queue (\S+) already has (\d+) applications|"
                      r"(?:[Mm]aximum|limit) (?:system|number of) applications", text)
    if match:
        where = f"the queue {match.group(1)} already has {match.group(2)} applications, its maximum" \
            if match.group(1) else "the cluster holds as many applications as it may"
        return UserError(f"YARN refused {doing}: {where}; try again once some have finished, or submit to "
                         f"another queue (-D QUEUE=name)")
    match = re.search(r"greater than maximum allowed allocation.*?Requested resource=(<[^>]*>).*?"
                      r"maximum allowed allocation=(<[^>]*>)", text, re.S)
    if match:
        return UserError(f"YARN refused {doing}: the application master asks for {match.group(1)}, more than "
                         f"one container may have on this cluster {match.group(2)}; lower MASTER_MEMORY_MB "
                         f"or MASTER_VCORES")
    match = re.search(r"AccessControlException: (User \S+ does not have permission[^\n]*|"
                      r"User \S+ cannot submit applications to queue[^\n]*)", text)
    if match:
        return UserError(f"YARN refused {doing}: {match.group(1).strip()}; submit to a queue you may use "
                         f"(-D QUEUE=name)")
    return None


def log_tail(path: str | None, lines: int = 15, label: str = "driver log") -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as f:
            tail = [ln.rstrip() for ln in f.readlines()[-lines:] if ln.strip()]
    except OSError:
        return ""
    return (f"\n  {label} ({path}):\n    " + "\n    ".join(tail)) if tail else ""


def translate(exc: BaseException, doing: str, conf_dir: str | None = None,
              log_path: str | None = None) -> StramError:
    """One place that turns skein/driver/Hadoop failures into stram's clear errors.

    A missing or broken local setup (``yarn``, Java, Kerberos ticket) is a
    :class:`UserError`, a ResourceManager that does not answer is
    :class:`ClusterUnreachable`, anything else a :class:`StramError` with the
    driver's log tail.
    """
    text = str(exc).strip()
    conf = conf_dir or hadoopconf.find_hadoop_conf_dir() or "$HADOOP_CONF_DIR"
    if isinstance(exc, FileNotFoundError) and "yarn" in text:
        return UserError(f"{doing}: the `yarn` command could not be run ({text}); put the Hadoop "
                          f"client's bin directory on PATH")
    if isinstance(exc, subprocess.CalledProcessError) and "classpath" in str(exc.cmd):
        return UserError(f"{doing}: `{' '.join(exc.cmd)}` failed with exit code {exc.returncode}; "
                          f"check that the `yarn` on PATH belongs to a working Hadoop client "
                          f"(try running it yourself)")
    if isinstance(exc, FileNotFoundError) and "java" in text:
        return UserError(f"{doing}: Java could not be run ({text}); export JAVA_HOME=/path/to/jdk")
    refused = _refusal(text, doing)
    if refused is not None:
        return refused
    if re.search(r"ConnectException|Connection refused|UnknownHost|NoRouteToHost|"
                 r"failed on connection exception|ConnectTimeout", text):
        return ClusterUnreachable(
            f"no ResourceManager answers at {hadoopconf.rm_address(conf)} (yarn.resourcemanager.address in "
            f"{conf}/yarn-site.xml) while {doing}. Check that the address is right and the "
            f"ResourceManager is up, or point HADOOP_CONF_DIR at your cluster's configuration. "
            f"({text.splitlines()[-1] if text else type(exc).__name__})")
    if re.search(r"(?i)kerberos|GSS|ticket|SIMPLE authentication is not enabled", text):
        return UserError(f"{doing}: Kerberos authentication failed ({text.splitlines()[-1]}); run "
                          f"`kinit` first, or set STRAM_YARN_PRINCIPAL and STRAM_YARN_KEYTAB")
    if "Failed to start java process" in text or "Failed to read in client port" in text:
        return StramError(f"{doing}: skein's Java driver exited before it was ready; is `yarn "
                          f"classpath --glob` giving the Hadoop client jars, and is Java 8+ "
                          f"installed?{log_tail(log_path)}")
    name = type(exc).__name__
    first = text.splitlines()[0] if text else name
    return StramError(f"{doing} failed: {first} ({name}){log_tail(log_path)}")


