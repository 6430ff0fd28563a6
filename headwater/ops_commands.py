"""``headwater partitions reassign|reassignments|elect-leaders|delete-records``: operating a
cluster from the command line (issue 17), as Kafka's ``kafka-reassign-partitions.sh``,
``kafka-leader-election.sh`` and ``kafka-delete-records.sh`` do.

Self-contained: ``add_parsers(subparsers)`` adds the ``partitions`` command group to any
argparse parser (the lead wires it into the CLI). Each command exits 0 on success and
1 on a Kafka error or bad input, printed as one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from headwater.client.admin import AdminClient
from headwater.client.errors import KafkaError, error_name
from headwater.client.types import TopicPartition

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
ELECTION_TYPES: Final = {"preferred": 0, "unclean": 1}

Handler = Callable[[argparse.Namespace], int]


def _one_line_errors(fn: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (KafkaError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return run


def _partitions(items: Sequence[str]) -> list[TopicPartition]:
    """``TOPIC:PARTITION`` items."""
    out = []
    for item in items:
        topic, sep, partition = item.rpartition(":")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"expected TOPIC:PARTITION, got {item!r}")
        out.append(TopicPartition(topic, int(partition)))
    return out


def _brokers(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"expected broker ids like 1,2,3, got {text!r}") from None
    if not brokers:
        raise ValueError("--replicas needs at least one broker id")
    return brokers


def _report(results: dict[TopicPartition, int], ok: str) -> int:
    failed = 0
    for tp, code in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        if code:
            failed += 1
            print(f"{tp.topic}-{tp.partition}\t{error_name(code)} ({code})")
        else:
            print(f"{tp.topic}-{tp.partition}\t{ok}")
    return 1 if failed else 0


@_one_line_errors
def cmd_reassign(args: argparse.Namespace) -> int:
    targets: dict[TopicPartition, list[int] | None] = {
        tp: None if args.cancel else _brokers(args.replicas) for tp in _partitions(args.partition)
    }
    with AdminClient(args.bootstrap) as admin:
        results = admin.alter_partition_reassignments(targets)
    return _report(results, "cancelled" if args.cancel else "reassignment started")


@_one_line_errors
def cmd_reassignments(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap) as admin:
        moving = admin.list_partition_reassignments()
    for tp, (replicas, adding, removing) in sorted(
        moving.items(), key=lambda item: (item[0].topic, item[0].partition)
    ):
        print(
            f"{tp.topic}-{tp.partition}\tReplicas: {_ids(replicas)}\t"
            f"Adding: {_ids(adding)}\tRemoving: {_ids(removing)}"
        )
    return 0


@_one_line_errors
def cmd_elect_leaders(args: argparse.Namespace) -> int:
    partitions = None if args.all else _partitions(args.partition)
    if partitions is not None and not partitions:
        raise ValueError("name partitions with --partition TOPIC:PARTITION, or use --all")
    with AdminClient(args.bootstrap) as admin:
        results = admin.elect_leaders(ELECTION_TYPES[args.type], partitions)
    if args.all:  # as kafka-leader-election.sh: nothing to do is not a failure
        results = {tp: code for tp, code in results.items() if code != 84}
    return _report(results, "leader elected")


@_one_line_errors
def cmd_delete_records(args: argparse.Namespace) -> int:
    offsets = {tp: args.offset for tp in _partitions(args.partition)}
    with AdminClient(args.bootstrap) as admin:
        low = admin.delete_records(offsets)
    for tp, start in sorted(low.items(), key=lambda item: (item[0].topic, item[0].partition)):
        print(f"{tp.topic}-{tp.partition}\tlow_watermark: {start}")
    return 0


def _ids(brokers: Sequence[int]) -> str:
    return ",".join(map(str, brokers))


def add_parsers(subparsers: Any) -> None:
    """The ``partitions`` command group (reassign, reassignments, elect-leaders, delete-records)."""
    group = subparsers.add_parser("partitions", help="move partitions, elect leaders, trim logs")
    sub = group.add_subparsers(dest="partitions_command", required=True)

    def bootstrap(p: argparse.ArgumentParser) -> None:
        help_text = f"a broker to bootstrap from (default {DEFAULT_BOOTSTRAP})"
        p.add_argument(
            "--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT", help=help_text
        )

    reassign = sub.add_parser("reassign", help="move partitions to other brokers (KIP-455)")
    reassign.add_argument("--partition", action="append", default=[], required=True,
                          metavar="TOPIC:PARTITION")  # fmt: skip
    how = reassign.add_mutually_exclusive_group(required=True)
    how.add_argument("--replicas", metavar="IDS", help="target brokers, preferred leader first")
    how.add_argument("--cancel", action="store_true", help="cancel the move in flight")
    bootstrap(reassign)
    reassign.set_defaults(func=cmd_reassign)

    listing = sub.add_parser("reassignments", help="moves in flight")
    bootstrap(listing)
    listing.set_defaults(func=cmd_reassignments)

    elect = sub.add_parser("elect-leaders", help="preferred or unclean leader election (KIP-460)")
    elect.add_argument("--type", choices=sorted(ELECTION_TYPES), default="preferred")
    elect.add_argument("--partition", action="append", default=[], metavar="TOPIC:PARTITION")
    elect.add_argument("--all", action="store_true", help="every partition of the cluster")
    bootstrap(elect)
    elect.set_defaults(func=cmd_elect_leaders)

    delete = sub.add_parser("delete-records", help="move log start offsets forward")
    delete.add_argument("--partition", action="append", default=[], required=True,
                        metavar="TOPIC:PARTITION")  # fmt: skip
    delete.add_argument("--offset", type=int, required=True,
                        help="new log start offset (-1: the high watermark)")  # fmt: skip
    bootstrap(delete)
    delete.set_defaults(func=cmd_delete_records)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="headwater")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
