"""Who may use a master's admin API: every request is authorized before it is served.

Accepted (:meth:`AdminAuth.check`):

* ``Authorization: Bearer <token>``: the application's token (compared in
  constant time). The CLI reads it from the launching machine's private file
  (:func:`stram.common.apps.read_token`).
* The session cookie ``stram_session`` that ``GET /login?token=<token>`` sets
  (HttpOnly, SameSite=Strict): for a browser. Its value is derived from the
  token (an HMAC), never the token itself.
* On YARN (``STRAM_LAUNCHER=yarn``), a request that came through the
  ResourceManager's web proxy: the check Hadoop's ``AmIpFilter`` makes, the
  caller's address is one of the proxy hosts' addresses (``yarn.web-proxy.address``,
  else the ResourceManager web addresses). The Skein web UI in the same
  container forwards such a request after its own ``AmIpFilter``; then the
  caller is this node and the proxy's address is the last ``X-Forwarded-For``.
  A call that changes something also needs the proxied user (the
  ``proxy-user`` cookie the proxy sets, which ``AmIpFilter`` reads) in the
  application's modify ACL (``STRAM_MODIFY_ACL``, comma-separated, ``*`` for
  anyone; default: the user who launched it).

The console's static shell (``GET /`` and ``GET /console/<asset>``: fixed
files, no application data) is served to anyone, so a browser can open
``…/#token=<token>``; every document it then fetches is authorized as above.

Everything else is answered 401 (no or a wrong credential) or 403 (a proxied
user without the right, a foreign ``Origin``) with ``{"error": ...}`` and one
log line (rate-limited). A call that changes something (POST, PUT, DELETE,
PATCH) whose ``Origin`` names another site is refused 403 whatever credential
it carries: a page elsewhere cannot make a logged-in browser act (CSRF).
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import logging
import os
import socket
from typing import Any, Iterable
from urllib.parse import unquote, urlsplit

from flask import Flask, jsonify, redirect, request

from stram.common.logsetup import rate_limit

__all__ = ["AdminAuth", "install", "SESSION_COOKIE", "MUTATING", "proxy_hosts", "session_value"]

log = logging.getLogger("stram.master.admin.auth")
rate_limit(log, burst=5, interval=10.0)

#: The browser's session cookie (set by ``/login``).
SESSION_COOKIE = "stram_session"
#: The cookie the ResourceManager's web proxy sets to name the user it authenticated
#: (Hadoop's ``WebAppProxyServlet.PROXY_USER_COOKIE_NAME``, read by ``AmIpFilter``).
PROXY_USER_COOKIE = "proxy-user"
#: Methods that change something.
MUTATING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: an HMAC of it, so the cookie never holds the token."""
    return hmac.new(token.encode(), b"stram admin session", hashlib.sha256).hexdigest()


def _addresses(host: str) -> set[str]:
    """Every IP address ``host`` (a name or an address, without port) resolves to; empty when it does not."""
    host = host.strip().strip("[]")
    if not host:
        return set()
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return set()


def _host_of(address: str) -> str:
    """``host`` of ``host:port`` (or of a bare host)."""
    address = address.strip()
    if "://" in address:
        address = address.split("://", 1)[1]
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def proxy_hosts(site: dict[str, str]) -> list[str]:
    """The ``host:port`` web addresses of the ResourceManager web proxy in a yarn-site.xml's values.

    ``yarn.web-proxy.address`` when the proxy runs on its own; else the ResourceManager's
    web application (``yarn.resourcemanager.webapp[.https].address``, per RM id with HA,
    from ``yarn.resourcemanager.hostname`` and port 8088/8090 by default).
    """
    if site.get("yarn.web-proxy.address"):
        return [a.strip() for a in site["yarn.web-proxy.address"].split(",") if a.strip()]
    ids = [i.strip() for i in site.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    out = []
    for suffix in ([f".{i}" for i in ids] or [""]):
        host = site.get(f"yarn.resourcemanager.hostname{suffix}", site.get("yarn.resourcemanager.hostname",
                                                                             "0.0.0.0"))
        for key, port in (("yarn.resourcemanager.webapp.address", 8088),
                          ("yarn.resourcemanager.webapp.https.address", 8090)):
            value = site.get(key + suffix) or site.get(key) or f"{host}:{port}"
            out.append(value.replace("0.0.0.0", host) if host != "0.0.0.0" else value)
    return out


class AdminAuth:
    """The admin API's authorization (see the module's documentation).

    Parameters
    ----------
    token:
        The application's token.
    yarn:
        Whether requests through the ResourceManager's web proxy are accepted.
    proxies:
        The web proxy's ``host:port`` addresses (YARN only).
    local:
        The names of this node (the Skein web UI that forwards proxied requests runs here).
    modify_users:
        Users a proxied request may change something for (``*``: anyone).
    tls:
        Whether the application's TLS is on: then the token and the session cookie are
        taken over HTTPS only (a plain listener serves the YARN web proxy alone).
    """

    def __init__(self, token: str, yarn: bool = False, proxies: Iterable[str] = (),
                 local: Iterable[str] = (), modify_users: Iterable[str] = (), tls: bool = False) -> None:
        self.token = token.encode()
        self.tls = tls
        self.session = session_value(token).encode()
        self.yarn = yarn
        self.proxies = [p for p in proxies if p]
        self.proxy_addrs: set[str] = set()
        for p in self.proxies:
            self.proxy_addrs |= _addresses(_host_of(p))
        self.local_addrs: set[str] = set()
        for name in local:
            self.local_addrs |= _addresses(name)
        self.modify_users = {u.strip() for u in modify_users if u.strip()}
        #: host:port values a proxied browser request's Origin may name.
        self.proxy_origins = {p.split("://", 1)[-1].lower() for p in self.proxies}

    @classmethod
    def for_master(cls, master: Any) -> "AdminAuth":
        """The authorization of ``master``'s admin API, from its token and environment."""
        yarn = os.environ.get("STRAM_LAUNCHER") == "yarn"
        proxies: list[str] = []
        if os.environ.get("STRAM_PROXY_HOSTS") is not None:
            proxies = [p for p in os.environ["STRAM_PROXY_HOSTS"].split(",") if p.strip()]
        elif yarn:
            from stram.common.hadoopconf import find_hadoop_conf_dir, read_site
            conf = find_hadoop_conf_dir()
            proxies = proxy_hosts(read_site(os.path.join(conf, "yarn-site.xml"))) if conf else []
            if not proxies:
                log.warning("no YARN configuration found: requests through the ResourceManager's "
                            "web proxy are refused (the token still works)")
        acl = os.environ.get("STRAM_MODIFY_ACL") or os.environ.get("STRAM_USER") or getpass.getuser()
        return cls(master.token, yarn=yarn, proxies=proxies,
                   local=[getattr(master, "host", ""), socket.gethostname()], modify_users=acl.split(","),
                   tls=getattr(master, "tls_identity", None) is not None)

    # ------------------------------------------------------------ the check
    def _bearer(self) -> bool | None:
        header = request.headers.get("Authorization", "")
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token)

    def _cookie(self) -> bool | None:
        value = request.cookies.get(SESSION_COOKIE)
        if value is None:
            return None
        return hmac.compare_digest(value.encode(), self.session)

    def _proxied(self) -> bool:
        """The AmIpFilter check: the caller is a proxy host, or this node's Skein web UI
        forwarding a request whose previous hop was one."""
        if not self.yarn or not self.proxy_addrs:
            return False
        peer = request.remote_addr or ""
        if peer in self.proxy_addrs:
            return True
        forwarded = request.headers.getlist("X-Forwarded-For")
        if peer in self.local_addrs and forwarded:
            return forwarded[-1].split(",")[-1].strip() in self.proxy_addrs
        return False

    def _origin_ok(self, proxied: bool) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return True
        if origin == "null":
            return False
        netloc = urlsplit(origin).netloc.lower()
        return netloc == (request.host or "").lower() or (proxied and netloc in self.proxy_origins)

    def check(self) -> tuple[int, str] | None:
        """None when the current request may go on; else (status, why)."""
        bearer, cookie = self._bearer(), self._cookie()
        if self.tls and request.scheme != "https" and (bearer is not None or cookie is not None):
            return 403, ("this application's TLS is on: its token is taken over HTTPS only (this plain "
                         "listener serves the YARN web proxy); use the https:// address in admin.json")
        proxied = False
        if not (bearer or cookie):
            proxied = self._proxied()
        mutating = request.method in MUTATING
        if mutating and not self._origin_ok(proxied):
            return 403, f"cross-site request refused: Origin {request.headers.get('Origin')!r} is not this server"
        if bearer or cookie:
            return None
        if proxied:
            if not mutating:
                return None
            user = unquote(request.cookies.get(PROXY_USER_COOKIE, ""))
            if "*" in self.modify_users or (user and user in self.modify_users):
                return None
            return 403, (f"user {user or '(unauthenticated)'} may not modify this application "
                         f"(modify ACL: {', '.join(sorted(self.modify_users))})")
        if bearer is False or cookie is False:
            return 401, "wrong application token"
        return 401, ("missing application token: send 'Authorization: Bearer <token>' (the token is in "
                     "$STRAM_HOME/secrets/<appId>/token on the machine that launched the application)")


def _static_shell(path: str) -> bool:
    """The console's fixed files (its page and assets), which hold no application data."""
    return path == "/" or (path.startswith("/console/") and "/" not in path[len("/console/"):])


def install(app: Flask, auth: AdminAuth) -> None:
    """Make ``app`` authorize every request with ``auth``; adds ``GET /login?token=<token>``."""

    @app.before_request
    def authorize():  # noqa: ANN202
        if request.path == "/login" or (request.method in ("GET", "HEAD") and _static_shell(request.path)):
            return None
        refused = auth.check()
        if refused is None:
            return None
        status, why = refused
        log.warning("admin API refused %s %s from %s: %d %s", request.method, request.path,
                    request.remote_addr, status, why)
        resp = jsonify({"error": why})
        resp.status_code = status
        if status == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="stram"'
        return resp

    @app.get("/login")
    def login():  # noqa: ANN202
        """Exchange the token for a session cookie (for a browser), then go to the console."""
        supplied = request.args.get("token", "")
        if auth.tls and request.scheme != "https":
            log.warning("admin API refused a login from %s over plain HTTP (TLS is on)", request.remote_addr)
            return jsonify({"error": "this application's TLS is on: log in over HTTPS"}), 403
        if not hmac.compare_digest(supplied.encode(), auth.token):
            log.warning("admin API refused a login from %s: wrong application token", request.remote_addr)
            return jsonify({"error": "wrong application token"}), 401
        resp = redirect("./", code=303)
        resp.set_cookie(SESSION_COOKIE, auth.session.decode(), httponly=True, samesite="Strict", path="/",
                        secure=request.scheme == "https")
        resp.headers["Cache-Control"] = "no-store"
        return resp
