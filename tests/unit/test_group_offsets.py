"""Committed offsets: who may commit, what is stored, and what survives a restart."""

from __future__ import annotations

import io
import itertools
import struct

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.results import JoinResult
from headwater.group.storage import CommittedOffset

SESSION_MS = 10_000


def partition_exists(topic: str, partition: int) -> bool:
    return topic in {"orders", "audit"} and 0 <= partition < 3


def make_coordinator(log: InMemoryStateLog, *, now_ms: int = 0) -> GroupCoordinator:
    counter = itertools.count(1)
    return GroupCoordinator(
        log,
        partition_exists,
        now_ms=now_ms,
        config=GroupConfig(initial_rebalance_delay_ms=0, max_metadata_bytes=16),
        member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
    )


def subscription(*topics: str) -> bytes:
    buffer = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(
        buffer, ConsumerProtocolSubscription(topics=topics, user_data=None)
    )
    return struct.pack(">h", 0) + buffer.getvalue()


def stable_member(coordinator: GroupCoordinator, group_id: str, *topics: str) -> JoinResult:
    """A one-member group in generation 1 with its assignment synced."""
    joined = coordinator.join_group(
        0,
        group_id=group_id,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", subscription(*topics or ("orders",)))],
        session_timeout_ms=SESSION_MS,
        require_known_member_id=False,
    ).result()
    coordinator.sync_group(
        0,
        group_id=group_id,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        assignments=[(joined.member_id, b"")],
    )
    return joined


def commit(
    coordinator: GroupCoordinator,
    group_id: str,
    *entries: OffsetCommitEntry,
    generation_id: int = -1,
    member_id: str = "",
) -> list[ErrorCode]:
    return coordinator.commit_offsets(
        0,
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        entries=list(entries),
        timestamp_ms=1_700_000_000_000,
    ).result()


def test_member_commit_with_its_generation_is_stored_with_epoch_and_metadata() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    member = stable_member(coordinator, "g")
    errors = commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 100, leader_epoch=5, metadata="note"),
        OffsetCommitEntry("orders", 1, 7),
        generation_id=member.generation_id,
        member_id=member.member_id,
    )
    assert errors == [ErrorCode.none, ErrorCode.none]
    assert coordinator.fetch_offsets("g", [("orders", 0), ("orders", 1), ("orders", 2)]) == [
        ("orders", 0, CommittedOffset(100, 5, "note", 1_700_000_000_000)),
        ("orders", 1, CommittedOffset(7, -1, "", 1_700_000_000_000)),
        ("orders", 2, None),
    ]


def test_stale_generation_commit_is_rejected() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    member = stable_member(coordinator, "g")
    errors = commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 100),
        generation_id=member.generation_id - 1,
        member_id=member.member_id,
    )
    assert errors == [ErrorCode.illegal_generation]
    assert coordinator.fetch_offsets("g", [("orders", 0)]) == [("orders", 0, None)]


def test_commit_from_a_stranger_to_a_group_with_members_is_rejected() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    member = stable_member(coordinator, "g")
    assert commit(coordinator, "g", OffsetCommitEntry("orders", 0, 1)) == [
        ErrorCode.unknown_member_id
    ]
    assert commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 1),
        generation_id=member.generation_id,
        member_id="someone-else",
    ) == [ErrorCode.unknown_member_id]


def test_standalone_consumer_commits_to_a_group_without_members() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    assert commit(coordinator, "standalone", OffsetCommitEntry("orders", 2, 9)) == [ErrorCode.none]
    assert coordinator.describe_group("standalone").state == "Empty"
    # A generation that a group without members never had is illegal.
    assert commit(coordinator, "nobody", OffsetCommitEntry("orders", 0, 1), generation_id=3) == [
        ErrorCode.illegal_generation
    ]


def test_commit_during_completing_rebalance_asks_to_wait() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    joined = coordinator.join_group(
        0,
        group_id="g",
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        require_known_member_id=False,
    ).result()
    errors = commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 1),
        generation_id=joined.generation_id,
        member_id=joined.member_id,
    )
    assert errors == [ErrorCode.rebalance_in_progress]


def test_commit_while_preparing_rebalance_is_allowed_for_the_current_generation() -> None:
    """Eager consumers commit in onPartitionsRevoked, before rejoining."""
    coordinator = make_coordinator(InMemoryStateLog())
    member = stable_member(coordinator, "g")
    coordinator.join_group(
        0,
        group_id="g",
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=SESSION_MS,
        require_known_member_id=False,
    )
    assert coordinator.describe_group("g").state == "PreparingRebalance"
    errors = commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 1),
        generation_id=member.generation_id,
        member_id=member.member_id,
    )
    assert errors == [ErrorCode.none]


def test_oversized_metadata_and_unknown_partitions_fail_alone() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    errors = commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 1, metadata="x" * 16),
        OffsetCommitEntry("orders", 1, 1, metadata="x" * 17),
        OffsetCommitEntry("orders", 9, 1),
        OffsetCommitEntry("nope", 0, 1),
    )
    assert errors == [
        ErrorCode.none,
        ErrorCode.offset_metadata_too_large,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert [tp for *tp, value in coordinator.fetch_offsets("g", None)] == [["orders", 0]]


def test_unknown_partition_error_wins_over_group_errors() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    stable_member(coordinator, "g")
    errors = commit(
        coordinator, "g", OffsetCommitEntry("nope", 0, 1), OffsetCommitEntry("orders", 0, 1)
    )
    assert errors == [ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_member_id]


def test_fetch_of_all_partitions_and_of_an_unknown_group() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    commit(coordinator, "g", OffsetCommitEntry("orders", 0, 1), OffsetCommitEntry("audit", 2, 3))
    assert {
        (t, p, v.offset if v else None) for t, p, v in coordinator.fetch_offsets("g", None)
    } == {
        ("orders", 0, 1),
        ("audit", 2, 3),
    }
    assert coordinator.fetch_offsets("other", None) == []
    assert coordinator.fetch_offsets("other", [("orders", 0)]) == [("orders", 0, None)]


def test_offsets_and_deletions_survive_replay_of_the_log() -> None:
    log = InMemoryStateLog()
    coordinator = make_coordinator(log)
    commit(coordinator, "a", OffsetCommitEntry("orders", 0, 1), OffsetCommitEntry("orders", 1, 2))
    commit(coordinator, "a", OffsetCommitEntry("orders", 0, 10, leader_epoch=3, metadata="m"))
    commit(coordinator, "b", OffsetCommitEntry("audit", 0, 5))
    commit(coordinator, "c", OffsetCommitEntry("audit", 1, 6))
    assert coordinator.delete_offsets("a", [("orders", 1)]) == (ErrorCode.none, [ErrorCode.none])
    assert coordinator.delete_groups(["b"]) == [ErrorCode.none]

    restarted = make_coordinator(log, now_ms=50_000)
    assert restarted.fetch_offsets("a", None) == [
        ("orders", 0, CommittedOffset(10, 3, "m", 1_700_000_000_000))
    ]
    assert restarted.fetch_offsets("b", None) == []
    assert restarted.describe_group("b").state == "Dead"
    assert [t for t, _, _ in restarted.fetch_offsets("c", None)] == ["audit"]
    assert sorted(g.group_id for g in restarted.list_groups()) == ["a", "c"]
    # A compacted log (the live records only) rebuilds the same state.
    compacted = InMemoryStateLog()
    compacted.append(list(restarted.live_records()))
    again = make_coordinator(compacted)
    assert again.fetch_offsets("a", None) == restarted.fetch_offsets("a", None)
    assert again.fetch_offsets("c", None) == restarted.fetch_offsets("c", None)


def test_group_generation_survives_replay_so_members_keep_heartbeating() -> None:
    log = InMemoryStateLog()
    coordinator = make_coordinator(log)
    member = stable_member(coordinator, "g")
    restarted = make_coordinator(log, now_ms=1000)
    heartbeat = restarted.heartbeat(
        1000, group_id="g", generation_id=member.generation_id, member_id=member.member_id
    )
    assert heartbeat is ErrorCode.none
    assert restarted.describe_group("g").state == "Stable"
    # Its session restarted at load time and lapses if it stays silent.
    restarted.tick(1000 + 2 * SESSION_MS)
    assert restarted.describe_group("g").state == "Empty"


def test_delete_groups_refuses_groups_with_members() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    stable_member(coordinator, "busy")
    commit(coordinator, "idle", OffsetCommitEntry("orders", 0, 1))
    assert coordinator.delete_groups(["busy", "idle", "missing"]) == [
        ErrorCode.non_empty_group,
        ErrorCode.none,
        ErrorCode.group_id_not_found,
    ]
    assert coordinator.fetch_offsets("idle", None) == []
    assert coordinator.describe_group("busy").state == "Stable"


def test_offset_delete_spares_topics_the_group_still_reads() -> None:
    coordinator = make_coordinator(InMemoryStateLog())
    member = stable_member(coordinator, "g", "orders")
    commit(
        coordinator,
        "g",
        OffsetCommitEntry("orders", 0, 1),
        OffsetCommitEntry("audit", 0, 1),
        generation_id=member.generation_id,
        member_id=member.member_id,
    )
    error, errors = coordinator.delete_offsets("g", [("orders", 0), ("audit", 0), ("nope", 0)])
    assert error is ErrorCode.none
    assert errors == [
        ErrorCode.group_subscribed_to_topic,
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert [t for t, _, _ in coordinator.fetch_offsets("g", None)] == ["orders"]
    assert coordinator.delete_offsets("missing", [("orders", 0)]) == (
        ErrorCode.group_id_not_found,
        [],
    )


def test_offsets_expire_only_retention_after_the_group_became_empty() -> None:
    """KIP-211: a consumer group's offsets outlive their commit time while the group is alive."""
    day = 86_400_000
    log = InMemoryStateLog()
    now = 1_700_000_000_000
    coordinator = GroupCoordinator(
        log,
        partition_exists,
        now_ms=now,
        config=GroupConfig(
            initial_rebalance_delay_ms=0,
            empty_group_retention_ms=7 * day,
            offsets_retention_check_interval_ms=1000,
        ),
    )
    # a standalone committer (assign, no group protocol): counted from the commit
    assert commit(coordinator, "weekly-job", OffsetCommitEntry("orders", 0, 7)) == [ErrorCode.none]
    coordinator.tick(now + 6 * day)
    assert coordinator.fetch_offsets("weekly-job", None)[0][2] is not None
    coordinator.tick(now + 7 * day + 1)
    assert coordinator.fetch_offsets("weekly-job", None) == []
    # replayed after a restart: the tombstone keeps it gone
    assert make_coordinator(log).fetch_offsets("weekly-job", None) == []

    # a consumer group: nothing expires while it has members, then 7 days after it empties
    member = stable_member(coordinator, "live", "orders")
    commit(
        coordinator,
        "live",
        OffsetCommitEntry("orders", 1, 3),
        generation_id=member.generation_id,
        member_id=member.member_id,
    )
    later = now + 30 * day
    coordinator.heartbeat(
        later, group_id="live", generation_id=member.generation_id, member_id=member.member_id
    )
    coordinator.leave_group(later, group_id="live", members=[(member.member_id, None)])
    coordinator.tick(later + 6 * day)
    assert coordinator.fetch_offsets("live", None) != []
    coordinator.tick(later + 7 * day + 1)
    assert coordinator.fetch_offsets("live", None) == []
