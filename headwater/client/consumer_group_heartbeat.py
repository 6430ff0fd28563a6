"""The I/O side of ``group.protocol=consumer``: heartbeats, reconciliation, commits.

``GroupMember`` runs one task on the consumer's loop. It sends the
ConsumerGroupHeartbeat that ``Membership`` builds, every heartbeat interval
the coordinator gives (at once while joining, acknowledging or leaving),
and carries out each reconciliation revocation first:

1. partitions no longer assigned: their positions are committed (with
   ``enable.auto.commit``), the listener's ``on_partitions_revoked`` runs
   and the consumer stops fetching them;
2. newly assigned ones start at their committed offsets (else
   ``auto.offset.reset``) and ``on_partitions_assigned`` runs;
3. the next heartbeat acknowledges with the partitions owned.

A fenced member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) loses everything
(``on_partitions_lost``, no commit) and rejoins with epoch 0; coordinator
errors look the coordinator up again; any other error is kept for ``poll``
to raise. Offset commits carry the member id and epoch (OffsetCommit v9);
STALE_MEMBER_EPOCH is retried after the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

from headwater.client.cluster import ClusterClient
from headwater.client.consumer_group_membership import (
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    Action,
    Membership,
    Reconciliation,
    State,
)
from headwater.client.coordinator import CoordinatorClient, CoordinatorType
from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.client.types import TopicPartition
from headwater.protocol.apis import ApiKey

log = logging.getLogger(__name__)

FIRST_MEMBER_EPOCH_COMMIT_VERSION: Final = 9
ILLEGAL_GENERATION: Final = 22
REBALANCE_IN_PROGRESS: Final = 27
_MS: Final = datetime.timedelta(milliseconds=1)


class RebalanceListener(Protocol):
    """Kafka's ConsumerRebalanceListener; any of the three may be left out."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...


class GroupHost(Protocol):
    """What the consumer lends the member: its partitions and positions."""

    def _group_positions(self) -> dict[TopicPartition, int]: ...

    def _group_remove(self, partitions: set[TopicPartition]) -> None: ...

    def _group_add(self, offsets: Mapping[TopicPartition, int | None]) -> None: ...

    def _group_wake(self) -> None: ...


def _listener_call(listener: object | None, name: str, partitions: set[TopicPartition]) -> None:
    fn = getattr(listener, name, None)
    if fn is None:
        return
    try:
        fn(set(partitions))
    except Exception:
        log.exception("rebalance listener %s failed", name)


class GroupMember:
    """One consumer's membership in a KIP-848 group, driven on the consumer's loop."""

    def __init__(
        self,
        host: GroupHost,
        cluster: ClusterClient,
        coordinators: CoordinatorClient,
        membership: Membership,
        *,
        auto_commit: bool,
        retry_backoff_s: float,
    ) -> None:
        self.host = host
        self.cluster = cluster
        self.coordinators = coordinators
        self.membership = membership
        self.auto_commit = auto_commit
        self.retry_backoff_s = retry_backoff_s
        self.listener: object | None = None
        self.error: KafkaError | None = None
        self._wake = asyncio.Event()
        self._heartbeat_done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_sent = -1e18
        self._closing = False

    @property
    def group_id(self) -> str:
        return self.membership.group_id

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        m = self.membership
        while True:
            if m.state in (State.LEFT, State.UNSUBSCRIBED):
                return
            if m.state is State.FATAL:
                code, message = m.error or (0, "")
                self.error = KafkaError(code, f"group {self.group_id!r}: {message}".rstrip(": "))
                self.host._group_wake()
                return
            now = loop.time()
            if m.heartbeat_due(now - self._last_sent):
                self._last_sent = now
                action = await self._heartbeat()
                await self._act(action)
                continue
            delay = max(0.0, self._last_sent + m.heartbeat_interval_ms / 1000 - loop.time())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(delay, 0.001)):
                    await self._wake.wait()

    async def _heartbeat(self) -> Action:
        m = self.membership
        try:
            node = await self.coordinators.find(CoordinatorType.GROUP, self.group_id)
            conn = await self.cluster.connection(node)
            version = conn.version(ApiKey.CONSUMER_GROUP_HEARTBEAT)
            data = m.heartbeat_request(version)
            ids = {tp.topic: self.cluster.topic_id(tp.topic) for tp in m.owned}
            missing = [t for t, i in ids.items() if i.int == 0]
            if missing:
                await self.cluster.refresh_metadata(missing)
                ids = {t: self.cluster.topic_id(t) for t in ids}
            resp = await conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, m.sent(data, ids), version)
        except asyncio.CancelledError:
            # Stopped mid-request (the task cancelled): its answer will never be taken,
            # so it is no longer in flight; else a restarted task never sends again.
            m.request_failed()
            raise
        except (KafkaConnectionError, KafkaError) as exc:
            m.request_failed()
            log.info("heartbeat of group %r failed: %s", self.group_id, exc)
            self.coordinators.forget(CoordinatorType.GROUP, self.group_id)
            await asyncio.sleep(self.retry_backoff_s)
            return Action.NONE
        assignment = None
        if resp.assignment is not None:
            assignment = {t.topic_id: list(t.partitions) for t in resp.assignment.topic_partitions}
        interval = resp.heartbeat_interval
        action = m.on_response(
            int(resp.error_code),
            error_message=resp.error_message,
            member_id=resp.member_id,
            member_epoch=int(resp.member_epoch),
            heartbeat_interval_ms=(
                interval // _MS if hasattr(interval, "total_seconds") else int(interval)
            ),
            assignment=assignment,
        )
        self._heartbeat_done.set()
        self._heartbeat_done = asyncio.Event()
        if int(resp.error_code):
            log.info(
                "group %r heartbeat: error %s (%s)",
                self.group_id,
                KafkaError(int(resp.error_code)).name,
                resp.error_message,
            )
        return action

    async def _act(self, action: Action) -> None:
        m = self.membership
        if action is Action.FIND_COORDINATOR:
            self.coordinators.forget(CoordinatorType.GROUP, self.group_id)
            await asyncio.sleep(self.retry_backoff_s)
        elif action is Action.RELEASE_ALL:
            lost = set(m.owned)
            self.host._group_remove(lost)
            if lost:
                _listener_call(self.listener, "on_partitions_lost", lost)
            m.released()
        elif action is Action.RECONCILE:
            await self._reconcile()

    async def _reconcile(self) -> None:
        m = self.membership
        names = {meta.topic_id: name for name, meta in self.cluster.topics.items()}
        if any(t not in names for t in m.unresolved()):
            with contextlib.suppress(KafkaError):
                await self.cluster.refresh_metadata(None)
            names = {meta.topic_id: name for name, meta in self.cluster.topics.items()}
        step = m.reconcile(names)
        if step is None:
            log.info("group %r: assignment names topics not in the metadata yet", self.group_id)
            await asyncio.sleep(self.retry_backoff_s)
            return
        await self._apply(step)

    async def _apply(self, step: Reconciliation) -> None:
        m = self.membership
        if step.revoke:
            log.info("group %r: revoking %s", self.group_id, sorted(step.revoke))
            if self.auto_commit:
                positions = self.host._group_positions()
                await self._commit_quietly(
                    {tp: positions[tp] for tp in step.revoke if tp in positions}
                )
            _listener_call(self.listener, "on_partitions_revoked", set(step.revoke))
            self.host._group_remove(set(step.revoke))
            m.revoked(step.revoke)
        if step.add:
            log.info("group %r: assigned %s", self.group_id, sorted(step.add))
            committed: dict[TopicPartition, int | None] = dict.fromkeys(step.add)
            try:
                committed.update(await self.committed(set(step.add)))
            except KafkaError as exc:
                log.warning("group %r: no committed offsets (%s); resetting", self.group_id, exc)
            self.host._group_add(committed)
            _listener_call(self.listener, "on_partitions_assigned", set(step.add))
        m.reconciled(step)
        self.wake()

    # -- offsets ----------------------------------------------------------------------

    async def committed(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        return await fetch_committed(self.coordinators, self.group_id, partitions)

    async def commit(self, offsets: Mapping[TopicPartition, int], timeout_s: float = 30.0) -> None:
        """OffsetCommit as this member (id and epoch); raises the first partition error."""
        if not offsets:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": offset}
            )
        while True:
            m = self.membership
            data = {
                "group_id": self.group_id,
                "generation_id_or_member_epoch": m.member_epoch if m.member_id else -1,
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            }
            _, code = await self.coordinators.request(
                CoordinatorType.GROUP,
                self.group_id,
                ApiKey.OFFSET_COMMIT,
                data,
                error_of=_commit_error,
                what=f"OffsetCommit({self.group_id!r})",
            )
            if not code:
                return
            retry = code in (STALE_MEMBER_EPOCH, REBALANCE_IN_PROGRESS)
            # The heartbeat task itself (a commit before a revocation) cannot wait for itself.
            if retry and asyncio.current_task() is not self._task and loop.time() < deadline:
                # Our epoch moved on: the next heartbeat brings the new one.
                waiter = self._heartbeat_done
                self.wake()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.01, deadline - loop.time())):
                        await waiter.wait()
                continue
            raise KafkaError(code, f"OffsetCommit({self.group_id!r})")

    async def _commit_quietly(self, offsets: Mapping[TopicPartition, int]) -> None:
        try:
            await self.commit(offsets, timeout_s=5.0)
        except KafkaError as exc:
            if exc.code not in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                log.warning("group %r: commit of %s failed: %s", self.group_id, offsets, exc)

    # -- leaving ----------------------------------------------------------------------

    async def close(self, timeout_s: float = 5.0) -> None:
        """Commit (auto-commit), revoke, and leave with epoch -1 (-2 for a static member)."""
        m = self.membership
        owned = set(m.owned)
        if owned and m.state not in (State.FENCED, State.FATAL):
            if self.auto_commit:
                positions = self.host._group_positions()
                await self._commit_quietly({tp: positions[tp] for tp in owned if tp in positions})
            _listener_call(self.listener, "on_partitions_revoked", owned)
        self.host._group_remove(owned)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        m.request_failed()
        if m.leave():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await self._heartbeat()
        m.state = State.LEFT


def _commit_error(response: Any) -> int:
    for t in response.topics:
        for p in t.partitions:
            if int(p.error_code):
                return int(p.error_code)
    return 0


async def fetch_committed(
    coordinators: CoordinatorClient, group_id: str, partitions: set[TopicPartition]
) -> dict[TopicPartition, int]:
    """OffsetFetch (stable offsets) of the group: the same for a classic and a KIP-848
    member; partitions with no committed offset are left out."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    resp, code = await coordinators.request(
        CoordinatorType.GROUP,
        group_id,
        ApiKey.OFFSET_FETCH,
        {
            "group_id": group_id,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
            "require_stable": True,
        },
        what=f"OffsetFetch({group_id!r})",
    )
    if code:
        raise KafkaError(code, f"OffsetFetch({group_id!r})")
    return {
        TopicPartition(t.name, int(p.partition_index)): int(p.committed_offset)
        for t in resp.topics
        for p in t.partitions
        if int(p.committed_offset) >= 0 and not int(p.error_code)
    }
