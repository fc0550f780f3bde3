"""stram's one error family: what the library raises and the CLI prints as ``error: ...``.

Every module below the CLI (the spec model, the YARN client, the master, the
node-side checks, the admin client) raises these; ``stram/client/cli.py:main``
catches :class:`StramError` once, prints its message and exits 1. The message
of every instance is written for the user: what went wrong, where, and how to
fix it. skein's ``SkeinError`` family is the model.

* :class:`UserError` — the user's input or setup is wrong (a spec, an option,
  a missing file or tool); fixing it is up to them.
* :class:`ClusterUnreachable` — a server stram needs (a ResourceManager, an
  application master's admin API) does not answer; trying again later may work.
* :class:`AdminRequestError` — an application master answered an admin call
  with an error status.
"""

from __future__ import annotations

__all__ = ["StramError", "UserError", "ClusterUnreachable", "AdminRequestError", "FatalError"]


class StramError(Exception):
    """Base of every error stram reports to a user; the message says what to do."""


class UserError(StramError):
    """A user mistake: bad spec, option, file or local setup."""


class ClusterUnreachable(StramError):
    """A ResourceManager, NameNode or application master does not answer."""


class AdminRequestError(StramError):
    """An application master refused an admin API call.

    Parameters
    ----------
    status:
        The HTTP status code of the answer.
    detail:
        The master's own explanation (the ``error`` field of its JSON answer).
    """

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class FatalError(Exception):
    """Raised by an operator when restarting cannot help: the application fails.

    Operator code imports it as ``stram.FatalError``; it lives here so that the
    base layer (a full disk, :mod:`stram.common.space`) can raise it too.
    """

    __module__ = "stram"
