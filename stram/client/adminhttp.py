"""The one HTTP helper for a master's admin API (``/ws/v2/stram/...``), local or behind YARN's proxy.

:func:`request_json` sends a JSON body (for calls that change something) and
returns the parsed JSON answer; an error status becomes
:class:`~stram.common.errors.AdminRequestError` with the master's own
explanation, and a server that does not answer becomes
:class:`~stram.common.errors.ClusterUnreachable`. Every call carries the
application's token as ``Authorization: Bearer <token>`` when one is given
(the master refuses calls without it, :mod:`stram.master.admin.auth`). An
``https://`` base is trusted only when it presents the application's own
certificate (``ca``, from ``APP_PATH/tls/cert.pem``): nothing else can pose as
the master, whatever host name it answers on.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from stram.common import jsonbytes
from stram.common.errors import AdminRequestError, ClusterUnreachable
from stram.common.skeinkeys import ADMIN_KEY

if TYPE_CHECKING:
    import ssl

__all__ = ["ADMIN_PREFIX", "ADMIN_KEY", "request_json", "pinned_context"]

#: Where the admin API lives under a master's base URL.
ADMIN_PREFIX = "/ws/v2/stram/"


def pinned_context(cert_pem: bytes | str) -> ssl.SSLContext:
    """A TLS client context that trusts exactly the application's certificate.

    The certificate is its own root and names the application (not a host), so
    the host name is not checked; the chain is."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=cert_pem.decode() if isinstance(cert_pem, bytes) else cert_pem)
    return ctx


def request_json(base: str, path: str, method: str = "GET", body: dict | None = None,
                 timeout: float = 10.0, token: str | None = None, ca: bytes | str | None = None) -> Any:
    """Call ``<base>/ws/v2/stram/<path>``; the parsed JSON answer (None for an empty one).

    Parameters
    ----------
    base:
        The master's admin base URL (``http://host:port`` or a YARN proxy page).
    path:
        The API path below ``/ws/v2/stram/``, e.g. ``info`` or ``containers/c1``.
    method:
        HTTP method; every method but GET sends ``body`` (default ``{}``) as JSON.
    body:
        The JSON body of a call that changes something.
    timeout:
        Seconds to wait for the answer.
    token:
        The application's token (:func:`stram.common.apps.read_token`), sent as a Bearer credential.
    ca:
        The application's certificate, PEM: an ``https://`` base must present it. Without
        it an ``https://`` base is refused (ClusterUnreachable) rather than trusted blindly.

    Raises
    ------
    AdminRequestError
        The master answered with an error status (``.status``, ``.detail``).
    ClusterUnreachable
        Nothing answered at ``base``.
    """
    # urllib.request and ssl (7 MB, 20 ms) load at the first call: ``stram launch`` follows its
    # application through its processes and status.json and never calls the admin API
    import urllib.error
    import urllib.request

    url = base.rstrip("/") + ADMIN_PREFIX + path
    data = json.dumps(body if body is not None else {}).encode() if method != "GET" else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    context = None
    if url.startswith("https://"):
        if not ca:
            raise ClusterUnreachable(f"{url}: the master serves HTTPS, and the application's certificate "
                                     f"(APP_PATH/tls/cert.pem) to check it against was not found")
        context = pinned_context(ca)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return jsonbytes.loads(resp.read() or b"null")  # 9 MB of 20,000 operators: 40 ms, not 120
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        raise AdminRequestError(exc.code, str(detail)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ClusterUnreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
