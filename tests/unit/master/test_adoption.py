"""A new master attempt takes over only processes proven to be its containers.

The journal records each container's process as its launcher started it (pid
and start time, :class:`~stram.master.core.events.ContainerStarted`); a new attempt
asks the launcher to take over exactly that process, and the launcher checks
the live pid's start time and ``STRAM_CONTAINER_ID`` before it tracks (and
may later kill) it. A pid reused by an unrelated process is left alone: the
container is lost and redeployed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from conftest import ROOT
from e2ekit import wait_until
from statekit import StateRun, container_heartbeat

from stram.master.core import lifecycle
from stram.master.core.instructions import AdoptContainer, LaunchContainer
from stram.master.core.plan import ContainerState, OperatorState
from stram.master.core.state import AdoptContainers, ContainerExited, ContainerStarted, MasterState
from stram.master.journal import document as journal
from stram.master.launch.local import ContainerRequest, LocalLauncher, proven_container, stop_strays
from stram.master.spec import AppSpec

SPEC = """
name: adopt
operators:
  src: {class: "stram.operators.io:LineReader", properties: {path: /dev/null}}
  out: {class: "stram.operators.io:JsonLinesOutput", properties: {path: /tmp/adopt-out}}
streams:
  s: {from: src.output, to: [out.input]}
"""


@pytest.fixture
def sleeper():
    """Start ``sleep`` processes (optionally with extra environment); all killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(**env: str) -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "60"], env=dict(os.environ, **env))
        procs.append(proc)
        # until it has exec'd, /proc shows the forking parent's environment
        wait_until(lambda: psutil.Process(proc.pid).cmdline() == ["sleep", "60"], 10, what="sleep to start")
        return proc
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def started(proc: subprocess.Popen) -> float:
    return psutil.Process(proc.pid).create_time()


def test_only_a_process_with_the_start_time_and_the_container_id_is_proven(sleeper):
    stranger = sleeper()
    assert proven_container(stranger.pid, started(stranger), "container_000001") is None  # no id
    ours = sleeper(STRAM_CONTAINER_ID="container_000001", STRAM_APP_ID="app-1")
    assert proven_container(ours.pid, started(ours), "container_000001").pid == ours.pid
    assert proven_container(ours.pid, started(ours), "container_000001", app_id="app-1") is not None
    assert proven_container(ours.pid, started(ours), "container_000001", app_id="app-2") is None
    assert proven_container(ours.pid, started(ours), "container_000002") is None  # another container
    assert proven_container(ours.pid, started(ours) - 5, "container_000001") is None  # pid reused
    assert proven_container(ours.pid, 0.0, "container_000001") is None  # start time never recorded
    assert proven_container(0, started(ours), "container_000001") is None


def test_launcher_refuses_a_reused_pid_reports_the_container_lost_and_never_signals_it(sleeper, tmp_path):
    launcher = LocalLauncher(str(tmp_path / "logs"))
    stranger = sleeper()
    # the journal's start time is the container's, the pid now a stranger's
    assert launcher.adopt("container_000001", stranger.pid, started(stranger) - 30) is False
    # even the right start time is not enough without the container's id in its environment
    assert launcher.adopt("container_000002", stranger.pid, started(stranger)) is False
    assert sorted(launcher.poll()) == [("container_000001", None), ("container_000002", None)]
    launcher.kill("container_000001")
    launcher.stop_all(grace=0.5)
    assert stranger.poll() is None, "the stranger was signalled"


def test_launcher_takes_over_and_kills_its_own_container(sleeper, tmp_path):
    launcher = LocalLauncher(str(tmp_path / "logs"))
    ours = sleeper(STRAM_CONTAINER_ID="container_000003")
    assert launcher.adopt("container_000003", ours.pid, started(ours)) is True
    assert launcher.poll() == []
    launcher.kill("container_000003")
    assert ours.wait(10) == -signal.SIGKILL


def test_state_journals_the_launched_process_and_adopts_exactly_it():
    run = StateRun(SPEC)
    state = run.state
    first, second = sorted(state.plan.containers)
    state.handle(ContainerStarted(first, 4242, 1_700_000_123.25, 1))
    run.deploy()
    doc = journal.decode(journal.encode(state.snapshot()))
    restored = MasterState.restore(AppSpec.from_yaml(SPEC), doc, state.app_path, state.token, 5000)
    assert (restored.plan.containers[first].pid, restored.plan.containers[first].process_started) == \
        (4242, 1_700_000_123.25)
    instructions = restored.handle(AdoptContainers(6000, launcher_adopts=True))
    # the recorded process, and the RUNNING container without a record (the launcher refuses pid 0)
    assert sorted(instructions, key=lambda i: i.container_id) == [
        AdoptContainer(first, 4242, 1_700_000_123.25), AdoptContainer(second, 0, 0.0)]
    # the launcher refused one: it is lost and relaunched, which forgets the old process
    out = restored.handle(ContainerExited(first, None, 7000))
    restored.handle(ContainerStarted(first, 999, 1.0, 7000))  # a stale report for a lost container
    assert restored.plan.containers[first].state in (ContainerState.LOST, ContainerState.RELEASED)
    assert restored.plan.containers[first].pid == 4242
    assert not any(isinstance(i, AdoptContainer) for i in out)


def test_a_launcher_that_takes_over_no_process_recovers_every_running_container_at_once():
    """YARN through Skein: the previous attempt's containers ended with it. The new attempt
    recovers them all in its first event, from the journal's checkpoints, instead of waiting
    for each one's heartbeat timeout."""
    run = StateRun(SPEC)
    state = run.state
    run.deploy()
    old = sorted(state.plan.containers)
    assert all(state.plan.containers[c].state == ContainerState.RUNNING for c in old)
    doc = journal.decode(journal.encode(state.snapshot()))
    restored = MasterState.restore(AppSpec.from_yaml(SPEC), doc, state.app_path, state.token, 5000)
    instructions = restored.handle(AdoptContainers(6000, launcher_adopts=False))
    assert not any(isinstance(i, AdoptContainer) for i in instructions)
    assert all(restored.plan.containers[c].state in (ContainerState.LOST, ContainerState.RELEASED) for c in old)
    launched = [i.container_id for i in instructions if isinstance(i, LaunchContainer)]
    assert len(launched) == len(old) and not set(launched) & set(old)
    # every operator waits in a new container, from its recovery checkpoint
    assert {op.container for op in restored.plan.operators.values()} == set(launched)
    assert any(e.kind == "lost" and "ended with it" in e.text for e in restored.events), restored.events


def test_relaunch_forgets_the_previous_process():
    run = StateRun(SPEC)
    state = run.state
    cid = sorted(state.plan.containers)[0]
    state.handle(ContainerStarted(cid, 4242, 1_700_000_123.25, 1))
    launch = lifecycle.launch(state, state.plan.containers[cid], 2)
    assert isinstance(launch, LaunchContainer)
    assert (state.plan.containers[cid].pid, state.plan.containers[cid].process_started) == (0, 0.0)


def test_launch_kills_a_stray_process_an_earlier_attempt_started_for_the_container(tmp_path):
    """A master that died between starting a container's process and recording it leaves a
    process the next attempt cannot adopt; it launches the container again, and first kills
    that stray (and only it), so that one process speaks for one container."""
    def agent(app_id: str, container_id: str) -> subprocess.Popen:
        # held (STRAM_HOLD, its stdin open): it lives until killed, however slow the machine; an
        # agent let go would find no credential here and exit at once
        env = dict(os.environ, STRAM_APP_ID=app_id, STRAM_CONTAINER_ID=container_id, STRAM_TOKEN="t",
                   STRAM_APP_PATH=f"file://{tmp_path}/no-master", STRAM_WORK_DIR=str(tmp_path / container_id),
                   STRAM_HOLD="1")
        proc = subprocess.Popen([sys.executable, "-m", "stram.agent"], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: psutil.Process(proc.pid).cmdline()[-2:] == ["-m", "stram.agent"], 10, what="agent")
        return proc
    stray, other_container, other_app = agent("app-7", "container_000002"), \
        agent("app-7", "container_000003"), agent("app-8", "container_000002")
    try:
        assert stop_strays("app-7", "container_000001") == 0
        launcher = LocalLauncher(str(tmp_path / "logs"), cwd=str(ROOT))
        env = {"STRAM_APP_ID": "app-7", "STRAM_CONTAINER_ID": "container_000002", "STRAM_TOKEN": "t",
               "STRAM_APP_PATH": f"file://{tmp_path}/no-master"}
        pid, _ = launcher.launch(ContainerRequest("container_000002", 256, 1, (), env))
        stray.wait(10)  # killed (and reaped by the launcher's psutil.wait_procs: no exit code here)
        assert other_container.poll() is None and other_app.poll() is None
        assert psutil.Process(pid).is_running()
        launcher.stop_all(grace=2.0)
    finally:
        for proc in (stray, other_container, other_app):
            proc.kill()
            proc.stdin.close()
            proc.wait()


def test_a_heartbeat_from_another_process_than_the_launched_one_is_refused():
    """Two processes with one container id (see above): only the recorded one is heard; the
    other is told to shut down, and what its heartbeat omits does not leave the plan."""
    run = StateRun(SPEC)
    state = run.state
    run.deploy()
    cid = run.containers["out"]
    state.handle(ContainerStarted(cid, 4242, 1_700_000_123.25, run.now))
    hb = container_heartbeat(cid, [])  # reports no operator, from pid 1
    response, _ = state.heartbeat(hb, run.now + 500)
    assert response.shutdown
    assert state.plan.operators[run.ids["out"]].state == OperatorState.ACTIVE
    response, _ = run.heartbeat(cid, run.report("out", 1))  # the launched process: heard
    assert not response.shutdown
