"""File access for master and agents through ``pyarrow.fs`` (local disk or HDFS).

Every file stram touches under ``APP_PATH`` (heartbeatUri, checkpoints, the
journal, WAL segments) goes through these helpers, so the same code runs on
the local file system and on HDFS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from functools import lru_cache

import pyarrow.fs as pafs

__all__ = ["resolve", "join", "write_atomic", "write_status_file", "read_bytes", "exists", "delete",
           "list_dir", "makedirs", "move", "open_output", "open_input"]


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
    fs, _ = pafs.FileSystem.from_uri(key + "/")
    return fs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """The ``pyarrow.fs`` file system and path for a URI or a local path."""
    key, path = _split(uri)
    return _filesystem(key), path


def join(uri: str, *parts: str) -> str:
    """Join path parts onto a URI with ``/``."""
    out = uri.rstrip("/")
    for part in parts:
        out += "/" + str(part).strip("/")
    return out


def makedirs(uri: str) -> None:
    fs, path = resolve(uri)
    fs.create_dir(path, recursive=True)


def write_atomic(uri: str, data: bytes) -> None:
    """Write ``data`` to ``uri`` so readers see the old file or the new one, never a part."""
    fs, path = resolve(uri)
    parent = path.rsplit("/", 1)[0] or "/"
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/._tmp-{uuid.uuid4().hex}"
    try:
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, path)
    except BaseException:
        try:  # a failed write (a full disk) leaves no temporary file behind
            fs.delete_file(tmp)
        except OSError:
            pass
        raise


#: A status document is padded with trailing spaces (still the same JSON) to at least this many
#: bytes, so that rewriting it in place on a full disk reuses blocks it already holds.
STATUS_RESERVE = 16384


def write_status_file(uri: str, data: bytes) -> None:
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
        write_atomic(uri, data)
        return
    except OSError as exc:
        from container.space import is_no_space
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


def read_bytes(uri: str) -> bytes:
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def exists(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def file_type(uri: str) -> str:
    """``"file"``, ``"directory"`` or ``"missing"``: what ``uri`` names."""
    fs, path = resolve(uri)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.NotFound:
        return "missing"
    return "directory" if kind == pafs.FileType.Directory else "file"


def delete(uri: str, missing_ok: bool = True) -> None:
    """Delete a file or a directory tree."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        if not missing_ok:
            raise FileNotFoundError(uri)
    elif info.type == pafs.FileType.Directory:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)


def list_dir(uri: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """Entries under a directory (empty when it does not exist)."""
    fs, path = resolve(uri)
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
    return fs.get_file_info(selector)


def move(src: str, dst: str) -> None:
    fs, src_path = resolve(src)
    _, dst_path = resolve(dst)
    fs.move(src_path, dst_path)


def open_output(uri: str):
    fs, path = resolve(uri)
    parent = path.rsplit("/", 1)[0] or "/"
    fs.create_dir(parent, recursive=True)
    return fs.open_output_stream(path)


def open_input(uri: str):
    fs, path = resolve(uri)
    return fs.open_input_file(path)
