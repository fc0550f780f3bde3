"""A flood of refused calls to a real master keeps its log bounded (repeats are counted, not written)."""

from __future__ import annotations

import os
import time

import grpc
import pytest
from conftest import ROOT
from e2ekit import launch_detached, running_operators, wait_final, wait_until

from stram import wire as proto
from stram.client import cli
from stram.common import apps as stram_apps

MOBY = ROOT / "specs" / "data" / "moby-dick.txt"


def test_refused_call_flood_keeps_the_master_log_small(tmp_path):
    out = tmp_path / "out"
    app_id = launch_detached("specs/wordcount.yaml", "-D", f"operators.reader.path={MOBY}",
                             "-D", "operators.reader.lines_per_window=20", "-D", f"operators.out.path={out}")
    try:
        wait_until(lambda: running_operators(app_id) == 4, what="all operators running")
        app_path = stram_apps.find_app(app_id)["app_path"]
        log_path = os.path.join(app_path, "logs", "master.log")
        with open(os.path.join(app_path, "heartbeatUri")) as f:
            address = f.read().strip()
        before = os.path.getsize(log_path)
        channel = grpc.insecure_channel(address)
        stub = proto.StreamingContainerUmbilicalStub(channel)
        refused = 0
        started = time.monotonic()
        while time.monotonic() - started < 12:  # past one 10 s interval, so a summary line is due
            for _ in range(50):
                try:
                    stub.ProcessHeartbeat(proto.ContainerHeartbeat(container_id="intruder"),
                                          metadata=((proto.TOKEN_METADATA_KEY, "wrong"),), timeout=5)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
                    refused += 1
        channel.close()
        time.sleep(1.0)
        grown = os.path.getsize(log_path) - before
        text = open(log_path, errors="replace").read()
        lines = [line for line in text.splitlines() if "refused call from" in line]
        assert refused > 1000, f"only {refused} calls were refused"
        # unbounded, every refused call would add ~116 bytes: the log grew by far less
        assert grown < 20_000, f"master.log grew by {grown} bytes for {refused} refused calls"
        assert len(lines) <= 5 * 3, lines
        assert any("repeated" in line and "times in the last" in line for line in lines), lines[-3:]
        print(f"{refused} refused calls in 12 s; master.log grew by {grown} bytes ({len(lines)} lines)")
    finally:
        cli.main(["kill-app", app_id])
        wait_final(app_id, timeout=60)
