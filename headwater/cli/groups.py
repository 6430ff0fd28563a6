"""``headwater groups list|describe GROUP``: consumer groups as an operator sees them.

Talks to a running broker with ListGroups, DescribeGroups, OffsetFetch and
ListOffsets, and prints members, their assignments, committed offsets and
the lag of every committed partition (log end offset minus committed).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from typing import Any

from headwater.cli.common import add_client_args, command_security, guarded, print_json, table
from headwater.client.cluster import ClusterClient
from headwater.client.connection import BrokerConnection
from headwater.client.coordinator import CoordinatorClient, CoordinatorType
from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.group.describe import (
    GroupReport,
    consumer_group_report,
    description_from_response,
    group_report,
)
from headwater.group.storage import CommittedOffset
from headwater.protocol.apis import ApiKey
from headwater.security.client_security import ClientSecurity

_LATEST = -1


async def _list(bootstrap: str, security: ClientSecurity | None) -> list[tuple[str, str, str, str]]:
    """(group, protocol type, state, type): ListGroups v5 says classic or consumer."""
    cluster = ClusterClient(bootstrap, client_id="headwater-groups", security=security)
    try:
        conn = await cluster.any_connection()
        resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        _raise(int(resp.error_code), "ListGroups")
        return sorted(
            (
                g.group_id,
                g.protocol_type,
                getattr(g, "group_state", "") or "",
                getattr(g, "group_type", "") or "classic",
            )
            for g in resp.groups
        )
    finally:
        await cluster.close()


async def _coordinator(cluster: ClusterClient, group: str) -> BrokerConnection:
    """A connection to the group's coordinator (any broker may not be it in a cluster)."""
    node = await CoordinatorClient(cluster).find(CoordinatorType.GROUP, group)
    return await cluster.connection(node)


def _assigned(report: GroupReport) -> list[tuple[str, int, str]]:
    """(topic, partition, member id) of every assigned partition."""
    return [
        (topic, partition, m.member_id)
        for m in report.members
        for topic, partitions in (m.assignment or ())
        for partition in partitions
    ]


async def _describe(
    bootstrap: str, group: str, security: ClientSecurity | None
) -> tuple[GroupReport, dict[tuple[str, int], int]]:
    cluster = ClusterClient(bootstrap, client_id="headwater-groups", security=security)
    try:
        conn = await _coordinator(cluster, group)
        described = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
        (g,) = described.groups
        _raise(int(g.error_code), f"DescribeGroups {group}")
        consumer_group = None
        if (
            g.group_state == "Dead"
            and not g.members
            and ApiKey.CONSUMER_GROUP_DESCRIBE in conn.broker_versions
        ):
            # DescribeGroups knows only classic groups: a KIP-848 one reads as Dead.
            answer = await conn.request(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                {"group_ids": [group], "include_authorized_operations": False},
            )
            (found,) = answer.groups
            if int(found.error_code) == 0:
                consumer_group = found
        # OffsetFetch v7: one group, all of its committed partitions (topics null).
        fetched = await conn.request(
            ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None}, version=7
        )
        _raise(int(fetched.error_code), f"OffsetFetch {group}")
        committed: list[tuple[str, int, CommittedOffset | None]] = []
        for t in fetched.topics:
            for p in t.partitions:
                offset = CommittedOffset(
                    int(p.committed_offset), int(p.committed_leader_epoch), p.metadata or "", -1
                )
                committed.append((t.name, int(p.partition_index), offset))
        if consumer_group is not None:
            report = consumer_group_report(consumer_group, committed)
        else:
            report = group_report(description_from_response(g), committed)
        tps = [TopicPartition(topic, partition) for topic, partition, _ in committed]
        tps += [TopicPartition(topic, partition) for topic, partition, _ in _assigned(report)]
        ends = await cluster.list_offsets(tps, _LATEST) if tps else {}
        return report, {(tp.topic, tp.partition): end for tp, end in ends.items()}
    finally:
        await cluster.close()


def _raise(code: int, what: str) -> None:
    if code:
        raise KafkaError(code, what)


def cmd_groups_list(args: argparse.Namespace) -> int:
    rows = asyncio.run(_list(args.bootstrap, command_security(args)))
    if args.json:
        print_json([{"group": g, "protocol_type": t, "state": s, "type": k} for g, t, s, k in rows])
        return 0
    for group_id, protocol_type, state, kind in rows:
        print(f"{group_id}\t{protocol_type or '-'}\t{state or '-'}\t{kind}")
    return 0


def format_report(report: GroupReport, ends: dict[tuple[str, int], int]) -> list[str]:
    if report.group_type == "consumer":
        lines = [
            f"Group: {report.group_id}\tType: consumer\tState: {report.state}\t"
            f"Assignor: {report.protocol or '-'}\tGroup epoch: {report.group_epoch}\t"
            f"Assignment epoch: {report.assignment_epoch}\tMembers: {len(report.members)}"
        ]
    else:
        lines = [
            f"Group: {report.group_id}\tType: classic\tState: {report.state}\tProtocol: "
            f"{report.protocol_type or '-'}/{report.protocol or '-'}\t"
            f"Members: {len(report.members)}"
        ]

    def named(assignment: Any) -> str:
        return ", ".join(
            f"{topic}[{','.join(str(p) for p in partitions)}]"
            for topic, partitions in (assignment or ())
        )

    for m in report.members:
        instance = f" instance={m.group_instance_id}" if m.group_instance_id else ""
        epoch = "" if m.member_epoch is None else f" epoch={m.member_epoch}"
        target = ""
        if m.target_assignment is not None and m.target_assignment != m.assignment:
            target = f" target={named(m.target_assignment) or '-'}"
        lines.append(
            f"  member {m.member_id} client={m.client_id} host={m.client_host}{instance}{epoch}"
            f" assigned={named(m.assignment) or '-'}{target}"
        )
    lines.append("  TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tOWNER\tMETADATA")
    for o in sorted(report.offsets, key=lambda o: (o.topic, o.partition)):
        end = ends.get((o.topic, o.partition))
        lag = "-" if end is None else str(o.lag(end))
        lines.append(
            f"  {o.topic}\t{o.partition}\t{o.offset}\t{'-' if end is None else end}\t{lag}"
            f"\t{o.owner or '-'}\t{o.metadata}"
        )
    # Assigned but never committed: Kafka's tool shows these too, with no lag.
    committed = {(o.topic, o.partition) for o in report.offsets}
    for topic, partition, member in sorted(_assigned(report)):
        if (topic, partition) not in committed:
            end = ends.get((topic, partition))
            lines.append(f"  {topic}\t{partition}\t-\t{'-' if end is None else end}\t-\t{member}\t")
    return lines


def cmd_groups_describe(args: argparse.Namespace) -> int:
    report, ends = asyncio.run(_describe(args.bootstrap, args.group, command_security(args)))
    if report.state == "Dead" and not report.members and not report.offsets:
        print(f"error: consumer group {args.group!r} does not exist", file=sys.stderr)
        return 1
    if args.json:
        print_json(report_json(report, ends))
        return 0
    print("\n".join(format_report(report, ends)))
    return 0


def report_json(report: GroupReport, ends: dict[tuple[str, int], int]) -> dict[str, Any]:
    """The same facts as ``format_report``: members, then every partition with its lag."""
    committed = {(o.topic, o.partition): o for o in report.offsets}
    owners = {(t, p): m for t, p, m in _assigned(report)}
    partitions = []
    for topic, partition in sorted(committed.keys() | owners.keys()):
        o = committed.get((topic, partition))
        end = ends.get((topic, partition))
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "committed_offset": None if o is None else o.offset,
                "log_end_offset": end,
                "lag": None if o is None or end is None else o.lag(end),
                "owner": owners.get((topic, partition)),
                "metadata": None if o is None else o.metadata,
            }
        )
    answer: dict[str, Any] = {
        "group": report.group_id,
        "type": report.group_type,
        "state": report.state,
        "protocol_type": report.protocol_type,
        "protocol": report.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": {t: list(ps) for t, ps in (m.assignment or ())},
                **(
                    {}
                    if m.member_epoch is None
                    else {
                        "member_epoch": m.member_epoch,
                        "target_assignment": {t: list(ps) for t, ps in (m.target_assignment or ())},
                    }
                ),
            }
            for m in report.members
        ],
        "partitions": partitions,
    }
    if report.group_type == "consumer":
        answer["group_epoch"] = report.group_epoch
        answer["assignment_epoch"] = report.assignment_epoch
    return answer


_EARLIEST = -2
_ACTIVE_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable")


async def _committed(conn: BrokerConnection, group: str) -> dict[TopicPartition, int]:
    fetched = await conn.request(
        ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None}, version=7
    )
    _raise(int(fetched.error_code), f"OffsetFetch {group}")
    return {
        TopicPartition(t.name, int(p.partition_index)): int(p.committed_offset)
        for t in fetched.topics
        for p in t.partitions
        if int(p.committed_offset) >= 0
    }


async def _reset_partitions(
    cluster: ClusterClient, args: argparse.Namespace, committed: dict[TopicPartition, int]
) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    out: list[TopicPartition] = []
    for spec in args.topic:
        topic, _, listed = spec.partition(":")
        if listed:
            out += [TopicPartition(topic, int(p)) for p in listed.split(",")]
            continue
        meta = (await cluster.refresh_metadata([topic])).get(topic)
        if meta is None:
            raise KafkaError(3, f"topic {topic!r} does not exist")
        out += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    return out


def _timestamp_ms(text: str) -> int:
    """--to-datetime: ISO 8601 (local time without a zone, as Kafka's tool) or epoch ms."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM]"
        ) from None
    return int(moment.timestamp() * 1000)


async def _reset(
    args: argparse.Namespace, security: ClientSecurity | None
) -> list[tuple[TopicPartition, int]]:
    """The new offset of each partition; committed when --execute."""
    group = args.group
    cluster = ClusterClient(args.bootstrap, client_id="headwater-groups", security=security)
    try:
        conn = await _coordinator(cluster, group)
        described = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
        (g,) = described.groups
        _raise(int(g.error_code), f"DescribeGroups {group}")
        if g.group_state in _ACTIVE_STATES or g.members:
            raise ValueError(
                f"consumer group {group!r} is {g.group_state} with {len(g.members)} member(s): "
                "stop its consumers first; offsets of an active group cannot be reset"
            )
        committed = await _committed(conn, group)
        tps = await _reset_partitions(cluster, args, committed)
        if not tps:
            raise ValueError(f"no partitions to reset in group {group!r}")
        starts = await cluster.list_offsets(tps, _EARLIEST)
        ends = await cluster.list_offsets(tps, _LATEST)
        if args.to_datetime is not None:
            found = await cluster.list_offsets(tps, _timestamp_ms(args.to_datetime))
        targets: list[tuple[TopicPartition, int]] = []
        for tp in tps:
            if args.to_earliest:
                target = starts[tp]
            elif args.to_latest:
                target = ends[tp]
            elif args.to_offset is not None:
                target = args.to_offset
            elif args.to_datetime is not None:
                target = found[tp] if found[tp] >= 0 else ends[tp]
            else:
                target = committed.get(tp, starts[tp]) + args.shift_by
            targets.append((tp, min(max(target, starts[tp]), ends[tp])))
        if args.execute:
            await _commit(conn, group, targets)
        return targets
    finally:
        await cluster.close()


async def _commit(
    conn: BrokerConnection, group: str, targets: list[tuple[TopicPartition, int]]
) -> None:
    """OffsetCommit as an admin (generation -1, no member), as kafka-consumer-groups does."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, offset in targets:
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }
    resp = await conn.request(ApiKey.OFFSET_COMMIT, body, version=8)
    for t in resp.topics:
        for p in t.partitions:
            _raise(int(p.error_code), f"committing {t.name}-{p.partition_index} for {group}")


def group_offsets(args: argparse.Namespace, group: str) -> dict[TopicPartition, int]:
    """The committed offsets of ``group`` (for ``consume --group``)."""

    async def fetch() -> dict[TopicPartition, int]:
        cluster = ClusterClient(
            args.bootstrap, client_id="headwater-groups", security=command_security(args)
        )
        try:
            return await _committed(await _coordinator(cluster, group), group)
        finally:
            await cluster.close()

    return asyncio.run(fetch())


def commit_group_offsets(
    args: argparse.Namespace, group: str, offsets: dict[TopicPartition, int]
) -> None:
    """Commit ``offsets`` for ``group`` as a standalone member (generation -1)."""

    async def commit() -> None:
        cluster = ClusterClient(
            args.bootstrap, client_id="headwater-groups", security=command_security(args)
        )
        try:
            await _commit(await _coordinator(cluster, group), group, sorted(offsets.items()))
        finally:
            await cluster.close()

    asyncio.run(commit())


def cmd_groups_reset_offsets(args: argparse.Namespace) -> int:
    """Kafka's kafka-consumer-groups --reset-offsets: a plan, committed only with --execute."""
    targets = asyncio.run(_reset(args, command_security(args)))
    rows = [(args.group, tp.topic, tp.partition, offset) for tp, offset in targets]
    print("\n".join(table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows)))
    if not args.execute and not args.dry_run:
        print(
            "no offsets changed: add --execute to commit them (--dry-run to only show)",
            file=sys.stderr,
        )
    return 0


async def _delete(groups: list[str], security: ClientSecurity | None, bootstrap: str) -> None:
    cluster = ClusterClient(bootstrap, client_id="headwater-groups", security=security)
    try:
        for group in groups:
            conn = await _coordinator(cluster, group)
            resp = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]})
            for r in resp.results:
                _raise(int(r.error_code), f"deleting group {r.group_id!r}")
    finally:
        await cluster.close()


def cmd_groups_delete(args: argparse.Namespace) -> int:
    asyncio.run(_delete(args.group, command_security(args), args.bootstrap))
    for group in args.group:
        print(f"deleted group {group}")
    return 0


def add_group_commands(sub: Any) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe (with lag), reset offsets of, or delete consumer groups"
    )
    gsub = groups.add_subparsers(dest="groups_command", required=True)
    lst = gsub.add_parser("list", help="group ids with protocol type and state")
    desc = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    desc.add_argument("group")
    reset = gsub.add_parser(
        "reset-offsets",
        help="move a stopped group's committed offsets (kafka-consumer-groups --reset-offsets)",
    )
    reset.add_argument("group")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )  # fmt: skip
    which.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS",
        help="the first record at or after this time (ISO 8601; epoch ms too)",
    )  # fmt: skip
    to.add_argument("--shift-by", type=int, metavar="N", help="committed offset plus N (or minus)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    delete = gsub.add_parser("delete", help="delete empty groups and their committed offsets")
    delete.add_argument("group", nargs="+")
    for p in (lst, desc):
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
    for p in (lst, desc, reset, delete):
        add_client_args(p)
    reset.set_defaults(func=guarded(cmd_groups_reset_offsets))
    delete.set_defaults(func=guarded(cmd_groups_delete))
    lst.set_defaults(func=guarded(cmd_groups_list))
    desc.set_defaults(func=guarded(cmd_groups_describe))
