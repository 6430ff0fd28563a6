"""``headwater partitions delete-records|elect-leaders|reassign|list-reassignments``.

The partition operations of Kafka's ``kafka-delete-records.sh``,
``kafka-leader-election.sh`` and ``kafka-reassign-partitions.sh``, with their
JSON files (``--offset-json-file``, ``--path-to-json-file``,
``--reassignment-json-file``) and their per-partition report lines, so an
operator's scripts and habits carry over. Each command exits 1 when any
partition failed (a leader election that was not needed is not a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from headwater.cli import placement
from headwater.cli.common import add_client_args, command_security, guarded, print_json
from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError, error_name
from headwater.client.partition_admin import (
    ElectionType,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    delete_records,
    elect_leaders,
    list_partition_reassignments,
)
from headwater.client.types import TopicPartition
from headwater.protocol.error_codes import ErrorCode

T = TypeVar("T")


def run_with_cluster(args: argparse.Namespace, work: Callable[[ClusterClient], Awaitable[T]]) -> T:
    """Run ``work`` on a client of ``--bootstrap`` with the ``--command-config`` security."""

    async def go() -> T:
        cluster = ClusterClient(
            args.bootstrap, client_id="headwater-admin", security=command_security(args)
        )
        try:
            return await work(cluster)
        finally:
            await cluster.close()

    return asyncio.run(go())


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _json_partitions(path: str, *, with_key: str | None = None) -> list[dict[str, Any]]:
    """The ``partitions`` list of one of Kafka's JSON files, each entry checked."""
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f'{path} has no "partitions" list')
    for entry in entries:
        if not isinstance(entry, dict) or not {"topic", "partition"} <= entry.keys():
            raise ValueError(f'{path}: every partition needs "topic" and "partition"')
        if with_key is not None and with_key not in entry:
            raise ValueError(
                f'{path}: partition {entry["topic"]}-{entry["partition"]} has no "{with_key}"'
            )
    return entries


def _named_partitions(
    cluster: ClusterClient, topic: str, partitions: Sequence[int] | None
) -> list[TopicPartition]:
    if partitions:
        return [TopicPartition(topic, p) for p in partitions]
    meta = cluster.topics.get(topic)
    if meta is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")
    return [TopicPartition(topic, p) for p in sorted(meta.partitions)]


# -- delete-records ------------------------------------------------------------------


def cmd_delete_records(args: argparse.Namespace) -> int:
    if args.offset_json_file:
        entries = _json_partitions(args.offset_json_file, with_key="offset")
        wanted = {
            TopicPartition(e["topic"], int(e["partition"])): int(e["offset"]) for e in entries
        }
    elif args.topic is None or args.offset is None:
        raise ValueError("give --offset-json-file, or --topic and --offset")
    else:
        wanted = {}

    async def work(cluster: ClusterClient) -> int:
        offsets = dict(wanted)
        if not offsets:
            await cluster.refresh_metadata([args.topic])
            for tp in _named_partitions(cluster, args.topic, args.partition):
                offsets[tp] = args.offset
        results = await delete_records(cluster, offsets)
        print("Records delete operation completed:")
        failed = 0
        for tp, r in sorted(results.items()):
            if r.error_code:
                failed += 1
                print(f"partition: {_name(tp)}\terror: {KafkaError(r.error_code, r.message)}")
            else:
                print(f"partition: {_name(tp)}\tlow_watermark: {r.low_watermark}")
        return 1 if failed else 0

    return run_with_cluster(args, work)


# -- elect-leaders -------------------------------------------------------------------


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    election = ElectionType[args.election_type.upper()]
    chosen = sum(bool(x) for x in (args.all_topic_partitions, args.topic, args.path_to_json_file))
    if chosen != 1:
        raise ValueError("give one of --all-topic-partitions, --topic or --path-to-json-file")
    if args.partition and not args.topic:
        raise ValueError("--partition needs --topic")

    async def work(cluster: ClusterClient) -> int:
        partitions: list[TopicPartition] | None = None
        if args.path_to_json_file:
            entries = _json_partitions(args.path_to_json_file)
            partitions = [TopicPartition(e["topic"], int(e["partition"])) for e in entries]
        elif args.topic:
            await cluster.refresh_metadata([args.topic])
            partitions = _named_partitions(cluster, args.topic, args.partition)
        results = await elect_leaders(cluster, election, partitions)
        done = [tp for tp, r in results.items() if r.ok]
        not_needed = [
            tp for tp, r in results.items() if r.error_code == ErrorCode.election_not_needed
        ]
        failed = {
            tp: r
            for tp, r in results.items()
            if not r.ok and r.error_code != ErrorCode.election_not_needed
        }
        kind = election.name
        if done:
            names = ", ".join(map(_name, done))
            print(f"Successfully completed leader election ({kind}) for partitions {names}")
        if not_needed:
            print(
                f"Valid replica already elected for partitions {', '.join(map(_name, not_needed))}"
            )
        for tp, r in failed.items():
            print(
                f"Error completing leader election ({kind}) for partition: {_name(tp)}: "
                f"{error_name(r.error_code)} ({r.error_code}): {r.message}"
            )
        if not results:
            print("No partitions to elect leaders for")
        return 1 if failed else 0

    return run_with_cluster(args, work)


# -- reassign / list-reassignments ----------------------------------------------------------


def _reassignment_targets(path: str) -> dict[TopicPartition, list[int]]:
    targets: dict[TopicPartition, list[int]] = {}
    for e in _json_partitions(path, with_key="replicas"):
        replicas = e["replicas"]
        if not isinstance(replicas, list) or not all(isinstance(r, int) for r in replicas):
            raise ValueError(
                f"{path}: replicas of {e['topic']}-{e['partition']} must be a list of broker ids"
            )
        if len(set(replicas)) != len(replicas) or not replicas:
            raise ValueError(
                f"{path}: replicas of {e['topic']}-{e['partition']} must be distinct and not empty"
            )
        targets[TopicPartition(e["topic"], int(e["partition"]))] = replicas
    return targets


#: Kafka's ``ANY_LOG_DIR``: a replica with no wish for a data directory.
ANY_LOG_DIR = "any"
_REPLICA_NOT_AVAILABLE = 9


def _replica_log_dirs(path: str) -> dict[tuple[TopicPartition, int], str]:
    """The optional ``log_dirs`` of each partition (one per replica, ``any`` for none),
    as (partition, broker) -> directory for those that name one, Kafka's checks."""
    wanted: dict[tuple[TopicPartition, int], str] = {}
    for e in _json_partitions(path, with_key="replicas"):
        dirs = e.get("log_dirs")
        if dirs is None:
            continue
        tp = TopicPartition(e["topic"], int(e["partition"]))
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ValueError(f'{path}: log_dirs of {_name(tp)} must be a list of paths or "any"')
        if len(dirs) != len(e["replicas"]):
            raise ValueError(
                f"Size of replicas list {e['replicas']} is different from size of log dirs "
                f"list {dirs} for partition {_name(tp)}"
            )
        for broker, d in zip(e["replicas"], dirs, strict=True):
            if d != ANY_LOG_DIR:
                wanted[(tp, int(broker))] = d
    return wanted


async def _move_log_dirs(
    cluster: ClusterClient, wanted: dict[tuple[TopicPartition, int], str], timeout_s: float
) -> int:
    """Kafka's ``executeMoves``: AlterReplicaLogDirs to each broker until every move
    has started; a replica not there yet (REPLICA_NOT_AVAILABLE) is asked again until
    ``timeout_s``, as it appears only once the reassignment created it."""
    pending = dict(wanted)
    deadline = time.monotonic() + timeout_s
    while True:
        brokers = sorted({b for _, b in pending})
        for broker in brokers:
            mine = {tp: d for (tp, b), d in pending.items() if b == broker}
            codes = await alter_replica_log_dirs(cluster, broker, mine)
            for tp, d in sorted(mine.items()):
                code = codes.get(tp, _REPLICA_NOT_AVAILABLE)
                if code == _REPLICA_NOT_AVAILABLE:
                    continue
                del pending[(tp, broker)]
                if code:
                    raise KafkaError(
                        code, f"Failed to alter dir for {_name(tp)} on broker {broker}"
                    )
                print(
                    f"Successfully started moving log directory to {d} for replica "
                    f"{_name(tp)} with broker {broker}"
                )
        if not pending:
            return 0
        if time.monotonic() >= deadline:
            names = ",".join(f"{_name(tp)}-{b}" for tp, b in sorted(pending))
            plural = "" if len(pending) == 1 else "s"
            print(f"Timed out before log directory move{plural} could be started for: {names}")
            return 1
        await asyncio.sleep(0.1)


def _topics_to_move(path: str) -> list[str]:
    """The topics of ``--topics-to-move-json-file`` (``{"version": 1, "topics": [...]}``)."""
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError:
        raise ValueError("The input string is not a valid JSON") from None
    if not isinstance(doc, dict):
        raise ValueError(f'{path}: expected {{"version": 1, "topics": [{{"topic": "name"}}]}}')
    version = doc.get("version", 1)
    if version != 1:
        raise ValueError(f"Not supported version field value {version}")
    entries = doc.get("topics") or []
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries
    ):
        raise ValueError(f'{path}: every entry of "topics" needs a "topic" name')
    topics = [e["topic"] for e in entries]
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise ValueError(
            "List of topics to reassign contains duplicate entries: " + ", ".join(duplicates)
        )
    return topics


def _broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise ValueError(f"--broker-list takes broker ids like 1,2,3, not {text!r}") from None
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise ValueError(
            "Broker list contains duplicate entries: " + ", ".join(map(str, duplicates))
        )
    return brokers


def _reassignment_json(assignment: dict[TopicPartition, list[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: compact, by topic and partition, any log dir."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": replicas,
            "log_dirs": ["any"] * len(replicas),
        }
        for tp, replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def cmd_generate(args: argparse.Namespace) -> int:
    """``kafka-reassign-partitions --generate``: a plan moving whole topics onto
    ``--broker-list``, placed as at creation (rack-aware unless --disable-rack-aware;
    brokers not alive are left out, as Kafka does). Prints the current assignment
    and the proposal in Kafka's words; moves nothing."""
    if not args.topics_to_move_json_file or not args.broker_list:
        raise ValueError("--generate needs --topics-to-move-json-file and --broker-list")
    topics = _topics_to_move(args.topics_to_move_json_file)
    wanted_brokers = _broker_list(args.broker_list)
    rack_mode = placement.mode(args.disable_rack_aware)

    async def work(cluster: ClusterClient) -> int:
        found = await cluster.refresh_metadata(topics)
        current: dict[TopicPartition, list[int]] = {}
        for topic in topics:
            meta = found.get(topic)
            if meta is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {topic} not found.")
            for p, info in meta.partitions.items():
                current[TopicPartition(topic, p)] = list(info.replicas)
        chosen = {b: m for b, m in cluster.brokers.items() if b in wanted_brokers}
        racks = placement.rack_map(chosen)
        proposed: dict[TopicPartition, list[int]] = {}
        for topic in topics:
            meta = found[topic]
            first = meta.partitions.get(0) or next(iter(meta.partitions.values()), None)
            if first is None:
                continue
            plan = placement.plan(racks, rack_mode, len(meta.partitions), len(first.replicas))
            proposed.update({TopicPartition(topic, p): r for p, r in plan.items()})
        print(f"Current partition replica assignment\n{_reassignment_json(current)}\n")
        print(f"Proposed partition reassignment configuration\n{_reassignment_json(proposed)}")
        return 0

    return run_with_cluster(args, work)


def cmd_reassign(args: argparse.Namespace) -> int:
    if args.generate:
        return cmd_generate(args)
    if not args.reassignment_json_file:
        raise ValueError("give --reassignment-json-file (or --generate to make one)")
    targets = _reassignment_targets(args.reassignment_json_file)
    log_dirs = _replica_log_dirs(args.reassignment_json_file)

    async def work(cluster: ClusterClient) -> int:
        if args.verify:
            ongoing = await list_partition_reassignments(cluster, targets)
            await cluster.refresh_metadata(sorted({tp.topic for tp in targets}))
            print("Status of partition reassignment:")
            pending = 0
            for tp, replicas in sorted(targets.items()):
                meta = cluster.topics.get(tp.topic)
                current = meta.partitions.get(tp.partition) if meta is not None else None
                if tp in ongoing:
                    pending += 1
                    print(f"Reassignment of partition {_name(tp)} is still in progress.")
                elif current is not None and list(current.replicas) == replicas:
                    print(f"Reassignment of partition {_name(tp)} is completed.")
                else:
                    pending += 1
                    now = "" if current is None else ",".join(map(str, current.replicas))
                    print(
                        f"There is no active reassignment of partition {_name(tp)}, but its "
                        f"replicas are [{now}], not the target."
                    )
            return 1 if pending else 0
        wanted: dict[TopicPartition, list[int] | None] = (
            dict.fromkeys(targets) if args.cancel else dict(targets)
        )
        results = await alter_partition_reassignments(cluster, wanted)
        ok = [tp for tp, r in results.items() if r.ok]
        failed = {tp: r for tp, r in results.items() if not r.ok}
        if ok:
            names = ",".join(map(_name, ok))
            verb = "cancelled" if args.cancel else "started"
            print(f"Successfully {verb} partition reassignments for {names}")
        for tp, r in failed.items():
            print(f"Error reassigning partition {_name(tp)}: {KafkaError(r.error_code, r.message)}")
        if failed:
            return 1
        if log_dirs and not args.cancel:
            return await _move_log_dirs(cluster, log_dirs, args.timeout / 1000)
        return 0

    return run_with_cluster(args, work)


def cmd_list_reassignments(args: argparse.Namespace) -> int:
    async def work(cluster: ClusterClient) -> int:
        partitions = None
        if args.topic:
            await cluster.refresh_metadata([args.topic])
            partitions = _named_partitions(cluster, args.topic, None)
        ongoing = await list_partition_reassignments(cluster, partitions)
        if args.json:
            print_json(
                [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "replicas": list(r.replicas),
                        "adding": list(r.adding),
                        "removing": list(r.removing),
                    }
                    for tp, r in ongoing.items()
                ]
            )
            return 0
        if not ongoing:
            print("No partition reassignments found.")
            return 0
        print("Current partition reassignments:")
        for tp, r in ongoing.items():
            print(
                f"{_name(tp)}: replicas: {','.join(map(str, r.replicas))}. "
                f"adding: {','.join(map(str, r.adding))}. "
                f"removing: {','.join(map(str, r.removing))}."
            )
        return 0

    return run_with_cluster(args, work)


def add_partition_commands(sub: Any) -> None:
    """Add ``partitions`` to an argparse subparsers object."""
    parts = sub.add_parser("partitions", help="delete records, elect leaders, reassign partitions")
    psub = parts.add_subparsers(dest="partitions_command", required=True)

    delete = psub.add_parser(
        "delete-records",
        help="move partitions' log start offset forward (kafka-delete-records)",
        description="Delete every record before an offset: the log start offset moves there "
        "(-1: the high watermark, i.e. everything).",
    )
    delete.add_argument("--topic", metavar="NAME", help="the topic (with --offset)")
    delete.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="a partition of --topic (repeatable; default: all of them)",
    )
    delete.add_argument(
        "--offset",
        type=int,
        metavar="OFFSET",
        help="delete records before this offset (-1: the high watermark)",
    )
    delete.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='Kafka\'s format: {"partitions": [{"topic": T, "partition": P, "offset": O}], '
        '"version": 1}',
    )
    add_client_args(delete)
    delete.set_defaults(func=guarded(cmd_delete_records))

    elect = psub.add_parser(
        "elect-leaders",
        help="elect preferred or unclean leaders (kafka-leader-election)",
        description="PREFERRED moves leadership to each partition's first replica; UNCLEAN "
        "elects a live replica outside the ISR when no ISR member is alive (data may be lost).",
    )
    elect.add_argument(
        "--election-type",
        required=True,
        choices=("preferred", "unclean"),
        type=str.lower,
        help="preferred or unclean",
    )
    elect.add_argument("--topic", metavar="NAME", help="elect for this topic's partitions")
    elect.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="a partition of --topic (repeatable; default: all of them)",
    )
    elect.add_argument(
        "--all-topic-partitions", action="store_true", help="elect for every partition"
    )
    elect.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='Kafka\'s format: {"partitions": [{"topic": T, "partition": P}]}',
    )
    add_client_args(elect)
    elect.set_defaults(func=guarded(cmd_elect_leaders))

    reassign = psub.add_parser(
        "reassign",
        help="move partitions to other brokers, cancel or verify a move "
        "(kafka-reassign-partitions)",
        description="Start moving each listed partition to its replicas (the first is the "
        "preferred leader); --cancel stops those moves, --verify reports on them; "
        "--generate proposes a plan moving whole topics onto --broker-list.",
    )
    reassign.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        help='Kafka\'s format: {"version": 1, "partitions": [{"topic": T, "partition": P, '
        '"replicas": [1, 2, 3]}]}',
    )
    mode = reassign.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="start the listed moves (the default)")
    mode.add_argument("--cancel", action="store_true", help="cancel the listed moves")
    mode.add_argument("--verify", action="store_true", help="report whether the moves are done")
    mode.add_argument(
        "--generate",
        action="store_true",
        help="print the current assignment and a proposed plan; moves nothing",
    )
    reassign.add_argument(
        "--topics-to-move-json-file",
        metavar="FILE",
        help='with --generate: {"version": 1, "topics": [{"topic": T}]}',
    )
    reassign.add_argument(
        "--broker-list", metavar="1,2,3", help="with --generate: the brokers to move onto"
    )
    reassign.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="with --generate: place replicas ignoring the brokers' racks",
    )
    reassign.add_argument(
        "--timeout",
        type=int,
        default=10_000,
        metavar="MS",
        help="with --execute: how long to retry starting the log_dirs moves of replicas "
        "not yet on their broker (default 10000)",
    )
    add_client_args(reassign)
    reassign.set_defaults(func=guarded(cmd_reassign))

    lst = psub.add_parser("list-reassignments", help="partition moves in progress")
    lst.add_argument("--topic", metavar="NAME", help="only this topic")
    lst.add_argument("--json", action="store_true", help="print JSON instead of lines")
    add_client_args(lst)
    lst.set_defaults(func=guarded(cmd_list_reassignments))
