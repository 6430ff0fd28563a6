"""Classic group membership without sockets: the state machine, its ConsumerProtocol
bytes (checked against the broker's own codec), and the async driver against a
scripted coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from headwater.client.classic_group_heartbeat import ClassicGroupMember
from headwater.client.classic_group_membership import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Action,
    ClassicMembership,
    JoinedMember,
    State,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from headwater.client.types import TopicPartition
from headwater.protocol import consumer_protocol
from headwater.protocol.apis import ApiKey

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def joined(m: ClassicMembership, *, leader: str = "m1", generation: int = 1) -> None:
    metadata = encode_subscription(m.topics)
    members = [JoinedMember("m1", None, metadata), JoinedMember("m2", None, metadata)]
    action = m.on_join_response(
        0,
        member_id="m1",
        generation=generation,
        protocol_name="range",
        leader=leader,
        members=members,
    )
    assert action is Action.SYNC


def stable(owned: set[TopicPartition]) -> ClassicMembership:
    m = ClassicMembership("g")
    m.subscribe(["t"])
    joined(m)
    assert m.on_sync_response(0, encode_assignment(owned)) is Action.ASSIGNED
    return m


# -- bytes -------------------------------------------------------------------------


def test_subscription_and_assignment_bytes_read_by_the_brokers_codec() -> None:
    sub = consumer_protocol.decode_subscription(encode_subscription(["b", "a", "a"]))
    assert sub.topics == ("a", "b") and sub.owned_partitions == ()
    assert decode_subscription(encode_subscription(["x"])) == ("x",)
    assignment = consumer_protocol.decode_assignment(
        encode_assignment([T2, T0, TopicPartition("u", 1)])
    )
    assert assignment.partitions == (("t", (0, 2)), ("u", (1,)))
    broker_made = consumer_protocol.encode_assignment([("t", [1, 0])], version=3)
    assert decode_assignment(broker_made) == {T0, T1}
    assert decode_assignment(b"") == set()
    assert decode_assignment(b"\x00\x00\xff") is None
    assert decode_subscription(b"junk") == ()


# -- the state machine ---------------------------------------------------------------


def test_join_sends_every_assignor_in_order_and_kip394_gives_the_member_id() -> None:
    m = ClassicMembership(
        "g",
        strategies=["roundrobin", "range"],
        session_timeout_ms=6000,
        rebalance_timeout_ms=9000,
        instance_id="i1",
    )
    m.subscribe(["t"])
    assert m.state is State.UNJOINED
    req = m.join_request()
    assert [p["name"] for p in req["protocols"]] == ["roundrobin", "range"]
    assert decode_subscription(req["protocols"][0]["metadata"]) == ("t",)
    assert (req["member_id"], req["session_timeout"], req["rebalance_timeout"]) == ("", 6000, 9000)
    assert req["group_instance_id"] == "i1" and req["protocol_type"] == "consumer"
    action = m.on_join_response(
        MEMBER_ID_REQUIRED, member_id="m-given", generation=-1, protocol_name=None, leader=""
    )
    assert action is Action.JOIN and m.join_request()["member_id"] == "m-given"


def test_the_leader_assigns_with_the_chosen_assignor_and_followers_send_nothing() -> None:
    m = ClassicMembership("g")
    m.subscribe(["t"])
    joined(m)
    assert m.is_leader and m.leader_topics() == {"t"}
    out = m.assign({"t": 3})
    assert out == {"m1": [T0, T1], "m2": [T2]}
    req = m.sync_request(out)
    assert req["generation_id"] == 1 and req["protocol_name"] == "range"
    assert {a["member_id"] for a in req["assignments"]} == {"m1", "m2"}
    follower = ClassicMembership("g")
    follower.subscribe(["t"])
    joined(follower, leader="m2")
    assert not follower.is_leader and follower.members == ()
    assert follower.sync_request(None)["assignments"] == []


def test_sync_takes_the_assignment() -> None:
    m = stable({T0, T2})
    assert m.state is State.STABLE and m.owned == {T0, T2}
    assert m.commit_identity() == (1, "m1")
    hb = m.heartbeat_request()
    assert (hb["generation_id"], hb["member_id"]) == (1, "m1")


@pytest.mark.parametrize(
    ("code", "action", "member_id", "generation"),
    [
        (0, Action.NONE, "m1", 1),
        (REBALANCE_IN_PROGRESS, Action.REJOIN, "m1", 1),
        (ILLEGAL_GENERATION, Action.LOSE, "m1", -1),
        (UNKNOWN_MEMBER_ID, Action.LOSE, "", -1),
        (NOT_COORDINATOR, Action.FIND_COORDINATOR, "m1", 1),
        (COORDINATOR_NOT_AVAILABLE, Action.FIND_COORDINATOR, "m1", 1),
    ],
)
def test_heartbeat_errors(code: int, action: Action, member_id: str, generation: int) -> None:
    m = stable({T0})
    assert m.on_heartbeat_response(code) is action
    assert (m.member_id, m.generation) == (member_id, generation)
    rejoining = action in (Action.REJOIN, Action.LOSE)
    assert m.state is (State.UNJOINED if rejoining else State.STABLE)
    assert m.owned == {T0}  # the driver revokes (REJOIN) or loses (LOSE) them


def test_a_fenced_static_member_fails() -> None:
    m = stable({T0})
    assert m.on_heartbeat_response(FENCED_INSTANCE_ID) is Action.FAIL
    assert m.state is State.FATAL and m.error is not None and m.error[0] == FENCED_INSTANCE_ID


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (REBALANCE_IN_PROGRESS, Action.REJOIN),
        (UNKNOWN_MEMBER_ID, Action.REJOIN),
        (ILLEGAL_GENERATION, Action.REJOIN),
        (NOT_COORDINATOR, Action.FIND_COORDINATOR),
    ],
)
def test_sync_errors_rejoin(code: int, action: Action) -> None:
    m = ClassicMembership("g")
    m.subscribe(["t"])
    joined(m)
    assert m.on_sync_response(code, b"") is action
    assert m.state is State.UNJOINED and m.owned == set()
    assert m.member_id == ("" if code == UNKNOWN_MEMBER_ID else "m1")


def test_the_leader_rejoins_when_the_groups_topics_change() -> None:
    m = ClassicMembership("g")
    m.subscribe(["t"])
    joined(m)
    m.assign({"t": 3})
    assert m.on_sync_response(0, encode_assignment({T0, T1})) is Action.ASSIGNED
    assert not m.metadata_changed({"t": 3})
    assert m.state is State.STABLE
    assert m.metadata_changed({"t": 4})  # partitions added
    assert m.state is State.UNJOINED
    joined(m, generation=2)
    m.assign({})  # the topic did not exist yet
    m.on_sync_response(0, b"")
    assert m.metadata_changed({"t": 3})  # now it does
    follower = stable({T0})
    assert not follower.is_leader or follower.assigned_counts is None
    assert not follower.metadata_changed({"t": 9})


def test_leave_is_sent_by_dynamic_members_only() -> None:
    m = stable({T0})
    leave = m.leave_request()
    assert leave is not None and leave["members"] == [
        {"member_id": "m1", "group_instance_id": None}
    ]
    assert m.state is State.LEFT and m.owned == set()
    static = ClassicMembership("g", instance_id="i1")
    static.subscribe(["t"])
    joined(static)
    assert static.leave_request() is None
    never = ClassicMembership("g")
    never.subscribe(["t"])
    assert never.leave_request() is None


def test_subscribe_rejects_patterns_and_rejoins_on_a_change() -> None:
    m = stable({T0})
    with pytest.raises(NotImplementedError):
        m.subscribe(None, pattern="t.*")
    m.subscribe(["t"])
    assert m.state is State.STABLE
    m.subscribe(["t", "u"])
    assert m.state is State.UNJOINED


# -- the driver ------------------------------------------------------------------------


class Host:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.positions: dict[TopicPartition, int] = {}

    def _group_positions(self) -> dict[TopicPartition, int]:
        return dict(self.positions)

    def _group_remove(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"remove {sorted(p.partition for p in partitions)}")
        for tp in partitions:
            self.positions.pop(tp, None)

    def _group_add(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        self.events.append(f"add {sorted((tp.partition, o) for tp, o in offsets.items())}")
        self.positions.update({tp: o or 0 for tp, o in offsets.items()})

    def _group_wake(self) -> None:
        self.events.append("wake")


class Listener:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"revoked {sorted(p.partition for p in partitions)}")

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"assigned {sorted(p.partition for p in partitions)}")

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.events.append(f"lost {sorted(p.partition for p in partitions)}")


def ns(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**kw)


class Coordinator:
    """A scripted group coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, offsets."""

    def __init__(self, events: list[str], heartbeats: list[int]) -> None:
        self.events = events
        self.heartbeats = heartbeats
        self.joins = 0
        self.generation = 0
        self.committed: dict[TopicPartition, int] = {T0: 7}
        self.done = asyncio.Event()

    # the connection
    def version(self, api_key: int, highest: int | None = None) -> int:
        return {ApiKey.JOIN_GROUP: 9, ApiKey.SYNC_GROUP: 5}.get(ApiKey(api_key), 4)

    def send(self, api_key: int, version: int, body: bytes, decode: Any) -> asyncio.Future[Any]:
        assert api_key == ApiKey.JOIN_GROUP
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.joins += 1
        if self.joins == 1:
            self.events.append("join -> MEMBER_ID_REQUIRED")
            future.set_result(
                ns(
                    error_code=MEMBER_ID_REQUIRED,
                    member_id="m1",
                    generation_id=-1,
                    protocol_name=None,
                    leader="",
                    members=(),
                )
            )
            return future
        self.generation += 1
        self.events.append(f"join -> generation {self.generation}")
        members = (ns(member_id="m1", group_instance_id=None, metadata=encode_subscription(["t"])),)
        future.set_result(
            ns(
                error_code=0,
                member_id="m1",
                generation_id=self.generation,
                protocol_name="range",
                leader="m1",
                members=members,
            )
        )
        return future

    async def request(self, api_key: int, data: dict[str, Any], version: int) -> Any:
        if api_key == ApiKey.SYNC_GROUP:
            (a,) = data["assignments"]
            assert data["generation_id"] == self.generation
            return ns(error_code=0, assignment=a["assignment"])
        if api_key == ApiKey.HEARTBEAT:
            code = self.heartbeats.pop(0) if self.heartbeats else 0
            if not self.heartbeats:
                self.done.set()
            self.events.append(f"heartbeat -> {code}")
            return ns(error_code=code)
        if api_key == ApiKey.LEAVE_GROUP:
            self.events.append(f"leave {data['members'][0]['member_id']}")
            return ns(error_code=0, members=())
        raise AssertionError(api_key)

    # the cluster
    async def connection(self, node: int) -> Coordinator:
        return self

    async def refresh_metadata(self, topics: list[str]) -> dict[str, Any]:
        return {"t": ns(partitions={0: None, 1: None})}

    # the coordinator client
    async def find(self, kind: Any, key: str) -> int:
        return 0

    def forget(self, kind: Any, key: str) -> None:
        self.events.append("forget coordinator")

    async def request_coordinator(
        self, kind: Any, key: str, api_key: ApiKey, data: Any, **kw: Any
    ) -> tuple[Any, int]:
        if api_key == ApiKey.OFFSET_FETCH:
            parts = [
                ns(partition_index=tp.partition, committed_offset=o, error_code=0)
                for tp, o in self.committed.items()
            ]
            return ns(topics=[ns(name="t", partitions=parts)]), 0
        assert api_key == ApiKey.OFFSET_COMMIT
        offsets = {
            p["partition_index"]: p["committed_offset"] for p in data["topics"][0]["partitions"]
        }
        self.events.append(f"commit {sorted(offsets.items())}@{data['generation_id']}")
        return ns(), 0


def drive(heartbeats: list[int], **membership: Any) -> tuple[list[str], ClassicMembership]:
    """Join, heartbeat through ``heartbeats`` until stable again, close; the events."""
    events: list[str] = []
    coordinator = Coordinator(events, heartbeats)
    m = ClassicMembership("g", heartbeat_interval_ms=1, **membership)
    m.subscribe(["t"])
    coordinators = SimpleNamespace(
        find=coordinator.find, forget=coordinator.forget, request=coordinator.request_coordinator
    )
    host = Host(events)
    member = ClassicGroupMember(
        host,
        coordinator,
        coordinators,
        m,
        auto_commit=True,
        retry_backoff_s=0.001,  # type: ignore[arg-type]
    )
    member.listener = Listener(events)

    async def run() -> None:
        member.start()
        async with asyncio.timeout(5):
            await coordinator.done.wait()
            while m.state is not State.STABLE:
                await asyncio.sleep(0.001)
        await member.close()

    asyncio.run(run())
    return events, m


def test_the_driver_joins_syncs_revokes_before_rejoining_and_leaves() -> None:
    # The first heartbeat starts a rebalance; the second finds the generation gone.
    events, _ = drive([REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, 0])
    assert events == [
        "join -> MEMBER_ID_REQUIRED",
        "join -> generation 1",
        "add [(0, 7), (1, None)]",
        "assigned [0, 1]",
        "heartbeat -> 27",
        # Eager: everything is committed and revoked before the JoinGroup.
        "commit [(0, 7), (1, 0)]@1",
        "revoked [0, 1]",
        "remove [0, 1]",
        "join -> generation 2",
        "add [(0, 7), (1, None)]",
        "assigned [0, 1]",
        "heartbeat -> 22",
        # The generation is gone: lost, no commit, then a new JoinGroup.
        "remove [0, 1]",
        "lost [0, 1]",
        "join -> generation 3",
        "add [(0, 7), (1, None)]",
        "assigned [0, 1]",
        "heartbeat -> 0",
        "commit [(0, 7), (1, 0)]@3",
        "revoked [0, 1]",
        "remove [0, 1]",
        "leave m1",
    ]


def test_a_coordinator_error_finds_the_coordinator_again_and_keeps_the_partitions() -> None:
    events, m = drive([NOT_COORDINATOR, 0], instance_id="i1")
    assert events == [
        "join -> MEMBER_ID_REQUIRED",
        "join -> generation 1",
        "add [(0, 7), (1, None)]",
        "assigned [0, 1]",
        "heartbeat -> 16",
        "forget coordinator",
        "heartbeat -> 0",
        "commit [(0, 7), (1, 0)]@1",
        "revoked [0, 1]",
        "remove [0, 1]",
        # A static member sends no LeaveGroup: it keeps its place for its session.
    ]
    assert m.state is State.LEFT
