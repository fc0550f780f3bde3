"""APP_PATH is private (issue 14): checkpoints and the journal are pickles, so whoever can write
them runs code in the application. Files stram writes under a private root are ``0600`` and its
directories ``0700``; a master refuses to start on an APP_PATH others can write or another user owns;
the master and containers read the token from a file, not from the environment.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from conftest import ROOT

from stram.common import fs
from stram.common.secret import read_token_file


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def private_root(tmp_path, monkeypatch):
    monkeypatch.setattr(fs, "_PRIVATE_ROOTS", [])
    root = tmp_path / "app"
    root.mkdir(mode=0o700)
    old = os.umask(0o022)  # what a user's shell usually has: new files 0644 unless stram restricts them
    try:
        yield root
    finally:
        os.umask(old)


def test_files_written_under_a_private_root_are_owner_only(private_root, tmp_path):
    fs.keep_private(f"file://{private_root}")
    fs.write_atomic(f"file://{private_root}/checkpoints/3/17", b"state")
    fs.write_atomic(str(private_root / "journal" / "snapshot"), b"journal")
    fs.makedirs(f"file://{private_root}/wal/4")
    fs.write_local_atomic(str(private_root / "local" / "supervisor.json"), b"{}")  # stram's own, through os
    with fs.open_output(f"file://{private_root}/spark/x/part") as out:
        out.write(b"x")
    assert mode(private_root / "checkpoints" / "3" / "17") == 0o600
    assert mode(private_root / "journal" / "snapshot") == 0o600
    assert mode(private_root / "spark" / "x" / "part") == 0o600
    assert mode(private_root / "local" / "supervisor.json") == 0o600
    for d in ("checkpoints", "checkpoints/3", "journal", "wal", "wal/4", "spark", "spark/x", "local"):
        assert mode(private_root / d) == 0o700, d
    # elsewhere (an operator's output directory) the usual modes stay
    fs.write_atomic(f"file://{tmp_path}/out/part-0", b"row")
    fs.write_local_atomic(str(tmp_path / "out" / "part-1"), b"row")
    assert mode(tmp_path / "out" / "part-0") == mode(tmp_path / "out" / "part-1") == 0o644
    assert sorted(os.listdir(tmp_path / "out")) == ["part-0", "part-1"]  # no temporary file left


def test_check_private_refuses_writable_and_tightens_readable(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    for bits, who in ((0o777, "its group and others"), (0o775, "its group"), (0o757, "others")):
        os.chmod(app, bits)
        why = fs.check_private(f"file://{app}")
        assert f"can be written by {who}" in why and "chmod 700" in why, why
    os.chmod(app, 0o755)
    assert fs.check_private(str(app)) == "" and mode(app) == 0o700   # readable only: made private
    assert fs.check_private(f"file://{tmp_path}/missing") == ""       # created private later
    assert fs.check_private("hdfs://nn:8020/apps/x") == ""            # HDFS: its own permissions


def master_env(tmp_path, token_file) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRAM_")}
    env.update(STRAM_HOME=str(tmp_path / "home"), STRAM_TOKEN_FILE=str(token_file), STRAM_LOG_DIR=str(tmp_path),
               PYTHONPATH=str(ROOT))
    return env


def test_a_master_refuses_an_app_path_others_can_write(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    os.chmod(app, 0o777)
    token = tmp_path / "token"
    token.write_text("secret")
    os.chmod(token, 0o600)
    run = subprocess.run([sys.executable, "-m", "stram.master", "--app-path", f"file://{app}", "--app-id", "app-1"],
                         env=master_env(tmp_path, token), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "refuses to start" in run.stderr and "can be written by its group and others" in run.stderr
    assert not (app / "journal").exists() and not (app / "heartbeatUri").exists()


def test_a_master_without_its_token_file_says_so(tmp_path):
    app = tmp_path / "app"
    app.mkdir(mode=0o700)
    run = subprocess.run([sys.executable, "-m", "stram.master", "--app-path", f"file://{app}", "--app-id", "app-1"],
                         env=master_env(tmp_path, tmp_path / "nope"), cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "cannot read the application token from STRAM_TOKEN_FILE" in run.stderr
    env = master_env(tmp_path, "x")
    del env["STRAM_TOKEN_FILE"]
    env["STRAM_TOKEN"] = "old-style"  # a token in the environment is not taken
    run = subprocess.run([sys.executable, "-m", "stram.agent"], env=dict(env, STRAM_CONTAINER_ID="c1",
                                                                       STRAM_APP_PATH=str(app)),
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"cannot read this container's credential from {app}/credentials/c1" in run.stderr, run.stderr


def test_read_token_file(tmp_path):
    (tmp_path / "t").write_text(" abc\n")
    assert read_token_file(str(tmp_path / "t")) == "abc"
    (tmp_path / "empty").write_text("\n")
    assert read_token_file(str(tmp_path / "empty")) is None
    assert read_token_file(str(tmp_path / "missing")) is None
