"""``headwater health``, ``log-dirs`` and ``quotas``: what a running cluster reports about itself.

``health`` (rpk's ``cluster health``): brokers, controller, under-replicated
and offline partitions from one Metadata answer. ``log-dirs`` (Kafka's
``kafka-log-dirs.sh``): every broker's data directory and the size of each
partition in it (DescribeLogDirs). ``quotas describe|alter`` (Kafka's
``kafka-configs --entity-type users|clients``): client quotas through
DescribeClientQuotas and AlterClientQuotas.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from headwater.cli.common import (
    add_client_args,
    admin_request,
    command_security,
    guarded,
    parse_key_values,
    print_json,
    table,
)
from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError
from headwater.protocol.apis import ApiKey


async def _health(args: argparse.Namespace) -> dict[str, Any]:
    cluster = ClusterClient(
        args.bootstrap, client_id="headwater-health", security=command_security(args)
    )
    try:
        topics = await cluster.refresh_metadata(None)
        under, offline = [], []
        partitions = 0
        for name, meta in sorted(topics.items()):
            for index, p in sorted(meta.partitions.items()):
                partitions += 1
                if p.leader < 0:
                    offline.append(f"{name}-{index}")
                elif len(p.isr) < len(p.replicas):
                    under.append(f"{name}-{index}")
        full, offline_dirs, corrupt = await _log_dir_problems(cluster)
        return {
            "brokers": sorted(cluster.brokers),
            # broker id -> broker.rack (null: none), as Metadata gives it (KIP-36)
            "racks": {b: m.rack for b, m in sorted(cluster.brokers.items())},
            "controller": cluster.controller_id,
            "topics": len(topics),
            "partitions": partitions,
            "under_replicated_partitions": under,
            "offline_partitions": offline,
            # "broker:path" of log directories below log.dir.free.space.min.bytes
            "full_log_dirs": full,
            # "broker:path" of log directories taken offline by an I/O error (KIP-112)
            "offline_log_dirs": offline_dirs,
            # "broker:topic-partition:first-last" ranges the scrubber found corrupt
            "corrupt_partitions": corrupt,
            "healthy": not under
            and not corrupt
            and not offline
            and not full
            and not offline_dirs
            and cluster.controller_id >= 0,
        }
    finally:
        await cluster.close()


#: What a broker that does not report ``log.dir.free.space.min.bytes`` is assumed to use.
_DEFAULT_FREE_SPACE_FLOOR = 64 << 20
_KAFKA_STORAGE_ERROR = 56


async def _log_dir_problems(
    cluster: ClusterClient,
) -> tuple[list[str], list[str], list[str]]:
    """Every broker's log directories that are full (usable bytes below the broker's
    ``log.dir.free.space.min.bytes``) or offline (KAFKA_STORAGE_ERROR), from
    DescribeLogDirs with no partitions and DescribeConfigs, and the ranges its
    scrubber found corrupt (the read-only status ``headwater.log.corrupt.partitions``)."""
    full: list[str] = []
    offline: list[str] = []
    corrupt: list[str] = []
    for node in sorted(cluster.brokers):
        try:
            conn = await cluster.connection(node)
            floor = _DEFAULT_FREE_SPACE_FLOOR
            configs = await conn.request(
                ApiKey.DESCRIBE_CONFIGS,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": str(node),
                            "configuration_keys": [
                                "log.dir.free.space.min.bytes",
                                "headwater.log.corrupt.partitions",
                            ],
                        }
                    ],
                    "include_synonyms": False,
                    "include_documentation": False,
                },
            )
            for resource in configs.results:
                for entry in resource.configs:
                    if entry.name == "log.dir.free.space.min.bytes" and entry.value:
                        floor = int(entry.value)
                    elif entry.name == "headwater.log.corrupt.partitions" and entry.value:
                        corrupt.extend(f"{node}:{r}" for r in entry.value.split(","))
            resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": []})
        except (KafkaError, OSError):
            continue  # an unreachable broker shows in the broker list already
        for result in resp.results:
            where = f"{node}:{result.log_dir}"
            if int(result.error_code) == _KAFKA_STORAGE_ERROR:
                offline.append(where)
            elif 0 <= int(result.usable_bytes) < floor:
                full.append(where)
    return full, offline, corrupt


def cmd_health(args: argparse.Namespace) -> int:
    report = asyncio.run(_health(args))
    if args.json:
        print_json(report)
        return 0

    def some(names: list[str]) -> str:
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        return f"{len(names)}" + (f" ({shown})" if names else "")

    print(f"Healthy: {'yes' if report['healthy'] else 'no'}")
    print(f"Brokers: {','.join(map(str, report['brokers']))}")
    racks = report["racks"]
    if any(rack is not None for rack in racks.values()):
        print("Racks: " + ",".join(f"{b}={rack or '-'}" for b, rack in racks.items()))
    print(f"Controller: {report['controller']}")
    print(f"Topics: {report['topics']}\tPartitions: {report['partitions']}")
    print(f"Under-replicated partitions: {some(report['under_replicated_partitions'])}")
    print(f"Offline partitions: {some(report['offline_partitions'])}")
    if report["full_log_dirs"]:
        print(f"Full log directories: {some(report['full_log_dirs'])}")
    if report["offline_log_dirs"]:
        print(f"Offline log directories: {some(report['offline_log_dirs'])}")
    if report["corrupt_partitions"]:
        print(f"Corrupt ranges (scrubber): {some(report['corrupt_partitions'])}")
    return 0


async def _log_dirs(args: argparse.Namespace) -> list[tuple[int, str, str, int, int]]:
    cluster = ClusterClient(
        args.bootstrap, client_id="headwater-log-dirs", security=command_security(args)
    )
    try:
        await cluster.refresh_metadata([])
        wanted = None
        if args.topic:
            metas = await cluster.refresh_metadata(args.topic)
            wanted = [
                {"topic": t, "partitions": sorted(metas[t].partitions)}
                for t in args.topic
                if t in metas
            ]
        rows = []
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": wanted})
            for result in resp.results:
                if int(result.error_code) == _KAFKA_STORAGE_ERROR:
                    # An offline directory (KIP-112): listed, with no partitions.
                    rows.append((node, result.log_dir, "OFFLINE", -1, -1))
                    continue
                if int(result.error_code):
                    raise KafkaError(
                        int(result.error_code), f"log dir {result.log_dir} of broker {node}"
                    )
                for t in result.topics:
                    for p in t.partitions:
                        rows.append(
                            (node, result.log_dir, f"{t.name}-{p.partition_index}",
                             int(p.partition_size), int(p.offset_lag))
                        )  # fmt: skip
        return rows
    finally:
        await cluster.close()


def cmd_log_dirs(args: argparse.Namespace) -> int:
    rows = asyncio.run(_log_dirs(args))
    if args.json:
        print_json(
            [
                {"broker": b, "log_dir": d, "partition": tp, "size": size, "offset_lag": lag}
                for b, d, tp, size, lag in rows
            ]
        )
        return 0
    print("\n".join(table(("BROKER", "LOG-DIR", "PARTITION", "SIZE", "OFFSET-LAG"), sorted(rows))))
    return 0


_ENTITY_FLAGS = (("user", "user_defaults", "user"), ("client_id", "client_defaults", "client-id"))


def _entity(args: argparse.Namespace) -> list[dict[str, Any]]:
    entity = []
    for attr, defaults, entity_type in _ENTITY_FLAGS:
        value = getattr(args, attr)
        if getattr(args, defaults):
            entity.append({"entity_type": entity_type, "entity_name": None})
        elif value is not None:
            entity.append({"entity_type": entity_type, "entity_name": value})
    return entity


def _name(entity: Any) -> str:
    return " ".join(
        f"{e.entity_type}={'<default>' if e.entity_name is None else e.entity_name}" for e in entity
    )


def cmd_quotas_describe(args: argparse.Namespace) -> int:
    components = [
        {
            "entity_type": e["entity_type"],
            "match_type": 0 if e["entity_name"] else 1,
            "match": e["entity_name"],
        }
        for e in _entity(args)
    ]
    body = {"components": components, "strict": False}
    resp = asyncio.run(
        admin_request(args.bootstrap, ApiKey.DESCRIBE_CLIENT_QUOTAS, body, command_security(args))
    )
    if int(resp.error_code):
        raise KafkaError(int(resp.error_code), resp.error_message or "DescribeClientQuotas")
    entries = sorted(
        (_name(entry.entity), {v.key: v.value for v in entry.values})
        for entry in resp.entries or ()
    )
    if args.json:
        print_json({name: values for name, values in entries})
        return 0
    for name, values in entries:
        print(f"{name}\t" + ", ".join(f"{k}={_number(v)}" for k, v in sorted(values.items())))
    return 0


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def cmd_quotas_alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    if not entity:
        raise ValueError("name --user/--user-defaults and/or --client-id/--client-defaults")
    sets = parse_key_values(args.add_config, "--add-config")
    if not sets and not args.delete_config:
        raise ValueError("alter needs --add-config or --delete-config")
    try:
        ops = [{"key": k, "value": float(v), "remove": False} for k, v in sets.items()]
    except ValueError:
        raise ValueError("quota values are numbers, e.g. producer_byte_rate=1048576") from None
    ops += [{"key": k, "value": 0.0, "remove": True} for k in args.delete_config]
    body = {"entries": [{"entity": entity, "ops": ops}], "validate_only": False}
    resp = asyncio.run(
        admin_request(args.bootstrap, ApiKey.ALTER_CLIENT_QUOTAS, body, command_security(args))
    )
    for entry in resp.entries:
        if int(entry.error_code):
            raise KafkaError(int(entry.error_code), entry.error_message or "AlterClientQuotas")
    names = " ".join(f"{e['entity_type']}={e['entity_name'] or '<default>'}" for e in entity)
    print(f"altered quotas of {names}")
    return 0


def add_cluster_info_commands(subparsers: Any) -> None:
    health = subparsers.add_parser(
        "health", help="brokers, controller, under-replicated and offline partitions"
    )
    health.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_client_args(health)
    health.set_defaults(func=guarded(cmd_health))

    log_dirs = subparsers.add_parser(
        "log-dirs", help="each broker's data directory and partition sizes (DescribeLogDirs)"
    )
    log_dirs.add_argument(
        "--topic", action="append", metavar="NAME", help="only this topic (repeatable)"
    )
    log_dirs.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_client_args(log_dirs)
    log_dirs.set_defaults(func=guarded(cmd_log_dirs))

    quotas = subparsers.add_parser("quotas", help="describe or alter client quotas")
    qsub = quotas.add_subparsers(dest="quotas_command", required=True)
    describe = qsub.add_parser("describe", help="quotas matching the entity flags (none: all)")
    alter = qsub.add_parser("alter", help="set or remove quotas of a user and/or client id")
    for p in (describe, alter):
        p.add_argument("--user", metavar="NAME", help="a user principal's name")
        p.add_argument("--user-defaults", action="store_true", help="the default of every user")
        p.add_argument("--client-id", metavar="ID", help="a client id")
        p.add_argument(
            "--client-defaults", action="store_true", help="the default of every client id"
        )
        add_client_args(p)
    describe.add_argument("--json", action="store_true", help="print JSON instead of text")
    alter.add_argument(
        "--add-config", action="append", default=[], metavar="KEY=VALUE",
        help="producer_byte_rate, consumer_byte_rate or request_percentage (repeatable)",
    )  # fmt: skip
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a quota (repeatable)",
    )
    describe.set_defaults(func=guarded(cmd_quotas_describe))
    alter.set_defaults(func=guarded(cmd_quotas_alter))
