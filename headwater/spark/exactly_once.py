"""The exactly-once mode of the ``headwater`` sink (option ``exactlyOnce=true``).

Spark's own Kafka sink is at-least-once: a micro-batch replayed after a
crash is written again. This mode makes each micro-batch all-or-nothing and
idempotent across replays, with Kafka transactions (KIP-98/447):

* **One transaction per task.** Task ``p`` of a query writes under
  ``transactional.id = <transactionalIdPrefix>-<queryId>-<p>``. The query id
  is Spark's (``sql.streaming.queryId``, kept in the checkpoint, so it
  survives restarts), and so is the batch id (``streaming.sql.batchId``);
  both reach the task as local properties of its TaskContext.
* **The task never commits.** It calls ``init_transactions``, which bumps
  the epoch of its id: any earlier attempt of the same task (a killed
  executor, a replay after a driver crash) is fenced and whatever it left
  open is aborted. It then reads the **progress** of its id: the offsets
  committed by the group of the same name (``OffsetFetch`` with
  ``require_stable``). The progress is the next batch id to write, stored as
  the committed offset of partition 0 of the output topic (the key is
  arbitrary; a partition that exists is needed, and a group per task keeps
  tasks apart). If progress > B, batch B is already in the topic: the task
  writes nothing. Otherwise it begins a transaction, produces its rows,
  adds ``progress = B + 1`` with ``send_offsets_to_transaction`` (so the
  progress commits atomically with the data, or not at all), flushes, and
  returns ``(transactional id, producer id, epoch)`` in its commit message.
* **The driver commits.** ``commit(messages, batchId)`` ends every task's
  transaction with an EndTxn(COMMIT) sent on its behalf (the coordinator
  checks only id, producer id and epoch); ``abort`` ends them with ABORT.

Replay after a crash between the tasks' writes and the driver's commit
(or in the middle of it): tasks whose transaction did commit find their
progress at B + 1 and skip; the others' transactions are aborted by the
epoch bump and are written again. Readers with ``read_committed`` see every
row once. Requirements: a replayed batch has the same tasks (Spark replays
a micro-batch with the same plan and number of partitions), and the whole
batch, from a task's write to the driver's commit, fits in
``kafka.transaction.timeout.ms`` (default here 5 minutes, below the
broker's ``transaction.max.timeout.ms``; a longer batch is aborted by the
coordinator and the driver's commit fails, so the batch is replayed).

Batch writes (``df.write``) with ``exactlyOnce`` outside a stream (no batch
id) are all-or-nothing: the driver commits every task's transaction at job
commit, under a job id chosen by the driver. Inside ``foreachBatch``, Spark's
local properties carry the query and batch id, so a replay skips too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from headwater.client.types import TopicPartition, TransactionHandle
from headwater.spark.clients import SINK_BATCH_BYTES, ClientConfig
from headwater.spark.options import SinkOptions

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 300_000

ProduceRows = Callable[[Any, Iterator[pa.RecordBatch]], tuple[int, str | None]]
"""(producer, batches) -> (rows produced, first topic written to or None)."""


@dataclass(frozen=True)
class TransactionalCommit(WriterCommitMessage):  # type: ignore[misc]
    """A task's commit message: its rows and the transaction the driver must end.

    ``transaction`` is None when there is nothing to end: the task had no
    rows, or (``skipped``) an earlier attempt's transaction already committed
    this batch.
    """

    records: int
    transaction: TransactionHandle | None
    skipped: bool = False


@dataclass(frozen=True)
class WritePlace:
    """Where a task's transaction belongs: which sink, which micro-batch, which task."""

    sink_id: str
    batch_id: int | None
    partition_id: int

    def transactional_id(self, prefix: str) -> str:
        return f"{prefix}-{self.sink_id}-{self.partition_id}"


def new_job_id() -> str:
    """A sink id for a batch write outside a stream (chosen once, on the driver)."""
    return uuid.uuid4().hex


def current_place(job_id: str) -> WritePlace:
    """This task's place, from Spark's TaskContext (query and batch id when streaming)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("exactlyOnce writes run inside Spark tasks only")
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return WritePlace(
        sink_id=query or job_id,
        batch_id=int(batch) if query and batch is not None else None,
        partition_id=int(ctx.partitionId()),
    )


def progress_of(offsets: dict[TopicPartition, int]) -> int:
    """The next batch id to write, from the progress group's committed offsets (0: none)."""
    return max(offsets.values(), default=0)


def producer_settings(options: SinkOptions, transactional_id: str) -> dict[str, str]:
    config = ClientConfig.of(options.bootstrap, options.client_settings)
    settings = config.client_settings(
        client_id="headwater-spark",
        compression_type="lz4",
        linger_ms="5",
        batch_size=str(SINK_BATCH_BYTES),
        transaction_timeout_ms=str(DEFAULT_TRANSACTION_TIMEOUT_MS),
    )
    settings["transactional.id"] = transactional_id
    return settings


def write_transactionally(
    options: SinkOptions,
    place: WritePlace,
    batches: Iterator[pa.RecordBatch],
    produce_rows: ProduceRows,
) -> TransactionalCommit:
    """The task's side: fence, check progress, write in a transaction, hand it to the driver."""
    from headwater.client.admin import AdminClient
    from headwater.client.producer import Producer

    tid = place.transactional_id(options.transactional_id_prefix)
    producer = Producer(producer_settings(options, tid))
    try:
        producer.init_transactions()  # fences earlier attempts, aborts what they left open
        if place.batch_id is not None:
            with AdminClient(options.bootstrap, client_id="headwater-spark") as admin:
                done = progress_of(admin.list_consumer_group_offsets(tid, require_stable=True))
            if done > place.batch_id:
                log.info("%s: batch %d is already committed; skipping", tid, place.batch_id)
                return TransactionalCommit(0, None, skipped=True)
        producer.begin_transaction()
        count, first_topic = produce_rows(producer, batches)
        progress_topic = options.topic or first_topic
        if place.batch_id is not None and progress_topic is not None:
            producer.send_offsets_to_transaction(
                {TopicPartition(progress_topic, 0): place.batch_id + 1}, tid
            )
        handle = producer.hand_off_transaction()
        return TransactionalCommit(count, handle)
    finally:
        # After the hand-off this leaves the transaction open for the driver;
        # before it (a failure), closing aborts what the task started.
        producer.close()


def _handles(messages: Sequence[WriterCommitMessage | None]) -> list[TransactionHandle]:
    return [
        m.transaction
        for m in messages
        if isinstance(m, TransactionalCommit) and m.transaction is not None
    ]


def commit_all(options: SinkOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    """The driver's side: COMMIT every task's transaction (EndTxn on their behalf)."""
    from headwater.client.producer import end_transactions

    handles = _handles(messages)
    config = ClientConfig.of(options.bootstrap, options.client_settings)
    end_transactions(handles, True, config.client_settings(client_id="headwater-spark"))
    log.info("committed %d task transactions", len(handles))


def abort_all(options: SinkOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    """ABORT the tasks' transactions (best effort: a replay fences them anyway)."""
    from headwater.client.producer import end_transactions

    handles = _handles(messages)
    config = ClientConfig.of(options.bootstrap, options.client_settings)
    try:
        end_transactions(handles, False, config.client_settings(client_id="headwater-spark"))
    except Exception as exc:
        log.warning("aborting %d task transactions: %s", len(handles), exc)
