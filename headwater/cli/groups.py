"""``headwater groups list|describe GROUP``: consumer groups as an operator sees them.

Talks to a running broker with ListGroups, DescribeGroups, OffsetFetch and
ListOffsets, and prints members, their assignments, committed offsets and
the lag of every committed partition (log end offset minus committed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from headwater.cli.common import add_client_args, command_security, guarded
from headwater.client.cluster import ClusterClient
from headwater.client.errors import KafkaError
from headwater.client.types import TopicPartition
from headwater.group.describe import GroupReport, description_from_response, group_report
from headwater.group.storage import CommittedOffset
from headwater.protocol.apis import ApiKey
from headwater.security.client_security import ClientSecurity

_LATEST = -1


async def _list(bootstrap: str, security: ClientSecurity | None) -> list[tuple[str, str, str]]:
    cluster = ClusterClient(bootstrap, client_id="headwater-groups", security=security)
    try:
        conn = await cluster.any_connection()
        resp = await conn.request(ApiKey.LIST_GROUPS, {"states_filter": []})
        _raise(int(resp.error_code), "ListGroups")
        return sorted(
            (g.group_id, g.protocol_type, getattr(g, "group_state", "") or "") for g in resp.groups
        )
    finally:
        await cluster.close()


async def _describe(
    bootstrap: str, group: str, security: ClientSecurity | None
) -> tuple[GroupReport, dict[tuple[str, int], int]]:
    cluster = ClusterClient(bootstrap, client_id="headwater-groups", security=security)
    try:
        conn = await cluster.any_connection()
        described = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
        (g,) = described.groups
        _raise(int(g.error_code), f"DescribeGroups {group}")
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
        tps = [TopicPartition(topic, partition) for topic, partition, _ in committed]
        ends = await cluster.list_offsets(tps, _LATEST) if tps else {}
        return group_report(description_from_response(g), committed), {
            (tp.topic, tp.partition): end for tp, end in ends.items()
        }
    finally:
        await cluster.close()


def _raise(code: int, what: str) -> None:
    if code:
        raise KafkaError(code, what)


def cmd_groups_list(args: argparse.Namespace) -> int:
    rows = asyncio.run(_list(args.bootstrap, command_security(args)))
    for group_id, protocol_type, state in rows:
        print(f"{group_id}\t{protocol_type or '-'}\t{state or '-'}")
    return 0


def format_report(report: GroupReport, ends: dict[tuple[str, int], int]) -> list[str]:
    lines = [
        f"Group: {report.group_id}\tState: {report.state}\tProtocol: "
        f"{report.protocol_type or '-'}/{report.protocol or '-'}\tMembers: {len(report.members)}"
    ]
    for m in report.members:
        parts = ", ".join(
            f"{topic}[{','.join(str(p) for p in partitions)}]"
            for topic, partitions in (m.assignment or ())
        )
        instance = f" instance={m.group_instance_id}" if m.group_instance_id else ""
        lines.append(
            f"  member {m.member_id} client={m.client_id} host={m.client_host}{instance}"
            f" assigned={parts or '-'}"
        )
    lines.append("  TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tOWNER\tMETADATA")
    for o in sorted(report.offsets, key=lambda o: (o.topic, o.partition)):
        end = ends.get((o.topic, o.partition))
        lag = "-" if end is None else str(o.lag(end))
        lines.append(
            f"  {o.topic}\t{o.partition}\t{o.offset}\t{'-' if end is None else end}\t{lag}"
            f"\t{o.owner or '-'}\t{o.metadata}"
        )
    return lines


def cmd_groups_describe(args: argparse.Namespace) -> int:
    report, ends = asyncio.run(_describe(args.bootstrap, args.group, command_security(args)))
    if report.state == "Dead" and not report.members and not report.offsets:
        print(f"error: consumer group {args.group!r} does not exist", file=sys.stderr)
        return 1
    print("\n".join(format_report(report, ends)))
    return 0


def add_group_commands(sub: Any) -> None:
    groups = sub.add_parser("groups", help="list consumer groups, or describe one with its lag")
    gsub = groups.add_subparsers(dest="groups_command", required=True)
    lst = gsub.add_parser("list", help="group ids with protocol type and state")
    desc = gsub.add_parser("describe", help="members, assignments, committed offsets and lag")
    desc.add_argument("group")
    for p in (lst, desc):
        add_client_args(p)
    lst.set_defaults(func=guarded(cmd_groups_list))
    desc.set_defaults(func=guarded(cmd_groups_describe))
