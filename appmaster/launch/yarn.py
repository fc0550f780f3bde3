"""The master's launcher inside YARN: stram containers as instances of a Skein service.

:class:`YarnLauncher` is the :class:`~stram.master.launch.local.Launcher` of a master
running as the Skein master script: it adds and kills containers through
``skein.ApplicationClient``, reports which ended (with their exit codes),
shows progress and the admin pages in the YARN web UI, and reports the final
status to YARN.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import logging
import os
import re
import threading
import time
import warnings
from typing import Any, Mapping

from stram.common.apps import TERMINAL
from stram.common.errors import UserError
from stram.common.skeinkeys import ADMIN_KEY, CONTAINER_SERVICE, parse_service
from stram.master.launch.local import NODE_LOST_EXIT, ContainerRequest, Launcher
from stram.master.launch.yarnplace import Choice, PinnedServices

log = logging.getLogger("stram.master.launch.yarn")

__all__ = ["YarnLauncher"]

#: Skein container states of a container still held (requested or running).
_ACTIVE_STATES = ("WAITING", "REQUESTED", "RUNNING")


#: YARN's diagnostics: "Container exited with a non-zero exit code 1", "Exit code: 1",
#: "Container killed on request. Exit code is 137".
_EXIT_CODE_RE = re.compile(r"(?i)exit(?:ed with a non-zero exit)? code(?: is)?[: ]+(-?\d+)")
#: YARN's diagnostics of a container lost with its node: "Container released on a *lost* node".
_LOST_NODE_RE = re.compile(r"(?i)lost\W*node")


def _exit_code(container: Any) -> int | None:
    """The container's exit code from its state and YARN's diagnostics; :data:`NODE_LOST_EXIT` for a
    container lost with its node (an ABORTED -100 that does not say so: None, the master released it)."""
    state = str(container.state)
    if state == "SUCCEEDED":
        return 0
    message = container.exit_message or ""
    if _LOST_NODE_RE.search(message):
        return NODE_LOST_EXIT
    match = _EXIT_CODE_RE.search(message)
    code = int(match.group(1)) if match else None
    return None if code == NODE_LOST_EXIT else code


def _node_host(container: Any) -> str | None:
    """The host of the NodeManager YARN put a container on (``yarn_node_http_address`` is host:port)."""
    address = getattr(container, "yarn_node_http_address", "") or ""
    return address.rsplit(":", 1)[0] or None


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
    pinned:
        The services pinned to nodes, racks and labels (:mod:`stram.master.launch.yarnplace`);
        default: read from the spec with ``services`` (none when ``services`` is given).

    A request placed on a pinned service it asked for that is not RUNNING within
    :attr:`placement_timeout_millis` is killed and asked again on the general service when
    the request may be relaxed; else :meth:`poll` reports it ended and :meth:`unplaceable`
    says why.
    """

    #: A cluster is shared: its channels are encrypted unless the spec says ``TLS: false``.
    tls_by_default = True

    #: How long a container asked on a pinned service may wait for YARN (the master sets
    #: PLACEMENT_TIMEOUT_MILLIS); the clock it is measured with.
    placement_timeout_millis = 30_000
    clock = staticmethod(time.monotonic)
    #: Seconds between two asks for where live containers run (for the least used node).
    node_refresh_seconds = 1.0

    def __init__(self, app_client: Any, services: Mapping[str, tuple[int, int]] | None = None, *,
                 defer_shutdown: bool = False, pinned: PinnedServices | None = None) -> None:
        self.app_client = app_client
        spec_services = {} if services else self._spec_services(app_client)
        self.services = dict(services) if services else self._general_services(spec_services)
        self.pinned = pinned if pinned is not None else PinnedServices(spec_services)
        #: Every service whose containers are stram's (general and pinned).
        self.all_services = [*self.services, *self.pinned.names()]
        #: stram container id -> the host YARN put it on (kept after it ended)
        self._nodes: dict[str, str] = {}
        self._nodes_asked = float("-inf")
        #: stram container id -> (deadline, request, choice) of a request waiting on a pinned service
        self._placing: dict[str, tuple[float, ContainerRequest, Choice]] = {}
        #: stram container id -> why it could not be placed (reported ended by poll)
        self._unplaceable: dict[str, str] = {}
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
        UserError
            Not inside a Skein container (``SKEIN_APPLICATION_ID`` unset).
        """
        import skein
        try:
            client = skein.ApplicationClient.from_current()
        except Exception as exc:  # noqa: BLE001
            raise UserError(f"the YARN launcher runs inside the Skein master container, but {exc} "
                             f"(SKEIN_APPLICATION_ID={os.environ.get('SKEIN_APPLICATION_ID')!r}); "
                             f"launch with `stram launch --yarn`") from None
        return cls(client, defer_shutdown=True)

    @staticmethod
    def _spec_services(app_client: Any) -> dict[str, Any]:
        """The application's stram container services (general and pinned) from its spec."""
        try:
            spec = app_client.get_specification()
            return {name: s for name, s in spec.services.items()
                    if parse_service(name)[0] == CONTAINER_SERVICE
                    or parse_service(name)[0].startswith(CONTAINER_SERVICE + "-")}
        except Exception:  # noqa: BLE001
            log.warning("could not read the Skein application spec; using service %r", CONTAINER_SERVICE,
                        exc_info=True)
        return {}

    @staticmethod
    def _general_services(services: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
        found = {name: (int(s.resources.memory), int(s.resources.vcores))
                 for name, s in services.items() if not parse_service(name)[1]}
        return found or {CONTAINER_SERVICE: (0, 0)}

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
        """Add a container to the fitting service (pinned where the request wants it: :meth:`choose`)
        with the request's environment."""
        self._maybe_register_ui(request.env.get("STRAM_APP_PATH"))
        self._add(request, self.choose(request))

    def choose(self, request: ContainerRequest) -> Choice:
        """The service for ``request``: its shape's general service, or one pinned to a node, a rack or a
        node label (:meth:`PinnedServices.choose`)."""
        base = self.service_for(request.memory_mb, request.vcores)
        if not (request.hosts or request.racks or request.avoid or request.node_label):
            return Choice(base)
        return self.pinned.choose(base, request, self._usage())

    def _add(self, request: ContainerRequest, choice: Choice) -> None:
        kwargs: dict[str, Any] = {"env": dict(request.env)}
        if _accepts(self.app_client.add_container, "resources"):
            import skein
            kwargs["resources"] = skein.Resources(memory=request.memory_mb, vcores=request.vcores)
        try:
            container = self.app_client.add_container(choice.service, **kwargs)
        except Exception:  # noqa: BLE001 - the master recovers it like a container that died
            log.exception("could not request a container for %s", request.container_id)
            with self._lock:
                self._failed.append((request.container_id, None))
            return
        with self._lock:
            self._live[container.id] = request.container_id
            self._skein_ids[request.container_id] = container.id
            self._nodes.pop(request.container_id, None)
            if choice.where:
                self._placing[request.container_id] = (
                    self.clock() + self.placement_timeout_millis / 1000, request, choice)
        log.info("requested %s as skein %s (%s%s, %d MB, %d vcores)", request.container_id, container.id,
                 choice.service, f" on {choice.where}" if choice.where else "", request.memory_mb, request.vcores)

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
        self._check_placing()
        with self._lock:
            ended, self._failed = self._failed, []
            if not self._live:
                return ended
        try:
            done = self.app_client.get_containers(services=self.all_services, states=list(TERMINAL))
        except Exception as exc:  # noqa: BLE001 - try again at the next poll
            log.warning("could not ask the Skein application master for containers: %s", exc)
            return ended
        with self._lock:
            for c in done:
                cid = self._live.pop(c.id, None)
                if cid is None:
                    continue
                self._skein_ids.pop(cid, None)
                self._placing.pop(cid, None)
                if _node_host(c):
                    self._nodes[cid] = _node_host(c)
                code = _exit_code(c)
                if str(c.state) != "SUCCEEDED":
                    log.info("%s (skein %s) ended %s: %s", cid, c.id, c.state,
                             (c.exit_message or "").strip()[:500])
                ended.append((cid, code))
        return ended

    # -------------------------------------------------------------- nodes
    def nodes(self) -> list[tuple[str, str]]:
        """(host, rack) of the nodes a service is pinned to (the cluster's RUNNING nodes at submit)."""
        return self.pinned.nodes()

    def node_of(self, container_id: str) -> str | None:
        """The host YARN put a container on (its NodeManager's), once allocated; kept after it ended."""
        if container_id not in self._nodes and container_id in self._skein_ids:
            self._refresh_nodes(force=True)
        return self._nodes.get(container_id)

    def unplaceable(self, container_id: str) -> str | None:
        """Why a container :meth:`poll` reported ended was never placed (a request not to be relaxed
        that YARN did not allocate where asked within the placement timeout)."""
        return self._unplaceable.get(container_id)

    def _refresh_nodes(self, force: bool = False) -> None:
        """Learn where the live containers run (at most every :attr:`node_refresh_seconds` unless ``force``)."""
        if not force and self.clock() - self._nodes_asked < self.node_refresh_seconds:
            return
        self._nodes_asked = self.clock()
        try:
            found = self.app_client.get_containers(services=self.all_services, states=["RUNNING"])
        except Exception as exc:  # noqa: BLE001 - placement and the books do without for now
            log.info("could not ask the Skein application master where containers run: %s", exc)
            return
        with self._lock:
            for c in found:
                cid = self._live.get(c.id)
                if cid is not None and _node_host(c):
                    self._nodes[cid] = _node_host(c)

    def _usage(self) -> dict[str, int]:
        """host -> this application's containers there, running or asked for on a pinned host."""
        self._refresh_nodes()
        usage: dict[str, int] = {}
        with self._lock:
            for cid in self._live.values():
                host = self._nodes.get(cid) or (self._placing[cid][2].host if cid in self._placing else None)
                if host:
                    usage[host] = usage.get(host, 0) + 1
        return usage

    def _check_placing(self) -> None:
        """Requests on a pinned service past the placement timeout and not RUNNING: asked again on the
        general service (relaxed), else reported ended and unplaceable."""
        now = self.clock()
        with self._lock:
            late = {cid: v for cid, v in self._placing.items() if v[0] <= now}
        if not late:
            return
        try:
            waiting = {c.id for c in self.app_client.get_containers(services=self.pinned.names(),
                                                                     states=["WAITING", "REQUESTED"])}
        except Exception as exc:  # noqa: BLE001 - asked again at the next poll
            log.warning("could not ask the Skein application master for waiting containers: %s", exc)
            return
        for cid, (_, request, choice) in late.items():
            with self._lock:
                skein_id = self._skein_ids.get(cid)
                self._placing.pop(cid, None)
                if skein_id is None or skein_id not in waiting:
                    continue  # allocated (or ended: poll reports it)
                self._live.pop(skein_id, None)
                self._skein_ids.pop(cid, None)
            with contextlib.suppress(Exception):
                self.app_client.kill_container(skein_id)
            waited = f"{self.placement_timeout_millis} ms (PLACEMENT_TIMEOUT_MILLIS)"
            if request.relax or not choice.wanted:
                log.warning("%s: YARN gave no container on %s within %s; asking anywhere", cid, choice.where, waited)
                self._add(request, Choice(parse_service(choice.service)[0]))
                continue
            reason = (f"YARN gave {cid} no container on {choice.where} within {waited}, and its placement may "
                      f"not be relaxed (is the node RUNNING, with {request.memory_mb} MB and {request.vcores} "
                      f"vcores free?)")
            log.error(reason)
            with self._lock:
                self._unplaceable[cid] = reason
                self._failed.append((cid, None))

    def log_page(self, container_id: str) -> str | None:
        """The NodeManager's page of a live container's logs (what the console links to); None when
        the container is not live or YARN does not say where it runs yet."""
        with self._lock:
            skein_id = self._skein_ids.get(container_id)
        if skein_id is None:
            return None
        try:
            found = [c for c in self.app_client.get_containers(services=self.all_services) if c.id == skein_id]
        except Exception as exc:  # noqa: BLE001 - the console says it does not know
            log.info("could not ask the Skein application master where %s runs: %s", container_id, exc)
            return None
        if not found or not found[0].yarn_node_http_address or not found[0].yarn_container_id:
            return None
        c = found[0]
        # the NodeManager sets USER to the application's user in its containers (this one too)
        return (f"http://{c.yarn_node_http_address}/node/containerlogs/{c.yarn_container_id}/"
                f"{os.environ.get('USER', '')}")

    def running(self) -> list[str]:
        """Containers requested or running and not yet reported ended."""
        with self._lock:
            return list(self._live.values())

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
                active = {c.id for c in self.app_client.get_containers(services=self.all_services,
                                                                       states=list(_ACTIVE_STATES))}
            except Exception:  # noqa: BLE001
                break
            if not active & set(live):
                break
            time.sleep(0.1)
        with self._lock:
            self._live.clear()
            self._skein_ids.clear()
            self._placing.clear()

    def set_progress(self, fraction: float) -> None:
        """Show progress in the YARN UI (clamped to [0, 1])."""
        try:
            self.app_client.set_progress(min(1.0, max(0.0, float(fraction))))
        except Exception as exc:  # noqa: BLE001
            log.debug("set_progress: %s", exc)

    def register_ui(self, admin_url: str, direct: str | None = None, cert: bytes | None = None) -> str | None:
        """Put the master's admin pages into the Skein web UI (route and link ``stram``).

        ``admin_url`` is what Skein's proxy forwards to (plain HTTP); with TLS on, the
        HTTPS address the CLI calls directly (``direct``) and the certificate it must
        present (``cert``) go into the application's key-value store as ``stram.admin``.
        Returns the proxied address, or None (with a warning) when it failed:
        the application runs on without the link.
        """
        self._ui_done = True
        if direct and direct != admin_url:
            try:
                self.app_client.kv[ADMIN_KEY] = json.dumps(
                    {"url": direct, "cert": (cert or b"").decode()}).encode()
            except Exception as exc:  # noqa: BLE001
                log.warning("could not publish the admin API's HTTPS address: %s", exc)
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
            from stram.common import apppath, fs, tls
            admin = json.loads(fs.read_bytes(apppath.file(app_path, apppath.ADMIN)))
            url = admin.get("proxy_url") or admin["url"]
            cert = tls.load_certificate(app_path)
        except Exception as exc:  # noqa: BLE001
            log.warning("no admin URL to put into the Skein web UI (%s)", exc)
            return
        self.register_ui(url, direct=admin["url"], cert=cert)

    def finish(self, state: str, diagnostics: str) -> None:
        """Report the final state to YARN: SUCCEEDED, FAILED or KILLED (anything else: FAILED)."""
        self._final = (state if state in TERMINAL else "FAILED", (diagnostics or f"stram application {state}")[:4000])
        if self.defer_shutdown:
            atexit.register(self._shutdown)
        else:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._final is None or self._shutdown_sent:
            return
        self._shutdown_sent = True
        status, diagnostics = self._final
        remove_staging()
        try:
            self.app_client.shutdown(status, diagnostics)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not report %s to YARN: %s", status, exc)


def remove_staging() -> None:
    """With a keytab, delete Skein's staging directory of this application before Skein tries.

    The directory holds what the driver uploaded, the keytab among it. Skein's
    master deletes it at the end with the launch's HDFS delegation token, which
    an application that ran past the token's maximum lifetime no longer has
    (Skein then logs ``InvalidToken`` and leaves the keytab behind). This
    process has a Kerberos ticket of its own. Only a directory that is Skein's
    (it has ``.skein.proto``) under ``/user/<user>/.skein/<application id>`` on
    the default file system is deleted.
    """
    app_id, user = os.environ.get("SKEIN_APPLICATION_ID"), os.environ.get("STRAM_USER")
    if not os.environ.get("STRAM_PRINCIPAL") or not app_id or not user:
        return
    from stram.common import fs
    staging = f"hdfs:///user/{user}/.skein/{app_id}"
    try:
        if fs.exists(fs.join(staging, ".skein.proto")):
            fs.delete(staging)
            log.info("deleted Skein's staging directory %s (it held the keytab)", staging)
    except Exception as exc:  # noqa: BLE001 - Skein tries too; never in the way of the final report
        log.warning("could not delete Skein's staging directory %s: %s", staging, exc)
