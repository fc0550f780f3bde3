"""KafkaOutput: tuples to a Kafka topic, exactly once per committed window in EXACTLY_ONCE mode.

Imported as ``container.connectors.kafka:KafkaOutput``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from container.connectors.kafkacommon import (Waiter, bootstrap, check_value_format, encode, existing_topics,
                                              import_client, topic_error)
from container.operator import FatalError, InputPort, Operator, OperatorContext

log = logging.getLogger("stram.kafka")

#: The metadata of the marker offset: ``stram-window=<window id in hex>``.
MARKER_PREFIX = "stram-window="


def marker_window(metadata: str | None) -> int:
    """The committed window a marker's metadata records; -1 for none."""
    if metadata and metadata.startswith(MARKER_PREFIX):
        try:
            return int(metadata[len(MARKER_PREFIX):], 16)
        except ValueError:
            return -1
    return -1


class KafkaOutput(Operator):
    """Writes each tuple as one record of ``topic``.

    Properties
    ----------
    bootstrap_servers:
        ``host:port,...``; empty: ``$KAFKA_BOOTSTRAP_SERVERS``.
    topic:
        The topic written to (it must exist).
    value_format:
        ``json`` (default: each tuple as one JSON value), ``str`` or ``bytes``.
    key_field:
        Optional: a dict tuple's field whose value (as a string) becomes the
        record's key, so equal keys land in the same Kafka partition.
    producer:
        Extra librdkafka producer settings.
    transactional_id:
        Prefix of the transactional ids (EXACTLY_ONCE); default
        ``stram-<application id>-<operator>``; partition ``i`` uses ``<prefix>-<i>``.
    timeout_seconds:
        How long the broker may stay unreachable before the operator fails.

    In EXACTLY_ONCE mode each window's values are kept (in the checkpointed
    state) until the window is committed; then every window up to it is
    published in one Kafka transaction, with the committed window recorded in
    the same transaction (an offset commit of the group ``<transactional id>``
    on the topic's partition 0, metadata ``stram-window=<hex>``). A recovered
    partition's producer fences its predecessor (same transactional id), reads
    that marker and skips the windows already published: ``read_committed``
    consumers see each window once. Otherwise records are produced as tuples
    arrive and flushed at each window's end (at least once: a replay may repeat them).
    """

    input = InputPort()
    bootstrap_servers: str = ""
    topic: str = ""
    value_format: str = "json"
    key_field: str = ""
    producer: dict = {}
    transactional_id: str = ""
    timeout_seconds: float = 120.0
    transient = ("_producer", "_marker", "_window", "_values", "_ck", "_waiter", "_who", "_exactly_once",
                 "_published", "_servers", "_txn_id", "_failed", "_target", "_txn", "_need_init", "_last_try")

    def __init__(self) -> None:
        #: EXACTLY_ONCE: window id -> (key, value) pairs not yet published, oldest first.
        self.pending: dict[int, list[tuple[bytes | None, bytes]]] = {}
        self._producer: Any = None
        self._marker: Any = None
        self._window = 0
        self._values: list[tuple[bytes | None, bytes]] = []
        self._ck: Any = None
        self._waiter: Waiter | None = None
        self._who = "KafkaOutput"
        self._exactly_once = False
        self._published = -1
        self._servers = ""
        self._txn_id = ""
        self._failed: list[str] = []
        #: EXACTLY_ONCE: the newest committed window; the transaction in flight; whether
        #: init_transactions is still to be done; when the last step was tried.
        self._target = -1
        self._txn: dict[str, Any] | None = None
        self._need_init = False
        self._last_try = 0.0

    def setup(self, context: OperatorContext) -> None:
        self._who = who = f"KafkaOutput {context.name}[{context.partition_index}]"
        check_value_format(self.value_format, who)
        if not self.topic:
            raise FatalError(f"{who} needs the property 'topic'")
        self._servers = bootstrap(self.bootstrap_servers, who)
        self._ck = ck = import_client()
        self._waiter = Waiter(who, self._servers, float(self.timeout_seconds), context)
        self._exactly_once = context.attributes.get("PROCESSING_MODE") == "EXACTLY_ONCE"
        self._txn_id = f"{self.transactional_id or f'stram-{context.app_id}-{context.name}'}-{context.partition_index}"
        self._producer = self._new_producer()
        metadata = self._wait(lambda: self._producer.list_topics(self.topic, timeout=5))
        why = topic_error(metadata, self.topic)
        if why:
            raise FatalError(f"{who}: the topic {self.topic!r} cannot be written on {self._servers}: {why} "
                             f"(topics there: {existing_topics(metadata)})")
        if self._exactly_once:
            self._start_transactions()

    def _new_producer(self) -> Any:
        conf = {"bootstrap.servers": self._servers, "client.id": self._txn_id, "linger.ms": 5,
                "enable.idempotence": True, "error_cb": self._on_error,
                "logger": logging.getLogger("stram.kafka.librdkafka")}
        if self._exactly_once:
            conf["transactional.id"] = self._txn_id
            conf["transaction.timeout.ms"] = int(max(60.0, float(self.timeout_seconds)) * 1000)
        conf.update(self.producer or {})
        try:
            return self._ck.Producer(conf)
        except self._ck.KafkaException as exc:
            raise FatalError(f"{self._who}: bad producer settings: {exc}") from None

    def _on_error(self, err: Any) -> None:
        if err.code() in (self._ck.KafkaError._ALL_BROKERS_DOWN, self._ck.KafkaError._TRANSPORT):
            try:
                self._waiter.trouble(err.str())
            except FatalError as exc:
                self._failed.append(str(exc))

    def _wait(self, call: Any) -> Any:
        """``call()``, retried with log lines while the broker does not answer (FatalError past the timeout)."""
        while True:
            try:
                result = call()
                self._waiter.ok()
                return result
            except self._ck.KafkaException as exc:
                err = exc.args[0]
                if hasattr(err, "retriable") and not err.retriable() and err.code() not in (
                        self._ck.KafkaError._TIMED_OUT, self._ck.KafkaError._TRANSPORT,
                        self._ck.KafkaError._ALL_BROKERS_DOWN, self._ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
                        self._ck.KafkaError.NOT_COORDINATOR, self._ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
                    raise
                self._waiter.trouble(str(err))
                time.sleep(0.5)

    def _start_transactions(self, wait: bool = True) -> None:
        """Fence older producers of this transactional id; read the last window published.

        ``wait``: retry (with log lines) while the broker does not answer; else one
        bounded try that raises the client's KafkaException.
        """
        call = self._wait if wait else (lambda fn: fn())
        self._need_init = True
        call(lambda: self._producer.init_transactions(10 if wait else 2))
        if self._marker is None:
            self._marker = self._ck.Consumer({"bootstrap.servers": self._servers, "group.id": self._txn_id,
                                              "enable.auto.commit": False, "isolation.level": "read_committed",
                                              "logger": logging.getLogger("stram.kafka.librdkafka")})
        tp = self._ck.TopicPartition(self.topic, 0)
        found = call(lambda: self._marker.committed([tp], timeout=10 if wait else 2))
        self._need_init = False
        published = marker_window(found[0].metadata if found else None)
        if published >= 0:
            log.info("%s: windows up to %x were published already (transactional id %s)", self._who,
                     published, self._txn_id)
        self._done(published)

    # -- windows -----------------------------------------------------------
    def begin_window(self, window_id: int) -> None:
        self._window = window_id
        self._values = []

    def process_input(self, tuple: Any) -> None:
        key = None
        if self.key_field and isinstance(tuple, dict):
            raw = tuple.get(self.key_field)
            key = None if raw is None else str(raw).encode()
        value = encode(tuple, self.value_format)
        if self._exactly_once:
            self._values.append((key, value))
        else:
            self._produce(key, value)

    def _produce(self, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full: serve deliveries, then try again
                self._producer.poll(0.1)
                self._check()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"a record to {self.topic} was not delivered: {err.str()}")

    def _check(self) -> None:
        if self._failed:
            failed, self._failed = self._failed, []
            raise RuntimeError(f"{self._who}: {failed[0]}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))

    def end_window(self) -> None:
        if self._exactly_once:
            if self._values and self._window > self._published:
                self.pending[self._window] = self._values
            self._values = []
            if self._target > self._published:
                self._advance()  # a transaction left unfinished by broker trouble: one more step
            return
        # at least once: the window's records are delivered before the window counts as done
        while self._wait(lambda: self._producer.flush(5)) > 0:
            self._waiter.trouble(f"{len(self._producer)} records not yet delivered")
            self._check()
        self._waiter.ok()
        self._check()

    def committed(self, window_id: int) -> None:
        """Publish every pending window up to ``window_id`` in one transaction.

        While the broker is in trouble this does not block the operator's
        windows (the master would take it for blocked): each call, and each
        window's end, takes one bounded step of the transaction. Once every
        window the operator has seen is committed (the end of a bounded run),
        it waits until the transaction is done, since no window will follow.
        """
        if not self._exactly_once:
            return
        self._target = max(self._target, window_id)
        self._advance(force=True)
        if window_id >= self._window:
            while self._target > self._published and self._advance(force=True):
                time.sleep(0.5)

    def _advance(self, force: bool = False) -> bool:
        """One bounded step towards publishing up to ``_target``; True while more steps are needed."""
        now = time.monotonic()
        if not force and now - self._last_try < 0.5:
            return True
        self._last_try = now
        ck = self._ck
        try:
            if self._need_init:
                self._start_transactions(wait=False)
            if self._txn is None:
                windows = sorted(w for w in self.pending if self._published < w <= self._target)
                if not windows:
                    self._done(self._target)
                    return False
                self._producer.begin_transaction()
                for w in windows:
                    for key, value in self.pending[w]:
                        self._produce(key, value)
                self._txn = {"windows": windows, "marker": self._target, "stage": "offsets"}
            if self._txn["stage"] == "offsets":
                meta = self._marker.consumer_group_metadata()
                offsets = [ck.TopicPartition(self.topic, 0, 0, f"{MARKER_PREFIX}{self._txn['marker']:x}")]
                self._producer.send_offsets_to_transaction(offsets, meta, 2)
                self._txn["stage"] = "commit"
            self._producer.commit_transaction(2)
            self._check()
        except ck.KafkaException as exc:
            self._trouble(exc.args[0])
            return True
        self._waiter.ok()
        self._done(self._txn["marker"])
        self._txn = None
        return self._target > self._published

    def _done(self, marker: int) -> None:
        self._published = max(self._published, marker)
        for w in [w for w in self.pending if w <= marker]:
            del self.pending[w]

    def _trouble(self, err: Any) -> None:
        """A transaction step failed: retry it (retriable), abort (abortable) or a new producer (fatal)."""
        what = "transaction" if self._txn is None else \
            f"transaction for windows {self._txn['windows'][0]:x}..{self._txn['windows'][-1]:x}"
        self._waiter.trouble(f"{what}: {err}")  # FatalError past timeout_seconds
        if err.fatal():
            self._recreate()
        elif err.txn_requires_abort():
            try:
                self._producer.abort_transaction(2)
                self._txn = None
            except self._ck.KafkaException as again:
                if again.args[0].fatal():
                    self._recreate()
        elif not err.retriable() and err.code() != self._ck.KafkaError._TIMED_OUT:
            self._recreate()

    def _recreate(self) -> None:
        """A new producer with the same transactional id (its init fences the old one and aborts its
        open transaction); the marker tells what was published meanwhile."""
        self._txn = None
        self._producer = self._new_producer()
        self._need_init = True
        try:
            self._start_transactions(wait=False)
        except self._ck.KafkaException as exc:
            log.warning("%s: initializing transactions failed, will retry: %s", self._who, exc)

    @classmethod
    def split_state(cls, states, count, owner):  # noqa: ANN001, ANN206
        """Refuse: each partition owns a transactional id and uncommitted windows only it publishes."""
        raise ValueError("KafkaOutput cannot be repartitioned while running: each partition publishes its "
                         "own uncommitted windows under its own transactional id")

    def teardown(self) -> None:
        if self._producer is not None:
            if not self._exactly_once:
                try:
                    self._producer.flush(10)
                except Exception:  # noqa: BLE001
                    pass
            self._producer = None
        if self._marker is not None:
            try:
                self._marker.close()
            except Exception:  # noqa: BLE001
                pass
            self._marker = None
