"""Where output operators may write: never through a planted link, never into another user's directory.

An output operator writes where its spec says; in a shared directory (``/tmp``)
someone else may have created that directory first, or planted a symbolic link
at a name the operator will write, to make the application write into their
files (or, running as root, anyone's). These checks refuse such a destination
with :class:`UnsafeDestination`, naming the path and its owner. HDFS
destinations are not checked here: HDFS's own permissions apply.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod

from stram.common import fs

__all__ = ["UnsafeDestination", "check_output_dir", "open_own_append"]


class UnsafeDestination(OSError):
    """A local output destination another user controls (or a link planted in it): never written."""


def _owner(uid: int) -> str:
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_output_dir(uri: str) -> None:
    """Refuse a local output directory that another user could redirect.

    An output operator writes where its spec says; in a shared directory (``/tmp``)
    someone else may have created that directory first, or planted a symbolic link
    at its name, to make the application write into their files. The directory and
    every directory above it must belong to this user or root, and a symbolic link
    on the way must be this user's own. Raises :class:`UnsafeDestination` saying
    which path and whose it is; nothing for HDFS (its permissions apply).
    """
    path = fs.local_path(uri)
    if path is None:
        return
    me = os.geteuid()
    here = os.path.abspath(path)
    while True:
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            st = None
        if st is not None:
            if os.path.islink(here) and st.st_uid not in (me, 0):
                raise UnsafeDestination(f"output path {path}: {here} is a symbolic link owned by "
                                        f"{_owner(st.st_uid)}, not by this user; choose a directory of your own")
            target = os.stat(here)
            if target.st_uid not in (me, 0):
                raise UnsafeDestination(f"output path {path}: {os.path.realpath(here)} belongs to "
                                        f"{_owner(target.st_uid)}, not to this user; choose a directory of your own")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def open_own_append(path: str) -> int:
    """A descriptor appending to the local file ``path``, created ``0600`` if missing.

    Never through a symbolic link (``O_NOFOLLOW``), and only to a regular file of this
    user with no other names (a hard link planted to someone's file is refused).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeDestination(f"{path} is a symbolic link; an output file is never written through "
                                    f"one (remove it, or choose another path)") from None
        raise
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat_mod.S_ISREG(st.st_mode) else
               f"belongs to {_owner(st.st_uid)}, not to this user" if st.st_uid != os.geteuid() else
               f"has {st.st_nlink} names (a hard link to another file)" if st.st_nlink != 1 else "")
    if problem:
        os.close(fd)
        raise UnsafeDestination(f"{path} {problem}; an output file is never appended to then")
    return fd
