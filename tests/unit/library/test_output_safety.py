"""JsonLinesOutput never writes through a link or into a directory someone else planted.

In a shared directory (``/tmp``) another user can create the output directory
first, or plant a symbolic link where an output file or directory will be; the
operator must refuse, with an error naming the path and its owner, and leave the
other files untouched. The cases that need a second user run as root (CI does).
"""

from __future__ import annotations

import os

import pytest

from stram import FatalError
from stram.common import destinations
from stram.operator import OperatorContext
from stram.operators import io

OTHER = 65534  # nobody
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")


def setup_output(path, mode: str) -> io.JsonLinesOutput:
    op = io.JsonLinesOutput()
    op.path = str(path)
    op.setup(OperatorContext(id=3, name="out", attributes={"PROCESSING_MODE": mode}))
    return op


def write_window(op: io.JsonLinesOutput, window: int, rows: list) -> None:
    op.begin_window(window)
    op.process_batch(rows)
    op.end_window()


def test_a_planted_file_link_is_never_appended_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-out-3.jsonl").symlink_to(victim)
    with pytest.raises(FatalError, match="symbolic link"):
        setup_output(out, "AT_LEAST_ONCE")
    assert victim.read_bytes() == b"precious\n"


def test_a_link_planted_after_setup_is_refused_at_the_next_window(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    out = tmp_path / "out"
    op = setup_output(out, "AT_LEAST_ONCE")
    write_window(op, 1, [{"a": 1}])
    part = out / "part-out-3.jsonl"
    part.unlink()
    part.symlink_to(victim)
    with pytest.raises(destinations.UnsafeDestination, match="symbolic link"):
        write_window(op, 2, [{"a": 2}])
    assert victim.read_bytes() == b"precious\n"


def test_own_private_directories_work_in_both_modes(tmp_path):
    op = setup_output(tmp_path / "once", "AT_LEAST_ONCE")
    write_window(op, 1, [{"a": 1}, {"a": 2}])
    assert (tmp_path / "once" / "part-out-3.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert (tmp_path / "once" / "part-out-3.jsonl").stat().st_mode & 0o777 == 0o600
    # a link of one's own to a directory of one's own is a user's choice, and allowed
    (tmp_path / "real").mkdir()
    (tmp_path / "mine").symlink_to(tmp_path / "real")
    op = setup_output(tmp_path / "mine", "EXACTLY_ONCE")
    write_window(op, 5, [{"b": 1}])
    op.committed(5)
    assert [p.name for p in (tmp_path / "real" / "out-3").iterdir()] == [f"{5:020d}.jsonl"]


@as_root
def test_a_directory_link_planted_by_another_user_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    link = out / "out-3"  # where EXACTLY_ONCE writes its window files
    link.symlink_to(victim)
    os.lchown(link, OTHER, OTHER)
    with pytest.raises(FatalError, match=r"symbolic link owned by .*uid 65534"):
        setup_output(out, "EXACTLY_ONCE")
    assert list(victim.iterdir()) == []


@as_root
def test_a_directory_another_user_made_first_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, OTHER, OTHER)
    for mode in ("AT_LEAST_ONCE", "EXACTLY_ONCE"):
        with pytest.raises(FatalError, match=r"belongs to .*uid 65534.*not to this user"):
            setup_output(out, mode)
    assert list(out.iterdir()) == []


@as_root
def test_a_hard_link_to_another_users_file_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    os.chown(victim, OTHER, OTHER)
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / "part-out-3.jsonl")
    with pytest.raises(FatalError, match="belongs to"):
        setup_output(out, "AT_LEAST_ONCE")
    assert victim.read_bytes() == b"precious\n"
