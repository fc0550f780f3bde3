"""The application's token as a process gets it: from a private file, never from the environment.

The launcher writes the token to a file only its owner can read (locally
``$STRAM_HOME/apps/<appId>/token``; on YARN the localized file ``stram.token``)
and names it in ``STRAM_TOKEN_FILE``; the master and the containers read it
here. The environment of a process is readable by others (``ps e``, a
process's ``/proc/<pid>/environ`` by root and, on some systems, by the same
user's other programs, YARN's container launch scripts and logs), a file
``0600`` is not.
"""

from __future__ import annotations

import os

__all__ = ["TOKEN_FILE_ENV", "read_token_file"]

#: The environment variable naming the token file.
TOKEN_FILE_ENV = "STRAM_TOKEN_FILE"


def read_token_file(path: str) -> str | None:
    """The token in ``path`` (surrounding white space removed); None when missing, unreadable or empty."""
    try:
        with open(os.path.expanduser(path)) as f:
            return f.read().strip() or None
    except OSError:
        return None
