"""The first container of a fresh local application starts ahead of the plan.

The master's ``__main__`` starts ``container_000001``'s process before it imports
and plans (``LocalLauncher.prestart``); the process imports what it needs and
waits on its stdin. The launch of that container with the same environment lets
it go on (the process is the launched one); anything else releases it, and it
exits with nothing written.
"""

from __future__ import annotations

import argparse
import os

import psutil
import pytest
from conftest import ROOT, read_counts, word_truth
from e2ekit import wait_until

from stram.client import cli
from stram.common import apps as stram_apps
from stram.master import __main__ as master_main
from stram.master.core.plan import PhysicalPlan
from stram.master.launch.local import FIRST_CONTAINER_ID, ContainerRequest, LocalLauncher, container_request_env
from stram.master.spec import AppSpec


def _held_launcher(tmp_path, app_id="app-1"):
    launcher = LocalLauncher(str(tmp_path / "logs"), cwd=str(ROOT), app_id=app_id)
    env = container_request_env(FIRST_CONTAINER_ID, f"file://{tmp_path}/app", app_id)
    launcher.prestart(FIRST_CONTAINER_ID, env)
    (proc, _), = launcher._held.values()
    # held: its interpreter is up and waits (an exit would be a failure to wait)
    wait_until(lambda: psutil.Process(proc.pid).cmdline()[-2:] == ["-m", "stram.agent"], 10, what="the process")
    return launcher, proc, env


def test_the_launch_of_the_held_container_is_that_process_and_it_goes_on(tmp_path):
    launcher, held, env = _held_launcher(tmp_path)
    try:
        pid, started = launcher.launch(ContainerRequest(FIRST_CONTAINER_ID, 256, 1, (), env))
        assert pid == held.pid and started == psutil.Process(pid).create_time()
        # it went on as the container: no credential was written, so it says so and exits 2
        assert held.wait(30) == 2
        out = (tmp_path / "logs" / f"{FIRST_CONTAINER_ID}.out").read_text()
        assert "cannot read this container's credential" in out
        assert launcher.poll() == [(FIRST_CONTAINER_ID, 2)]
    finally:
        launcher.stop_all(grace=2.0)


def test_another_container_or_another_environment_releases_the_held_process(tmp_path):
    launcher, held, env = _held_launcher(tmp_path)
    try:
        other = dict(env, STRAM_APP_PATH=f"file://{tmp_path}/elsewhere")
        pid, _ = launcher.launch(ContainerRequest(FIRST_CONTAINER_ID, 256, 1, (), other))
        assert pid != held.pid
        assert held.wait(30) == 0  # released: it exits at once, quietly
        assert not launcher._held
    finally:
        launcher.stop_all(grace=2.0)
    launcher, held, env = _held_launcher(tmp_path / "second")
    try:
        launcher.launch(ContainerRequest("container_000002", 256, 1, (),
                                         container_request_env("container_000002", env["STRAM_APP_PATH"], "app-1")))
        assert held.wait(30) == 0
    finally:
        launcher.stop_all(grace=2.0)


def test_a_held_process_never_launched_exits_when_the_launcher_stops_or_its_master_dies(tmp_path):
    launcher, held, _ = _held_launcher(tmp_path)
    launcher.stop_all(grace=2.0)
    assert held.poll() == 0
    launcher, held, _ = _held_launcher(tmp_path / "second")
    held.stdin.close()  # what the master's death does to the pipe
    assert held.wait(30) == 0
    launcher._held.clear()


def test_a_fresh_plan_asks_first_for_the_container_started_ahead():
    spec = AppSpec.from_yaml((ROOT / "specs" / "wordcount.yaml").read_text())
    plan = PhysicalPlan.from_spec(spec)
    assert min(plan.containers) == FIRST_CONTAINER_ID


def test_only_a_fresh_local_application_starts_a_container_ahead(tmp_path, monkeypatch):
    app = tmp_path / "app"
    (app / "journal").mkdir(parents=True)
    args = argparse.Namespace(app_path=str(app), app_id="app-1", launcher="local")
    launcher = master_main._prestart_first_container(args, str(tmp_path / "logs"))
    assert launcher is not None and list(launcher._held) == [FIRST_CONTAINER_ID]
    launcher.release_held()
    (app / "journal" / "snapshot").write_text("{}")  # a later attempt: its containers are known
    assert master_main._prestart_first_container(args, str(tmp_path / "logs")) is None
    assert master_main._prestart_first_container(
        argparse.Namespace(app_path=str(tmp_path / "b"), app_id="a", launcher="yarn"), str(tmp_path)) is None
    monkeypatch.setenv("STRAM_PRESTART", "0")
    assert master_main._prestart_first_container(
        argparse.Namespace(app_path=str(tmp_path / "b"), app_id="a", launcher="local"), str(tmp_path)) is None


@pytest.mark.slow
def test_a_launched_application_runs_in_the_process_started_ahead(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["launch", "specs/wordcount.yaml", "-D", f"operators.out.path={out}",
                     "-D", "streams.words.locality=CONTAINER_LOCAL", "-D", "streams.counts.locality=CONTAINER_LOCAL"])
    assert code == 0, capsys.readouterr().err
    sums, _, _ = read_counts(out)
    assert sums == word_truth(ROOT / "specs" / "data" / "words.txt")
    app = stram_apps.local_apps()[0]
    log = open(os.path.join(app["app_path"], "logs", "master.log")).read()
    assert f"launched {FIRST_CONTAINER_ID} as pid" in log and "(started ahead of the plan)" in log
