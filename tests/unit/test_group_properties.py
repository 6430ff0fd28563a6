"""Random join/sync/heartbeat/leave/time sequences keep the group's invariants."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode

from headwater.coordinator.pending import Pending
from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.membership import GroupState
from headwater.group.offsets import OffsetCommitEntry
from headwater.group.results import JoinResult, SyncResult

GROUP = "g"
SESSION_MS = 6_000
REBALANCE_MS = 10_000
CLIENTS = 4
PROTOCOL_CHOICES = [
    (("range", b"r"),),
    (("roundrobin", b"rr"), ("range", b"r")),
    (("range", b"r2"),),
]


@dataclass
class Client:
    """What a consumer remembers between requests."""

    instance_id: str | None
    member_id: str = ""
    joined: JoinResult | None = None
    pendings: list[Pending[JoinResult] | Pending[SyncResult]] = field(default_factory=list)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.coordinator: GroupCoordinator
        self.clients = [
            Client(instance_id=f"inst-{i}" if i >= CLIENTS - 1 else None) for i in range(CLIENTS)
        ]
        self.leaders_by_generation: dict[int, set[str]] = {}
        self.highest_generation = 0

    @initialize(initial_delay=st.sampled_from([0, 3000]))
    def start(self, initial_delay: int) -> None:
        counter = itertools.count(1)
        self.coordinator = GroupCoordinator(
            InMemoryStateLog(),
            lambda topic, partition: True,
            now_ms=0,
            config=GroupConfig(initial_rebalance_delay_ms=initial_delay),
            member_id_factory=lambda prefix: f"{prefix}-{next(counter)}",
        )

    def _on_join(self, client: Client, result: JoinResult) -> None:
        if result.error in (ErrorCode.none, ErrorCode.member_id_required):
            client.member_id = result.member_id
        elif result.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            client.member_id = ""
        if result.error is ErrorCode.none:
            client.joined = result
            if result.leader_id == result.member_id and not result.skip_assignment:
                self.leaders_by_generation.setdefault(result.generation_id, set()).add(
                    result.member_id
                )

    @rule(
        index=st.integers(0, CLIENTS - 1),
        known=st.booleans(),
        v4=st.booleans(),
        protocols=st.sampled_from(PROTOCOL_CHOICES),
        skip=st.booleans(),
    )
    def join(
        self,
        index: int,
        known: bool,
        v4: bool,
        protocols: tuple[tuple[str, bytes], ...],
        skip: bool,
    ) -> None:
        client = self.clients[index]
        pending = self.coordinator.join_group(
            self.now,
            group_id=GROUP,
            member_id=client.member_id if known else "",
            group_instance_id=client.instance_id,
            client_id=f"c{index}",
            protocol_type="consumer",
            protocols=protocols,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            require_known_member_id=v4,
            supports_skip_assignment=skip,
        )
        pending.on_done(lambda result: self._on_join(client, result))
        client.pendings.append(pending)

    @rule(index=st.integers(0, CLIENTS - 1))
    def sync(self, index: int) -> None:
        client = self.clients[index]
        if client.joined is None:
            return
        joined = client.joined
        assignments = [(m.member_id, m.member_id.encode()) for m in joined.members]
        pending = self.coordinator.sync_group(
            self.now,
            group_id=GROUP,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=client.instance_id,
            assignments=assignments,
        )
        client.pendings.append(pending)

    @rule(index=st.integers(0, CLIENTS - 1), generation_skew=st.sampled_from([0, 0, 0, -1, 1]))
    def heartbeat(self, index: int, generation_skew: int) -> None:
        client = self.clients[index]
        generation = client.joined.generation_id if client.joined else -1
        self.coordinator.heartbeat(
            self.now,
            group_id=GROUP,
            generation_id=generation + generation_skew,
            member_id=client.member_id,
            group_instance_id=client.instance_id,
        )

    @rule(index=st.integers(0, CLIENTS - 1), by_instance=st.booleans())
    def leave(self, index: int, by_instance: bool) -> None:
        client = self.clients[index]
        member_id = "" if by_instance and client.instance_id else client.member_id
        self.coordinator.leave_group(
            self.now, group_id=GROUP, members=[(member_id, client.instance_id)]
        )

    @rule(index=st.integers(0, CLIENTS - 1))
    def commit(self, index: int) -> None:
        client = self.clients[index]
        self.coordinator.commit_offsets(
            self.now,
            group_id=GROUP,
            generation_id=client.joined.generation_id if client.joined else -1,
            member_id=client.member_id,
            group_instance_id=client.instance_id,
            entries=[OffsetCommitEntry("t", 0, self.now)],
            timestamp_ms=self.now,
        )

    @rule(ms=st.sampled_from([1, 500, 2000, 3000, 6000, 10_000, 30_000]))
    def advance(self, ms: int) -> None:
        self.now += ms
        self.coordinator.tick(self.now)

    @invariant()
    def one_leader_per_generation(self) -> None:
        for generation, leaders in self.leaders_by_generation.items():
            assert len(leaders) <= 1, (generation, leaders)

    @invariant()
    def generation_only_increases(self) -> None:
        group = self.coordinator.group(GROUP) if hasattr(self, "coordinator") else None
        if group is not None:
            assert group.generation_id >= self.highest_generation
            self.highest_generation = group.generation_id

    @invariant()
    def membership_is_consistent(self) -> None:
        group = self.coordinator.group(GROUP) if hasattr(self, "coordinator") else None
        if group is None:
            return
        if group.members:
            assert group.leader_id in group.members
        else:
            assert group.state in (GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
        if group.state is GroupState.STABLE:
            assert all(m.assignment is not None for m in group.members.values())
        if group.state is not GroupState.PREPARING_REBALANCE:
            assert all(m.awaiting_join is None for m in group.members.values())
        for instance_id, member_id in group.static_members.items():
            assert group.members[member_id].group_instance_id == instance_id

    def teardown(self) -> None:
        """Left alone long enough, every blocked request gets its answer."""
        if not hasattr(self, "coordinator"):
            return
        for _ in range(6):
            self.now += 4 * REBALANCE_MS
            self.coordinator.tick(self.now)
        for client in self.clients:
            assert all(p.done for p in client.pendings)


GroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_group_invariants_hold_under_random_traffic = GroupMachine.TestCase
