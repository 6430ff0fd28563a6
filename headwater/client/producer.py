"""The producer: batching, compression, acks, idempotence, Kafka's partitioner.

``AsyncProducer.send`` appends a record to its partition's batch in the
``RecordAccumulator`` and returns a future; a sender task turns ready
batches into Produce requests, one per broker, with up to
``max.in.flight.requests.per.connection`` outstanding. Retriable failures
(a dropped connection, a leader change) put batches back in order; an
idempotent producer (the default, as in Kafka 3) keeps each batch's
sequence number across retries so the broker drops duplicates.

``Producer`` is the blocking front: ``send`` appends straight from the
caller's thread under a lock (no event-loop round trip per record) and
returns a ``concurrent.futures.Future``; the loop thread sends.

With ``transactional.id`` the producer is transactional (KIP-98), with
Kafka's API: ``init_transactions`` (fences older producers of the id and
aborts what they left open), ``begin_transaction``, ``send``...,
``send_offsets_to_transaction``, ``commit_transaction`` /
``abort_transaction``. The rules live in the sans-I/O
``TransactionManager``; the producer adds each partition to the transaction
(AddPartitionsToTxn) before its first batch goes out (the batches wait for
it), marks batches transactional, flushes before EndTxn, and turns a failed
batch into an abortable transaction.

Size: the producer's public API and its sender: batching, idempotence
(sequences, epochs) and transactions meet in the send loop and
its error handling; the accumulator, partitioner and transaction manager are
their own modules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pyarrow as pa

from headwater.client.accumulator import ProducerBatch, RecordAccumulator, estimate_record_size
from headwater.client.cluster import ClusterClient
from headwater.client.config import ProducerConfig
from headwater.client.connection import BrokerConnection
from headwater.client.coordinator import (
    CoordinatorClient,
    CoordinatorType,
    end_transaction,
)
from headwater.client.errors import (
    RETRIABLE_CODES,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from headwater.client.loop_thread import EventLoopThread
from headwater.client.partitioner import StickyPartitioner, partition_for_key
from headwater.client.transaction_manager import (
    Action,
    TransactionManager,
    TransactionStateError,
    TxnState,
    classify,
    error_for,
)
from headwater.client.types import (
    ConsumerGroupMetadata,
    Header,
    RecordMetadata,
    TopicMetadata,
    TopicPartition,
    TransactionHandle,
)
from headwater.protocol.apis import ApiKey
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProduceRequestData,
    ProduceResponseData,
    ProduceTopicData,
)
from headwater.records.batch import HEADER_SIZE as RECORD_BATCH_OVERHEAD
from headwater.records.columnar_encode import encode_batches
from headwater.records.compression import Compression

log = logging.getLogger(__name__)

MESSAGE_TOO_LARGE: Final = 10
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
DUPLICATE_SEQUENCE_NUMBER: Final = 46
MAX_SEQUENCE: Final = 0x7FFFFFFF
_CODECS: Final = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def _as_bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


class TransactionAbortedError(KafkaError):
    """The record's transaction was aborted before the record was sent."""

    def __init__(self, message: str = "the transaction was aborted") -> None:
        super().__init__(-1, message)

    def __reduce__(self) -> tuple[type[KafkaError], tuple[int, str]]:
        return (KafkaError, (self.code, self.message))


def _group_metadata(group: str | ConsumerGroupMetadata) -> ConsumerGroupMetadata:
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str) and group:
        return ConsumerGroupMetadata(group)
    raise ValueError(f"a group id or ConsumerGroupMetadata is needed, not {group!r}")


def _offset_value(value: Any) -> tuple[int, str]:
    """An offset as an int, or anything with ``.offset`` (and ``.metadata``)."""
    if isinstance(value, int):
        return value, ""
    offset = getattr(value, "offset", None)
    if not isinstance(offset, int):
        raise TypeError(f"an offset must be an int or have an int .offset, not {value!r}")
    return offset, getattr(value, "metadata", "") or ""


def _worst_code(codes: list[int]) -> int:
    """The code that decides a multi-partition answer: fatal, then abortable, then retries."""
    order = {Action.FATAL: 0, Action.ABORTABLE: 1, Action.FIND_COORDINATOR: 2, Action.RETRY: 3}
    failed = [c for c in codes if c]
    return min(failed, key=lambda c: order.get(classify(c), 4)) if failed else 0


def _worst_add_partitions_error(response: Any) -> int:
    return _worst_code(
        [
            int(p.partition_error_code)
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]
    )


def _worst_partition_error(response: Any) -> int:
    return _worst_code([int(p.error_code) for t in response.topics for p in t.partitions])


def _resolve(future: Any, result: RecordMetadata) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: Any, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class AsyncProducer:
    """A producer on the caller's event loop."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = ProducerConfig.from_mapping(config, **kwargs)
        c = self.config
        self.acks = c.required_acks
        self.idempotent = c.idempotent
        self._cluster = ClusterClient(
            c.bootstrap_servers,
            client_id=c.client_id,
            request_timeout_ms=c.request_timeout_ms,
            reconnect_backoff_ms=c.reconnect_backoff_ms,
            reconnect_backoff_max_ms=c.reconnect_backoff_max_ms,
            security=c.security,
        )
        self._accumulator = RecordAccumulator(
            batch_size=c.batch_size, linger_ms=c.linger_ms, compression=_CODECS[c.compression_type]
        )
        self._lock = threading.Lock()  # guards the accumulator and the partitioner
        # buffer.memory: send() blocks (max.block.ms) while this many bytes wait.
        self._space = threading.Condition(self._lock)
        self._buffered_bytes = 0
        self._space_freed: asyncio.Event | None = None
        self._partitioner = StickyPartitioner()
        self._sequences: dict[TopicPartition, int] = {}
        self._producer_id = -1
        self._producer_epoch = -1
        self._in_flight: dict[int, int] = {}  # node -> requests outstanding
        self._incomplete: set[ProducerBatch] = set()  # appended, not yet resolved
        self._wakeup: asyncio.Event | None = None
        self._all_done: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refreshing: set[str] = set()  # topics with a metadata refresh under way
        self._connecting: set[int] = set()  # nodes with a connection attempt under way
        self._coordinators = CoordinatorClient(
            self._cluster, retry_backoff_ms=c.retry_backoff_ms, max_block_ms=c.max_block_ms
        )
        self._txn: TransactionManager | None = (
            TransactionManager(c.transactional_id, c.transaction_timeout_ms)
            if c.transactional
            else None
        )
        self._adding: asyncio.Task[None] | None = None  # AddPartitionsToTxn in flight
        self._closed = False

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind to the running loop and start the sender (send() does this lazily)."""
        if self._sender is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._space_freed = asyncio.Event()
        self._all_done = asyncio.Event()
        self._all_done.set()
        if self.idempotent and self._txn is None:
            await self._init_producer_id()
        self._sender = asyncio.ensure_future(self._run_sender())

    async def _init_producer_id(self) -> None:
        resp = await self._cluster.request_any(
            ApiKey.INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        if int(resp.error_code):
            raise KafkaError(int(resp.error_code), "InitProducerId failed")
        self._producer_id = int(resp.producer_id)
        self._producer_epoch = int(resp.producer_epoch)

    # -- transactions ------------------------------------------------------------

    def _transaction_manager(self) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError("transactional.id is not set: no transactions")
        return self._txn

    @property
    def transaction_state(self) -> TxnState | None:
        """Where the transaction stands (None for a producer without ``transactional.id``)."""
        return None if self._txn is None else self._txn.state

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for ``transactional.id`` (once, before the first
        transaction). The coordinator bumps the epoch, which fences every older
        producer of the id, and aborts a transaction one of them left open."""
        txn = self._transaction_manager()
        await self.start()
        with self._lock:
            txn.begin_init()
        tid = txn.transactional_id
        try:
            resp, code = await self._coordinators.request(
                CoordinatorType.TRANSACTION,
                tid,
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": tid,
                    "transaction_timeout": txn.transaction_timeout_ms,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
                what=f"InitProducerId for {tid!r}",
            )
        except BaseException as exc:
            with self._lock:
                txn.abortable_error(
                    exc if isinstance(exc, KafkaError) else KafkaError(-1, str(exc))
                )
            raise
        with self._lock:
            if code:
                txn.handle(code, f"InitProducerId for {tid!r}")
                raise error_for(code, f"InitProducerId for {tid!r}")
            txn.init_done(int(resp.producer_id), int(resp.producer_epoch))
            self._producer_id = int(resp.producer_id)
            self._producer_epoch = int(resp.producer_epoch)
            self._sequences.clear()  # a new epoch starts its sequences at 0

    def begin_transaction(self) -> None:
        """Start a transaction (local only; the coordinator hears of it with the first send)."""
        txn = self._transaction_manager()
        with self._lock:
            txn.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, Any],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        ``offsets`` maps partitions to the next offset to consume (an int, or an
        object with ``.offset`` and optional ``.metadata``); ``group`` is a group
        id or a ``ConsumerGroupMetadata``. The offsets become visible to the
        group only if the transaction commits.
        """
        txn = self._transaction_manager()
        meta = _group_metadata(group)
        with self._lock:
            txn.check_can_send_offsets()
        tid = txn.transactional_id
        what = f"AddOffsetsToTxn({meta.group_id!r}) for {tid!r}"
        _, code = await self._coordinators.request(
            CoordinatorType.TRANSACTION,
            tid,
            ApiKey.ADD_OFFSETS_TO_TXN,
            {
                "transactional_id": tid,
                "producer_id": self._producer_id,
                "producer_epoch": self._producer_epoch,
                "group_id": meta.group_id,
            },
            what=what,
        )
        self._raise_for_transaction(code, what)
        with self._lock:
            txn.offsets_added()
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, value in offsets.items():
            offset, metadata = _offset_value(value)
            by_topic.setdefault(tp[0], []).append(
                {
                    "partition_index": int(tp[1]),
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )
        what = f"TxnOffsetCommit({meta.group_id!r}) for {tid!r}"
        _, code = await self._coordinators.request(
            CoordinatorType.GROUP,
            meta.group_id,
            ApiKey.TXN_OFFSET_COMMIT,
            {
                "transactional_id": tid,
                "group_id": meta.group_id,
                "producer_id": self._producer_id,
                "producer_epoch": self._producer_epoch,
                "generation_id": meta.generation_id,
                "member_id": meta.member_id,
                "group_instance_id": meta.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
            error_of=_worst_partition_error,
            what=what,
        )
        self._raise_for_transaction(code, what)

    def _raise_for_transaction(self, code: int, what: str) -> None:
        """Apply a final coordinator answer to the transaction; raise unless it is 0."""
        if not code:
            return
        assert self._txn is not None
        with self._lock:
            action = self._txn.handle(code, what)
        if action in (Action.ABORTABLE, Action.FATAL):
            self._fail_undrained(error_for(code, what))
        raise error_for(code, what)

    async def commit_transaction(self) -> None:
        """Flush, then commit: every record sent in the transaction becomes visible at once.

        Raises ``TransactionAbortableError`` if a record failed (abort, then
        try again) and ``ProducerFencedError`` if a newer producer took over.
        """
        txn = self._transaction_manager()
        with self._lock:
            txn.begin_commit()
        await self.flush()
        await self._settle_partitions()
        with self._lock:
            if txn.has_error:
                assert txn.last_error is not None
                raise txn.last_error
        if txn.started_on_coordinator:
            await self._end_transaction(txn, commit=True)
        with self._lock:
            txn.end_done()

    async def abort_transaction(self) -> None:
        """Drop what is not sent yet, wait for what is, and abort on the coordinator."""
        txn = self._transaction_manager()
        with self._lock:
            txn.begin_abort()
        self._fail_undrained(TransactionAbortedError())
        await self.flush()
        await self._settle_partitions()
        if txn.started_on_coordinator:
            await self._end_transaction(txn, commit=False)
        with self._lock:
            txn.end_done()

    async def hand_off_transaction(self) -> TransactionHandle | None:
        """Flush the open transaction and give it away without ending it.

        For a coordinator process that commits or aborts many producers'
        transactions at once (the exactly-once Spark sink's driver): pass the
        handle to ``end_transactions`` there. None means the coordinator never
        heard of the transaction (nothing was sent in it): there is nothing to
        end. This producer needs ``init_transactions`` again before its next
        transaction (which fences the handed-off one if it is still open).
        """
        txn = self._transaction_manager()
        with self._lock:
            txn.check_can_append()  # in a transaction, without an error
        await self.flush()
        await self._settle_partitions()
        with self._lock:
            if txn.has_error:
                assert txn.last_error is not None
                raise txn.last_error
            started = txn.started_on_coordinator
            owner = txn.hand_off()
        if not started:
            return None
        return TransactionHandle(txn.transactional_id, owner.producer_id, owner.epoch)

    async def _settle_partitions(self) -> None:
        """Wait for an AddPartitionsToTxn in flight: it may add to what EndTxn must end."""
        adding = self._adding
        if adding is not None and not adding.done():
            await asyncio.gather(adding, return_exceptions=True)

    async def _end_transaction(self, txn: TransactionManager, commit: bool) -> None:
        try:
            await end_transaction(
                self._coordinators,
                txn.transactional_id,
                self._producer_id,
                self._producer_epoch,
                commit,
            )
        except KafkaError as exc:
            if exc.code:
                with self._lock:
                    txn.handle(exc.code, str(exc))
            raise

    def _transaction_ready(self, ready: list[TopicPartition]) -> list[TopicPartition]:
        """Start AddPartitionsToTxn for new partitions; only added ones may be drained."""
        txn = self._txn
        assert txn is not None
        with self._lock:
            if txn.has_error:
                return []
            new = txn.take_new_partitions() if self._adding is None else []
            allowed = [tp for tp in ready if txn.may_send(tp)]
        if new:
            self._adding = asyncio.ensure_future(self._add_partitions(new))
        return allowed

    async def _add_partitions(self, tps: list[TopicPartition]) -> None:
        txn = self._txn
        assert txn is not None
        tid = txn.transactional_id
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        what = f"AddPartitionsToTxn for {tid!r}"
        try:
            _, code = await self._coordinators.request(
                CoordinatorType.TRANSACTION,
                tid,
                ApiKey.ADD_PARTITIONS_TO_TXN,
                {
                    "v3_and_below_transactional_id": tid,
                    "v3_and_below_producer_id": self._producer_id,
                    "v3_and_below_producer_epoch": self._producer_epoch,
                    "v3_and_below_topics": [
                        {"name": t, "partitions": ps} for t, ps in by_topic.items()
                    ],
                },
                error_of=_worst_add_partitions_error,
                what=what,
            )
            if code:
                self._raise_for_transaction(code, what)
            with self._lock:
                txn.partitions_added(tps)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc if isinstance(exc, KafkaError) else KafkaError(-1, f"{what}: {exc}")
            log.info("%s failed: %s", what, error)
            with self._lock:
                txn.partitions_not_added(tps)
                if not txn.has_error:
                    txn.abortable_error(error_for(error.code, str(error)))
            self._fail_undrained(error)
        finally:
            self._adding = None
            self._wake()

    def _fail_undrained(self, error: KafkaError) -> None:
        """Fail every batch not sent yet: the transaction cannot take them any more."""
        with self._lock:
            leftover = self._accumulator.abort_all()
        reason = (
            error
            if isinstance(error, TransactionAbortedError)
            else TransactionAbortedError(f"the transaction failed: {error}")
        )
        for batch in leftover:
            self._complete(batch, error=reason)

    # -- sending -----------------------------------------------------------------

    async def topic_metadata(self, topic: str) -> TopicMetadata:
        """Partitions of ``topic`` (auto-created by the broker if it allows that)."""
        meta = self._cluster.topics.get(topic)
        if meta is not None and meta.partitions:
            return meta
        found = await self._cluster.topic(topic, allow_auto_create=True)
        if found is None:
            raise KafkaError(3, f"topic {topic!r} does not exist")
        return found

    async def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Sequence[tuple[str, bytes | str | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves once the broker has it.

        Awaiting ``send`` waits only for metadata (first use of a topic);
        await the returned future for the acknowledgement.
        """
        await self.start()
        meta = await self.topic_metadata(topic)
        await self._wait_for_space()
        assert self._loop is not None
        future: asyncio.Future[RecordMetadata] = self._loop.create_future()
        if self._append(meta, value, key, headers, partition, timestamp_ms, future):
            self._wake()
        return future

    async def send_arrow(
        self,
        topic: str,
        partition: int,
        values: pa.Array | pa.ChunkedArray,
        keys: pa.Array | pa.ChunkedArray | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
    ) -> list[asyncio.Future[RecordMetadata]]:
        """Queue Arrow rows (binary or string ``values``, optional ``keys``) for one partition.

        The rows are encoded column-wise into RecordBatch v2 batches of about
        ``batch.size`` bytes (no Python object per row; rows with ``headers``,
        one list per row, go record by record). One future per batch,
        resolving to the metadata of that batch's first record; the rows of a
        batch are stored at consecutive offsets from there.
        """
        await self.start()
        meta = await self.topic_metadata(topic)
        await self._wait_for_space()
        assert self._loop is not None
        futures = self._append_arrow(
            meta, partition, values, keys, timestamp_ms, headers, self._loop.create_future
        )
        self._wake()
        return futures

    def _append_arrow(
        self,
        meta: TopicMetadata,
        partition: int,
        values: pa.Array | pa.ChunkedArray,
        keys: pa.Array | pa.ChunkedArray | None,
        timestamp_ms: int | None,
        headers: Sequence[Sequence[Header] | None] | None,
        new_future: Any,
    ) -> list[Any]:
        """Encode and queue the rows (any thread)."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if not 0 <= partition < len(meta.partitions):
            raise KafkaError(3, f"topic {meta.name} has no partition {partition}")
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        c = self.config
        builders = encode_batches(
            values,
            keys,
            timestamp_ms=ts,
            compression=self._accumulator.compression,
            target_bytes=max(1, min(c.batch_size, c.max_request_size - RECORD_BATCH_OVERHEAD)),
            headers=headers,
        )
        tp = TopicPartition(meta.name, partition)
        futures = []
        now = time.monotonic()
        with self._lock:
            if self._txn is not None:
                self._txn.check_can_append()
                self._txn.maybe_add_partition(tp)
            for builder in builders:
                future = new_future()
                size = builder.estimated_size
                batch = self._accumulator.append_built(tp, builder, ts, future, now, size)
                self._incomplete.add(batch)
                self._buffered_bytes += size
                futures.append(future)
        return futures

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Sequence[tuple[str, bytes | str | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        return await (await self.send(topic, value, key, headers, partition, timestamp_ms))

    def _append(
        self,
        meta: TopicMetadata,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: Sequence[tuple[str, bytes | str | None]] | None,
        partition: int | None,
        timestamp_ms: int | None,
        future: Any,
    ) -> bool:
        """Add the record to its batch (any thread); True if the sender should wake."""
        if self._closed:
            raise RuntimeError("producer is closed")
        # The hot path of a producing loop: bytes in, no conversions.
        key_bytes = key if key is None or type(key) is bytes else _as_bytes(key, "key")
        value_bytes = value if value is None or type(value) is bytes else _as_bytes(value, "value")
        header_list: Sequence[Header] = (
            [(name, _as_bytes(v, f"header {name!r}")) for name, v in headers] if headers else ()
        )
        size = estimate_record_size(key_bytes, value_bytes, header_list)
        if size > self.config.max_request_size:
            raise KafkaError(
                MESSAGE_TOO_LARGE,
                f"a record of about {size} bytes exceeds max.request.size="
                f"{self.config.max_request_size}",
            )
        name = meta.name
        count = len(meta.partitions)
        if partition is not None and not 0 <= partition < count:
            raise KafkaError(3, f"topic {name} has no partition {partition}")
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        now = time.monotonic()
        append = self._accumulator.append
        txn = self._txn
        with self._lock:
            if txn is not None:
                txn.check_can_append()
            if partition is None and key_bytes is None:
                sticky = self._partitioner.partition(name, count)
                result = append(
                    TopicPartition(name, sticky),
                    ts,
                    key_bytes,
                    value_bytes,
                    header_list,
                    future,
                    now,
                    abort_on_new_batch=True,
                    size=size,
                )
                if result.batch is None:
                    sticky = self._partitioner.next_batch(name, count, sticky)
                    result = append(
                        TopicPartition(name, sticky),
                        ts,
                        key_bytes,
                        value_bytes,
                        header_list,
                        future,
                        now,
                        size=size,
                    )
            else:
                if partition is None:
                    assert key_bytes is not None
                    partition = partition_for_key(key_bytes, count)
                result = append(
                    TopicPartition(name, partition),
                    ts,
                    key_bytes,
                    value_bytes,
                    header_list,
                    future,
                    now,
                    size=size,
                )
            if result.new_batch:
                assert result.batch is not None
                self._incomplete.add(result.batch)
                if txn is not None:
                    txn.maybe_add_partition(result.batch.tp)
            self._buffered_bytes += size
        return result.new_batch or result.batch_full

    def _has_space(self) -> bool:
        return self._buffered_bytes < self.config.buffer_memory

    async def _wait_for_space(self) -> None:
        """Async side of buffer.memory: wait for acknowledgements to free room."""
        assert self._space_freed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.max_block_ms / 1000
        while not self._has_space():
            self._space_freed.clear()
            if self._has_space():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KafkaTimeoutError("buffer.memory stayed full for max.block.ms")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._space_freed.wait()

    def _block_for_space(self) -> None:
        """Blocking side of buffer.memory, for ``Producer.send`` (never on the loop)."""
        with self._space:
            if not self._space.wait_for(self._has_space, self.config.max_block_ms / 1000):
                raise KafkaTimeoutError("buffer.memory stayed full for max.block.ms")

    def _call_on_loop(self, fn: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._call_on_loop(self._wakeup.set)

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until each record is acknowledged or failed."""
        if self._sender is None:
            return
        assert self._all_done is not None
        with self._lock:
            self._accumulator.begin_flush()
        self._wake()
        try:
            async with asyncio.timeout(timeout_s):
                await self._wait_all_done()
        finally:
            with self._lock:
                self._accumulator.end_flush()

    async def _wait_all_done(self) -> None:
        assert self._all_done is not None
        while True:
            with self._lock:
                if not self._incomplete:
                    return
            self._all_done.clear()
            with self._lock:
                if not self._incomplete:
                    return
            await self._all_done.wait()

    async def close(self, timeout_s: float | None = 30.0) -> None:
        """Flush, then stop; records still unsent after ``timeout_s`` fail."""
        if self._closed:
            return
        txn = self._txn
        if txn is not None and txn.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            # As Kafka's producer: an unfinished transaction is aborted on a clean close.
            log.info("aborting the open transaction of %r on close", txn.transactional_id)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await self.abort_transaction()
        try:
            if self._sender is not None:
                with contextlib.suppress(TimeoutError):
                    await self.flush(timeout_s)
        finally:
            self._closed = True
            with self._lock:
                leftover = self._accumulator.abort_all()
            error = KafkaTimeoutError("producer closed before the record was sent")
            for batch in leftover:
                self._complete(batch, error=error)
            for batch in list(self._incomplete):
                self._complete(batch, error=error)
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._cluster.close()

    # -- the sender ----------------------------------------------------------------

    async def _run_sender(self) -> None:
        assert self._wakeup is not None
        c = self.config
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            with self._lock:
                expired = self._accumulator.expire(now, c.delivery_timeout_ms / 1000)
                ready, next_due = self._accumulator.ready(now)
            for batch in expired:
                self._complete(batch, error=KafkaTimeoutError("delivery.timeout.ms expired"))
            if self._txn is not None:
                ready = self._transaction_ready(ready)
            wait = next_due
            if ready:
                wait = self._send_ready(ready, wait)
            try:
                if wait is None:
                    await self._wakeup.wait()
                else:
                    async with asyncio.timeout(max(wait, 0.001)):
                        await self._wakeup.wait()
            except TimeoutError:
                pass

    def _send_ready(self, ready: list[TopicPartition], wait: float | None) -> float | None:
        """Send one request per broker with room in flight; returns the next wake-up delay."""
        by_node: dict[int, list[TopicPartition]] = {}
        missing: set[str] = set()
        for tp in ready:
            leader = self._cluster.leader(tp)
            if leader is None:
                missing.add(tp.topic)
            else:
                by_node.setdefault(leader, []).append(tp)
        if missing:
            self._start_refresh(missing)
        retry = self.config.retry_backoff_ms / 1000
        for node_id, tps in by_node.items():
            if self._in_flight.get(node_id, 0) >= self.config.max_in_flight_requests_per_connection:
                continue
            conn = self._cluster.ready_connection(node_id)
            if conn is None:
                self._start_connect(node_id)
                continue
            with self._lock:
                batches = self._accumulator.drain(tps, self.config.max_request_size)
                transactional = self._txn is not None
                for batch in batches:
                    if batch.payload is None and self.idempotent:
                        batch.base_sequence = self._next_sequence(batch)
                    batch.build(self._producer_id, self._producer_epoch, transactional)
            if not batches:
                continue
            self._spawn(self._produce(node_id, conn, batches))
        if missing:
            wait = retry if wait is None else min(wait, retry)
        return wait

    def _next_sequence(self, batch: ProducerBatch) -> int:
        seq = self._sequences.get(batch.tp, 0)
        self._sequences[batch.tp] = (seq + batch.record_count) % (MAX_SEQUENCE + 1)
        return seq

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_refresh(self, topics: set[str]) -> None:
        """One metadata refresh at a time per topic, however often the sender loops."""
        wanted = topics - self._refreshing
        if wanted:
            self._refreshing |= wanted
            self._spawn(self._refresh(wanted))

    async def _refresh(self, topics: set[str]) -> None:
        try:
            with contextlib.suppress(KafkaError):
                await self._cluster.refresh_metadata(topics)
        finally:
            self._refreshing -= topics
            self._wake()

    def _start_connect(self, node_id: int) -> None:
        if node_id not in self._connecting:
            self._connecting.add(node_id)
            self._spawn(self._connect(node_id))

    async def _connect(self, node_id: int) -> None:
        try:
            await self._cluster.connection(node_id)
        except KafkaError as exc:
            log.info("producer cannot reach node %d: %s", node_id, exc)
            led = {
                name
                for name, meta in self._cluster.topics.items()
                if any(p.leader == node_id for p in meta.partitions.values())
            }
            if led:
                self._start_refresh(led)  # it may lead them no more
        finally:
            self._connecting.discard(node_id)
            self._wake()

    async def _produce(
        self, node_id: int, conn: BrokerConnection, batches: list[ProducerBatch]
    ) -> None:
        topics: dict[str, ProduceTopicData] = {}
        for batch in batches:
            topic = topics.get(batch.tp.topic)
            if topic is None:
                topic = topics[batch.tp.topic] = ProduceTopicData(batch.tp.topic)
            assert batch.payload is not None
            topic.partitions.append(
                ProducePartitionData(batch.tp.partition, memoryview(batch.payload))
            )
        req = ProduceRequestData(
            transactional_id=None if self._txn is None else self._txn.transactional_id,
            acks=self.acks,
            timeout_ms=self.config.request_timeout_ms,
            topics=list(topics.values()),
        )
        self._in_flight[node_id] = self._in_flight.get(node_id, 0) + 1
        try:
            version = conn.version(ApiKey.PRODUCE)
            future = conn.send_produce(req, version)
            response: ProduceResponseData | None = await conn.wait(future)
        except KafkaError as exc:
            self._retry_or_fail(batches, exc)
            return
        finally:
            self._in_flight[node_id] -= 1
            self._wake()
        if response is None:  # acks=0
            for batch in batches:
                self._complete(batch, base_offset=-1, append_time=-1)
            return
        results = {(t.name, p.index): p for t in response.topics for p in t.partitions}
        for batch in batches:
            part = results.get((batch.tp.topic, batch.tp.partition))
            if part is None:
                self._retry_or_fail([batch], KafkaError(13, "partition missing from the response"))
            elif part.error_code == 0:
                self._complete(
                    batch, base_offset=part.base_offset, append_time=part.log_append_time_ms
                )
            elif part.error_code == DUPLICATE_SEQUENCE_NUMBER:
                self._complete(batch, base_offset=-1, append_time=-1)
            else:
                message = (
                    part.error_message or f"producing to {batch.tp.topic}-{batch.tp.partition}"
                )
                self._retry_or_fail([batch], KafkaError(part.error_code, message))

    def _retry_or_fail(self, batches: list[ProducerBatch], error: KafkaError) -> None:
        deadline = self.config.delivery_timeout_ms / 1000
        now = time.monotonic()
        retriable = isinstance(error, KafkaConnectionError) or error.code in RETRIABLE_CODES
        for batch in batches:
            retry = retriable or self._behind_a_retry(batch, error)
            if retry and not self._closed and now - batch.created_at < deadline:
                log.info("retrying batch for %s: %s", batch.tp, error)
                with self._lock:
                    self._accumulator.reenqueue(batch)
                if error.code in (3, 5, 6) or isinstance(error, KafkaConnectionError):
                    # A lost leader may have been replaced (Java: a disconnect requests
                    # a metadata update); without this the batch waits for the dead one.
                    self._start_refresh({batch.tp.topic})
            else:
                self._complete(batch, error=error)

    def _behind_a_retry(self, batch: ProducerBatch, error: KafkaError) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER because an older batch of the partition failed
        and is being retried: this one goes again after it (as Kafka's producer does)."""
        if error.code != OUT_OF_ORDER_SEQUENCE_NUMBER or not self.idempotent:
            return False
        with self._lock:
            return any(
                other.tp == batch.tp and other.order < batch.order and other.attempts > 0
                for other in self._incomplete
            )

    def _complete(
        self,
        batch: ProducerBatch,
        *,
        base_offset: int = -1,
        append_time: int = -1,
        error: BaseException | None = None,
    ) -> None:
        txn = self._txn
        if (
            txn is not None
            and isinstance(error, KafkaError)
            and not isinstance(error, TransactionAbortedError)
            and batch in self._incomplete
        ):
            # A batch failed for good: the transaction cannot commit (or, fenced, at all).
            with self._lock:
                txn.batch_failed(error)
            self._fail_undrained(error)
        with self._space:
            if batch not in self._incomplete:
                return  # already resolved (close() may see a batch twice)
            self._incomplete.discard(batch)
            self._buffered_bytes -= batch.reserved
            done = not self._incomplete
            self._space.notify_all()
        if self._space_freed is not None:
            self._space_freed.set()
        topic, partition = batch.tp
        if error is not None:
            for future in batch.futures:
                _fail(future, error)
        else:
            timestamps = batch.timestamps
            for i, future in enumerate(batch.futures):
                offset = base_offset + i if base_offset >= 0 else -1
                ts = append_time if append_time >= 0 else timestamps[i]
                _resolve(future, RecordMetadata(topic, partition, offset, ts))
        if done and self._all_done is not None:
            self._all_done.set()


class Producer:
    """The blocking producer: ``send`` returns a ``concurrent.futures.Future``."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._producer = AsyncProducer(config, **kwargs)
        self.config = self._producer.config
        self._thread = EventLoopThread("headwater-producer")
        self._closed = False
        try:
            self._thread.run(self._producer.start())
        except BaseException:
            self._thread.stop()
            raise

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Sequence[tuple[str, bytes | str | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        producer = self._producer
        meta = producer._cluster.topics.get(topic)
        if meta is None or not meta.partitions:
            meta = self._thread.run(producer.topic_metadata(topic))
        if not producer._has_space():
            producer._block_for_space()
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        if producer._append(meta, value, key, headers, partition, timestamp_ms, future):
            producer._wake()
        return future

    def send_arrow(
        self,
        topic: str,
        partition: int,
        values: pa.Array | pa.ChunkedArray,
        keys: pa.Array | pa.ChunkedArray | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
    ) -> list[concurrent.futures.Future[RecordMetadata]]:
        """Queue Arrow rows for one partition; see ``AsyncProducer.send_arrow``."""
        producer = self._producer
        meta = producer._cluster.topics.get(topic)
        if meta is None or not meta.partitions:
            meta = self._thread.run(producer.topic_metadata(topic))
        if not producer._has_space():
            producer._block_for_space()
        futures = producer._append_arrow(
            meta, partition, values, keys, timestamp_ms, headers, concurrent.futures.Future
        )
        producer._wake()
        return futures

    def partitions_for(self, topic: str) -> set[int]:
        return set(self._thread.run(self._producer.topic_metadata(topic)).partitions)

    # -- transactions (see AsyncProducer) -------------------------------------------

    @property
    def transaction_state(self) -> TxnState | None:
        return self._producer.transaction_state

    def init_transactions(self) -> None:
        self._thread.run(self._producer.init_transactions())

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, Any], group: str | ConsumerGroupMetadata
    ) -> None:
        self._thread.run(self._producer.send_offsets_to_transaction(dict(offsets), group))

    def commit_transaction(self) -> None:
        self._thread.run(self._producer.commit_transaction())

    def abort_transaction(self) -> None:
        self._thread.run(self._producer.abort_transaction())

    def hand_off_transaction(self) -> TransactionHandle | None:
        return self._thread.run(self._producer.hand_off_transaction())

    def flush(self, timeout_s: float | None = None) -> None:
        self._thread.run(self._producer.flush(timeout_s))

    def close(self, timeout_s: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._producer.close(timeout_s))
        finally:
            self._thread.stop()


async def end_transactions_async(
    handles: Sequence[TransactionHandle],
    commit: bool,
    config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """End transactions other producers handed off (``hand_off_transaction``), all at once.

    ``config`` needs ``bootstrap.servers``; the EndTxn requests go out
    concurrently and the first failure is raised after all have finished
    (a fenced handle fails with ``ProducerFencedError``).
    """
    if not handles:
        return
    c = ProducerConfig.from_mapping(config, **kwargs)
    cluster = ClusterClient(
        c.bootstrap_servers,
        client_id=c.client_id,
        request_timeout_ms=c.request_timeout_ms,
        reconnect_backoff_ms=c.reconnect_backoff_ms,
        reconnect_backoff_max_ms=c.reconnect_backoff_max_ms,
        security=c.security,
    )
    coordinators = CoordinatorClient(
        cluster, retry_backoff_ms=c.retry_backoff_ms, max_block_ms=c.max_block_ms
    )
    try:
        results = await asyncio.gather(
            *(
                end_transaction(
                    coordinators, h.transactional_id, h.producer_id, h.producer_epoch, commit
                )
                for h in handles
            ),
            return_exceptions=True,
        )
    finally:
        await cluster.close()
    for result in results:
        if isinstance(result, BaseException):
            raise result


def end_transactions(
    handles: Sequence[TransactionHandle],
    commit: bool,
    config: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Blocking ``end_transactions_async`` (for code without an event loop, e.g. a Spark driver)."""
    asyncio.run(end_transactions_async(handles, commit, config, **kwargs))
