"""The buffer server listens on the address its container advertises, never on every interface by default."""

from __future__ import annotations

import socket

import pytest

from stram.agent import agent as agent_mod
from stram.agent.agent import Agent, advertised_host, bind_host
from stram.wire import stram_pb2 as proto


@pytest.mark.parametrize("env, expected", [
    ({"STRAM_HOST": "10.0.0.5", "NM_HOST": "10.0.0.6"}, "10.0.0.5"),
    ({"NM_HOST": "10.0.0.6"}, "10.0.0.6"),
    ({}, socket.gethostname()),
])
def test_the_advertised_host_is_stram_host_then_nm_host_then_the_host_name(env, expected):
    assert advertised_host(None, env) == expected
    assert advertised_host("given", env) == "given"


@pytest.mark.parametrize("host", ["127.0.0.3", "node7.example.com", "localhost"])
def test_the_bind_address_is_the_advertised_one_unless_stram_bind_host_says_otherwise(host):
    assert bind_host(host, {}) == host
    assert bind_host(host, {"STRAM_BIND_HOST": "0.0.0.0"}) == "0.0.0.0"
    assert bind_host(host, {"STRAM_BIND_HOST": ""}) == host  # set but empty: not set


class _Stop(Exception):
    pass


class _RecordingServer:
    """Records where the agent asks the buffer server to listen, then stops the agent's run."""

    hosts: list[str] = []

    def __init__(self, *, host: str, **kwargs) -> None:
        _RecordingServer.hosts.append(host)

    def start(self):
        raise _Stop()


@pytest.mark.parametrize("host, bind_env", [("127.0.0.3", None), ("127.0.0.4", "0.0.0.0")])
def test_the_agent_starts_its_buffer_server_on_the_bind_address(tmp_path, monkeypatch, host, bind_env):
    if bind_env is None:
        monkeypatch.delenv("STRAM_BIND_HOST", raising=False)
    else:
        monkeypatch.setenv("STRAM_BIND_HOST", bind_env)
    monkeypatch.setattr(agent_mod, "BufferServer", _RecordingServer)
    _RecordingServer.hosts = []
    agent = Agent("container_000002", str(tmp_path), "credential", host=host, work_dir=str(tmp_path / "w"))
    monkeypatch.setattr(agent.umbilical, "connect", lambda: None)
    monkeypatch.setattr(agent.umbilical, "close", lambda: None)
    ctx = proto.StreamingContainerContext(deploy_buffer_server=True, heartbeat_interval_millis=500)
    monkeypatch.setattr(agent, "_call_with_retry", lambda method, request: ctx)
    with pytest.raises(_Stop):
        agent.run()
    assert _RecordingServer.hosts == [bind_env or host]
