"""The client's KIP-848 membership state machine (``Membership``), without sockets,
and the driver's revocation-first order with a fake consumer and coordinator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from headwater.client.consumer_group_heartbeat import GroupMember
from headwater.client.consumer_group_membership import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_MEMBER_EPOCH,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REQUEST,
    NOT_COORDINATOR,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    Action,
    Membership,
    Reconciliation,
    State,
)
from headwater.client.types import TopicPartition

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
NAMES = {T1: "t1", T2: "t2"}
IDS = {"t1": T1, "t2": T2}


def tps(topic: str, *partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


def state_of(m: Membership) -> State:
    return m.state


def joined(version: int = 1, **kwargs: Any) -> tuple[Membership, dict[str, Any]]:
    m = Membership("g", **kwargs)
    m.subscribe(["t1", "t2"])
    data = m.sent(m.heartbeat_request(version), IDS)
    return m, data


def stable(owned: frozenset[TopicPartition], epoch: int = 3, **kwargs: Any) -> Membership:
    m, _ = joined(**kwargs)
    assignment: dict[uuid.UUID, list[int]] = {}
    for tp in owned:
        assignment.setdefault(IDS[tp.topic], []).append(tp.partition)
    assert (
        m.on_response(0, member_epoch=epoch, heartbeat_interval_ms=500, assignment=assignment)
        is Action.RECONCILE
    )
    step = m.reconcile(NAMES)
    assert step is not None
    m.reconciled(step)
    m.sent(m.heartbeat_request(1), IDS)
    assert m.on_response(0, member_epoch=epoch, heartbeat_interval_ms=500) is Action.NONE
    assert m.state is State.STABLE
    return m


def test_join_sends_the_full_request_with_epoch_0_and_a_client_member_id() -> None:
    m, data = joined(rack_id="r1", remote_assignor="range", rebalance_timeout_ms=1000)
    assert m.state is State.JOINING
    assert data["member_epoch"] == 0
    uuid.UUID(data["member_id"])  # v1: the member names itself
    assert data["subscribed_topic_names"] == ["t1", "t2"]
    assert data["subscribed_topic_regex"] is None
    assert data["rack_id"] == "r1"
    assert data["server_assignor"] == "range"
    assert data["rebalance_timeout"] == 1000
    assert data["topic_partitions"] == []
    # Neither a session timeout nor a heartbeat interval is ever sent.
    assert not {k for k in data if "session" in k or "interval" in k}


def test_v0_takes_the_member_id_from_the_server() -> None:
    m, data = joined(version=0)
    assert data["member_id"] == ""
    m.on_response(0, member_id="server-id", member_epoch=1, heartbeat_interval_ms=500)
    assert m.member_id == "server-id"
    assert m.heartbeat_request(0)["member_id"] == "server-id"


def test_after_joining_only_changed_fields_are_sent() -> None:
    m = stable(tps("t1", 0, 1))
    data = m.heartbeat_request(1)
    assert data["member_epoch"] == 3
    assert data["subscribed_topic_names"] is None
    assert data["rack_id"] is None
    assert data["server_assignor"] is None
    assert data["rebalance_timeout"] == -1
    assert data["topic_partitions"] is None
    m.request_failed()
    m.subscribe(pattern="t.*")
    data = m.heartbeat_request(1)
    assert data["subscribed_topic_regex"] == "t.*"
    assert data["subscribed_topic_names"] is None


def test_heartbeat_follows_the_interval_from_the_response() -> None:
    m = stable(tps("t1", 0))
    assert m.heartbeat_interval_ms == 500
    assert not m.heartbeat_due(0.2)
    assert m.heartbeat_due(0.5)


def test_reconciliation_revokes_first_then_adds_then_acknowledges() -> None:
    m = stable(tps("t1", 0, 1))
    action = m.on_response(
        0, member_epoch=4, heartbeat_interval_ms=500, assignment={T1: [1], T2: [0]}
    )
    assert action is Action.RECONCILE
    step = m.reconcile(NAMES)
    assert step == Reconciliation(
        revoke=tps("t1", 0),
        add=tps("t2", 0),
        target=tps("t1", 1) | tps("t2", 0),
        epoch=4,
    )
    m.revoked(step.revoke)
    assert m.owned == tps("t1", 1)
    m.reconciled(step)
    assert state_of(m) is State.ACKNOWLEDGING
    assert m.heartbeat_due(0.0)
    data = m.sent(m.heartbeat_request(1), IDS)
    assert data["topic_partitions"] == [
        {"topic_id": T1, "partitions": [1]},
        {"topic_id": T2, "partitions": [0]},
    ]
    assert m.on_response(0, member_epoch=4, heartbeat_interval_ms=500) is Action.NONE
    assert state_of(m) is State.STABLE


def test_an_unknown_topic_id_waits_for_metadata() -> None:
    m, _ = joined()
    m.on_response(0, member_epoch=1, heartbeat_interval_ms=500, assignment={uuid.UUID(int=9): [0]})
    assert m.reconcile(NAMES) is None
    assert m.reconcile({**NAMES, uuid.UUID(int=9): "t9"}) is not None


@pytest.mark.parametrize("code", [FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID])
def test_fenced_releases_everything_and_rejoins_with_epoch_0(code: int) -> None:
    m = stable(tps("t1", 0, 1))
    member_id = m.member_id
    m.heartbeat_request(1)
    assert m.on_response(code) is Action.RELEASE_ALL
    assert m.state is State.FENCED
    assert not m.heartbeat_due(100)
    m.released()
    assert m.owned == frozenset()
    data = m.heartbeat_request(1)
    assert data["member_epoch"] == 0
    assert data["member_id"] == member_id
    assert data["subscribed_topic_names"] == ["t1", "t2"]
    assert data["topic_partitions"] == frozenset()


@pytest.mark.parametrize(
    "code", [UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST]
)
def test_other_errors_are_fatal_for_the_application(code: int) -> None:
    m, _ = joined()
    assert m.on_response(code, error_message="no") is Action.FAIL
    assert m.state is State.FATAL
    assert m.error == (code, "no")
    assert not m.heartbeat_due(100)


@pytest.mark.parametrize("code", [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, 14])
def test_coordinator_errors_find_it_again_and_resend_everything(code: int) -> None:
    m = stable(tps("t1", 0))
    m.heartbeat_request(1)
    assert m.on_response(code) is Action.FIND_COORDINATOR
    assert m.state is State.STABLE
    data = m.heartbeat_request(1)
    assert data["subscribed_topic_names"] == ["t1", "t2"]
    assert data["rack_id"] is None  # none configured
    assert data["topic_partitions"] is not None


def test_leave_with_epoch_minus_1_and_static_with_minus_2() -> None:
    m = stable(tps("t1", 0))
    assert m.leave()
    data = m.heartbeat_request(1)
    assert data["member_epoch"] == -1
    assert m.on_response(0, member_epoch=-1) is Action.NONE
    assert m.state is State.LEFT

    s = stable(tps("t1", 0), instance_id="static-1")
    assert s.leave()
    data = s.heartbeat_request(1)
    assert (data["member_epoch"], data["instance_id"]) == (-2, "static-1")


def test_leaving_before_joining_sends_nothing() -> None:
    m = Membership("g")
    assert not m.leave()
    assert m.state is State.LEFT


# -- the driver, with a fake consumer and coordinator ---------------------------------


class FakeHost:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.owned: dict[TopicPartition, int | None] = {}

    def _group_positions(self) -> dict[TopicPartition, int]:
        return {tp: 7 for tp in self.owned}

    def _group_remove(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"remove {sorted(partitions)}")
        for tp in partitions:
            self.owned.pop(tp, None)

    def _group_add(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        self.events.append(f"add {sorted(offsets.items())}")
        self.owned.update(offsets)

    def _group_wake(self) -> None:
        pass


class FakeCoordinators:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.commit_errors: list[int] = []

    async def request(self, kind: Any, key: str, api_key: int, data: Any, **kw: Any) -> Any:
        if api_key == 8 and self.commit_errors:
            self.events.append(f"commit@{data['generation_id_or_member_epoch']} refused")
            return None, self.commit_errors.pop(0)
        if api_key == 8:  # OffsetCommit
            self.events.append(
                f"commit {data['member_id']}@{data['generation_id_or_member_epoch']} "
                + ",".join(
                    f"{t['name']}-{p['partition_index']}"
                    for t in data["topics"]
                    for p in t["partitions"]
                )
            )
            topics = [
                SimpleNamespace(partitions=[SimpleNamespace(error_code=0)]) for _ in data["topics"]
            ]
            return SimpleNamespace(topics=topics), 0
        self.events.append("offset fetch")
        topics = [
            SimpleNamespace(
                name=t["name"],
                partitions=[
                    SimpleNamespace(partition_index=p, committed_offset=42, error_code=0)
                    for p in t["partition_indexes"]
                ],
            )
            for t in data["topics"]
        ]
        return SimpleNamespace(topics=topics), 0


class Listener:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"revoked {sorted(partitions)}")

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"assigned {sorted(partitions)}")

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"lost {sorted(partitions)}")


def driver(events: list[str], m: Membership) -> tuple[GroupMember, FakeHost]:
    host = FakeHost(events)
    member = GroupMember(
        host,
        SimpleNamespace(topics={}),  # type: ignore[arg-type]
        FakeCoordinators(events),  # type: ignore[arg-type]
        m,
        auto_commit=True,
        retry_backoff_s=0.01,
    )
    member.listener = Listener(events)
    return member, host


def test_driver_commits_and_revokes_before_adding() -> None:
    events: list[str] = []
    m = stable(tps("t1", 0, 1), epoch=5)
    member, host = driver(events, m)
    host.owned = dict.fromkeys(m.owned)
    m.on_response(0, member_epoch=5, heartbeat_interval_ms=500, assignment={T1: [1], T2: [0]})
    step = m.reconcile(NAMES)
    assert step == Reconciliation(
        revoke=tps("t1", 0), add=tps("t2", 0), target=tps("t1", 1) | tps("t2", 0), epoch=5
    )
    asyncio.run(member._apply(step))
    t10, t20 = TopicPartition("t1", 0), TopicPartition("t2", 0)
    assert events == [
        f"commit {m.member_id}@5 t1-0",
        f"revoked {[t10]}",
        f"remove {[t10]}",
        "offset fetch",
        f"add {[(t20, 42)]}",
        f"assigned {[t20]}",
    ]
    assert m.owned == step.target
    assert state_of(m) is State.ACKNOWLEDGING


def test_driver_fenced_loses_partitions_without_committing() -> None:
    events: list[str] = []
    m = stable(tps("t1", 0), epoch=5)
    member, _ = driver(events, m)
    m.heartbeat_request(1)
    action = m.on_response(FENCED_MEMBER_EPOCH)
    asyncio.run(member._act(action))
    t10 = TopicPartition("t1", 0)
    assert events == [f"remove {[t10]}", f"lost {[t10]}"]
    assert m.state is State.JOINING and m.member_epoch == 0


def test_a_stale_member_epoch_commit_is_retried_after_the_next_heartbeat() -> None:
    events: list[str] = []
    m = stable(tps("t1", 0), epoch=5)
    member, _ = driver(events, m)
    fake = member.coordinators
    assert isinstance(fake, FakeCoordinators)
    fake.commit_errors = [113]  # STALE_MEMBER_EPOCH

    async def run() -> None:
        commit = asyncio.ensure_future(member.commit({TopicPartition("t1", 0): 9}))
        while not events:  # the first attempt is refused
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not commit.done()  # waiting for a heartbeat
        m.heartbeat_request(1)
        m.on_response(0, member_epoch=6, heartbeat_interval_ms=500)
        member._heartbeat_done.set()
        await asyncio.wait_for(commit, 5)

    asyncio.run(run())
    assert events == ["commit@5 refused", f"commit {m.member_id}@6 t1-0"]


def test_a_request_without_an_answer_is_not_in_flight_any_more() -> None:
    m = stable(tps("t1", 0), epoch=5)
    m.sent(m.heartbeat_request(1), IDS)
    assert not m.heartbeat_due(10.0)  # one heartbeat at a time
    m.request_failed()
    assert m.heartbeat_due(10.0)
    assert m.heartbeat_request(1)["topic_partitions"] == tps("t1", 0)  # everything again


class HeartbeatConn:
    """Answers ConsumerGroupHeartbeat from a script; ``None`` never answers."""

    def __init__(self, answers: list[tuple[int, int] | None]) -> None:
        self.answers = answers
        self.epochs: list[int] = []
        self.sent = asyncio.Event()

    def version(self, api_key: int) -> int:
        return 1

    async def request(self, api_key: int, data: dict[str, Any], version: int) -> Any:
        self.epochs.append(data["member_epoch"])
        self.sent.set()
        answer = self.answers.pop(0) if self.answers else (0, data["member_epoch"] or 1)
        if answer is None:
            await asyncio.Event().wait()  # the response never comes
        assert answer is not None
        code, epoch = answer
        return SimpleNamespace(
            error_code=code,
            error_message=None,
            member_id=None,
            member_epoch=epoch if not code else -1,
            heartbeat_interval=500,
            assignment=None,
        )


def test_a_heartbeat_task_cancelled_mid_request_heartbeats_again_when_restarted() -> None:
    """The integration test stops a member's heartbeats by cancelling its task; the
    cancelled request stayed in flight, so the restarted task never sent again."""
    events: list[str] = []
    m = stable(tps("t1", 0), epoch=5)
    member, host = driver(events, m)
    host.owned = dict.fromkeys(m.owned)
    # The first heartbeat is never answered; after the restart the member is unknown.
    conn = HeartbeatConn([None, (UNKNOWN_MEMBER_ID, -1)])

    async def connection(node: int) -> HeartbeatConn:
        return conn

    async def find(kind: Any, key: str) -> int:
        return 0

    member.cluster = SimpleNamespace(  # type: ignore[assignment]
        topics={}, connection=connection, topic_id=IDS.__getitem__
    )
    member.coordinators.find = find  # type: ignore[attr-defined]

    async def run() -> None:
        member.start()
        await asyncio.wait_for(conn.sent.wait(), 5)
        task = member._task
        assert task is not None
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        member.start()
        async with asyncio.timeout(5):
            while conn.epochs[-1] != 0 or m.member_epoch != 1:
                await asyncio.sleep(0.01)
        restarted = member._task
        assert restarted is not None
        restarted.cancel()
        with pytest.raises(asyncio.CancelledError):
            await restarted

    asyncio.run(run())
    # The lost request, its resend (answered UNKNOWN_MEMBER_ID), then the rejoin.
    assert conn.epochs[:3] == [5, 5, 0]
    t10 = TopicPartition("t1", 0)
    assert events == [f"remove {[t10]}", f"lost {[t10]}"]
