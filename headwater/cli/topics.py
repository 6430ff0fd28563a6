"""``headwater topics create|list|describe|delete`` (Kafka: ``kafka-topics.sh``)."""

from __future__ import annotations

import argparse
from typing import Any

from headwater.cli.common import add_client_args, admin_client, guarded, parse_key_values


def cmd_topics_create(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config)
    with admin_client(args) as admin:
        admin.create_topics([(args.name, args.partitions, configs, args.replication_factor)])
    print(f"created topic {args.name}")
    return 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


def cmd_topics_describe(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        meta = admin.describe_topic(args.name)
        offsets = admin.log_offsets(args.name)
        configs = admin.describe_configs(args.name)
    print(f"Topic: {meta.name}\tTopicId: {meta.topic_id}\tPartitions: {len(meta.partitions)}")
    print("Configs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items())))
    for index in sorted(meta.partitions):
        p = meta.partitions[index]
        start, end = offsets[index]
        print(
            f"\tPartition: {index}\tLeader: {p.leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
            f"LogStartOffset: {start}\tLogEndOffset: {end}"
        )
    return 0


def cmd_topics_delete(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        admin.delete_topics([args.name])
    print(f"deleted topic {args.name}")
    return 0


def add_topic_commands(subparsers: Any) -> None:
    """Add ``topics`` to an argparse subparsers object."""
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True)

    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="copies of each partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. --config retention.ms=60000 (repeatable)",
    )
    add_client_args(create)
    create.set_defaults(func=guarded(cmd_topics_create))

    listing = topic_commands.add_parser("list", help="list topic names")
    add_client_args(listing)
    listing.set_defaults(func=guarded(cmd_topics_list))

    describe = topic_commands.add_parser(
        "describe", help="partitions with log start/end offsets, topic id and configs"
    )
    describe.add_argument("name")
    add_client_args(describe)
    describe.set_defaults(func=guarded(cmd_topics_describe))

    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    add_client_args(delete)
    delete.set_defaults(func=guarded(cmd_topics_delete))
