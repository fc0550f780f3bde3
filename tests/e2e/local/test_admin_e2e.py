"""What admins see (issue 15): /metrics and stack traces on demand, on real local applications.

A word count whose reader stays alive at the end of its file: once its
counters stop moving, ``/metrics`` (parsed with ``prometheus_client``'s
parser) must agree with ``/ws/v2/stram/operators`` and with the numbers of
lines and words counted here from the file. ``stram stack`` on a container
whose operator sleeps inside ``process_input`` must show that frame; a
blocked operator's diagnostic must carry it too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from conftest import ROOT, word_truth
from e2ekit import admin, agent_pid, launch_detached, wait_final, wait_until
from prometheus_client.parser import text_string_to_metric_families

from stram.common import apps as stram_apps

WORDS = ROOT / "specs" / "data" / "words.txt"
E2E_OPS = str(ROOT / "tests" / "kits" / "e2e_ops.py")


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stram.client.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def kill(app_id: str) -> None:
    cli("kill-app", app_id)
    wait_final(app_id, timeout=60)


def wordcount_spec(tmp_path) -> str:
    spec = tmp_path / "idle-wordcount.yaml"
    spec.write_text(f"""
name: idle-wordcount
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, CHECKPOINT_WINDOW_COUNT: 5}}
operators:
  reader: {{class: "tests.kits.e2e_ops:LinesThenIdle", properties: {{path: "{WORDS}", lines_per_window: 100}}}}
  split: {{class: "stram.operators.text:WordSplitter", partitions: 2}}
  count: {{class: "stram.operators.aggregate:KeyCounter"}}
  out: {{class: "stram.operators.io:JsonLinesOutput", properties: {{path: "{tmp_path / 'out'}"}}}}
streams:
  lines: {{from: reader.output, to: [split.input]}}
  words: {{from: split.output, to: [count.input]}}
  counts: {{from: count.output, to: [out.input]}}
""")
    return str(spec)


def scrape(app_id: str) -> dict:
    """/metrics of a local application, parsed: {(sample name, frozenset(labels)): value}."""
    url = stram_apps.find_app(app_id)["admin_url"] + "/metrics"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {stram_apps.read_token(app_id)}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def committed(samples: dict) -> float:
    (v,) = [v for (n, _), v in samples.items() if n == "stram_committed_window"]
    return v


def test_metrics_agree_with_the_operators_api_and_with_the_input(tmp_path):
    lines = len(WORDS.read_text().splitlines())
    words = sum(word_truth(WORDS).values())
    app_id = launch_detached(wordcount_spec(tmp_path))
    try:
        counters = ("tuples_processed_total", "tuples_in_total", "tuples_out_total", "restarts")
        last: list = [None]

        def settled() -> list | None:
            # every operator's totals final: the input's lines and words everywhere, and two reads
            # in a row alike (one container's heartbeat may still be on its way after another's)
            rows = (admin(app_id, "operators") or {}).get("operators", [])
            sums: dict[tuple[str, str], int] = {}
            for r in rows:
                for key in counters:
                    sums[r["name"], key] = sums.get((r["name"], key), 0) + r[key]
            seen = sorted((r["id"], *(r[k] for k in counters)) for r in rows)
            same, last[0] = seen == last[0], seen
            final = (sums.get(("reader", "tuples_out_total")) == lines
                     and sums.get(("reader", "tuples_processed_total")) == lines
                     and sums.get(("split", "tuples_processed_total")) == lines
                     and sums.get(("split", "tuples_out_total")) == words
                     and sums.get(("count", "tuples_in_total")) == words
                     and sums.get(("count", "tuples_processed_total")) == words)
            return rows if final and same else None
        wait_until(settled, timeout=90, what="every word counted", interval=0.5)
        wait_until(lambda: committed(scrape(app_id)) >= 0, timeout=60, what="a committed window")
        before = admin(app_id, "operators")["operators"]
        samples = scrape(app_id)
        after = admin(app_id, "operators")["operators"]

        def metric(sample: str, row: dict) -> float:
            labels = {("app", app_id), ("operator", row["name"]), ("id", str(row["id"])),
                      ("partition", "" if row["partition"] is None else str(row["partition"]))}
            (v,) = [v for (n, ls), v in samples.items() if n == sample and ls == labels]
            return v

        assert {r["id"] for r in before} == {r["id"] for r in after}
        old = {r["id"]: r for r in before}
        for row in after:
            for sample, key in (("stram_operator_tuples_processed_total", "tuples_processed_total"),
                                ("stram_operator_tuples_in_total", "tuples_in_total"),
                                ("stram_operator_tuples_emitted_total", "tuples_out_total"),
                                ("stram_operator_restarts_total", "restarts")):
                assert old[row["id"]][key] == metric(sample, row) == row[key], (row["label"], key)
            # windows go on passing while the application idles: the scrape lies between the two reads
            assert old[row["id"]]["windows_total"] <= metric("stram_operator_windows_total", row) \
                <= row["windows_total"]

        def total(name: str, key: str) -> int:
            return sum(metric(key, r) for r in after if r["name"] == name)
        # the independent answer: lines and words of the input file
        assert total("reader", "stram_operator_tuples_processed_total") == lines
        assert total("split", "stram_operator_tuples_processed_total") == lines
        assert total("split", "stram_operator_tuples_emitted_total") == words
        assert total("count", "stram_operator_tuples_processed_total") == words
        assert len([r for r in after if r["name"] == "split"]) == 2

        value = {n: v for (n, ls), v in samples.items() if ("app", app_id) in ls and len(ls) == 1}
        assert value["stram_committed_window"] >= 0
        assert 0 <= value["stram_committed_window_lag_seconds"] < 60
        assert value["stram_recoveries_total"] == 0
        ages = [v for (n, _), v in samples.items() if n == "stram_container_heartbeat_age_seconds"]
        containers = [c for c in admin(app_id, "containers")["containers"] if c["state"] == "RUNNING"]
        assert len(ages) == len(containers) and all(0 <= a < 10 for a in ages)
        assert any(n == "stram_buffer_server_bytes" for (n, _) in samples)
        assert any(n == "process_resident_memory_bytes" for (n, _) in samples)  # the master's own
    finally:
        kill(app_id)


def sleeper_spec(tmp_path, timeout_windows: int) -> str:
    spec = tmp_path / "sleepy.yaml"
    spec.write_text(f"""
name: sleepy
attributes: {{STREAMING_WINDOW_SIZE_MILLIS: 100, HEARTBEAT_INTERVAL_MILLIS: 300, CHECKPOINT_WINDOW_COUNT: 5,
             TIMEOUT_WINDOW_COUNT: {timeout_windows}}}
operators:
  reader: {{class: "tests.kits.e2e_ops:LinesThenIdle", properties: {{path: "{WORDS}", lines_per_window: 10}}}}
  sleepy: {{class: "tests.kits.e2e_ops:Sleeper", properties: {{marker: "{tmp_path / 'sleeping'}"}}}}
streams:
  lines: {{from: reader.output, to: [sleepy.input]}}
""")
    return str(spec)


def container_of(app_id: str, label: str) -> str:
    def find() -> str | None:
        for row in (admin(app_id, "containers") or {}).get("containers", []):
            if row["state"] == "RUNNING" and label in row["operators"]:
                return row["id"]
        return None
    return wait_until(find, timeout=60, what=f"the container of {label}")


def test_stram_stack_shows_the_frame_an_operator_sleeps_in(tmp_path):
    app_id = launch_detached(sleeper_spec(tmp_path, timeout_windows=100_000))
    try:
        container = container_of(app_id, "sleepy")
        wait_until(lambda: (tmp_path / "sleeping").exists(), timeout=60, what="sleepy to fall asleep")
        out = cli("stack", app_id, container)
        assert out.returncode == 0, out.stderr
        assert f'File "{E2E_OPS}"' in out.stdout and "in process_input" in out.stdout
        assert "time.sleep(self.seconds)  # the frame `stram stack` must show" in out.stdout

        out = cli("stack", app_id, container, "--json")
        assert out.returncode == 0, out.stderr
        trace = json.loads(out.stdout)
        sleepy_id = next(r["id"] for r in admin(app_id, "operators")["operators"] if r["name"] == "sleepy")
        (thread,) = [t for t in trace["threads"] if t["operator"] == sleepy_id]
        assert any(f["function"] == "process_input" and f["file"] == E2E_OPS for f in thread["frames"])
        assert trace["container"] == container and any(t["name"] == "MainThread" for t in trace["threads"])

        out = cli("stack", app_id, "container_999")
        assert out.returncode == 1 and "error:" in out.stderr and "unknown container 'container_999'" in out.stderr
        assert "Traceback" not in out.stderr

        # a container that does not answer (its agent stopped): a clear error after the timeout
        pid = agent_pid(app_id, container)
        os.kill(pid, signal.SIGSTOP)
        try:
            out = cli("stack", app_id, container, "--timeout", "2")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert out.returncode == 1, out.stdout
        assert f"container {container} did not answer within 2 s" in out.stderr
    finally:
        kill(app_id)


def test_a_blocked_operators_diagnostic_carries_its_stack(tmp_path):
    # TIMEOUT_WINDOW_COUNT 20 x 100 ms: sleepy is blocked 2 s after it falls asleep
    app_id = launch_detached(sleeper_spec(tmp_path, timeout_windows=20))
    try:
        def blocked_event() -> str | None:
            events = (admin(app_id, "info") or {}).get("events", [])
            return next((e["text"] for e in events if e["kind"] == "blocked" and "OperatorBlocked" in e["text"]),
                        None)
        text = wait_until(blocked_event, timeout=90, what="sleepy's blocked diagnostic")
        assert text.startswith("operator sleepy (2) blocked: no window finished for ")
        assert f'File "{E2E_OPS}"' in text and "in process_input" in text, text
        assert text.splitlines()[-1].endswith("(stack above)")
        info = admin(app_id, "info") or {}
        assert info["failures"]["sleepy"]["error"].startswith("OperatorBlocked: no window finished")
        wait_until(lambda: (admin(app_id, "info") or {}).get("restarts", {}).get("sleepy", 0) >= 1,
                   timeout=30, what="sleepy restarted")
    finally:
        kill(app_id)
