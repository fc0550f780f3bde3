"""stram.common.fs.replace_file: a journal that is never missing, wherever its writer is killed.

pyarrow's HDFS move onto an existing file deletes the file, then renames the
new one into place (libhdfs has no overwriting rename). A master attempt
killed between the two left no journal, and the next attempt started the
application over: every window the first attempt had finalized was written
again (test_yarn_faults' master-loss test, now and then).

Here a pyarrow file system implemented in Python (``pyarrow.fs.PyFileSystem``)
keeps its files on the local disk and moves them as pyarrow's HDFS does; it can
kill the writer (an exception) at every step of a replacement, after which
the journal must read as the old version or the new one. The same calls run
against the real NameNode in test_yarn_faults.py.
"""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from stram.common import fs
from stram.master.journal import document as journal


class Killed(BaseException):
    """The writer's process dies here."""


class HdfsLikeHandler(pafs.FileSystemHandler):
    """Local files, moved as pyarrow's HadoopFileSystem moves them; with ``kill_at`` = n the
    writer is killed as it takes the (n+1)th mutating step (a create, a delete, a rename)."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()
        self.kill_at: int | None = None
        self.steps = 0

    def _step(self) -> None:
        self.steps += 1
        if self.kill_at is not None:
            self.kill_at -= 1
            if self.kill_at < 0:
                raise Killed()

    def get_type_name(self) -> str:
        return "hdfs-like"

    def normalize_path(self, path):
        return path

    def get_file_info(self, paths):
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise NotImplementedError

    def delete_file(self, path):
        self._step()
        self.local.delete_file(path)

    def move(self, src, dest):
        # libhdfs's rename refuses an existing target: pyarrow deletes it, then renames
        if self.local.get_file_info(dest).type == pafs.FileType.File:
            self._step()
            self.local.delete_file(dest)
        self._step()
        self.local.move(src, dest)

    def copy_file(self, src, dest):
        self.local.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.local.open_input_stream(path)

    def open_input_file(self, path):
        return self.local.open_input_file(path)

    def open_output_stream(self, path, metadata):
        self._step()
        return self.local.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        return self.local.open_append_stream(path)


@pytest.fixture
def hdfs_like(monkeypatch, tmp_path):
    handler = HdfsLikeHandler()
    filesystem = pafs.PyFileSystem(handler)
    real = fs.filesystem
    scheme = "hdfs-like:"
    monkeypatch.setattr(fs, "filesystem", lambda uri: (filesystem, uri[len(scheme):]) if uri.startswith(scheme)
                        else real(uri))
    return handler, f"{scheme}{tmp_path}/app"


def test_the_move_modelled_is_pyarrows_hdfs_move(hdfs_like):
    """What made replace_file necessary: write_atomic over an existing file, killed after its
    move's delete, leaves no file at all."""
    handler, app = hdfs_like
    uri = journal.journal_uri(app)
    fs.write_atomic(uri, b"old")
    handler.kill_at = 2  # the temporary file is created, the move deletes the old file: killed
    with pytest.raises(Killed):
        fs.write_atomic(uri, b"new")
    handler.kill_at = None
    assert not fs.exists(uri)


def test_a_replacement_killed_at_any_step_leaves_the_old_or_the_new_version(hdfs_like):
    handler, app = hdfs_like
    uri = journal.journal_uri(app)
    fs.replace_file(uri, b"v0")
    handler.steps = 0
    fs.replace_file(uri, b"v1")
    steps = handler.steps
    assert steps >= 4 and fs.read_replaced(uri) == b"v1"
    outcomes = set()
    for kill_at in range(steps):
        fs.replace_file(uri, b"old")
        handler.kill_at = kill_at
        with pytest.raises(Killed):
            fs.replace_file(uri, b"new")
        handler.kill_at = None
        seen = fs.read_replaced(uri)
        assert seen in (b"old", b"new"), (kill_at, seen)
        outcomes.add(seen)
        # the next master's first write finishes or discards what the killed one left
        fs.replace_file(uri, b"after")
        assert fs.read_replaced(uri) == b"after"
        directory = fs.filesystem(uri)[1].rsplit("/", 1)[0]
        leftovers = {i.base_name for i in handler.local.get_file_info(pafs.FileSelector(directory))}
        assert leftovers - {"snapshot"} <= {n for n in leftovers if n.startswith("._tmp-")}, leftovers
    assert outcomes == {b"old", b"new"}  # the kills fell both before and after the new version was in place


def test_the_journal_reads_through_a_cut_short_replacement(hdfs_like):
    handler, app = hdfs_like
    doc = {"version": journal.VERSION, "committed": 7}
    journal.write_journal(app, dict(doc, committed=5))
    handler.kill_at = 3  # create tmp, move tmp -> .next, the delete of the old one; killed before the rename
    with pytest.raises(Killed):
        journal.write_journal(app, doc)
    handler.kill_at = None
    assert not fs.exists(journal.journal_uri(app))  # killed between the delete and the rename ...
    assert journal.read_journal(app)["committed"] == 7  # ... and the new version is read all the same


def test_local_files_are_replaced_in_one_move(tmp_path):
    uri = str(tmp_path / "journal" / "snapshot")
    fs.replace_file(uri, b"one")
    fs.replace_file(uri, b"two")
    assert fs.read_replaced(uri) == b"two"
    assert sorted(p.name for p in (tmp_path / "journal").iterdir()) == ["snapshot"]
    assert fs.read_replaced(str(tmp_path / "none")) is None
