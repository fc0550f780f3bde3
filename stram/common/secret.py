"""Secrets as a process gets them: from a private file, never from the environment; and the
credentials derived from the application's token.

The launcher writes the token to a file only its owner can read (locally
``$STRAM_HOME/secrets/<appId>/token``; on YARN the localized file ``stram.token``)
and names it in ``STRAM_TOKEN_FILE``; the master reads it here. A container
reads its own credential from ``APP_PATH/credentials/<containerId>``, which the
master writes before it starts the container (the application's directory is
its owner's only). The environment of a process is readable by others (``ps e``,
a process's ``/proc/<pid>/environ`` by root and, on some systems, by the same
user's other programs, YARN's container launch scripts and logs), a file
``0600`` is not.

Derived credentials (as Hadoop gives each container its own token): only the
master holds the application's token. Each container gets its own credential,
``container_credential(token, id)``, and the key of its own buffer server,
``buffer_server_key(token, id)``; a buffer server accepts a publisher or a
subscriber only with a credential scoped to that one publisher id
(``scoped_credential(key, "subscribe", publisher)``), which the master hands to
the operators that may read it. One leaked container credential lets its holder
act as that container only, never forge another's heartbeat or read another
container's streams. All are HMAC-SHA256 (hex), so the master and a buffer server
compute them again instead of storing them.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os

__all__ = ["TOKEN_FILE_ENV", "read_token_file", "derive", "container_credential", "buffer_server_key",
           "scoped_credential"]

#: The environment variable naming the token file.
TOKEN_FILE_ENV = "STRAM_TOKEN_FILE"


def read_token_file(path: str) -> str | None:
    """The token in ``path`` (surrounding white space removed); None when missing, unreadable or empty."""
    try:
        with open(os.path.expanduser(path)) as f:
            return f.read().strip() or None
    except OSError:
        return None


def derive(key: str | bytes, *scope: str) -> str:
    """HMAC-SHA256 of ``scope`` (its parts joined by NUL) under ``key``, as 64 hex digits."""
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return hmac.new(raw, "\x00".join(scope).encode(), hashlib.sha256).hexdigest()


def container_credential(token: str | bytes, container_id: str) -> str:
    """What container ``container_id`` presents to the master (gRPC metadata ``stram-token``)."""
    return derive(token, "container", container_id)


@functools.lru_cache(maxsize=4096)  # the master derives it for every remote input it deploys
def buffer_server_key(token: str | bytes, container_id: str) -> str:
    """The key of container ``container_id``'s buffer server: its owner's credential there, and
    what the scoped credentials of its publishers and subscribers derive from."""
    return derive(token, "buffer-server", container_id)


def scoped_credential(server_key: str | bytes, action: str, publisher_id: str) -> str:
    """The credential that lets its holder ``action`` ("publish" or "subscribe") the stream of
    ``publisher_id`` on the buffer server whose key is ``server_key``, and nothing else."""
    return derive(server_key, action, publisher_id)
