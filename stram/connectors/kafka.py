"""Kafka input and output operators over confluent-kafka (librdkafka).

``KafkaInput`` reads topics with offsets kept as checkpointed state, so a
recovered partition replays exactly the records after its recovery checkpoint,
and commits offsets to the consumer group only for committed windows.
``KafkaOutput`` (in :mod:`stram.connectors.kafkaout`) writes tuples, in
EXACTLY_ONCE mode with Kafka transactions per committed window.

Both find the broker in ``bootstrap_servers`` or, when that is empty, in
``$KAFKA_BOOTSTRAP_SERVERS`` (what ``eval "$(./scripts/kafka start)"`` sets).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Optional, Union

from stram.connectors.kafkacommon import (Waiter, bootstrap, check_value_format, decode, existing_topics, import_client,
                                          topic_error)
from stram.connectors.kafkaout import KafkaOutput
from stram.common.watermarks import IDLE, MAX_WATERMARK, MIN_WATERMARK, combine
from stram.operator import FatalError, InputOperator, OperatorContext, OutputPort, ShutdownException

__all__ = ["KafkaInput", "KafkaOutput", "assign_partitions"]

log = logging.getLogger("stram.kafka")


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def assign_partitions(keys: list[tuple[str, int]], count: int, index: int) -> list[tuple[str, int]]:
    """The Kafka partitions stram partition ``index`` of ``count`` reads: every ``count``-th of them, sorted.

    Deterministic (the same in every container and after every restart), not a
    consumer group's rebalancing.
    """
    ordered = sorted(keys)
    return [k for i, k in enumerate(ordered) if i % max(count, 1) == index]


class KafkaInput(InputOperator):
    """Emits the records of Kafka topics; ends the stream at ``stop_at: latest``.

    Properties
    ----------
    bootstrap_servers:
        ``host:port,...``; empty: ``$KAFKA_BOOTSTRAP_SERVERS``.
    topics:
        Topic names (a list, or one string with commas); or ``topic_pattern``, a
        regular expression matched against the cluster's topics at the first start.
    group_id:
        The consumer group offsets are committed to (for committed windows only);
        default ``stram-<application id>-<operator>``. The group's committed
        offsets are never read back: the checkpointed offsets are the truth.
    start:
        Where a partition without checkpointed offset starts: ``earliest``
        (default), ``latest``, ``{"timestamp": epoch_millis}`` or
        ``{"<topic>:<partition>": offset, ...}`` (others start at ``earliest``).
        Resolved to concrete offsets at the first start and checkpointed.
    stop_at:
        Unset: unbounded. ``latest``: end the stream once every partition reached
        the end offset it had when the operator first started.
    value_format:
        ``bytes``, ``str`` (the value decoded as UTF-8, like LineReader's lines)
        or ``json`` (one JSON value per record).
    on_bad_record:
        ``fail`` (default: the application fails, naming the record's
        topic/partition/offset) or ``skip`` (skipped, counted in the metric
        ``bad_records`` and logged).
    max_records_per_window:
        Cap on records emitted per window (None: no cap).
    consumer:
        Extra librdkafka consumer settings (e.g. ``fetch.max.bytes``).
    timeout_seconds:
        How long the broker may stay unreachable before the operator fails.
    timestamp_field:
        With ``value_format: json``: the field holding a record's event time (epoch ms). The
        operator then declares a watermark: per Kafka partition the largest timestamp seen minus
        ``out_of_orderness_ms``, and the minimum over its partitions (docs/event-time.md).
    idle_timeout_ms:
        A Kafka partition with no record for this long stops holding the watermark back
        (None: it always does, since it may still deliver old records).

    With ``partitions: N`` the topics' partitions, sorted, are dealt out
    round-robin: stram partition ``i`` reads every N-th (:func:`assign_partitions`);
    ``stram scale`` deals the merged offsets out again.
    """

    output = OutputPort()
    bootstrap_servers: str = ""
    topics: Union[list, str] = ""
    topic_pattern: str = ""
    group_id: str = ""
    start: Union[str, dict] = "earliest"
    stop_at: Optional[str] = None
    value_format: str = "str"
    on_bad_record: str = "fail"
    max_records_per_window: Optional[int] = None
    consumer: dict = {}
    timeout_seconds: float = 120.0
    timestamp_field: Optional[str] = None
    out_of_orderness_ms: int = 0
    idle_timeout_ms: Optional[int] = None
    #: Records fetched per ``emit_tuples`` call at most.
    batch_records: int = 2000
    transient = ("_consumer", "_assigned", "_left", "_waiter", "_who", "_ck", "_poll_seconds", "_window",
                 "_metric", "_probed", "_commit_logged", "_heard", "_context")

    def __init__(self) -> None:
        #: ``"topic:partition"`` -> offset of the next record to emit, for every partition known.
        self.offsets: dict[str, int] = {}
        #: ``stop_at: latest``: ``"topic:partition"`` -> end offset at the first start.
        self.end_offsets: dict[str, int] = {}
        #: The resolved topic list (a pattern is matched once, at the first start).
        self.resolved_topics: list[str] = []
        #: (window id, offsets of this partition's Kafka partitions at its end), newest last, not yet committed.
        self.window_offsets: list[tuple[int, dict[str, int]]] = []
        self.bad_records = 0
        self.records = 0
        #: ``"topic:partition"`` -> the largest event time seen in it (with ``timestamp_field``).
        self.max_timestamps: dict[str, int] = {}
        #: ``"topic:partition"`` -> when it last had a record (monotonic seconds), for ``idle_timeout_ms``.
        self._heard: dict[str, float] = {}
        self._context: Optional[OperatorContext] = None
        self._consumer: Any = None
        self._assigned: list[tuple[str, int]] = []
        self._left: Optional[int] = None
        self._waiter: Optional[Waiter] = None
        self._who = "KafkaInput"
        self._ck: Any = None
        self._poll_seconds = 0.05
        self._window = 0
        self._metric: Any = None
        self._probed = 0.0
        self._commit_logged = -60.0

    # -- setup -------------------------------------------------------------
    def setup(self, context: OperatorContext) -> None:
        self._who = f"KafkaInput {context.name}[{context.partition_index}]"
        self._metric = context.set_metric
        who = self._who
        check_value_format(self.value_format, who)
        if self.on_bad_record not in ("fail", "skip"):
            raise FatalError(f"{who}: on_bad_record must be 'fail' or 'skip', not {self.on_bad_record!r}")
        if self.timestamp_field is not None and self.value_format != "json":
            raise FatalError(f"{who}: timestamp_field needs value_format 'json' (records with fields), "
                             f"not {self.value_format!r}")
        self._context = context
        if self.stop_at not in (None, "", "latest"):
            raise FatalError(f"{who}: stop_at must be unset or 'latest', not {self.stop_at!r}")
        self._poll_seconds = min(0.05, context.streaming_window_size_millis / 4000)
        servers = bootstrap(self.bootstrap_servers, who)
        self._ck = ck = import_client()
        self._waiter = Waiter(who, servers, float(self.timeout_seconds), context)
        conf = {"bootstrap.servers": servers, "group.id": self.group_id or f"stram-{context.app_id}-{context.name}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": True,
                "isolation.level": "read_committed", "client.id": f"stram-{context.name}-{context.partition_index}",
                "error_cb": self._on_error, "on_commit": self._on_commit,
                "logger": logging.getLogger("stram.kafka.librdkafka")}
        conf.update(self.consumer or {})
        try:
            self._consumer = ck.Consumer(conf)
        except ck.KafkaException as exc:
            raise FatalError(f"{who}: bad consumer settings: {exc}") from None
        metadata = self._metadata()
        if not self.resolved_topics:
            self.resolved_topics = self._topics(metadata)
        every = []
        for topic in self.resolved_topics:
            why = topic_error(metadata, topic)
            if why:
                raise FatalError(f"{who}: the topic {topic!r} cannot be read from {servers}: {why} "
                                 f"(topics there: {existing_topics(metadata)})")
            every += [(topic, p) for p in metadata.topics[topic].partitions]
        self._assigned = assign_partitions(every, context.partition_count, context.partition_index)
        # after `stram scale` every new partition got every offset: keep its own only, so that the
        # next split merges each partition's offset from its one owner
        mine = {tp_key(t, p) for t, p in self._assigned}
        self.offsets = {k: v for k, v in self.offsets.items() if k in mine}
        self.end_offsets = {k: v for k, v in self.end_offsets.items() if k in mine}
        self.max_timestamps = {k: v for k, v in self.max_timestamps.items() if k in mine}
        self._resolve_start()
        tps = [ck.TopicPartition(t, p, self.offsets[tp_key(t, p)]) for t, p in self._assigned]
        self._consumer.assign(tps)
        log.info("%s reads %s from %s", who, ", ".join(f"{t}:{p}@{self.offsets[tp_key(t, p)]}"
                                                       for t, p in self._assigned) or "no partition", servers)

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            log.error("%s: fatal Kafka client error: %s", self._who, err)
        elif self._waiter is not None and err.code() in (self._ck.KafkaError._ALL_BROKERS_DOWN,
                                                         self._ck.KafkaError._TRANSPORT):
            self._waiter.trouble(err.str())

    def _on_commit(self, err: Any, partitions: Any) -> None:
        if err is not None:  # the group's view lags a little longer; the next commit catches up
            now = time.monotonic()
            if now - self._commit_logged >= 10.0:
                self._commit_logged = now
                log.warning("%s: committing offsets to Kafka failed (the group's offsets lag until a later "
                            "commit): %s", self._who, err)

    def _metadata(self, topic: str | None = None) -> Any:
        """The cluster's metadata, waiting (with log lines) while the broker does not answer."""
        while True:
            try:
                md = self._consumer.list_topics(topic, timeout=5)
                self._waiter.ok()
                return md
            except self._ck.KafkaException as exc:
                self._waiter.trouble(str(exc.args[0]))

    def _topics(self, metadata: Any) -> list[str]:
        if self.topic_pattern:
            pattern = re.compile(self.topic_pattern)
            found = sorted(t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__"))
            if not found:
                raise FatalError(f"{self._who}: no topic matches topic_pattern {self.topic_pattern!r} "
                                 f"(topics there: {existing_topics(metadata)})")
            return found
        topics = self.topics.split(",") if isinstance(self.topics, str) else list(self.topics or [])
        topics = [t.strip() for t in topics if t and t.strip()]
        if not topics:
            raise FatalError(f"{self._who} needs the property 'topics' (or 'topic_pattern')")
        return topics

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        while True:
            try:
                low, high = self._consumer.get_watermark_offsets(self._ck.TopicPartition(topic, partition),
                                                                 timeout=5)
                self._waiter.ok()
                return low, high
            except self._ck.KafkaException as exc:
                self._waiter.trouble(str(exc.args[0]))

    def _resolve_start(self) -> None:
        """Concrete offsets for assigned partitions that have none yet; the end offsets for ``stop_at``."""
        ck = self._ck
        start = self.start
        for topic, partition in self._assigned:
            key = tp_key(topic, partition)
            if self.stop_at == "latest" and key not in self.end_offsets:
                self.end_offsets[key] = self._watermarks(topic, partition)[1]
            if key in self.offsets:
                continue
            low, high = self._watermarks(topic, partition)
            if start == "latest":
                offset = high
            elif isinstance(start, dict) and "timestamp" in start:
                found = self._consumer.offsets_for_times([ck.TopicPartition(topic, partition, int(start["timestamp"]))],
                                                         timeout=self.timeout_seconds)
                offset = found[0].offset if found and found[0].offset >= 0 else high
            elif isinstance(start, dict):
                offset = int(start.get(key, low))
            elif start == "earliest":
                offset = low
            else:
                raise FatalError(f"{self._who}: start must be 'earliest', 'latest', {{'timestamp': millis}} or "
                                 f"{{'topic:partition': offset}}, not {start!r}")
            self.offsets[key] = offset

    # -- windows -----------------------------------------------------------
    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._left = self.max_records_per_window

    def _done(self) -> bool:
        return self.stop_at == "latest" and all(
            self.offsets[tp_key(t, p)] >= self.end_offsets.get(tp_key(t, p), 0) for t, p in self._assigned)

    def emit_tuples(self) -> None:
        if self._done():
            if self._context is not None and self.timestamp_field is not None:
                self._context.emit_watermark(MAX_WATERMARK)  # every event-time window may fire
            raise ShutdownException("reached the end offsets of stop_at: latest")
        n = self.batch_records
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return
        if not self._assigned:
            time.sleep(self._poll_seconds)
            return
        msgs = self._consumer.consume(num_messages=n, timeout=self._poll_seconds)
        emit = self.output.emit
        offsets = self.offsets
        ends = self.end_offsets if self.stop_at == "latest" else None
        emitted = 0
        eof = []
        field = self.timestamp_field
        highs = self.max_timestamps
        now = time.monotonic()
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == self._ck.KafkaError._PARTITION_EOF:
                    eof.append((msg.topic(), msg.partition()))
                    continue
                if err.fatal():
                    raise FatalError(f"{self._who}: fatal Kafka error: {err.str()}")
                self._waiter.trouble(err.str())
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            key = tp_key(topic, partition)
            if offset < offsets[key]:
                continue  # already emitted (a fetch from before a seek)
            if ends is not None and offset >= ends.get(key, 0):
                offsets[key] = max(offsets[key], ends.get(key, 0))
                continue  # past the end of a bounded run
            try:
                value = decode(msg.value(), self.value_format)
            except ValueError as exc:
                offsets[key] = offset + 1
                self._bad(topic, partition, offset, str(exc))
                continue
            offsets[key] = offset + 1
            if field is not None:
                ts = value.get(field) if isinstance(value, dict) else None
                if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                    self._bad(topic, partition, offset, f"without a numeric {field!r}")
                    continue
                if ts > highs.get(key, ts - 1):
                    highs[key] = int(ts)
                self._heard[key] = now
            emit(value)
            emitted += 1
        if any(msg.error() is None for msg in msgs):
            self._waiter.ok()
        elif self._waiter.waiting:
            self._probe()
        for topic, partition in eof:  # past aborted transactions' records and markers: the consumer's position
            key = tp_key(topic, partition)
            pos = self._consumer.position([self._ck.TopicPartition(topic, partition)])[0].offset
            if ends is not None:
                pos = min(pos, ends.get(key, 0))
            if pos > offsets[key]:
                offsets[key] = pos
        self.records += emitted
        if self._left is not None:
            self._left -= emitted

    def _probe(self) -> None:
        """While the broker is away: a short metadata request every few seconds tells when it is back."""
        now = time.monotonic()
        if now - self._probed < 3.0:
            return
        self._probed = now
        try:
            self._consumer.list_topics(self._assigned[0][0], timeout=0.5)
        except self._ck.KafkaException as exc:
            self._waiter.trouble(str(exc.args[0]))  # a line every few seconds; FatalError past the timeout
        else:
            self._waiter.ok()

    def _bad(self, topic: str, partition: int, offset: int, why: str) -> None:
        where = f"topic {topic} partition {partition} offset {offset}"
        if self.on_bad_record == "fail":
            raise FatalError(f"{self._who}: the record at {where} is {why} for value_format "
                             f"{self.value_format!r} (on_bad_record: fail; 'skip' skips and counts such records)")
        self.bad_records += 1
        if self.bad_records <= 10 or self.bad_records % 1000 == 0:
            log.warning("%s: skipped the record at %s: %s (%d bad records so far)", self._who, where, why,
                        self.bad_records)

    def end_window(self) -> None:
        mine = {tp_key(t, p): self.offsets[tp_key(t, p)] for t, p in self._assigned}
        if not self.window_offsets or self.window_offsets[-1][1] != mine:
            self.window_offsets.append((self._window, mine))
        if self._metric is not None:
            self._metric("records", self.records)
            self._metric("bad_records", self.bad_records)
        if self.timestamp_field is not None and self._context is not None:
            self._context.emit_watermark(MAX_WATERMARK if self._done() else self._watermark())

    def _watermark(self) -> int:
        """The minimum over this partition's Kafka partitions of their largest timestamp minus the
        bound, leaving out those quiet for ``idle_timeout_ms``; when every one is quiet, the largest
        of their values (as Flink's valve does: the quiet ones hold nothing back, and none is ahead)."""
        now = time.monotonic()
        idle = self.idle_timeout_ms
        values, quiet = [], []
        for t, p in self._assigned:
            key = tp_key(t, p)
            heard = self._heard.setdefault(key, now)  # quiet since this process started
            value = self.max_timestamps[key] - self.out_of_orderness_ms if key in self.max_timestamps \
                else MIN_WATERMARK  # nothing seen yet: it may still deliver anything
            if idle is not None and (now - heard) * 1000 >= idle:
                quiet.append(value)
            else:
                values.append(value)
        if values:
            return combine(values)
        known = [v for v in quiet if v != MIN_WATERMARK]
        return max(known) if known else IDLE

    def committed(self, window_id: int) -> None:
        """Commit to the consumer group the offsets at the end of the newest window <= ``window_id``."""
        older = [entry for entry in self.window_offsets if entry[0] <= window_id]
        if not older:
            return
        self.window_offsets = [entry for entry in self.window_offsets if entry[0] > window_id]
        offsets = older[-1][1]
        if self._consumer is None or not offsets:
            return
        tps = []
        for key, off in offsets.items():
            topic, _, partition = key.rpartition(":")
            tps.append(self._ck.TopicPartition(topic, int(partition), off))
        try:  # asynchronous: a broker in trouble must not hold the operator's windows up
            self._consumer.commit(offsets=tps, asynchronous=True)
        except self._ck.KafkaException as exc:
            log.warning("%s: committing offsets for window %x to Kafka failed: %s", self._who, window_id, exc)

    @classmethod
    def split_state(cls, states: list[dict[str, Any]], count: int, owner: Any) -> list[dict[str, Any]]:
        """Merge the offsets of every old partition; each new partition picks its own in ``setup``."""
        offsets: dict[str, int] = {}
        ends: dict[str, int] = {}
        highs: dict[str, int] = {}
        topics: list[str] = []
        for state in states:
            offsets.update(state.get("offsets", {}))
            ends.update(state.get("end_offsets", {}))
            highs.update(state.get("max_timestamps", {}))
            topics = topics or list(state.get("resolved_topics", []))
        return [{"offsets": dict(offsets), "end_offsets": dict(ends), "resolved_topics": list(topics),
                 "max_timestamps": dict(highs), "window_offsets": [], "bad_records": 0, "records": 0}
                for _ in range(count)]

    def teardown(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self._consumer = None
