"""The one HTTP helper for a master's admin API (``/ws/v2/stram/...``), local or behind YARN's proxy.

:func:`request_json` sends a JSON body (for calls that change something) and
returns the parsed JSON answer; an error status becomes
:class:`~appmaster.errors.AdminRequestError` with the master's own
explanation, and a server that does not answer becomes
:class:`~appmaster.errors.ClusterUnreachable`. Every call carries the
application's token as ``Authorization: Bearer <token>`` when one is given
(the master refuses calls without it, :mod:`appmaster.adminauth`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from appmaster.errors import AdminRequestError, ClusterUnreachable

__all__ = ["ADMIN_PREFIX", "request_json"]

#: Where the admin API lives under a master's base URL.
ADMIN_PREFIX = "/ws/v2/stram/"


def request_json(base: str, path: str, method: str = "GET", body: dict | None = None,
                 timeout: float = 10.0, token: str | None = None) -> Any:
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
        The application's token (:func:`appmaster.apps.read_token`), sent as a Bearer credential.

    Raises
    ------
    AdminRequestError
        The master answered with an error status (``.status``, ``.detail``).
    ClusterUnreachable
        Nothing answered at ``base``.
    """
    url = base.rstrip("/") + ADMIN_PREFIX + path
    data = json.dumps(body if body is not None else {}).encode() if method != "GET" else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        raise AdminRequestError(exc.code, str(detail)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ClusterUnreachable(f"{url}: {getattr(exc, 'reason', exc)}") from None
