"""What KafkaInput and KafkaOutput share: settings, waiting for the broker, value formats."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable

from stram.operator import FatalError, OperatorContext

log = logging.getLogger("stram.kafka")

#: Where the connectors find the broker when ``bootstrap_servers`` is not set
#: (``eval "$(./scripts/kafka start)"`` exports it).
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
VALUE_FORMATS = ("bytes", "str", "json")
#: Seconds between two "still waiting for the broker" lines.
LOG_EVERY = 10.0


def bootstrap(value: str, who: str) -> str:
    """The ``bootstrap_servers`` property, else $KAFKA_BOOTSTRAP_SERVERS; FatalError when neither is set."""
    servers = (value or os.environ.get(BOOTSTRAP_ENV) or "").strip()
    if not servers:
        raise FatalError(f"{who} needs the property 'bootstrap_servers' (or ${BOOTSTRAP_ENV} in the "
                         f"container's environment, e.g. eval \"$(./scripts/kafka start)\" before launching)")
    return servers


def check_value_format(value_format: str, who: str) -> None:
    if value_format not in VALUE_FORMATS:
        raise FatalError(f"{who}: value_format must be one of {', '.join(VALUE_FORMATS)}, not {value_format!r}")


def import_client() -> Any:
    """The ``confluent_kafka`` module; FatalError saying how to install it."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - an install problem
        raise FatalError(f"the Kafka connectors need the confluent-kafka package: pip install 'stram[kafka]' "
                         f"({exc})") from None
    return confluent_kafka


class Waiter:
    """Rate-limited "waiting for the broker" lines and the time limit of one outage.

    ``trouble(detail)`` is called each time the broker could not be reached; the
    first call starts the clock, and a line goes to the container's log and the
    master's log at most every :data:`LOG_EVERY` seconds. ``ok()`` ends the
    outage (with a line saying so when one was logged). Past ``timeout`` seconds
    ``trouble`` raises :class:`FatalError` with the last detail.
    """

    def __init__(self, who: str, servers: str, timeout: float, context: OperatorContext | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.who = who
        self.servers = servers
        self.timeout = timeout
        self.context = context
        self.clock = clock
        self.since: float | None = None
        self.logged = 0.0
        self.lines = 0

    def _say(self, msg: str, level: int = logging.WARNING) -> None:
        log.log(level, msg)
        if self.context is not None:
            try:
                self.context.log(msg)
            except Exception:  # noqa: BLE001 - the master's log is best effort
                pass

    def trouble(self, detail: str) -> None:
        now = self.clock()
        if self.since is None:
            self.since, self.logged = now, now - LOG_EVERY
        waited = now - self.since
        if waited > self.timeout:
            raise FatalError(f"{self.who}: the Kafka broker at {self.servers} did not answer for "
                             f"{waited:.0f}s (timeout_seconds={self.timeout:g}): {detail}")
        if now - self.logged >= LOG_EVERY:
            self.logged = now
            self.lines += 1
            self._say(f"{self.who}: waiting for the Kafka broker at {self.servers} ({waited:.0f}s so far, "
                      f"failing after {self.timeout:g}s): {detail}")

    def ok(self) -> None:
        if self.since is not None:
            if self.lines:
                self._say(f"{self.who}: the Kafka broker at {self.servers} answers again after "
                          f"{self.clock() - self.since:.0f}s", logging.INFO)
            self.since, self.lines = None, 0

    @property
    def waiting(self) -> bool:
        return self.since is not None


def decode(value: bytes | None, value_format: str) -> Any:
    """A record's value as the operator emits it; ValueError for a value that is not valid ``json``."""
    if value_format == "bytes":
        return value
    if value is None:
        return None
    if value_format == "str":
        return value.decode("utf-8", "replace")
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None


def encode(tuple: Any, value_format: str) -> bytes:
    """A tuple as a record's value; TypeError for a non-bytes tuple with ``bytes``."""
    if value_format == "json":
        return json.dumps(tuple, separators=(",", ":"), default=str).encode()
    if value_format == "str":
        return (tuple if isinstance(tuple, str) else str(tuple)).encode()
    if isinstance(tuple, (bytes, bytearray, memoryview)):
        return bytes(tuple)
    raise TypeError(f"value_format 'bytes' needs bytes tuples, not {type(tuple).__name__}")


def topic_error(metadata: Any, topic: str) -> str | None:
    """Why ``topic`` cannot be used per the cluster metadata (None: it exists with partitions)."""
    tm = metadata.topics.get(topic)
    if tm is None or (tm.error is not None and tm.error.code() != 0):
        return (tm.error.str() if tm is not None and tm.error is not None else "unknown topic")
    if not tm.partitions:
        return "it has no partitions"
    return None


def existing_topics(metadata: Any) -> str:
    names = sorted(t for t in metadata.topics if not t.startswith("__"))
    return ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") if names else "none"
