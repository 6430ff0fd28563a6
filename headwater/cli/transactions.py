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
from headwater.client.admin import TransactionDescription, TransactionListing

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
