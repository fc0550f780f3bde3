"""stram.common.localfs: the local file system the fs helpers use, beside pyarrow's LocalFileSystem.

Each call stram makes is made on both, on twin directories, and must leave the same files and
answer the same way; the helpers on a local APP_PATH must not load pyarrow at all.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

from conftest import ROOT
from stram.common import fs
from stram.common.localfs import FileType, LocalFileSystem


def tree(root) -> dict[str, bytes | None]:
    out = {}
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            with open(os.path.join(here, f), "rb") as fh:
                out[os.path.normpath(os.path.join(rel, f))] = fh.read()
    return out


@pytest.fixture
def twins(tmp_path):
    (tmp_path / "ours").mkdir()
    (tmp_path / "arrow").mkdir()
    return [(LocalFileSystem(), str(tmp_path / "ours")), (pafs.LocalFileSystem(), str(tmp_path / "arrow"))]


def both(twins, call):
    """``call(filesystem, root)`` on each twin; (our answer, pyarrow's answer), an error as its type."""
    answers = []
    for filesystem, root in twins:
        try:
            answers.append(call(filesystem, root))
        except OSError as exc:
            answers.append(type(exc))
    return answers


def test_the_file_type_values_are_pyarrows():
    for member in FileType:
        assert member == getattr(pafs.FileType, member.name)


def test_every_call_leaves_the_same_files_and_answers_alike(twins):
    def write(filesystem, root, name, data):
        with filesystem.open_output_stream(f"{root}/{name}") as out:
            out.write(data)

    def info(filesystem, root, name):
        got = filesystem.get_file_info(f"{root}/{name}")
        return int(got.type), got.size if got.type == FileType.File else None, got.base_name

    steps = [
        lambda f, r: f.create_dir(f"{r}/a/b", recursive=True),
        lambda f, r: f.create_dir(f"{r}/a/b", recursive=True),  # already there: no error
        lambda f, r: f.create_dir(f"{r}/x/y", recursive=False),  # no parent: an error
        lambda f, r: write(f, r, "a/one", b"first"),
        lambda f, r: write(f, r, "a/b/two", b"second\n"),
        lambda f, r: info(f, r, "a/one"),
        lambda f, r: info(f, r, "a/b"),
        lambda f, r: info(f, r, "missing"),
        lambda f, r: info(f, r, "a/one/under-a-file"),
        lambda f, r: f.open_append_stream(f"{r}/a/one").write(b"+more"),
        lambda f, r: f.open_input_stream(f"{r}/a/one").read(),
        lambda f, r: f.open_input_stream(f"{r}/missing").read(),
        lambda f, r: f.move(f"{r}/a/one", f"{r}/a/b/two"),  # replaces a file
        lambda f, r: f.move(f"{r}/a/b/two", f"{r}/a"),  # onto a directory: an error
        lambda f, r: f.delete_file(f"{r}/a/one"),  # moved away: an error
        lambda f, r: f.delete_file(f"{r}/a/b"),  # a directory: an error
        lambda f, r: write(f, r, "a/b/c/three", b"3"),
        lambda f, r: f.delete_dir(f"{r}/a/b/c"),
        lambda f, r: f.delete_dir(f"{r}/nothing"),
    ]
    for n, step in enumerate(steps):
        ours, arrows = both(twins, step)
        if isinstance(ours, type):  # an error: the same kind of error
            assert isinstance(arrows, type), (n, ours, arrows)
            assert issubclass(ours, OSError) and issubclass(arrows, OSError), (n, ours, arrows)
        else:
            assert ours == arrows, (n, ours, arrows)
        assert tree(twins[0][1]) == tree(twins[1][1]), n


def test_a_random_access_file_seeks_and_reads_as_pyarrows(twins):
    data = bytes(range(256)) * 100
    reads = []
    for filesystem, root in twins:
        with open(f"{root}/f", "wb") as out:
            out.write(data)
        with filesystem.open_input_file(f"{root}/f") as f:
            f.seek(1000)
            got = [f.read(7), f.read(0)]
            f.seek(len(data) - 3)
            got += [f.read(100), f.read(100)]
        reads.append(got)
    assert reads[0] == reads[1] == [data[1000:1007], b"", data[-3:], b""]


def test_a_listing_matches_pyarrows_selector(twins):
    listings = []
    for filesystem, root in twins:
        for name in ("d/e/f", "d/g", "h"):
            os.makedirs(os.path.dirname(f"{root}/{name}"), exist_ok=True)
            with open(f"{root}/{name}", "wb") as out:
                out.write(name.encode())
        for recursive in (False, True):
            if isinstance(filesystem, LocalFileSystem):
                entries = filesystem.list(root, recursive=recursive)
            else:
                entries = filesystem.get_file_info(pafs.FileSelector(root, recursive=recursive))
            listings.append(sorted((os.path.relpath(i.path, root), int(i.type), i.size if i.type == 2 else None)
                                   for i in entries))
    assert listings[0] == listings[2] and listings[1] == listings[3]
    assert ("d/e/f", 2, 5) in listings[1] and ("d/e/f", 2, 5) not in listings[0]


def test_the_helpers_on_a_local_app_path_never_load_pyarrow(tmp_path):
    """What the change is for: the master and the containers of a local application do not pay
    for pyarrow (about 32 MB each). Every helper a local APP_PATH takes, in a fresh interpreter."""
    code = f"""
import sys
from stram.common import fs
app = {str(tmp_path / "app")!r}
fs.keep_private(app)
fs.makedirs(app + "/checkpoints/1")
fs.write_atomic(app + "/heartbeatUri", b"127.0.0.1:1")
fs.replace_file(app + "/journal/snapshot", b"{{}}")
assert fs.read_replaced(app + "/journal/snapshot") == b"{{}}"
assert fs.read_bytes("file://" + app + "/heartbeatUri") == b"127.0.0.1:1"
assert fs.exists(app + "/heartbeatUri") and not fs.exists(app + "/nothing")
assert fs.file_type(app + "/checkpoints") == "directory"
assert sorted(i.base_name for i in fs.list_dir(app)) == ["checkpoints", "heartbeatUri", "journal"]
assert fs.list_dir(app + "/nothing") == []
fs.move(app + "/heartbeatUri", app + "/moved")
with fs.open_output(app + "/out/part") as out:
    out.write(b"x")
with fs.open_input(app + "/out/part") as f:
    assert f.read() == b"x"
fs.delete(app + "/checkpoints")
fs.delete(app + "/moved")
assert oct(__import__("os").stat(app + "/out/part").st_mode & 0o777) == "0o600"
print(sorted(m for m in sys.modules if m.startswith(("pyarrow", "numpy"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_resolve_still_gives_pyarrow_a_file_system_of_its_own(tmp_path):
    filesystem, path = fs.resolve(str(tmp_path / "x.parquet"))
    assert isinstance(filesystem, pafs.LocalFileSystem) and path == str(tmp_path / "x.parquet")
    ours, _ = fs.filesystem(f"file://{tmp_path}")
    assert isinstance(ours, LocalFileSystem)
