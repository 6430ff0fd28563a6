"""A KIP-848 coordinator without sockets, and clients that follow the protocol.

`Harness` wraps one offsets partition's `GroupCoordinator` (its
`consumer_groups`) over an in-memory state log and a dict of topics, with a
clock the test moves. `Client` is what a well-behaved consumer does: it
remembers its member id and epoch, owns what the last assignment said, and
reports it back, so a test reads like a conversation.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from headwater.coordinator.state_log import InMemoryStateLog
from headwater.group.consumer_group_coordinator import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
)
from headwater.group.consumer_group_records import Assignment
from headwater.group.coordinator import GroupConfig, GroupCoordinator
from headwater.group.topics_image import StaticTopics

GROUP = "g"


class Harness:
    def __init__(
        self, config: ConsumerGroupConfig | None = None, group_config: GroupConfig | None = None
    ) -> None:
        self.group_config = group_config
        self.log = InMemoryStateLog()
        self.topics = StaticTopics()
        self.config = config or ConsumerGroupConfig(session_timeout_ms=45_000)
        self.now = 1_000
        self.coordinator = self._coordinator()

    def _coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(
            self.log,
            lambda topic, partition: True,
            now_ms=self.now,
            config=self.group_config,
            consumer_config=self.config,
            topics=self.topics,
        )

    def restart(self) -> None:
        """A new coordinator replaying the same log (a failover, or a broker restart)."""
        self.coordinator = self._coordinator()

    @property
    def cg(self):  # type: ignore[no-untyped-def]
        return self.coordinator.consumer_groups

    def group(self, group_id: str = GROUP):  # type: ignore[no-untyped-def]
        found = self.cg.group(group_id)
        assert found is not None
        return found

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        pending = self.cg.heartbeat(self.now, request)
        assert pending.done
        return pending.result()

    def advance(self, ms: int) -> None:
        self.now += ms
        self.coordinator.tick(self.now)

    def topic(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = self.topics.put(name, partitions).topic_id
        self.cg.topics_changed()
        return topic_id

    def delete_topic(self, name: str) -> None:
        self.topics.delete(name)
        self.cg.topics_changed()

    def client(self, name: str, *topics: str, **kw: object) -> Client:
        return Client(self, member_id=f"{name}-{uuid.uuid4()}", topics=tuple(topics), **kw)  # type: ignore[arg-type]


@dataclass
class Client:
    harness: Harness
    member_id: str
    topics: tuple[str, ...] = ()
    regex: str | None = None
    instance_id: str | None = None
    assignor: str | None = None
    rack: str | None = None
    group_id: str = GROUP
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: HeartbeatResult | None = None

    def join(self) -> HeartbeatResult:
        self.epoch = 0
        self.owned = {}
        return self._send(
            HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=0,
                instance_id=self.instance_id,
                rack_id=self.rack,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=None if self.regex and not self.topics else self.topics,
                subscribed_topic_regex=self.regex,
                server_assignor=self.assignor,
                owned={},
            )
        )

    def beat(self, *, epoch: int | None = None, full: bool = False) -> HeartbeatResult:
        return self._send(
            HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.epoch if epoch is None else epoch,
                instance_id=self.instance_id if full else None,
                rebalance_timeout_ms=30_000 if full else -1,
                subscribed_topic_names=self.topics if full else None,
                owned=dict(self.owned),
            )
        )

    def subscribe(self, *topics: str) -> HeartbeatResult:
        self.topics = topics
        return self._send(
            HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.epoch,
                subscribed_topic_names=topics,
                owned=dict(self.owned),
            )
        )

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        return self._send(
            HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self.instance_id,
            ),
            leaving=True,
        )

    def _send(self, request: HeartbeatRequest, leaving: bool = False) -> HeartbeatResult:
        result = self.harness.heartbeat(request)
        self.last = result
        if result.error is ErrorCode.none:
            if not leaving:
                self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = {t: p for t, p in result.assignment.items() if p}
            if leaving:
                self.owned = {}
        elif result.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.owned = {}  # it must give up everything and rejoin
            self.epoch = 0
        return result

    def partitions(self, topic_id: uuid.UUID) -> frozenset[int]:
        return self.owned.get(topic_id, frozenset())

    def count(self) -> int:
        return sum(len(p) for p in self.owned.values())


def owned_twice(assignments: list[Assignment]) -> set[tuple[uuid.UUID, int]]:
    seen: set[tuple[uuid.UUID, int]] = set()
    twice: set[tuple[uuid.UUID, int]] = set()
    for assignment in assignments:
        for topic_id, parts in assignment.items():
            for p in parts:
                if (topic_id, p) in seen:
                    twice.add((topic_id, p))
                seen.add((topic_id, p))
    return twice
