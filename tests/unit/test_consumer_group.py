"""KIP-848 consumer groups on the coordinator, without sockets (issue 29)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from headwater.group.consumer_group import ConsumerGroupState, MemberState
from headwater.group.consumer_group_coordinator import ConsumerGroupConfig, HeartbeatRequest
from headwater.group.coordinator import GroupConfig
from headwater.group.offsets import OffsetCommitEntry
from tests.unit.consumer_group_harness import GROUP, Harness, owned_twice


def test_a_member_joins_with_epoch_0_and_gets_every_partition() -> None:
    h = Harness()
    orders = h.topic("orders", 4)
    a = h.client("a", "orders")
    joined = a.join()
    assert joined.error is ErrorCode.none
    assert joined.member_id == a.member_id
    assert joined.member_epoch == 1
    assert joined.heartbeat_interval_ms == 5000
    assert a.partitions(orders) == {0, 1, 2, 3}
    group = h.group()
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert group.state is ConsumerGroupState.STABLE


def test_revocation_comes_before_reassignment() -> None:
    h = Harness()
    orders = h.topic("orders", 4)
    a, b = h.client("a", "orders"), h.client("b", "orders")
    a.join()
    b.join()  # group epoch 2: the target gives b half, but a still holds it
    assert b.epoch == 2 and b.count() == 0
    assert h.group().members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    a.beat()  # a is told to give up two partitions, at its old epoch
    assert a.epoch == 1 and a.count() == 2
    assert h.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    b.beat()  # still held by a (pending revocation): nothing yet
    assert b.count() == 0
    a.beat()  # a acknowledges: it no longer lists them, and moves to epoch 2
    assert a.epoch == 2
    b.beat()
    assert b.count() == 2
    assert a.partitions(orders) | b.partitions(orders) == {0, 1, 2, 3}
    assert not owned_twice([a.owned, b.owned])
    assert h.group().state is ConsumerGroupState.STABLE


def test_a_member_that_leaves_with_minus_1_frees_its_partitions() -> None:
    h = Harness()
    orders = h.topic("orders", 4)
    a, b = h.client("a", "orders"), h.client("b", "orders")
    a.join(), b.join(), a.beat(), a.beat(), b.beat()
    left = b.leave()
    assert left.error is ErrorCode.none and left.member_epoch == -1
    assert b.member_id not in h.group().members
    a.beat()
    assert a.partitions(orders) == {0, 1, 2, 3}


def test_a_static_member_leaves_with_minus_2_and_comes_back_to_its_partitions() -> None:
    h = Harness()
    orders = h.topic("orders", 4)
    a = h.client("a", "orders", instance_id="instance-a")
    b = h.client("b", "orders")
    a.join(), b.join(), a.beat(), a.beat(), b.beat()
    mine = a.partitions(orders)
    assert len(mine) == 2
    epoch = h.group().group_epoch
    assert a.leave(-2).member_epoch == -2
    assert h.group().members[a.member_id].member_epoch == -2
    b.beat()  # the static member's partitions are kept for it: b gets nothing more
    assert b.count() == 2
    restarted = h.client("a2", "orders", instance_id="instance-a")
    back = restarted.join()
    assert back.error is ErrorCode.none
    assert restarted.partitions(orders) == mine
    assert h.group().group_epoch == epoch  # no rebalance
    assert a.member_id not in h.group().members


def test_a_static_member_gone_past_its_session_loses_its_partitions() -> None:
    h = Harness(ConsumerGroupConfig(session_timeout_ms=10_000))
    orders = h.topic("orders", 2)
    a = h.client("a", "orders", instance_id="instance-a")
    b = h.client("b", "orders")
    a.join(), b.join(), a.beat(), a.beat(), b.beat()
    a.leave(-2)
    for _ in range(3):
        h.advance(4_000)
        b.beat()
    assert b.partitions(orders) == {0, 1}


def test_an_instance_id_held_by_a_live_member_is_unreleased() -> None:
    h = Harness()
    h.topic("orders", 2)
    h.client("a", "orders", instance_id="same").join()
    other = h.client("b", "orders", instance_id="same")
    assert other.join().error is ErrorCode.unreleased_instance_id


def test_a_fenced_member_rejoins() -> None:
    h = Harness()
    orders = h.topic("orders", 2)
    a = h.client("a", "orders")
    a.join()
    assert a.beat(epoch=7).error is ErrorCode.fenced_member_epoch
    assert a.beat(epoch=0).error is ErrorCode.invalid_request  # epoch 0 is a full join only
    rejoined = a.join()
    assert rejoined.error is ErrorCode.none
    assert a.partitions(orders) == {0, 1}


def test_a_member_one_epoch_behind_is_forgiven_when_it_owns_no_more_than_assigned() -> None:
    h = Harness()
    h.topic("orders", 2)
    a = h.client("a", "orders")
    a.join()
    h.client("b", "orders").join()
    a.beat()  # revocation at epoch 1
    a.owned = {}
    a.beat()  # moves to 2
    assert a.epoch == 2
    assert a.beat(epoch=1).error is ErrorCode.none  # its answer may have been lost


def test_error_codes() -> None:
    h = Harness(ConsumerGroupConfig(max_size=1))
    h.topic("orders", 1)
    a = h.client("a", "orders")
    a.join()
    assert h.client("b", "orders").join().error is ErrorCode.group_max_size_reached
    stranger = Harness().client("x", "orders")
    stranger.epoch = 3
    assert stranger.beat().error is ErrorCode.unknown_member_id
    assert h.client("c", "orders", assignor="sticky").join().error is ErrorCode.unsupported_assignor
    bad = [
        HeartbeatRequest(group_id="", member_id="m", member_epoch=0),
        HeartbeatRequest(group_id=GROUP, member_id="", member_epoch=3),
        HeartbeatRequest(group_id=GROUP, member_id="m", member_epoch=-3),
        HeartbeatRequest(GROUP, "m", 0, subscribed_topic_names=("t",), owned={}),  # no timeout
        HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, owned={}),  # no subscription
        HeartbeatRequest(GROUP, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",)),
        HeartbeatRequest(GROUP, "m", -2),  # static leave without an instance id
        HeartbeatRequest(GROUP, "m", 1, instance_id=""),
    ]
    for request in bad:
        assert h.heartbeat(request).error is ErrorCode.invalid_request, request
    regex = HeartbeatRequest(
        GROUP, "m", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(", owned={}
    )
    assert h.heartbeat(regex).error is ErrorCode.invalid_regular_expression


def test_a_session_timeout_fences_the_member_and_reassigns_its_partitions() -> None:
    h = Harness(ConsumerGroupConfig(session_timeout_ms=6_000))
    orders = h.topic("orders", 4)
    a, b = h.client("a", "orders"), h.client("b", "orders")
    a.join(), b.join(), a.beat(), a.beat(), b.beat()
    for _ in range(4):  # b heartbeats, a is silent (killed)
        h.advance(2_000)
        b.beat()
    assert a.member_id not in h.group().members
    assert b.partitions(orders) == {0, 1, 2, 3}


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced() -> None:
    h = Harness(ConsumerGroupConfig(session_timeout_ms=60_000))
    h.topic("orders", 2)
    a, b = h.client("a", "orders"), h.client("b", "orders")
    a.join(), b.join()
    a._send(  # asked to revoke, it keeps heartbeating while still listing everything
        HeartbeatRequest(GROUP, a.member_id, a.epoch, owned=dict(a.owned))
    )
    stuck = dict(h.group().members[a.member_id].assigned)
    stuck.update(h.group().members[a.member_id].pending_revocation)
    h.advance(31_000)
    assert a.member_id not in h.group().members
    b.beat()
    assert b.count() == 2


def test_the_target_follows_subscriptions_topics_and_partition_counts() -> None:
    h = Harness()
    orders = h.topic("orders", 2)
    a = h.client("a", "orders")
    a.join()
    epoch = h.group().group_epoch
    payments = h.topic("payments", 2)  # nobody subscribes: nothing changes
    assert h.group().group_epoch == epoch
    a.subscribe("orders", "payments")
    assert h.group().group_epoch == epoch + 1
    a.beat()
    assert a.partitions(payments) == {0, 1}
    h.topic("payments", 3)  # more partitions
    assert h.group().group_epoch == epoch + 2
    a.beat()
    assert a.partitions(payments) == {0, 1, 2}
    h.delete_topic("payments")
    a.beat()
    a.beat()
    assert a.owned == {orders: frozenset({0, 1})}


def test_a_regex_subscription_picks_up_topics_created_later() -> None:
    h = Harness()
    h.topic("logs-a", 1)
    h.topic("other", 1)
    a = h.client("a", regex="logs-.*")
    a.join()
    assert a.count() == 1
    later = h.topic("logs-b", 2)
    a.beat()
    assert a.partitions(later) == {0, 1}
    assert a.count() == 3
    h.topic("__internal-logs-x", 1)  # internal topics never match
    a.beat()
    assert a.count() == 3


def test_the_range_assignor_is_chosen_by_the_members() -> None:
    h = Harness()
    h.topic("orders", 4)
    a = h.client("a", "orders", assignor="range")
    a.join()
    assert h.cg.preferred_assignor(h.group()) == "range"
    assert a.count() == 4


def test_offset_commits_are_checked_against_member_epochs() -> None:
    h = Harness()
    h.topic("orders", 1)
    a = h.client("a", "orders")
    a.join()

    def commit(epoch: int, member: str, version: int = 9) -> ErrorCode:
        entries = [OffsetCommitEntry("orders", 0, 5, -1, "")]
        pending = h.coordinator.commit_offsets(
            h.now,
            group_id=GROUP,
            generation_id=epoch,
            member_id=member,
            entries=entries,
            timestamp_ms=1,
            api_version=version,
        )
        return pending.result()[0]

    assert commit(a.epoch, a.member_id) is ErrorCode.none
    assert commit(a.epoch + 1, a.member_id) is ErrorCode.stale_member_epoch
    assert commit(a.epoch, "nobody") is ErrorCode.unknown_member_id
    assert commit(-1, "") is ErrorCode.unknown_member_id  # the group has members
    assert commit(a.epoch, a.member_id, version=8) is ErrorCode.unsupported_version
    a.leave()
    assert commit(-1, "") is ErrorCode.none  # an empty group takes admin commits


def test_members_keep_their_assignment_across_a_restart() -> None:
    h = Harness()
    orders = h.topic("orders", 4)
    a = h.client("a", "orders", instance_id="i-a")
    b = h.client("b", "orders")
    a.join(), b.join(), a.beat(), a.beat(), b.beat()
    before = h.group()
    epochs = (before.group_epoch, before.assignment_epoch)
    mine = (a.partitions(orders), b.partitions(orders))
    h.restart()
    after = h.group()
    assert (after.group_epoch, after.assignment_epoch) == epochs
    assert after.static_members == {"i-a": a.member_id}
    a.beat(), b.beat()
    assert (a.partitions(orders), b.partitions(orders)) == mine
    assert h.group().group_epoch == epochs[0]  # no new rebalance
    assert h.group().state is ConsumerGroupState.STABLE


def test_a_restart_replays_leaves_and_deletions() -> None:
    h = Harness()
    h.topic("orders", 2)
    a, b = h.client("a", "orders"), h.client("b", "orders")
    a.join(), b.join()
    b.leave()
    a.leave()
    h.restart()
    assert h.group().members == {}
    assert h.coordinator.delete_groups([GROUP]) == [ErrorCode.none]
    h.restart()
    assert h.cg.group(GROUP) is None


def test_delete_groups_refuses_a_group_with_members() -> None:
    h = Harness()
    h.topic("orders", 1)
    h.client("a", "orders").join()
    assert h.coordinator.delete_groups([GROUP]) == [ErrorCode.non_empty_group]


def test_list_groups_says_the_type_and_filters_by_it() -> None:
    h = Harness()
    h.topic("orders", 1)
    h.client("a", "orders").join()
    listed = h.coordinator.list_groups()
    assert [(g.group_id, g.group_type, g.state) for g in listed] == [(GROUP, "consumer", "Stable")]
    assert h.coordinator.list_groups(types=["classic"]) == []
    assert h.coordinator.list_groups(types=["Consumer"])[0].group_id == GROUP


def test_an_empty_classic_group_with_offsets_becomes_a_consumer_group() -> None:
    h = Harness()
    h.topic("orders", 1)
    h.coordinator.commit_offsets(
        h.now,
        group_id=GROUP,
        generation_id=-1,
        member_id="",
        entries=[OffsetCommitEntry("orders", 0, 42, -1, "")],
        timestamp_ms=1,
    )
    assert h.coordinator.group(GROUP) is not None  # a classic group holding offsets
    a = h.client("a", "orders")
    assert a.join().error is ErrorCode.none
    assert h.coordinator.group(GROUP) is None
    fetched = h.coordinator.fetch_offsets(GROUP, [("orders", 0)])
    assert fetched[0][2] is not None and fetched[0][2].offset == 42
    h.restart()
    assert h.cg.group(GROUP) is not None and h.coordinator.group(GROUP) is None


def join_classic(h: Harness) -> ErrorCode:
    pending = h.coordinator.join_group(
        h.now,
        group_id=GROUP,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=10_000,
        require_known_member_id=True,
    )
    return pending.result().error


def test_a_classic_member_without_a_consumer_protocol_subscription_cannot_join() -> None:
    """A running consumer group takes classic members (online migration,
    test_consumer_group_migration.py) only with ConsumerProtocol metadata."""
    h = Harness()
    h.topic("orders", 1)
    h.client("a", "orders").join()
    assert join_classic(h) is ErrorCode.inconsistent_group_protocol


def test_an_empty_consumer_group_becomes_classic_when_a_classic_member_joins() -> None:
    h = Harness()
    h.topic("orders", 1)
    a = h.client("a", "orders")
    a.join()
    h.coordinator.commit_offsets(
        h.now,
        group_id=GROUP,
        generation_id=a.epoch,
        member_id=a.member_id,
        entries=[OffsetCommitEntry("orders", 0, 7, -1, "")],
        timestamp_ms=1,
    )
    a.leave()
    assert join_classic(h) is ErrorCode.member_id_required  # the classic protocol answers
    assert h.cg.group(GROUP) is None
    h.restart()
    assert h.cg.group(GROUP) is None
    fetched = h.coordinator.fetch_offsets(GROUP, [("orders", 0)])
    assert fetched[0][2] is not None and fetched[0][2].offset == 7


def test_migration_policy_disabled_keeps_the_protocols_apart() -> None:
    h = Harness(ConsumerGroupConfig(migration_policy="disabled"))
    h.topic("orders", 1)
    a = h.client("a", "orders")
    a.join()
    a.leave()
    assert join_classic(h) is ErrorCode.inconsistent_group_protocol


def test_offsets_of_a_group_with_members_never_expire_and_an_empty_group_goes_with_them() -> None:
    h = Harness(
        group_config=GroupConfig(
            empty_group_retention_ms=60_000, offsets_retention_check_interval_ms=1_000
        )
    )
    h.topic("orders", 1)
    a = h.client("a", "orders")
    a.join()
    h.coordinator.commit_offsets(
        h.now,
        group_id=GROUP,
        generation_id=a.epoch,
        member_id=a.member_id,
        entries=[OffsetCommitEntry("orders", 0, 7, -1, "")],
        timestamp_ms=h.now,
    )
    for _ in range(3):
        h.now += 50_000
        a.beat()
        h.coordinator.tick(h.now)
    assert h.coordinator.fetch_offsets(GROUP, None)  # kept: the group has a member
    a.leave()
    h.advance(61_000)
    h.advance(1_000)
    assert h.coordinator.fetch_offsets(GROUP, None) == []
    assert h.cg.group(GROUP) is None
    h.restart()
    assert h.cg.group(GROUP) is None
