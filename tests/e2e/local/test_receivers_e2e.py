"""Receivers end to end: socket and directory sources, the WAL across container kills, restarts and failure."""

from __future__ import annotations

import json
import pathlib
import socket
import threading
import time
from collections import Counter
from typing import Any

import pytest
from e2ekit import admin, kill_container_of, launch_detached, wait_until

from stram.client import cli
from stram.common import apps as stram_apps

FAST = ("-D", "STREAMING_WINDOW_SIZE_MILLIS=100", "-D", "CHECKPOINT_WINDOW_COUNT=5",
        "-D", "HEARTBEAT_INTERVAL_MILLIS=300")


class LineSource:
    """A TCP source of numbered lines that, on every new connection, resends what was not acknowledged.

    It reads ``ACK <n>`` lines: n lines of the current connection are stored.
    ``drop_after``: the first connection is reset after that many lines. ``hold``: no line after
    that number is sent until it is set back to None (a test's kill then lands mid-stream).
    """

    def __init__(self, total: int, rate: float, drop_after: int | None = None) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.total, self.rate, self.drop_after = total, rate, drop_after
        #: lines 1..acked are acknowledged
        self.acked = 0
        #: line number -> connections it was sent on
        self.sends: Counter = Counter()
        self.connections = 0
        self.hold: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @staticmethod
    def line(i: int) -> str:
        return f"line-{i:06d}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            self._session(conn, self.connections)

    def _session(self, conn: socket.socket, number: int) -> None:
        base = self.acked + 1
        reader = threading.Thread(target=self._read_acks, args=(conn, base), daemon=True)
        reader.start()
        step = max(1, int(self.rate / 50))
        i = base
        try:
            while i <= self.total and reader.is_alive() and not self._stop.is_set():
                if self.drop_after is not None and number == 1 and i - base >= self.drop_after:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    break  # reset the connection in the middle of the stream
                if self.hold is not None and i > self.hold:
                    time.sleep(0.02)
                    continue
                batch = range(i, min(i + step, self.total + 1))
                with self._lock:
                    self.sends.update(batch)
                conn.sendall("".join(self.line(j) + "\n" for j in batch).encode())
                i = batch[-1] + 1
                time.sleep(0.02)
            else:
                while reader.is_alive() and not self._stop.is_set():  # keep it open until it breaks
                    reader.join(0.2)
        except OSError:
            pass
        finally:
            try:
                conn.shutdown(socket.SHUT_RD)  # wakes the reader; close() alone would not
            except OSError:
                pass
            reader.join(5)
            conn.close()  # with SO_LINGER 0: a reset

    def _read_acks(self, conn: socket.socket, base: int) -> None:
        buf = b""
        try:
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    n = int(line.split()[1])
                    with self._lock:
                        self.acked = max(self.acked, base + n - 1)
        except (OSError, ValueError, IndexError):
            return


def write_spec(tmp_path: pathlib.Path, receiver: str, properties: dict, out: pathlib.Path,
               **attributes: Any) -> str:
    spec = {
        "name": "receiver-test",
        "attributes": {"PROCESSING_MODE": "EXACTLY_ONCE", **attributes},
        "operators": {
            "rx": {"class": receiver, "properties": properties},
            "relay": {"class": "tests.kits.receiver_ops:Relay"},
            "out": {"class": "stram.operators.io:JsonLinesOutput", "properties": {"path": str(out)}},
        },
        "streams": {"lines": {"from": "rx.output", "to": ["relay.input"]},
                    "relayed": {"from": "relay.output", "to": ["out.input"]}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return str(path)


def operators_active(app_id: str, count: int) -> bool:
    rows = (admin(app_id, "operators") or {}).get("operators", [])
    return len(rows) == count and all(r["state"] == "ACTIVE" for r in rows)


def output_lines(out: pathlib.Path) -> Counter:
    lines: Counter = Counter()
    for f in sorted(out.rglob("*.jsonl")):
        lines.update(json.loads(x) for x in f.read_text().splitlines() if x.strip())
    return lines


def finish(app_id: str) -> None:
    assert cli.main(["shutdown-app", app_id]) == 0
    assert cli.main(["wait", app_id, "--timeout", "60"]) == 0


def check_socket_output(source: LineSource, seen: Counter) -> None:
    """Every line arrived; a line sent on one connection only arrived once.

    A line the source had to resend (its connection ended before the ACK) may
    arrive once per send: it may have been stored before the connection broke.
    """
    expected = {source.line(i) for i in range(1, source.total + 1)}
    assert set(seen) == expected, sorted(expected - set(seen))[:5]
    for i in range(1, source.total + 1):
        n = seen[source.line(i)]
        assert n <= source.sends[i], (i, n, source.sends[i])
    assert sum(1 for i in range(1, source.total + 1) if seen[source.line(i)] > 1) \
        <= sum(1 for i in range(1, source.total + 1) if source.sends[i] > 1)


def test_socket_wal_every_acked_line_exactly_once_across_kills(tmp_path):
    source = LineSource(total=2000, rate=200)
    out = tmp_path / "out"
    spec = write_spec(tmp_path, "stram.receivers:SocketTextReceiver",
                      {"host": "127.0.0.1", "port": source.port, "ack": True}, out, RECEIVER_WAL=True)
    app_id = launch_detached(spec, *FAST)
    try:
        kills = []
        for threshold in (400, 1000):
            wait_until(lambda: source.acked >= threshold, 60, f"{threshold} lines acknowledged")
            acked_before = source.acked
            kills.append(kill_container_of(app_id, "rx"))
            wait_until(lambda: operators_active(app_id, 3) and source.acked > acked_before + 50, 60,
                       "recovery and new acknowledgements")
        wait_until(lambda: source.acked == source.total, 60, "every line acknowledged")
        wait_until(lambda: len(output_lines(out)) == source.total, 60, "every line in the output")
        info = admin(app_id, "info")
        assert info["receivers"]["rx"]["wal"] is True
        finish(app_id)
    finally:
        source.close()
        if stram_apps.find_app(app_id)["state"] not in stram_apps.TERMINAL:
            cli.main(["kill-app", app_id])
    assert len(set(kills)) == 2 and source.connections >= 3
    check_socket_output(source, output_lines(out))
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".jsonl")]


def test_socket_source_drops_connection_and_receiver_reconnects(tmp_path):
    source = LineSource(total=800, rate=400, drop_after=300)
    out = tmp_path / "out"
    spec = write_spec(tmp_path, "stram.receivers:SocketTextReceiver",
                      {"host": "127.0.0.1", "port": source.port, "ack": True}, out)
    app_id = launch_detached(spec, *FAST)
    try:
        wait_until(lambda: source.acked == source.total, 60, "every line acknowledged")
        wait_until(lambda: len(output_lines(out)) == source.total, 60, "every line in the output")
        rx = admin(app_id, "info")["receivers"]["rx"]
        assert rx["restarts"] >= 1
        assert "ConnectionResetError" in rx["last_error"] or "no more data" in rx["last_error"]
        finish(app_id)
    finally:
        source.close()
        if stram_apps.find_app(app_id)["state"] not in stram_apps.TERMINAL:
            cli.main(["kill-app", app_id])
    assert source.connections >= 2
    check_socket_output(source, output_lines(out))


def test_failing_receiver_is_restarted_then_fails_the_application(tmp_path):
    out = tmp_path / "out"
    spec = write_spec(tmp_path, "tests.kits.receiver_ops:FailingReceiver", {"message": "port 1 is closed"}, out,
                      RECEIVER_MAX_RESTARTS=5)
    app_id = launch_detached(spec, *FAST)
    try:
        def restarted() -> Any:  # the receiver's row once it restarted, or "ended" (seen too late)
            rx = ((admin(app_id, "info") or {}).get("receivers") or {}).get("rx") or {}
            if rx.get("restarts", 0) >= 1:
                return rx
            return "ended" if stram_apps.find_app(app_id)["state"] in stram_apps.TERMINAL else None
        # 30 s was too short when containers took 15 s to start (loop round 41, under load)
        rx = wait_until(restarted, 120, "a restart in get-app-info")
        if rx != "ended":
            assert "ConnectionError: port 1 is closed" in rx["last_error"]
        assert cli.main(["wait", app_id, "--timeout", "60"]) == 1
    finally:
        if stram_apps.find_app(app_id)["state"] not in stram_apps.TERMINAL:
            cli.main(["kill-app", app_id])
    app = stram_apps.find_app(app_id)
    assert app["state"] == "FAILED"
    assert "receiver 'rx' (FailingReceiver) failed 6 times in a row (RECEIVER_MAX_RESTARTS=5)" \
        in app["diagnostics"]
    assert "port 1 is closed" in app["diagnostics"]


def test_directory_receiver_picks_up_new_files_once_across_a_kill(tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    out = tmp_path / "out"
    expected: list[str] = []

    def drop(n: int) -> None:  # write aside, then rename in: the receiver never sees half a file
        lines = [f"file{n}-line{i}" for i in range(50)]
        expected.extend(lines)
        (incoming / f".f{n}").write_text("\n".join(lines) + "\n")
        (incoming / f".f{n}").rename(incoming / f"f{n:03d}.txt")

    drop(0)
    spec = write_spec(tmp_path, "stram.receivers:DirectoryReceiver",
                      {"path": str(incoming), "poll_millis": 50}, out, RECEIVER_WAL=True)
    app_id = launch_detached(spec, *FAST)
    try:
        n = 1
        for _ in range(2):
            wait_until(lambda: operators_active(app_id, 3), 60, "operators running")
            for _ in range(6):
                drop(n)
                n += 1
                time.sleep(0.15)
            kill_container_of(app_id, "rx")
            drop(n)
            n += 1
        wait_until(lambda: operators_active(app_id, 3), 60, "operators running")
        drop(n)
        wait_until(lambda: sum(output_lines(out).values()) >= len(expected), 60, "every file's lines")
        finish(app_id)
    finally:
        if stram_apps.find_app(app_id)["state"] not in stram_apps.TERMINAL:
            cli.main(["kill-app", app_id])
    seen = output_lines(out)
    assert set(seen) == set(expected)
    assert max(seen.values()) == 1, [k for k, v in seen.items() if v > 1][:5]
