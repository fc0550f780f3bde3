"""File access for master and agents: HDFS through ``pyarrow.fs``, local disk through ``os``.

Every file stram touches under ``APP_PATH`` (heartbeatUri, checkpoints, the
journal, WAL segments) goes through these helpers, so the same code runs on
the local file system and on HDFS. A local path is served by
:class:`stram.common.localfs.LocalFileSystem` (the same calls, through ``os``), so
that a local application's processes need not load pyarrow (about 32 MB each);
:func:`resolve` still gives a ``pyarrow.fs`` file system for every URI, for code
that hands one to pyarrow (Parquet).

HDFS calls ride out a NameNode that is briefly away (restarted, failing over,
in safe mode after a restart): :func:`hdfs_retry` (applied to every helper
here) repeats a call that failed that way, with backoff, for at most
``$STRAM_HDFS_RETRY_SECS`` (default 120) seconds, then raises
:class:`HdfsUnavailable`, whose message names the NameNode.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import subprocess
import time
import uuid
from functools import lru_cache
from typing import Any, Callable, TypeVar

from stram.common.localfs import FileInfo, FileType, LocalFileSystem


class _LazyPyarrowFs:
    """``pyarrow.fs``, imported on first use.

    Importing pyarrow takes about half a second; the processes that only read and write
    local files through ``os`` (``stram`` itself, the supervisor) never pay for it,
    which shortens every ``stram launch``. The first attribute looked up imports the
    module and puts it in this one's place.
    """

    def __getattr__(self, name: str) -> Any:
        import pyarrow.fs as module
        globals()["pafs"] = module
        return getattr(module, name)


pafs: Any = _LazyPyarrowFs()

log = logging.getLogger("stram.common.fs")
T = TypeVar("T")

__all__ = ["HdfsUnavailable", "hdfs_retry", "keep_private", "check_private", "resolve", "filesystem", "join",
           "write_atomic", "write_local_atomic", "write_status_file", "read_bytes", "local_path",
           "exists", "delete", "list_dir", "makedirs", "move", "open_output", "open_input", "FileType",
           "FileInfo", "LocalFileSystem"]


def _split(uri: str) -> tuple[str, str]:
    """(filesystem key, path) of a URI or a local path."""
    if "://" not in uri:
        return "file://", os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme == "file":
        return "file://", rest or "/"
    authority, _, path = rest.partition("/")
    if scheme in ("hdfs", "viewfs") and not authority:
        authority = "default"  # hdfs:///path: the cluster's fs.defaultFS
    return f"{scheme}://{authority}", "/" + path


def hadoop_client_env() -> None:
    """Give libhdfs its CLASSPATH from ``hadoop classpath --glob`` when none lists Hadoop's jars.

    The JVM that libhdfs embeds does not expand ``dir/*`` entries and finds
    nothing without a CLASSPATH; a user with Hadoop's client installed (or the
    environment ``./scripts/minicluster start`` prints) should not have to set
    it by hand to read ``hdfs://``. Leaves a CLASSPATH that lists jars alone.
    """
    current = os.environ.get("CLASSPATH", "")
    if any(entry.endswith(".jar") and "hadoop" in os.path.basename(entry) for entry in current.split(os.pathsep)):
        return
    home = os.environ.get("HADOOP_HOME")
    hadoop = shutil.which("hadoop") or (os.path.join(home, "bin", "hadoop") if home else None)
    if not hadoop or not os.access(hadoop, os.X_OK):
        return
    try:
        found = subprocess.run([hadoop, "classpath", "--glob"], capture_output=True, text=True, timeout=60,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if found:
        os.environ["CLASSPATH"] = found + (os.pathsep + current if current else "")


@lru_cache(maxsize=32)
def _filesystem(key: str) -> pafs.FileSystem:
    if key == "file://":
        return pafs.LocalFileSystem()
    if key.startswith(("hdfs://", "viewfs://")):
        hadoop_client_env()
    if key.startswith("hdfs://"):
        # owner-only, as a local APP_PATH (umask 077): journal and checkpoints are pickles, and
        # each container's credential is a file (the client's umask applies to what it creates)
        host, _, port = key[len("hdfs://"):].partition(":")
        return pafs.HadoopFileSystem("default" if host == "default" else f"hdfs://{host}",
                                     int(port) if port.isdigit() else 0,
                                     extra_conf={"fs.permissions.umask-mode": HDFS_UMASK})
    fs, _ = pafs.FileSystem.from_uri(key + "/")
    return fs


#: The umask of every file and directory stram creates on HDFS.
HDFS_UMASK = "077"


def local_path(uri: str) -> str | None:
    """The local path of a local URI or path (None for HDFS and the like), without pyarrow."""
    key, path = _split(uri)
    return path if key == "file://" else None


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The ``pyarrow.fs`` file system and path for a URI or a local path (for pyarrow's own readers)."""
    key, path = _split(uri)
    return _filesystem(key), path


#: The file system every helper here uses for a local path.
LOCAL = LocalFileSystem()


def filesystem(uri: str) -> tuple[Any, str]:
    """The file system the helpers use for ``uri`` and its path: :data:`LOCAL` for a local path
    or ``file://`` URI (no pyarrow loaded), the ``pyarrow.fs`` one (:func:`resolve`) otherwise."""
    key, path = _split(uri)
    if key == "file://":
        return LOCAL, path
    return _filesystem(key), path


# ---------------------------------------------------------------- a private APP_PATH

#: Local directories (an ``APP_PATH``) under which every file the helpers create is
#: owner-only (``0600``, directories ``0700``): checkpoints and the journal are pickles.
_PRIVATE_ROOTS: list[str] = []


def keep_private(uri: str) -> None:
    """Create every later file under the local directory ``uri`` readable by its owner only
    (files ``0600``, directories ``0700``); nothing for HDFS (its own permissions apply)."""
    key, path = _split(uri)
    if key == "file://":
        root = os.path.realpath(path).rstrip("/") + "/"
        if root not in _PRIVATE_ROOTS:
            _PRIVATE_ROOTS.append(root)


def _private_root(path: str) -> str | None:
    real = os.path.realpath(path)
    for root in _PRIVATE_ROOTS:
        if (real + "/").startswith(root):
            return root
    return None


def _restrict(fs: Any, path: str, directory: bool = False) -> None:
    """``path`` owner-only if it lies under a private root (and its directories up to the root)."""
    if isinstance(fs, LocalFileSystem):
        _restrict_local(path, directory)


def _restrict_local(path: str, directory: bool = False) -> None:
    """:func:`_restrict` for a local path (through ``os`` alone)."""
    root = _private_root(path)
    if root is None:
        return
    here = path if directory else None
    if not directory:
        os.chmod(path, 0o600)
        here = os.path.dirname(path)
    while here and (os.path.realpath(here) + "/").startswith(root):
        if os.stat(here).st_mode & 0o077:
            os.chmod(here, 0o700)
        if os.path.realpath(here) + "/" == root:
            break
        here = os.path.dirname(here)


def check_private(uri: str) -> str:
    """Why the local directory ``uri`` is not safe to run an application from ("" when it is).

    Checkpoints and the journal are pickles: whoever can write them runs code in the
    master and the containers. A directory another user owns, or that group or others
    may write, is refused; one that group or others may only read is made ``0700``.
    HDFS and other file systems are not checked here ("").
    """
    key, path = _split(uri)
    if key != "file://" or not os.path.isdir(path):
        return ""
    st = os.stat(path)
    if st.st_uid != os.getuid():
        return f"APP_PATH {path} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        who = "its group and others" if st.st_mode & 0o022 == 0o022 else \
            "its group" if st.st_mode & 0o020 else "others"
        return (f"APP_PATH {path} can be written by {who} (mode {st.st_mode & 0o777:04o}); checkpoints and "
                f"the journal there are pickles, which would let them run code as this application; "
                f"make it private (`chmod 700 {path}`) or choose another APP_PATH")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return ""


# ---------------------------------------------------------------- a NameNode briefly away

#: libhdfs's errno for a Java exception it has no errno for (ConnectException, EOFException, ...).
_EINTERNAL = 255
#: What a NameNode that is down, restarting or in safe mode (EROFS) makes an HDFS call fail with.
_TRANSIENT_ERRNOS = frozenset({_EINTERNAL, errno.EROFS, errno.EIO, errno.ESTALE, errno.ECONNREFUSED,
                               errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH})
#: While the NameNode answers a look at ``/``, an unexplained error is retried only this long.
_ANSWERING_GRACE = 20.0
_MAX_DELAY = 2.0
_LOG_EVERY = 15.0


class HdfsUnavailable(OSError):
    """An HDFS call kept failing for the whole retry time: the NameNode is away (or refuses)."""


def _retry_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("STRAM_HDFS_RETRY_SECS", "120")))
    except ValueError:
        return 120.0


def _uri_of(args: tuple[Any, ...]) -> str | None:
    return args[0] if args and isinstance(args[0], str) else None


def _answers(key: str) -> bool:
    """True when the NameNode behind ``key`` answers (a look at ``/``, which always exists)."""
    try:
        return _filesystem(key).get_file_info("/").type != FileType.NotFound
    except OSError:
        return False


def _info(fs: Any, path: str) -> FileInfo:
    """``fs.get_file_info(path)`` that tells a missing file from a NameNode that did not answer.

    pyarrow's HadoopFileSystem reports *any* failure to look a path up as
    ``NotFound``; with the NameNode away a file would seem missing (and a
    directory empty). The root always exists: when it seems missing too, the
    NameNode did not answer, and this raises an error :func:`hdfs_retry` retries.
    A path is missing only when the root was found before and after it.
    """
    info = fs.get_file_info(path)
    if info.type != FileType.NotFound or isinstance(fs, LocalFileSystem) or not isinstance(fs, pafs.HadoopFileSystem):
        return info
    for again in (True, False):
        if fs.get_file_info("/").type == FileType.NotFound:
            raise OSError(_EINTERNAL, f"HDFS NameNode did not answer a look at {path} (nor at /)")
        if again:  # it answers now: ask again, it may have come back just after the first look
            info = fs.get_file_info(path)
            if info.type != FileType.NotFound:
                return info
    return info


def hdfs_retry(func: Callable[..., T]) -> Callable[..., T]:
    """Make a helper whose first argument is a URI ride out a NameNode that is briefly away.

    Only calls on HDFS (``hdfs://``, ``viewfs://``) are repeated, and only for
    errors a missing or restarting NameNode causes: libhdfs's errno 255 (a
    ``ConnectException``, a connection cut mid-call), EROFS (safe mode), EIO and
    friends. A definite answer (ENOENT, EEXIST, EACCES, ENOSPC, ...) is raised
    at once. The whole call is repeated, so the helper must be idempotent (the
    ones here are: a write goes to a new temporary file, then a move).

    Raises
    ------
    HdfsUnavailable
        Still failing after ``$STRAM_HDFS_RETRY_SECS`` seconds (or after
        :data:`_ANSWERING_GRACE` while the NameNode answers other calls).
    """
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        uri = _uri_of(args)
        key = _split(uri)[0] if uri is not None else "file://"
        if key.startswith("file://"):
            return func(*args, **kwargs)
        started = time.monotonic()
        limit = _retry_seconds()
        delay, logged, tries = 0.1, 0.0, 0
        answering_since: float | None = None
        while True:
            try:
                result = func(*args, **kwargs)
                if tries:
                    log.warning("HDFS %s of %s succeeded after %.1fs and %d retries", func.__name__, uri,
                                time.monotonic() - started, tries)
                return result
            except OSError as exc:
                if exc.errno not in _TRANSIENT_ERRNOS or isinstance(exc, HdfsUnavailable):
                    raise
                now = time.monotonic()
                if exc.errno == _EINTERNAL and _answers(key):
                    answering_since = answering_since or now
                else:
                    answering_since = None
                waited = now - started
                if waited >= limit or (answering_since is not None and now - answering_since >= _ANSWERING_GRACE):
                    raise HdfsUnavailable(exc.errno, f"HDFS NameNode {key}: {func.__name__} {uri} still failing "
                                                     f"after {waited:.0f}s and {tries} retries: {exc}") from exc
                if now - logged >= _LOG_EVERY:
                    logged = now
                    log.warning("HDFS NameNode %s unavailable (%s); retrying %s %s for up to %.0fs%s",
                                key, exc, func.__name__, uri, limit - waited,
                                " (libhdfs printed the Java exception, an expired token say, to stderr)"
                                if exc.errno == _EINTERNAL else "")
                tries += 1
                time.sleep(min(delay, max(0.0, limit - waited)))
                delay = min(delay * 2, _MAX_DELAY)
    return wrapper


def join(uri: str, *parts: str) -> str:
    """Join path parts onto a URI with ``/``."""
    out = uri.rstrip("/")
    for part in parts:
        out += "/" + str(part).strip("/")
    return out


@hdfs_retry
def makedirs(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.create_dir(path, recursive=True)
    _restrict(fs, path, directory=True)


@hdfs_retry
def write_atomic(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri`` so readers never see a part of it: the old file or the new one,
    or on HDFS, for a moment, none (its move onto a file deletes it first; where a missing file
    would be taken for "none yet", use :func:`replace_file`)."""
    fs, path = filesystem(uri)
    _write_via_tmp(fs, path, path, data)


def _write_via_tmp(fs: Any, path: str, target: str, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then move it to ``target``."""
    parent = path.rsplit("/", 1)[0] or "/"
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/._tmp-{uuid.uuid4().hex}"

    def write() -> None:
        with fs.open_output_stream(tmp) as out:
            _restrict(fs, tmp)  # before any byte is written
            out.write(data)
    _write_then_move(tmp, target, write, fs.move, fs.delete_file)


#: Suffix of the new version of a file :func:`replace_file` puts in place where a move does not
#: replace atomically.
NEXT_SUFFIX = ".next"


@hdfs_retry
def replace_file(uri: str, data: bytes) -> None:
    """:func:`write_atomic` for a file that must never be missing once written (the master's journal).

    A local move replaces its target atomically. pyarrow's HDFS move onto an existing file deletes
    the file, then renames (libhdfs has no overwriting rename): a process killed in between leaves
    no file, and a master attempt that found no journal would start the application over. Here the
    new version first becomes ``<uri>.next`` (a rename onto no file is atomic) and only then takes
    the old one's place, which :func:`read_replaced` falls back on; a replacement cut short earlier
    is finished first. So one complete version or the other is always there.
    """
    fs, path = filesystem(uri)
    if isinstance(fs, LocalFileSystem):
        write_atomic(uri, data)
        return
    nxt = path + NEXT_SUFFIX
    if _info(fs, path).type == FileType.NotFound:
        if _info(fs, nxt).type == FileType.File:
            fs.move(nxt, path)  # the replacement a killed writer left half done
    elif _info(fs, nxt).type != FileType.NotFound:
        fs.delete_file(nxt)  # a new version never put in place: the old one stands
    _write_via_tmp(fs, path, nxt, data)
    fs.move(nxt, path)


@hdfs_retry
def read_replaced(uri: str) -> bytes | None:
    """The file :func:`replace_file` wrote (its new version while it was being put in place), or
    None when there is none."""
    fs, path = filesystem(uri)
    for _ in range(3):  # a live writer may move the file between a look and the read
        for candidate in (path, path + NEXT_SUFFIX):
            if _info(fs, candidate).type != FileType.File:
                continue
            try:
                with fs.open_input_stream(candidate) as f:
                    return f.read()
            except OSError:
                if _info(fs, candidate).type == FileType.File:
                    raise
    return None


def _write_then_move(tmp: str, path: str, write: Callable[[], None], move: Callable[[str, str], None],
                     delete: Callable[[str], None]) -> None:
    """``write()`` the temporary file ``tmp``, then ``move`` it to ``path``; a failed write (a full
    disk) leaves no temporary file behind."""
    try:
        write()
        move(tmp, path)
    except BaseException:
        try:
            delete(tmp)
        except OSError:
            pass
        raise


def write_local_atomic(path: str, data: bytes) -> None:
    """:func:`write_atomic` for a local file, through ``os`` alone: for the processes that are
    neither the master nor a container (``stram`` and the local supervisor), which then never
    import pyarrow (30 MB and half a second each). Private roots apply as in :func:`write_atomic`."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f"._tmp-{uuid.uuid4().hex}")

    def write() -> None:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as out:
            _restrict_local(tmp)  # before any byte is written
            out.write(data)
    _write_then_move(tmp, path, write, os.replace, os.unlink)


#: A status document is padded with trailing spaces (still the same JSON) to at least this many
#: bytes, so that rewriting it in place on a full disk reuses blocks it already holds.
STATUS_RESERVE = 16384


def write_status_file(uri: str, data: bytes, local: bool = False) -> None:
    """Write a small local JSON status document, even on a full disk.

    Atomically (:func:`write_atomic`) when it can; when that fails for want of
    space and the file exists locally, it is rewritten in place: the document is
    padded to :data:`STATUS_RESERVE` bytes every time, so the blocks the file holds
    are reused and no new space is needed (a reader may see a torn document for an
    instant and must treat unreadable JSON as "not known yet").

    Raises
    ------
    OSError
        Neither way worked.
    """
    data += b" " * max(0, STATUS_RESERVE - len(data))
    try:
        if local:  # ``uri`` is a local path, written through os alone (write_local_atomic)
            write_local_atomic(uri, data)
        else:
            write_atomic(uri, data)
        return
    except OSError as exc:
        from stram.common.space import is_no_space
        key, path = _split(uri)
        if not is_no_space(exc) or key != "file://" or not os.path.isfile(path):
            raise
        first = exc
    try:
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
    except OSError as exc:
        raise OSError(first.errno, f"{first} (and in place: {exc})") from exc


@hdfs_retry
def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


@hdfs_retry
def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return _info(fs, path).type != FileType.NotFound


@hdfs_retry
def file_type(uri: str) -> str:
    """``"file"``, ``"directory"`` or ``"missing"``: what ``uri`` names."""
    fs, path = filesystem(uri)
    kind = _info(fs, path).type
    if kind == FileType.NotFound:
        return "missing"
    return "directory" if kind == FileType.Directory else "file"


@hdfs_retry
def delete(uri: str, missing_ok: bool = True) -> None:
    """Delete a file or a directory tree."""
    fs, path = filesystem(uri)
    if isinstance(fs, LocalFileSystem):
        # one system call for a file: the master deletes thousands of obsolete checkpoints a
        # second at scale, and pyarrow's look-up plus its error for a missing file cost 60-90 us
        try:
            return os.remove(path)
        except FileNotFoundError:
            if not missing_ok:
                raise FileNotFoundError(uri) from None
            return None
        except IsADirectoryError:
            return fs.delete_dir(path)
    info = _info(fs, path)
    if info.type == FileType.NotFound:
        if not missing_ok:
            raise FileNotFoundError(uri)
    elif info.type == FileType.Directory:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)


@hdfs_retry
def list_dir(uri: str, recursive: bool = False) -> list[FileInfo]:
    """Entries under a directory (empty when it does not exist): ``base_name``, ``type``, ``size``."""
    fs, path = filesystem(uri)
    if isinstance(fs, LocalFileSystem):
        try:
            return fs.list(path, recursive=recursive)
        except FileNotFoundError:
            return []
    # not allow_not_found: pyarrow's HDFS client would then also list nothing when the NameNode
    # does not answer; a listing that fails says which it is
    try:
        return fs.get_file_info(pafs.FileSelector(path, allow_not_found=False, recursive=recursive))
    except FileNotFoundError:
        return []


@hdfs_retry
def move(src: str, dst: str) -> None:
    fs, src_path = filesystem(src)
    _, dst_path = filesystem(dst)
    fs.move(src_path, dst_path)


@hdfs_retry
def open_output(uri: str):
    fs, path = filesystem(uri)
    parent = path.rsplit("/", 1)[0] or "/"
    fs.create_dir(parent, recursive=True)
    stream = fs.open_output_stream(path)
    _restrict(fs, path)
    return stream


@hdfs_retry
def open_input(uri: str):
    fs, path = filesystem(uri)
    return fs.open_input_file(path)
