"""``stram logs``: finding, ordering, tailing and following an application's log files.

Real files in a real application directory layout; the YARN path parses the
output format of Hadoop's ``yarn logs`` (run for real in tests/e2e/yarn/test_yarn_cluster.py
and tests/e2e/yarn/test_yarn_faults.py).
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from stram.client.cli import main
from stram.common import logs as applogs
from stram.common.errors import StramError, UserError


def _app(home, app_id="application_1_0001", state="RUNNING"):
    app_dir = home / "apps" / app_id
    (app_dir / "logs").mkdir(parents=True)
    (app_dir / "status.json").write_text(json.dumps({"id": app_id, "state": state, "name": "wc"}))
    return app_dir


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("STRAM_HOME", str(tmp_path))
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    return tmp_path


def test_rotated_pieces_are_read_oldest_first_and_tailed_across(home, capsys):
    logs = _app(home, state="SUCCEEDED") / "logs"
    _write(logs / "master.log.2", ["m1", "m2"])
    _write(logs / "master.log.1", ["m3", "m4"])
    _write(logs / "master.log", ["m5"])
    _write(logs / "container_000001.log", ["c1"])
    (logs / "master.out").write_text("")  # nothing outside logging: not shown

    assert main(["logs", "application_1_0001"]) == 0
    assert capsys.readouterr().out == "m1\nm2\nm3\nm4\nm5\n"
    assert main(["logs", "application_1_0001", "--tail", "3"]) == 0
    assert capsys.readouterr().out == "m3\nm4\nm5\n"
    assert main(["logs", "application_1_0001", "container_000001"]) == 0
    assert capsys.readouterr().out == "c1\n"


def test_a_crash_outside_logging_is_shown_beside_the_log(home, capsys):
    logs = _app(home, state="FAILED") / "logs"
    _write(logs / "master.log", ["INFO started"])
    _write(logs / "master.out", ["Traceback (most recent call last):", "MemoryError"])
    assert main(["logs", "application_1_0001"]) == 0
    out = capsys.readouterr().out
    assert f"==> {logs}/master.log <==\nINFO started\n" in out
    assert f"==> {logs}/master.out <==\nTraceback (most recent call last):\nMemoryError\n" in out


def test_all_and_list(home, capsys):
    logs = _app(home, state="SUCCEEDED") / "logs"
    _write(logs / "master.log", ["a", "b"])
    _write(logs / "container_000002.log", ["x", "y", "z"])
    assert main(["logs", "application_1_0001", "--all", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert out == f"==> {logs}/container_000002.log <==\nz\n==> {logs}/master.log <==\nb\n"
    assert main(["logs", "application_1_0001", "--list"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["LOG", "WHERE", "BYTES"]
    assert [r.split()[0] for r in rows[1:]] == ["container_000002.log", "master.log"]
    assert [int(r.split()[2]) for r in rows[1:]] == [6, 4]


def test_unknown_container_and_bad_tail_are_clear_errors(home, capsys):
    _write(_app(home) / "logs" / "master.log", ["a"])
    assert main(["logs", "application_1_0001", "container_000009"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no log for 'container_000009'; the application has: master.log")
    assert main(["logs", "application_1_0001", "-n", "-2"]) == 1
    assert "--tail takes a count" in capsys.readouterr().err
    assert main(["logs", "application_nope"]) == 1
    assert "no application 'application_nope'" in capsys.readouterr().err


def test_follow_prints_appended_lines_until_the_application_ends(home, capsys):
    app_dir = _app(home)
    log = app_dir / "logs" / "master.log"
    _write(log, ["first"])

    def writer():
        time.sleep(0.6)
        with open(log, "a") as f:
            f.write("second\n")
        time.sleep(0.6)
        os.replace(log, str(log) + ".1")  # rotation: a new, shorter file under the name
        _write(log, ["third"])
        time.sleep(0.6)
        (app_dir / "status.json").write_text(json.dumps({"id": "application_1_0001", "state": "SUCCEEDED"}))

    thread = threading.Thread(target=writer)
    thread.start()
    started = time.monotonic()
    assert main(["logs", "application_1_0001", "--follow"]) == 0
    thread.join()
    assert capsys.readouterr().out == "first\nsecond\nthird\n"
    assert time.monotonic() - started < 10


def test_yarn_logs_output_is_parsed_by_container_and_attempt(tmp_path, monkeypatch):
    """The text ``yarn logs`` prints (Hadoop 3.5: LOCAL for running containers, AGGREGATED after)."""
    def section(container, name, body, kind="AGGREGATED"):
        return (f"Container: {container} on localhost_38597\nLogAggregationType: {kind}\n"
                f"{'=' * 68}\nLogType:{name}\nLogLastModifiedTime:Mon Nov 23 21:32:21 +0000 2026\n"
                f"LogLength:{len(body)}\nLogContents:\n{body}End of LogType:{name}\n"
                f"{'*' * 87}\n\n")
    text = (section("container_9_0001_02_000001", "master.log", "attempt 2\n")
            + section("container_9_0001_01_000001", "master.log", "attempt 1\nLogType:not a header\n", "LOCAL")
            + section("container_9_0001_01_000001", "master.log.1", "attempt 1 older\n"))

    class Done:
        def __init__(self, stdout, stderr=""):
            self.stdout, self.stderr, self.returncode = stdout, stderr, 0

    calls = []

    def run(command, **kw):
        calls.append(command)
        return Done(text)

    yarn = tmp_path / "yarn"
    yarn.write_text("#!/bin/sh\nexit 1\n")
    yarn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    files = applogs.yarn_logs("application_9_0001", None, run=run)
    assert calls[0][0] == str(yarn)
    assert calls[0][1:] == ["logs", "-applicationId", "application_9_0001",
                            "-log_files_pattern", r"^master\.log(\.\d+)?$"]
    assert applogs.render(files) == (
        "==> container_9_0001_01_000001/master.log <==\nattempt 1 older\nattempt 1\nLogType:not a header\n"
        "==> container_9_0001_02_000001/master.log <==\nattempt 2\n")
    with pytest.raises(StramError, match="YARN has no log 'container_000003.log' for application_9_0001: "
                                         "Can not find any log file"):
        applogs.yarn_logs("application_9_0001", "container_000003",
                          run=lambda *a, **k: Done("", "Can not find any log file matching the pattern"))


def test_yarn_logs_without_the_yarn_command_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StramError, match="needs Hadoop's `yarn` command on PATH"):
        applogs.yarn_logs("application_9_0001", None)


def test_pick_names_what_exists():
    files = [applogs.LogFile(n, "d", 1, lambda: "") for n in ("a.log", "master.log", "master.log.1")]
    assert [f.name for f in applogs.pick(files, None)] == ["master.log", "master.log.1"]
    with pytest.raises(UserError, match="the application has: a.log, master.log"):
        applogs.pick(files, "b")
