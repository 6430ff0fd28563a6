"""``headwater transactions list|describe ID``: transactions as an operator sees them.

The columns are those of Kafka's ``kafka-transactions.sh``, so an operator who
knows one knows the other. ``list`` asks every broker (each coordinates its
own ``__transaction_state`` partitions); ``describe`` asks the id's
coordinator. ``--json`` prints the same facts as JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from headwater.cli.common import add_client_args, admin_client, guarded, table
from headwater.cli.partitions import run_with_cluster
from headwater.client.admin import TransactionDescription, TransactionListing
from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError
from headwater.client.partition_admin import (
    ProducerState,
    abort_transaction,
    describe_producers,
)
from headwater.client.types import TopicPartition

LIST_COLUMNS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_COLUMNS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def list_rows(listings: Sequence[TransactionListing]) -> list[list[object]]:
    return [[t.transactional_id, t.coordinator_id, t.producer_id, t.state] for t in listings]


def describe_row(d: TransactionDescription, now_ms: int) -> list[object]:
    started = d.start_time_ms >= 0 and d.state not in ("Empty", "CompleteCommit", "CompleteAbort")
    return [
        d.coordinator_id,
        d.transactional_id,
        d.producer_id,
        d.producer_epoch,
        d.state,
        d.timeout_ms,
        d.start_time_ms if started else "None",
        now_ms - d.start_time_ms if started else "None",
        ",".join(f"{topic}-{partition}" for topic, partition in d.partitions),
    ]


def cmd_transactions_list(args: argparse.Namespace) -> int:
    with admin_client(args, "headwater-transactions") as admin:
        listings = admin.list_transactions(args.state or ())
    if args.json:
        print(json.dumps([asdict(t) for t in listings], indent=2))
    else:
        print("\n".join(table(LIST_COLUMNS, list_rows(listings))))
    return 0


def cmd_transactions_describe(args: argparse.Namespace) -> int:
    with admin_client(args, "headwater-transactions") as admin:
        described = admin.describe_transaction(args.transactional_id)
    if args.json:
        out: dict[str, Any] = asdict(described)
        out["partitions"] = [f"{t}-{p}" for t, p in described.partitions]
        print(json.dumps(out, indent=2))
    else:
        row = describe_row(described, int(time.time() * 1000))
        print("\n".join(table(DESCRIBE_COLUMNS, [row])))
    return 0


HANGING_COLUMNS = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15  # Kafka's transaction.max.timeout.ms


async def _partitions_to_check(
    cluster: ClusterClient, args: argparse.Namespace
) -> list[TopicPartition]:
    """--topic [--partition], or every partition --broker-id hosts, or every partition."""
    await cluster.refresh_metadata(None if args.topic is None else [args.topic])
    if args.topic is not None:
        meta = cluster.topics.get(args.topic)
        if meta is None:
            raise KafkaError(3, f"topic {args.topic!r} does not exist")
        parts = args.partition if args.partition is not None else sorted(meta.partitions)
        return [TopicPartition(args.topic, p) for p in parts]
    return [
        TopicPartition(name, p.partition)
        for name, meta in sorted(cluster.topics.items())
        for p in meta.partitions.values()
        if args.broker_id is None or args.broker_id in p.replicas
    ]


async def find_hanging(
    cluster: ClusterClient, args: argparse.Namespace, now_ms: int
) -> list[tuple[TopicPartition, ProducerState]]:
    """Open transactions older than the longest allowed that no coordinator still runs.

    As Kafka's ``find-hanging``: the partitions' leaders list their open
    transactions (DescribeProducers); one open longer than
    ``--max-transaction-timeout`` is hanging unless its producer's
    coordinator still has it ongoing with this partition in it.
    """
    limit_ms = args.max_transaction_timeout * 60_000
    described = await describe_producers(cluster, await _partitions_to_check(cluster, args))
    candidates = [
        (tp, state)
        for tp, result in described.items()
        if not result.error_code
        for state in result.producers
        if state.current_txn_start_offset >= 0 and now_ms - state.last_timestamp > limit_ms
    ]
    if not candidates:
        return []
    admin = admin_client(args, "headwater-transactions")
    try:
        listings = admin.list_transactions(
            (), sorted({state.producer_id for _, state in candidates})
        )
        running: set[tuple[int, TopicPartition]] = set()
        for listing in listings:
            if listing.state != "Ongoing":
                continue
            d = admin.describe_transaction(listing.transactional_id)
            running.update((d.producer_id, TopicPartition(t, p)) for t, p in d.partitions)
    finally:
        admin.close()
    return [(tp, s) for tp, s in candidates if (s.producer_id, tp) not in running]


def cmd_transactions_find_hanging(args: argparse.Namespace) -> int:
    now_ms = int(time.time() * 1000)
    hanging = run_with_cluster(args, lambda cluster: find_hanging(cluster, args, now_ms))
    if args.json:
        print(
            json.dumps(
                [{"topic": tp.topic, "partition": tp.partition, **asdict(s)} for tp, s in hanging],
                indent=2,
            )
        )
        return 0
    rows = [
        [
            tp.topic,
            tp.partition,
            s.producer_id,
            s.producer_epoch,
            s.coordinator_epoch,
            s.current_txn_start_offset,
            s.last_timestamp,
            (now_ms - s.last_timestamp) // 60_000,
        ]
        for tp, s in hanging
    ]
    print("\n".join(table(HANGING_COLUMNS, rows)))
    return 0


def cmd_transactions_abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)

    async def work(cluster: ClusterClient) -> int:
        if args.start_offset is not None:
            (described,) = (await describe_producers(cluster, [tp])).values()
            if described.error_code:
                raise KafkaError(described.error_code, described.message)
            matching = [
                s for s in described.producers if s.current_txn_start_offset == args.start_offset
            ]
            if not matching:
                raise ValueError(
                    f"no open transaction starts at offset {args.start_offset} of "
                    f"{tp.topic}-{tp.partition}"
                )
            producer = matching[0]
        elif None in (args.producer_id, args.producer_epoch, args.coordinator_epoch):
            raise ValueError(
                "give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"
            )
        else:
            producer = ProducerState(
                args.producer_id, args.producer_epoch, -1, -1, args.coordinator_epoch, -1
            )
        result = await abort_transaction(cluster, tp, producer)
        if not result.ok:
            raise result.error()
        print(
            f"aborted the transaction of producer {producer.producer_id} (epoch "
            f"{producer.producer_epoch}) on {tp.topic}-{tp.partition}"
        )
        return 0

    return run_with_cluster(args, work)


def add_transaction_commands(sub: Any) -> None:
    txns = sub.add_parser("transactions", help="list transactions, or describe one")
    tsub = txns.add_subparsers(dest="transactions_command", required=True)
    lst = tsub.add_parser("list", help="every transactional id with its coordinator and state")
    lst.add_argument(
        "--state", action="append", metavar="STATE", help="only this state (repeatable)"
    )
    desc = tsub.add_parser("describe", help="one transactional id's producer and transaction")
    desc.add_argument("transactional_id")
    for p in (lst, desc):
        add_client_args(p)
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lst.set_defaults(func=guarded(cmd_transactions_list))
    desc.set_defaults(func=guarded(cmd_transactions_describe))

    hanging = tsub.add_parser(
        "find-hanging",
        help="open transactions that no coordinator will ever end (kafka-transactions "
        "find-hanging)",
    )
    hanging.add_argument("--topic", metavar="NAME", help="only this topic's partitions")
    hanging.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="a partition of --topic (repeatable)",
    )
    hanging.add_argument(
        "--broker-id", type=int, metavar="ID", help="only partitions with a replica on this broker"
    )
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MINUTES",
        help="a transaction open longer than this is a candidate (default "
        f"{DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN}, Kafka's transaction.max.timeout.ms)",
    )
    hanging.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_client_args(hanging)
    hanging.set_defaults(func=guarded(cmd_transactions_find_hanging))

    abort = tsub.add_parser(
        "abort",
        help="abort a hanging transaction on one partition (kafka-transactions abort)",
    )
    abort.add_argument("--topic", required=True, metavar="NAME", help="the partition's topic")
    abort.add_argument(
        "--partition", required=True, type=int, metavar="P", help="the partition to abort on"
    )
    abort.add_argument(
        "--start-offset",
        type=int,
        metavar="OFFSET",
        help="the transaction's first offset (as find-hanging shows it)",
    )
    abort.add_argument("--producer-id", type=int, metavar="ID", help="instead of --start-offset")
    abort.add_argument(
        "--producer-epoch", type=int, metavar="EPOCH", help="with --producer-id: its epoch"
    )
    abort.add_argument(
        "--coordinator-epoch",
        type=int,
        metavar="EPOCH",
        help="with --producer-id: the coordinator epoch the partition last saw",
    )
    add_client_args(abort)
    abort.set_defaults(func=guarded(cmd_transactions_abort))
