"""``headwater topics create|list|describe|delete`` (Kafka: ``kafka-topics.sh``)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from headwater.cli import placement
from headwater.cli.common import (
    add_client_args,
    admin_client,
    admin_request,
    command_security,
    guarded,
    parse_key_values,
    print_json,
)
from headwater.client.admin import TOPIC_RESOURCE, AdminClient
from headwater.client.errors import KafkaError
from headwater.client.types import TopicMetadata
from headwater.cluster.replica_placement import new_partitions_start_index
from headwater.protocol.apis import ApiKey

TOPIC_CONFIG_SOURCE = 1


def cmd_topics_create(args: argparse.Namespace) -> int:
    """The brokers place replicas (rack-aware); with --disable-rack-aware this command
    does, rack-unaware, and sends them (Kafka's ZooKeeper-mode kafka-topics did so)."""
    configs = parse_key_values(args.config)
    if args.partitions < 1:
        raise ValueError(f"--partitions must be at least 1, got {args.partitions}")
    if args.disable_rack_aware and args.replication_factor == -1:
        raise ValueError(
            "--disable-rack-aware needs --replication-factor (replicas are placed here)"
        )
    rack_mode = placement.mode(args.disable_rack_aware)
    with admin_client(args) as admin:
        racks = placement.rack_map(admin.brokers())
        if args.disable_rack_aware:
            assignment = placement.plan(racks, rack_mode, args.partitions, args.replication_factor)
            admin.create_topic_with_assignment(args.name, assignment, configs)
        else:
            placement.check_racks(racks, rack_mode)
            admin.create_topics([(args.name, args.partitions, configs, args.replication_factor)])
    print(f"created topic {args.name}")
    return 0


def cmd_topics_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        names = list(admin.list_topics())
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def _partition_row(meta: TopicMetadata, index: int, offsets: dict[int, tuple[int, int]]) -> str:
    p = meta.partitions[index]
    start, end = offsets.get(index, (-1, -1))
    return (
        f"\tPartition: {index}\tLeader: {p.leader}\t"
        f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
        f"LogStartOffset: {start}\tLogEndOffset: {end}"
    )


def _wanted(args: argparse.Namespace, meta: TopicMetadata, index: int) -> bool:
    p = meta.partitions[index]
    if args.under_replicated_partitions and len(p.isr) >= len(p.replicas):
        return False
    return not (args.unavailable_partitions and p.leader >= 0)


def cmd_topics_describe(args: argparse.Namespace) -> int:
    """Kafka's layout; configs are the topic's overrides unless --all-configs."""
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    described = []
    with admin_client(args) as admin:
        names = [args.name] if args.name else [n for n in admin.list_topics()]
        for name in names:
            meta = admin.describe_topic(name)
            offsets = admin.log_offsets(name) if not filtered else {}
            entries = admin.describe_config_entries(name) if not filtered else {}
            configs = {
                k: v
                for k, (v, source) in sorted(entries.items())
                if args.all_configs or source == TOPIC_CONFIG_SOURCE
            }
            described.append((meta, offsets, configs))
    if args.json:
        print_json([_topic_json(args, *d) for d in described])
        return 0
    for meta, offsets, configs in described:
        rows = [i for i in sorted(meta.partitions) if _wanted(args, meta, i)]
        if filtered:
            for index in rows:
                print(f"\tTopic: {meta.name}" + _partition_row(meta, index, offsets))
            continue
        print(f"Topic: {meta.name}\tTopicId: {meta.topic_id}\tPartitions: {len(meta.partitions)}")
        print("Configs: " + ",".join(f"{k}={v}" for k, v in configs.items()))
        for index in rows:
            print(_partition_row(meta, index, offsets))
    return 0


def _topic_json(
    args: argparse.Namespace,
    meta: TopicMetadata,
    offsets: dict[int, tuple[int, int]],
    configs: dict[str, str | None],
) -> dict[str, Any]:
    partitions = []
    for index in sorted(meta.partitions):
        if not _wanted(args, meta, index):
            continue
        p = meta.partitions[index]
        start, end = offsets.get(index, (-1, -1))
        partitions.append(
            {
                "partition": index,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "log_start_offset": start,
                "log_end_offset": end,
            }
        )
    return {
        "name": meta.name,
        "topic_id": str(meta.topic_id),
        "configs": configs,
        "partitions": partitions,
    }


def cmd_topics_alter(args: argparse.Namespace) -> int:
    """More partitions (CreatePartitions) and config changes (IncrementalAlterConfigs)."""
    sets = parse_key_values(args.config)
    if args.partitions is None and not sets and not args.delete_config:
        raise ValueError("alter needs --partitions, --config or --delete-config")
    if args.partitions is not None:
        if args.partitions < 1:
            raise ValueError(f"--partitions must be at least 1, got {args.partitions}")
        with admin_client(args) as admin:
            add_partitions(admin, args.name, args.partitions, args.disable_rack_aware)
        print(f"topic {args.name} now has {args.partitions} partitions")
    if sets or args.delete_config:
        alter_configs(args, TOPIC_RESOURCE, args.name, sets, args.delete_config)
        print(f"altered configs of topic {args.name}")
    return 0


def add_partitions(admin: AdminClient, name: str, total: int, disable_rack_aware: bool) -> None:
    """CreatePartitions; --disable-rack-aware places the new partitions here as Kafka's
    AdminZkClient would (round robin on from partition 0's leader), racks ignored."""
    rack_mode = placement.mode(disable_rack_aware)
    racks = placement.rack_map(admin.brokers())
    if not disable_rack_aware:
        placement.check_racks(racks, rack_mode)
        admin.create_partitions(name, total)
        return
    current = admin.describe_topic(name).partitions
    first = list(current[0].replicas) if 0 in current else []
    if not first or total <= len(current):
        admin.create_partitions(name, total)  # the broker says what is wrong
        return
    new = placement.plan(
        racks,
        rack_mode,
        total - len(current),
        len(first),
        start_index=new_partitions_start_index(racks, first[0]),
        start_partition=len(current),
    )
    admin.create_partitions(name, total, assignments=[new[p] for p in sorted(new)])


def alter_configs(
    args: argparse.Namespace,
    resource_type: int,
    name: str,
    sets: dict[str, str],
    deletes: list[str],
) -> None:
    """IncrementalAlterConfigs (KIP-339): SET and DELETE, other keys untouched."""
    configs = [{"name": k, "config_operation": 0, "value": v} for k, v in sets.items()]
    configs += [{"name": k, "config_operation": 1, "value": None} for k in deletes]
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}],
        "validate_only": False,
    }
    resp = asyncio.run(
        admin_request(
            args.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, body, command_security(args)
        )
    )
    for r in resp.responses:
        if int(r.error_code):
            raise KafkaError(int(r.error_code), r.error_message or f"altering configs of {name!r}")


def cmd_topics_delete(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        admin.delete_topics([args.name])
    print(f"deleted topic {args.name}")
    return 0


def add_topic_commands(subparsers: Any) -> None:
    """Add ``topics`` to an argparse subparsers object."""
    topics = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
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
    create.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="place replicas ignoring racks (computed here; needs --replication-factor); "
        "the way to create a topic when only some brokers have broker.rack",
    )
    add_client_args(create)
    create.set_defaults(func=guarded(cmd_topics_create))

    listing = topic_commands.add_parser("list", help="list topic names")
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    add_client_args(listing)
    listing.set_defaults(func=guarded(cmd_topics_list))

    describe = topic_commands.add_parser(
        "describe", help="partitions with log start/end offsets, topic id and config overrides"
    )
    describe.add_argument("name", nargs="?", help="the topic (default: every topic)")
    describe.add_argument(
        "--all-configs", action="store_true", help="every config, defaults included"
    )
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica set",
    )
    describe.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions without a leader"
    )
    describe.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_client_args(describe)
    describe.set_defaults(func=guarded(cmd_topics_describe))

    alter = topic_commands.add_parser(
        "alter", help="add partitions, set or delete topic configs (kafka-topics --alter)"
    )
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, metavar="N", help="the new partition count")
    alter.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a topic config override (repeatable)",
    )
    alter.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="with --partitions: place the new partitions ignoring racks (computed here)",
    )
    add_client_args(alter)
    alter.set_defaults(func=guarded(cmd_topics_alter))

    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    add_client_args(delete)
    delete.set_defaults(func=guarded(cmd_topics_delete))
