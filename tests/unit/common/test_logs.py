"""Log files: the rate-limiting filter, rotation with a size cap, and what a full disk does to a handler."""

from __future__ import annotations

import logging
import os

import pytest

from stram.common import logsetup
from stram.common.logsetup import RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, limit: RateLimit) -> tuple[logging.Logger, list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(name)
    logger.handlers[:] = [Keep()]
    logger.filters[:] = [limit]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, lines


def test_rate_limit_summarizes_repeats():
    clock = Clock()
    logger, lines = _logger("test.ratelimit", RateLimit(burst=3, interval=10.0, clock=clock))
    for i in range(535):
        logger.warning("refused call from %s: wrong token", f"peer{i}")
    assert lines == [f"refused call from peer{i}: wrong token" for i in range(3)]
    clock.now += 10.0
    logger.warning("refused call from %s: wrong token", "late")
    assert lines[-1] == "refused call from late: wrong token (… repeated 532 times in the last 10 s)"
    logger.warning("refused call from %s: wrong token", "next")
    assert lines[-1] == "refused call from next: wrong token"  # the count is said once


def test_rate_limit_keeps_templates_apart():
    clock = Clock()
    logger, lines = _logger("test.ratelimit2", RateLimit(burst=2, interval=5.0, clock=clock))
    for _ in range(10):
        logger.warning("a %d", 1)
        logger.warning("b %d", 2)
        logger.error("a %d", 3)  # another level: another template
    assert lines == ["a 1", "b 2", "a 3", "a 1", "b 2", "a 3"]


def test_rate_limit_lets_a_slow_trickle_through():
    clock = Clock()
    logger, lines = _logger("test.ratelimit3", RateLimit(burst=1, interval=1.0, clock=clock))
    for i in range(20):
        logger.warning("tick %d", i)
        clock.now += 1.5
    assert lines == [f"tick {i}" for i in range(20)]


def test_rotation_caps_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("STRAM_LOG_MAX_BYTES", "4096")
    monkeypatch.setenv("STRAM_LOG_BACKUPS", "2")
    path = tmp_path / "logs" / "master.log"
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        handler = logsetup.configure(str(path))
        log = logging.getLogger("test.rotation")
        for i in range(2000):
            log.info("line %05d %s", i, "x" * 60)
        handler.flush()
        files = sorted(p.name for p in path.parent.iterdir())
        assert files == ["master.log", "master.log.1", "master.log.2"]
        assert all(p.stat().st_size <= 4096 for p in path.parent.iterdir())
        assert "line 01999" in path.read_text()
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        logging.raiseExceptions = True


def test_limits_ignore_bad_settings(monkeypatch):
    monkeypatch.setenv("STRAM_LOG_MAX_BYTES", "ten megs")
    monkeypatch.setenv("STRAM_LOG_BACKUPS", "-3")
    assert logsetup.limits() == (logsetup.DEFAULT_MAX_BYTES, 0)
