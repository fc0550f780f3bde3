"""KafkaOutput: tuples to a Kafka topic, exactly once per committed window in EXACTLY_ONCE mode.

Imported as ``stram.connectors.kafka:KafkaOutput``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from stram.connectors.kafkacommon import (Waiter, bootstrap, check_value_format, encode, existing_topics, import_client,
                                          topic_error)
from stram.operator import FatalError, InputPort, Operator, OperatorContext

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


class StuckCall(RuntimeError):
    """A client call that did not return long after its own timeout (its producer is abandoned)."""


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
    consumers see each window once. A window's records are dropped only once
    the marker, read back after the commit, covers it: a broker stopped while
    it answered a commit has been seen to report it done and then abort it
    (a loop of the broker-restart test); the marker read back tells, and the
    windows after it are published again. Otherwise records are produced as tuples
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
                 "_published", "_servers", "_txn_id", "_failed", "_target", "_lock", "_wake", "_thread",
                 "_stopping", "_error", "_call_timeout", "_confirmed")

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
        #: EXACTLY_ONCE: the window the marker was last read back to hold (records up to it are dropped)
        self._confirmed = -1
        self._servers = ""
        self._call_timeout = 10.0
        self._txn_id = ""
        self._failed: list[str] = []
        #: EXACTLY_ONCE: the newest committed window, for the publisher thread; its lock and
        #: wake-up; the error that ended it (raised on the operator's thread).
        self._target = -1
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._error: BaseException | None = None

    def setup(self, context: OperatorContext) -> None:
        self._who = who = f"KafkaOutput {context.name}[{context.partition_index}]"
        check_value_format(self.value_format, who)
        if not self.topic:
            raise FatalError(f"{who} needs the property 'topic'")
        self._servers = bootstrap(self.bootstrap_servers, who)
        self._ck = ck = import_client()
        self._waiter = Waiter(who, self._servers, float(self.timeout_seconds), context)
        # one blocking call of the client waits no longer than the whole outage may last
        self._call_timeout = max(1.0, min(10.0, float(self.timeout_seconds)))
        self._exactly_once = context.attributes.get("PROCESSING_MODE") == "EXACTLY_ONCE"
        self._txn_id = f"{self.transactional_id or f'stram-{context.app_id}-{context.name}'}-{context.partition_index}"
        self._producer = self._new_producer()
        metadata = self._wait(lambda: self._producer.list_topics(self.topic, timeout=5))
        why = topic_error(metadata, self.topic)
        if why:
            raise FatalError(f"{who}: the topic {self.topic!r} cannot be written on {self._servers}: {why} "
                             f"(topics there: {existing_topics(metadata)})")
        if self._exactly_once:
            # the transactions run on a thread of their own: a broker in trouble holds up
            # publishing, never the operator's windows (the master would take it for blocked)
            self._thread = threading.Thread(target=self._publisher, name=f"kafka-out-{context.id}", daemon=True)
            self._thread.start()

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

    def _wait(self, call: Any, settle: bool = True) -> Any:
        """``call()``, retried with log lines while the broker does not answer (FatalError past the timeout).

        ``settle``: its success ends the outage. Not for the steps of a transaction started over,
        which may succeed with the broker still away: the outage's clock runs on until a commit.
        """
        while True:
            try:
                result = call()
                if settle:
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

    def _start_transactions(self, settle: bool = True) -> None:
        """Fence older producers of this transactional id (their open transaction is aborted);
        read the last window published (publisher thread)."""
        self._wait(lambda: self._producer.init_transactions(self._call_timeout), settle)
        if self._marker is None:
            self._marker = self._ck.Consumer({"bootstrap.servers": self._servers, "group.id": self._txn_id,
                                              "enable.auto.commit": False, "isolation.level": "read_committed",
                                              "logger": logging.getLogger("stram.kafka.librdkafka")})
        tp = self._ck.TopicPartition(self.topic, 0)
        found = self._wait(lambda: self._marker.committed([tp], timeout=self._call_timeout), settle)
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
        full_since = None
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._delivered)
                if full_since is not None:
                    self._waiter.ok()
                return
            except BufferError:  # the local queue is full: serve deliveries, then try again
                now = time.monotonic()
                full_since = now if full_since is None else full_since
                waiting = f"{len(self._producer)} records wait in the producer's queue"
                if self._exactly_once and now - full_since > self._call_timeout:
                    # a transaction whose records do not go out (its producer is stuck after a broker
                    # restart): _publish aborts it, or starts over with a new producer
                    raise RuntimeError(f"{waiting}, none went out for {now - full_since:.0f}s")
                if not self._exactly_once:
                    self._waiter.trouble(waiting)  # FatalError past timeout_seconds
                self._producer.poll(0.1)
                self._check()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"a record to {self.topic} was not delivered: {err.str()}")

    def _check(self) -> None:
        if self._failed:
            failed, self._failed = self._failed, []
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            raise RuntimeError(f"{self._who}: {failed[0]}{more}")

    def end_window(self) -> None:
        if self._exactly_once:
            self._raise_publisher_error()
            with self._lock:
                if self._values and self._window > self._published:
                    self.pending[self._window] = self._values
            self._values = []
            return
        # at least once: the window's records are delivered before the window counts as done
        while self._wait(lambda: self._producer.flush(5)) > 0:
            self._waiter.trouble(f"{len(self._producer)} records not yet delivered")
            self._check()
        self._waiter.ok()
        self._check()

    def get_state(self) -> dict[str, Any]:
        with self._lock:  # the publisher thread drops published windows meanwhile
            state = super().get_state()
            state["pending"] = dict(self.pending)
        return state

    def committed(self, window_id: int) -> None:
        """Have every pending window up to ``window_id`` published, in one transaction.

        The publisher thread does it; this returns at once (it may run on the agent's
        heartbeat thread, once the operator has shut down). ``teardown`` waits for
        what is left; at the end of a run the master waits for it while the agent
        heartbeats that the operator is still ending (:mod:`stram.master.core.ending`).
        """
        if not self._exactly_once:
            return
        self._raise_publisher_error()
        with self._wake:
            self._target = max(self._target, window_id)
            self._wake.notify_all()

    def _raise_publisher_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _done(self, marker: int, confirmed: bool = True) -> None:
        """Windows up to ``marker`` are published. ``confirmed``: the marker was read back from Kafka,
        so their records are dropped, and a marker behind what was committed means the broker lost
        those commits (the windows after it are published again). Otherwise a commit returned: the
        records stay until a read confirms them."""
        with self._wake:
            if not confirmed:
                self._published = max(self._published, marker)
            else:
                if marker < self._published:
                    log.warning("%s: the broker holds windows up to %x as published, not up to %x: its commit "
                                "of the windows after %x was lost; publishing them again", self._who, marker,
                                self._published, marker)
                self._published = self._confirmed = marker
                for w in [w for w in self.pending if w <= marker]:
                    del self.pending[w]
            self._wake.notify_all()

    def _read_marker(self) -> None:
        """Read the marker back after a commit (the windows up to it are then on Kafka for good); a
        marker that cannot be read starts over with a new producer, whose fencing ends a transaction
        left open and whose start reads the marker again."""
        tp = self._ck.TopicPartition(self.topic, 0)
        try:
            found = self._bounded(lambda: self._marker.committed([tp], timeout=self._call_timeout), "committed")
            marker = marker_window(found[0].metadata if found else None)
            why = "" if marker >= self._published else f"it holds {marker:x}, behind the commit of {self._published:x}"
        except (self._ck.KafkaException, RuntimeError) as exc:
            why = f"it could not be read ({exc})"
        if why:  # a new producer's fencing settles the transaction (committed or aborted) before its read
            log.warning("%s: reading the marker back after a commit: %s; starting over with a new producer",
                        self._who, why)
            self._close_marker()
            self._producer = self._new_producer()
            self._start_transactions(settle=False)
            return
        self._done(marker)

    # -- the publisher thread (EXACTLY_ONCE) --------------------------------
    def _publisher(self) -> None:
        try:
            self._start_transactions()
            while True:
                with self._wake:
                    while not self._stopping and self._target <= self._published:
                        self._wake.wait(1.0)
                    if self._stopping:
                        return
                    target = self._target
                    windows = sorted(w for w in self.pending if self._published < w <= target)
                    records = [rec for w in windows for rec in self.pending[w]]
                if windows:
                    self._publish(windows, records, target)
                else:
                    self._done(target, confirmed=False)  # nothing to publish up to it
        except BaseException as exc:  # noqa: BLE001 - handed to the operator's thread
            if not self._stopping:
                log.error("%s: publishing failed: %s", self._who, exc)
                with self._wake:
                    self._error = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
                    self._wake.notify_all()

    def _bounded(self, call: Any, name: str) -> Any:
        """``call()`` on a thread of its own, given its timeout and as long again.

        librdkafka can stay in a transactional call past its timeout after a broker
        restart; the call is then left behind and :class:`StuckCall` starts the
        transaction over with a new producer, which fences the stuck one.
        """
        result: list[Any] = []

        def run() -> None:
            try:
                result.append((True, call()))
            except BaseException as exc:  # noqa: BLE001 - raised on the publisher's thread
                result.append((False, exc))
        thread = threading.Thread(target=run, name=f"kafka-{name}", daemon=True)
        thread.start()
        thread.join(2 * self._call_timeout + 5)
        if not result:
            raise StuckCall(f"{name} did not return within {2 * self._call_timeout + 5:.0f}s")
        ok, value = result[0]
        if not ok:
            raise value
        return value

    def _retry(self, call: Any, limit: float = 15.0) -> Any:
        """``call()``, retried while it fails with a retriable error, for ``limit`` seconds at most."""
        started = time.monotonic()
        while True:
            try:
                return call()
            except self._ck.KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or err.txn_requires_abort() or time.monotonic() - started > limit:
                    raise
                self._waiter.trouble(str(err))
                time.sleep(0.5)

    def _close_marker(self) -> None:
        if self._marker is not None:
            try:
                self._marker.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self._marker = None

    def _publish(self, windows: list[int], records: list[tuple[bytes | None, bytes]], marker: int) -> None:
        """One transaction: the windows' records and the marker ``marker``; retried until it is committed."""
        ck = self._ck
        what = f"the transaction of windows {windows[0]:x}..{windows[-1]:x}"
        while not self._stopping:
            try:
                self._producer.begin_transaction()
                for key, value in records:
                    self._produce(key, value)
                meta = self._marker.consumer_group_metadata()
                offsets = [ck.TopicPartition(self.topic, 0, 0, f"{MARKER_PREFIX}{marker:x}")]
                producer = self._producer
                self._retry(lambda: self._bounded(lambda: producer.send_offsets_to_transaction(
                    offsets, meta, self._call_timeout), "send_offsets_to_transaction"))
                self._retry(lambda: self._bounded(lambda: producer.commit_transaction(self._call_timeout),
                                                  "commit_transaction"))
                self._check()
                self._waiter.ok()
                self._done(marker, confirmed=False)
                log.info("%s: published windows %x..%x (%d records) up to committed window %x", self._who,
                         windows[0], windows[-1], len(records), marker)
                self._read_marker()
                return
            except ck.KafkaException as exc:
                err = exc.args[0]
                self._waiter.trouble(f"{what}: {err}")  # FatalError past timeout_seconds
                if not err.fatal() and err.txn_requires_abort():
                    try:
                        self._wait(lambda: self._producer.abort_transaction(self._call_timeout), settle=False)
                        continue
                    except ck.KafkaException:
                        pass
                # fenced, stuck (librdkafka may keep a stale group coordinator for the offsets after a
                # broker restart) or in an unknown state: a new producer and marker consumer (the
                # init fences the old producer and ends its open transaction); the marker tells
                # whether the windows went out
                log.warning("%s: starting over with a new producer after: %s", self._who, err)
                self._close_marker()
                self._producer = self._new_producer()
                self._start_transactions(settle=False)
                return  # the marker read tells which windows went out; the publisher loop sends the rest
            except RuntimeError as exc:  # records not delivered: the transaction cannot commit; start it again
                log.warning("%s: %s; aborting %s and trying again with a new producer", self._who, exc, what)
                self._waiter.trouble(f"{what}: {exc}")  # FatalError past timeout_seconds
                self._failed = []
                if not isinstance(exc, StuckCall):  # a stuck producer is left as it is
                    try:
                        self._producer.abort_transaction(self._call_timeout)
                    except ck.KafkaException:
                        pass
                self._close_marker()
                self._producer = self._new_producer()
                self._start_transactions(settle=False)
                return  # the marker read tells which windows went out; the publisher loop sends the rest

    def _unsettled(self) -> bool:
        """Committed windows not yet published, or published and not yet read back (the caller holds
        the lock)."""
        return self._published < self._target or any(w <= self._published for w in self.pending)

    @classmethod
    def split_state(cls, states, count, owner):  # noqa: ANN001, ANN206
        """Refuse: each partition owns a transactional id and uncommitted windows only it publishes."""
        raise ValueError("KafkaOutput cannot be repartitioned while running: each partition publishes its "
                         "own uncommitted windows under its own transactional id")

    def teardown(self) -> None:
        """Publish the committed windows not yet published (the broker was away at the end), then close.

        Raises when they could not be published (the publisher gave up after
        ``timeout_seconds``): the agent reports it, and the master does not end the
        application SUCCEEDED (:mod:`stram.master.core.ending`).
        """
        unpublished = None
        if self._thread is not None:
            with self._wake:
                if self._unsettled():
                    log.info("%s: publishing the last committed windows before stopping", self._who)
                while self._unsettled() and self._error is None and self._thread.is_alive():
                    self._wake.wait(0.5)
                if self._unsettled():
                    unpublished = (f"{self._who}: the committed windows after {self._published:x} up to "
                                   f"{self._target:x} were not published: {self._error or 'the publisher stopped'}")
                self._stopping = True
                self._wake.notify_all()
            self._thread.join(30)
            self._thread = None
        if self._producer is not None:
            if not self._exactly_once:
                try:
                    self._producer.flush(10)
                except Exception:  # noqa: BLE001
                    pass
            self._producer = None
        self._close_marker()
        if unpublished:
            raise RuntimeError(unpublished)
