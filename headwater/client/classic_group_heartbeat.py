"""The I/O side of ``group.protocol=classic``: join, sync, heartbeats, commits, leave.

``ClassicGroupMember`` runs one task on the consumer's loop, the same loop
(and thread) as the fetches and as ``consumer_group_heartbeat`` for
KIP-848 groups, with the same face to the consumer (``start``, ``commit``,
``committed``, ``close``, ``listener``, ``error``). The task drives
``ClassicMembership``:

* while unjoined: revoke everything owned (eager protocol: with
  ``enable.auto.commit`` the positions are committed first, then the
  listener's ``on_partitions_revoked`` runs and the consumer stops fetching
  them), JoinGroup, and, as leader, compute the assignment from every
  member's subscription and the topics' partition counts; SyncGroup; the
  assigned partitions start at their committed offsets (else
  ``auto.offset.reset``) and ``on_partitions_assigned`` runs;
* while stable: a Heartbeat every ``heartbeat.interval.ms``;
  REBALANCE_IN_PROGRESS rejoins as above; ILLEGAL_GENERATION and
  UNKNOWN_MEMBER_ID lose everything (``on_partitions_lost``, no commit)
  and rejoin; coordinator errors and lost connections look the coordinator
  up again.

JoinGroup waits as long as the coordinator may hold it (the rebalance
timeout, ``max.poll.interval.ms``, plus 5 s, as the Java client). The
leader looks at the group's topics every ``metadata.max.age.ms`` and rejoins
when one appeared or changed its partition count (Kafka's assignment
snapshot). The client does not enforce ``max.poll.interval.ms`` itself (no
proactive leave when the application stops polling).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Final

from headwater.client.classic_group_membership import (
    ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    Action,
    ClassicMembership,
    JoinedMember,
    State,
)
from headwater.client.cluster import ClusterClient
from headwater.client.consumer_group_heartbeat import (
    GroupHost,
    _commit_error,
    _listener_call,
    fetch_committed,
)
from headwater.client.coordinator import CoordinatorClient, CoordinatorType
from headwater.client.errors import KafkaConnectionError, KafkaError
from headwater.client.types import TopicPartition
from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_request, decode_response, encode_request

log = logging.getLogger(__name__)

JOIN_EXTRA_S: Final = 5.0  # the Java client's JoinGroup timeout: rebalance timeout + 5 s
#: Commits that fail only because the generation moved on: a rebalance took the partitions.
STALE_COMMIT_ERRORS: Final = frozenset(
    {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}
)


def _instance_id(member: Any) -> str | None:
    instance = getattr(member, "group_instance_id", None)  # JoinGroup v5+
    return None if instance is None else str(instance)


class ClassicGroupMember:
    """One consumer's membership in a classic group, driven on the consumer's loop."""

    def __init__(
        self,
        host: GroupHost,
        cluster: ClusterClient,
        coordinators: CoordinatorClient,
        membership: ClassicMembership,
        *,
        auto_commit: bool,
        retry_backoff_s: float,
        metadata_max_age_s: float = 300.0,
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
        self._task: asyncio.Task[None] | None = None
        self._last_heartbeat = -1e18
        self.metadata_max_age_s = metadata_max_age_s
        self._next_metadata_check = 0.0

    @property
    def group_id(self) -> str:
        return self.membership.group_id

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._task.add_done_callback(self._stopped)
        self.wake()

    def _stopped(self, task: asyncio.Task[None]) -> None:
        """A bug in the loop is the application's error, not a silent end of heartbeats."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.error("group %r: membership task failed", self.group_id, exc_info=exc)
        self.error = KafkaError(-1, f"group {self.group_id!r}: membership failed: {exc!r}")
        self.host._group_wake()

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
                self.error = KafkaError(code, f"group {self.group_id!r}: {message}")
                self.host._group_wake()
                return
            if m.state is not State.STABLE:
                await self._revoke_all()
                await self._act(await self._join_and_sync())
                continue
            # First: a heartbeat slower than its interval (behind a fetch on the same
            # connection) would otherwise never leave room for it.
            if m.is_leader and loop.time() >= self._next_metadata_check:
                self._next_metadata_check = loop.time() + self.metadata_max_age_s
                await self._check_metadata()
                continue
            due = self._last_heartbeat + m.heartbeat_interval_ms / 1000
            if loop.time() >= due:
                self._last_heartbeat = loop.time()
                await self._act(await self._heartbeat())
                continue
            if m.is_leader:
                due = min(due, self._next_metadata_check)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(due - loop.time(), 0.001)):
                    await self._wake.wait()

    async def _act(self, action: Action) -> None:
        if action is Action.FIND_COORDINATOR:
            self.coordinators.forget(CoordinatorType.GROUP, self.group_id)
            await asyncio.sleep(self.retry_backoff_s)
        elif action is Action.REJOIN:
            await asyncio.sleep(self.retry_backoff_s)
        elif action is Action.LOSE:
            lost = self.membership.revoked()
            self.host._group_remove(lost)
            if lost:
                log.info("group %r: lost %s", self.group_id, sorted(lost))
                _listener_call(self.listener, "on_partitions_lost", lost)

    async def _coordinator_request(
        self, api_key: ApiKey, data: Mapping[str, Any], timeout_s: float | None = None
    ) -> Any:
        """One request to the group coordinator; None after a connection failure (the
        coordinator is then looked up again)."""
        try:
            node = await self.coordinators.find(CoordinatorType.GROUP, self.group_id)
            conn = await self.cluster.connection(node)
            version = conn.version(api_key)
            if timeout_s is None:
                return await conn.request(api_key, data, version)
            body = encode_request(build_request(api_key, version, data))

            def decode(frame: memoryview, pos: int, v: int) -> Any:
                return decode_response(api_key, v, frame, pos)

            future = conn.send(api_key, version, body, decode)
            try:
                async with asyncio.timeout(timeout_s):
                    return await asyncio.shield(future)
            except TimeoutError:
                conn.close(f"no {api_key.name} response within {timeout_s:.1f} s")
                raise KafkaConnectionError(f"{api_key.name} timed out") from None
        except (KafkaConnectionError, KafkaError) as exc:
            log.info("group %r: %s failed: %s", self.group_id, api_key.name, exc)
            self.coordinators.forget(CoordinatorType.GROUP, self.group_id)
            await asyncio.sleep(self.retry_backoff_s)
            return None

    async def _join_and_sync(self) -> Action:
        m = self.membership
        join_timeout = m.rebalance_timeout_ms / 1000 + JOIN_EXTRA_S
        while True:
            resp = await self._coordinator_request(
                ApiKey.JOIN_GROUP, m.join_request(), join_timeout
            )
            if resp is None:
                return Action.NONE
            code = int(resp.error_code)
            members = [
                JoinedMember(str(x.member_id), _instance_id(x), bytes(x.metadata))
                for x in resp.members
            ]
            action = m.on_join_response(
                code,
                member_id=str(resp.member_id),
                generation=int(resp.generation_id),
                protocol_name=None if resp.protocol_name is None else str(resp.protocol_name),
                leader=str(resp.leader),
                members=members,
            )
            if code:
                log.info("group %r: JoinGroup: %s", self.group_id, KafkaError(code).name)
            if action is not Action.JOIN:
                break
        if action is not Action.SYNC:
            return action
        assignment = None
        if m.is_leader:
            assignment = await self._assign()
        log.info(
            "group %r: joined generation %d as %s%s",
            self.group_id,
            m.generation,
            m.member_id,
            f" (leader, {m.protocol_name})" if m.is_leader else "",
        )
        resp = await self._coordinator_request(ApiKey.SYNC_GROUP, m.sync_request(assignment))
        if resp is None:
            m.state = State.UNJOINED
            return Action.NONE
        action = m.on_sync_response(int(resp.error_code), bytes(resp.assignment or b""))
        if action is Action.ASSIGNED:
            await self._assigned(set(m.owned))
            now = asyncio.get_running_loop().time()
            self._last_heartbeat = now
            self._next_metadata_check = now + self.metadata_max_age_s
        elif int(resp.error_code):
            log.info("group %r: SyncGroup: %s", self.group_id, KafkaError(int(resp.error_code)))
        return action

    async def _partition_counts(self) -> dict[str, int] | None:
        """The partition count of every topic the group subscribes to (None: no answer)."""
        topics = sorted(self.membership.leader_topics())
        if not topics:
            return {}
        try:
            meta = await self.cluster.refresh_metadata(topics)
        except (KafkaConnectionError, KafkaError) as exc:
            log.warning("group %r: no metadata of the group's topics: %s", self.group_id, exc)
            return None
        return {t: len(meta[t].partitions) for t in topics if t in meta}

    async def _check_metadata(self) -> None:
        counts = await self._partition_counts()
        log.debug("group %r: the group's topics: %s", self.group_id, counts)
        if counts is not None and self.membership.metadata_changed(counts):
            log.info("group %r: the group's topics changed (%s): rejoining", self.group_id, counts)

    async def _assign(self) -> dict[str, list[TopicPartition]]:
        m = self.membership
        counts = await self._partition_counts()
        assignment = m.assign(counts or {})
        log.info("group %r: assignment %s", self.group_id, assignment)
        return assignment

    async def _assigned(self, partitions: set[TopicPartition]) -> None:
        log.info("group %r: assigned %s", self.group_id, sorted(partitions))
        committed: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        if partitions:
            try:
                committed.update(await self.committed(partitions))
            except KafkaError as exc:
                log.warning("group %r: no committed offsets (%s); resetting", self.group_id, exc)
            self.host._group_add(committed)
        _listener_call(self.listener, "on_partitions_assigned", set(partitions))

    async def _revoke_all(self) -> None:
        """Eager: commit (auto-commit), tell the listener, stop fetching; before every join."""
        m = self.membership
        owned = set(m.owned)
        if not owned:
            return
        log.info("group %r: revoking %s", self.group_id, sorted(owned))
        if self.auto_commit:
            positions = self.host._group_positions()
            await self._commit_quietly({tp: positions[tp] for tp in owned if tp in positions})
        _listener_call(self.listener, "on_partitions_revoked", owned)
        self.host._group_remove(owned)
        m.revoked()

    async def _heartbeat(self) -> Action:
        m = self.membership
        resp = await self._coordinator_request(ApiKey.HEARTBEAT, m.heartbeat_request())
        if resp is None:
            return Action.NONE
        code = int(resp.error_code)
        if code:
            log.info("group %r heartbeat: %s", self.group_id, KafkaError(code).name)
        return m.on_heartbeat_response(code)

    # -- offsets ----------------------------------------------------------------------

    async def committed(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        return await fetch_committed(self.coordinators, self.group_id, partitions)

    async def commit(self, offsets: Mapping[TopicPartition, int], timeout_s: float = 30.0) -> None:
        """OffsetCommit with this member's generation and id; raises the first partition
        error (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS: a rebalance
        took the partitions, Kafka's CommitFailedException)."""
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": offset}
            )
        generation, member_id = self.membership.commit_identity()
        data = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": generation,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": self.membership.instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        async with asyncio.timeout(timeout_s):
            _, code = await self.coordinators.request(
                CoordinatorType.GROUP,
                self.group_id,
                ApiKey.OFFSET_COMMIT,
                data,
                error_of=_commit_error,
                what=f"OffsetCommit({self.group_id!r})",
            )
        if code:
            if code in STALE_COMMIT_ERRORS and self.membership.state is State.STABLE:
                self.wake()  # the next heartbeat finds out about the rebalance
            raise KafkaError(code, f"OffsetCommit({self.group_id!r})")

    async def _commit_quietly(self, offsets: Mapping[TopicPartition, int]) -> None:
        try:
            await self.commit(offsets, timeout_s=5.0)
        except (KafkaError, TimeoutError) as exc:
            if not (isinstance(exc, KafkaError) and exc.code in STALE_COMMIT_ERRORS):
                log.warning("group %r: commit of %s failed: %s", self.group_id, offsets, exc)

    # -- leaving ----------------------------------------------------------------------

    async def close(self, timeout_s: float = 5.0) -> None:
        """Commit (auto-commit), revoke, and leave the group (a static member stays)."""
        m = self.membership
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        owned = set(m.owned)
        if owned and m.state is State.STABLE:
            if self.auto_commit:
                positions = self.host._group_positions()
                await self._commit_quietly({tp: positions[tp] for tp in owned if tp in positions})
            _listener_call(self.listener, "on_partitions_revoked", owned)
        self.host._group_remove(owned)
        leave = m.leave_request()
        if leave is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await self._coordinator_request(ApiKey.LEAVE_GROUP, leave)
