"""The consumer: assigned partitions, fetch sessions, pipelined fetches.

``AsyncConsumer`` runs on an asyncio loop; ``Consumer`` is the blocking
front that scripts and Spark tasks use (it runs the async one on a loop
thread). The application assigns partitions and seeks, as Spark's source
does, or subscribes as a member of a consumer group: with
``group.protocol=classic``, the default as in Kafka's clients
(JoinGroup/SyncGroup/Heartbeat, eager rebalances, the leader assigning with
``range`` or ``roundrobin``: ``classic_group_membership``,
``classic_group_heartbeat``, ``assignors``), or with
``group.protocol=consumer`` (KIP-848: ``consumer_group_membership`` and
``consumer_group_heartbeat``). Both run on the consumer's loop.

How fetching works (the book chapter's Fetcher and poll(), KIP-227, KIP-74):

* one ``FetchSessionHandler`` per broker: after the first full request,
  fetches name only partitions whose offset changed, and an idle consumer
  sends fetches that name no partition at all;
* **pipelining**: a fetch is sent as soon as the previous response from
  that broker is processed, reading only batch headers to know the next
  offsets; records are decoded later, when ``poll`` hands them out. At
  most ``MAX_BUFFERED_RESPONSES`` responses per broker wait for the
  application, which bounds memory, and ``poll`` sends the next fetch
  before it returns whenever it frees that budget;
* **round-robin** (KIP-74): partitions that returned data move to the back
  of the order, so the next full request starts with the ones that did not;
* OFFSET_OUT_OF_RANGE applies ``auto.offset.reset``; a lost connection
  makes the next fetch full (id, 0) and the consumer carries on from its
  positions, so nothing is lost or repeated;
* **closest replica** (KIP-392, ``client.rack``): a partition whose leader
  names a preferred read replica is fetched from that broker, in that
  broker's own session, until the lease ends or the replica errs
  (``read_replica``); a response is used only if it answers the partition's
  current fetch offset, so a partition briefly fetched from two brokers
  while it moves is never delivered twice.

Size: the consumer's two faces, the asyncio one and its blocking wrapper
(assign, seek, position, poll and poll_arrow, offsets lookups), over one fetch
loop; the fetch session and record decoding live in their own modules.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from headwater.client import assignors
from headwater.client.arrow_records import record_schema, to_record_batch
from headwater.client.classic_group_heartbeat import ClassicGroupMember
from headwater.client.classic_group_membership import ClassicMembership
from headwater.client.cluster import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ClusterClient
from headwater.client.completed_fetch import CompletedFetch
from headwater.client.config import ConsumerConfig
from headwater.client.connection import BrokerConnection
from headwater.client.consumer_group_heartbeat import GroupMember
from headwater.client.consumer_group_membership import Membership
from headwater.client.coordinator import CoordinatorClient
from headwater.client.errors import KafkaError
from headwater.client.loop_thread import EventLoopThread
from headwater.client.read_replica import (
    LAGGING_ERRORS,
    Action,
    ReadReplicas,
    decide,
)
from headwater.client.session_handler import FetchSessionHandler
from headwater.client.types import ConsumerRecord, TopicPartition
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_metadata import FINAL_EPOCH
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionFetch,
)

log = logging.getLogger(__name__)

MAX_BUFFERED_RESPONSES: Final = 2
OFFSET_OUT_OF_RANGE: Final = 1
FETCH_SESSION_TOPIC_ID_ERROR: Final = 106
LAST_NAME_ONLY_FETCH_VERSION: Final = 12


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None  # next offset the application will see
    fetch_offset: int | None = None  # next offset to ask the broker for
    reset: str | None = None  # "earliest" / "latest" while a reset is pending
    generation: int = 0  # bumped by seeks: data fetched before is dropped
    error: KafkaError | None = None  # raised by the next poll; the partition pauses
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class _Sent:
    """What a fetch asked of one partition, to judge the answer by."""

    generation: int
    fetch_offset: int
    via_replica: bool  # sent to a preferred read replica, not the leader


@dataclass(slots=True)
class _Buffered:
    node_id: int
    response_id: int
    generation: int
    fetch: CompletedFetch


class _Node:
    """Per-broker fetch state: its session, the fetch in flight, buffered responses."""

    __slots__ = (
        "connecting",
        "handler",
        "in_flight",
        "node_id",
        "not_before",
        "undelivered",
        "wake",
    )

    def __init__(self, node_id: int, handler: FetchSessionHandler) -> None:
        self.node_id = node_id
        self.handler = handler
        self.in_flight: asyncio.Task[None] | None = None
        self.connecting: asyncio.Task[BrokerConnection] | None = None
        self.undelivered: dict[int, int] = {}  # response id -> partitions not yet handed out
        self.not_before = 0.0  # loop time before which no fetch is sent (back-off)
        self.wake: asyncio.TimerHandle | None = None


class AsyncConsumer:
    """A consumer of assigned partitions; every method runs on the caller's event loop."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = ConsumerConfig.from_mapping(config, **kwargs)
        c = self.config
        self._cluster = ClusterClient(
            c.bootstrap_servers,
            client_id=c.client_id,
            request_timeout_ms=c.request_timeout_ms,
            reconnect_backoff_ms=c.reconnect_backoff_ms,
            reconnect_backoff_max_ms=c.reconnect_backoff_max_ms,
            security=c.security,
        )
        # Insertion order is the round-robin order of full fetch requests.
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._nodes: dict[int, _Node] = {}
        self._replicas = ReadReplicas(c.metadata_max_age_ms / 1000)
        self._buffer: collections.deque[_Buffered] = collections.deque()
        self._data = asyncio.Event()
        self._response_ids = itertools.count(1)
        self._metadata_task: asyncio.Task[None] | None = None
        self._reset_task: asyncio.Task[None] | None = None
        self._metadata_stale = False
        self._closed = False
        self._group: GroupMember | ClassicGroupMember | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._next_auto_commit = 0.0

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- assignment and positions ------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions; new ones start per ``auto.offset.reset``."""
        self._check_open()
        if self._group is not None:
            raise ValueError("assign while subscribed to a group: unsubscribe first")
        wanted = [TopicPartition(*tp) for tp in partitions]
        old = self._states
        self._states = {}
        for tp in wanted:
            state = old.get(tp)
            if state is None:
                state = _PartitionState()
                self._mark_reset(state, self.config.auto_offset_reset)
            self._states[tp] = state
        self._kick()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    # -- consumer groups (group.protocol=classic or consumer) --------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: object | None = None,
    ) -> None:
        """Join ``group.id`` for these topics, or every topic matching ``pattern``
        (RE2, evaluated by the broker: ``group.protocol=consumer`` only);
        partitions come from the coordinator (consumer) or the group's leader
        (classic, by ``partition.assignment.strategy``).

        ``listener`` may have ``on_partitions_revoked``, ``on_partitions_assigned``
        and ``on_partitions_lost`` (each takes a set of partitions; they run on
        the consumer's loop).
        """
        self._check_open()
        c = self.config
        if not c.group_id:
            raise ValueError("subscribe needs group.id")
        if c.group_protocol == "classic":
            self._subscribe_classic(topics, pattern=pattern, listener=listener)
            return
        if self._group is None:
            if self._states:
                raise ValueError("subscribe after assign: unsubscribe/assign([]) first")
            membership = Membership(
                c.group_id,
                instance_id=c.group_instance_id or None,
                rack_id=c.client_rack or None,
                remote_assignor=c.group_remote_assignor or None,
                rebalance_timeout_ms=c.max_poll_interval_ms,
            )
            self._group = GroupMember(
                self,
                self._cluster,
                self._coordinator_client(),
                membership,
                auto_commit=c.enable_auto_commit,
                retry_backoff_s=max(c.retry_backoff_ms, 10) / 1000,
            )
            self._start_auto_commit_clock()
        assert isinstance(self._group, GroupMember)
        self._group.listener = listener
        self._group.membership.subscribe(topics, pattern=pattern)
        self._group.start()

    def _subscribe_classic(
        self, topics: Iterable[str] | None, *, pattern: str | None, listener: object | None
    ) -> None:
        c = self.config
        if self._group is None:
            if self._states:
                raise ValueError("subscribe after assign: unsubscribe/assign([]) first")
            membership = ClassicMembership(
                c.group_id,
                strategies=assignors.strategies(c.partition_assignment_strategy),
                instance_id=c.group_instance_id or None,
                session_timeout_ms=c.session_timeout_ms,
                rebalance_timeout_ms=c.max_poll_interval_ms,
                heartbeat_interval_ms=c.heartbeat_interval_ms,
            )
            membership.subscribe(topics, pattern=pattern)  # raises before anything starts
            self._group = ClassicGroupMember(
                self,
                self._cluster,
                self._coordinator_client(),
                membership,
                auto_commit=c.enable_auto_commit,
                retry_backoff_s=max(c.retry_backoff_ms, 10) / 1000,
                metadata_max_age_s=c.metadata_max_age_ms / 1000,
            )
            self._start_auto_commit_clock()
        assert isinstance(self._group, ClassicGroupMember)
        self._group.listener = listener
        self._group.membership.subscribe(topics, pattern=pattern)
        self._group.start()

    def _coordinator_client(self) -> CoordinatorClient:
        """Finds the group's coordinator (both group protocols)."""
        c = self.config
        return CoordinatorClient(
            self._cluster, retry_backoff_ms=c.retry_backoff_ms, max_block_ms=c.request_timeout_ms
        )

    def _start_auto_commit_clock(self) -> None:
        self._next_auto_commit = (
            asyncio.get_running_loop().time() + self.config.auto_commit_interval_ms / 1000
        )

    async def unsubscribe(self) -> None:
        """Leave the group (committing first with auto-commit); no partitions after."""
        group, self._group = self._group, None
        if group is not None:
            await group.close()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: every owned partition's position) as this member."""
        group = self._require_group()
        wanted = self._group_positions() if offsets is None else dict(offsets)
        await group.commit(wanted)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``partitions`` (those with none are left out)."""
        return await self._require_group().committed({TopicPartition(*tp) for tp in partitions})

    def member_id(self) -> str:
        return "" if self._group is None else self._group.membership.member_id

    def _require_group(self) -> GroupMember | ClassicGroupMember:
        if self._group is None:
            raise ValueError("not subscribed to a group")
        return self._group

    def _group_positions(self) -> dict[TopicPartition, int]:
        return {
            tp: s.position
            for tp, s in self._states.items()
            if s.position is not None and s.reset is None
        }

    def _group_remove(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._states.pop(tp, None)
        self._kick()

    def _group_add(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        for tp, offset in offsets.items():
            state = _PartitionState()
            if offset is None:
                self._mark_reset(state, self.config.auto_offset_reset)
            else:
                state.position = state.fetch_offset = offset
            self._states[tp] = state
        self._kick()

    def _group_wake(self) -> None:
        self._data.set()

    def _group_poll(self) -> None:
        """Raise the group's error, if any; start an auto-commit when one is due."""
        group = self._group
        if group is None:
            return
        if group.error is not None:
            error, group.error = group.error, None
            raise error
        if not self.config.enable_auto_commit:
            return
        now = asyncio.get_running_loop().time()
        task = self._auto_commit_task
        if now >= self._next_auto_commit and (task is None or task.done()):
            self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
            positions = self._group_positions()
            if positions:
                self._auto_commit_task = asyncio.ensure_future(group._commit_quietly(positions))

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(TopicPartition(*tp))
        if state is None:
            raise ValueError(f"partition {tp[0]}-{tp[1]} is not assigned")
        return state

    def _mark_reset(self, state: _PartitionState, strategy: str) -> None:
        state.generation += 1
        state.fetch_offset = None
        state.error = None
        if strategy == "none":
            state.reset = None
            state.error = KafkaError(
                OFFSET_OUT_OF_RANGE, "no position and auto.offset.reset=none: seek first"
            )
            self._data.set()
        else:
            state.reset = strategy

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next record of ``tp`` that ``poll`` returns has offset ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._state(tp)
        state.generation += 1
        state.position = state.fetch_offset = offset
        state.reset = None
        state.error = None
        self._kick()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Lazily, as in Kafka: the log start offset is looked up by the next poll/position."""
        for tp in self._states if partitions is None else partitions:
            self._mark_reset(self._state(tp), "earliest")
        self._kick()

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        for tp in self._states if partitions is None else partitions:
            self._mark_reset(self._state(tp), "latest")
        self._kick()

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` will return for ``tp``."""
        state = self._state(tp)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.request_timeout_ms / 1000
        while state.position is None or state.reset is not None:
            if state.error is not None:
                error, state.error = state.error, None
                raise error
            self._kick()
            if loop.time() > deadline:
                raise KafkaError(7, f"no position for {tp[0]}-{tp[1]} yet")
            task = self._reset_task
            if task is not None and not task.done():
                await asyncio.wait([task], timeout=max(0.0, deadline - loop.time()))
            else:
                await asyncio.sleep(0.01)
        return state.position

    # -- offsets and metadata ----------------------------------------------------

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        tps = [TopicPartition(*tp) for tp in partitions]
        return await self._cluster.list_offsets(
            tps, EARLIEST_TIMESTAMP, isolation_level=self.config.isolation
        )

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark (read_uncommitted) or last stable offset (read_committed)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        return await self._cluster.list_offsets(
            tps, LATEST_TIMESTAMP, isolation_level=self.config.isolation
        )

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset with a timestamp at or after each given one (None: none yet)."""
        out: dict[TopicPartition, int | None] = {}
        for tp, ts in timestamps.items():
            found = await self._cluster.list_offsets([TopicPartition(*tp)], ts)
            offset = found[TopicPartition(*tp)]
            out[TopicPartition(*tp)] = offset if offset >= 0 else None
        return out

    async def partitions_for(self, topic: str) -> set[int] | None:
        meta = (await self._cluster.refresh_metadata([topic])).get(topic)
        return None if meta is None else set(meta.partitions)

    async def topics(self) -> set[str]:
        return set(await self._cluster.refresh_metadata(None))

    # -- poll ------------------------------------------------------------------------

    async def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        """Records fetched so far, waiting up to ``timeout_s`` for some to arrive.

        Raises the ``KafkaError`` of a partition that failed (it then stays
        paused until the next seek).
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        self._raise_partition_error()
        self._kick()
        while True:
            records = self._drain()
            if records:
                return records
            self._raise_partition_error()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._data.wait()

    async def poll_arrow(
        self,
        timeout_s: float = 1.0,
        *,
        include_headers: bool = False,
        max_records: int | None = None,
    ) -> pa.Table:
        """Like ``poll``, as one Arrow table (one chunk per partition fetch), no objects per record.

        The schema is ``arrow_records.record_schema`` (Spark's Kafka rows).
        ``max_records`` bounds the rows (``max.poll.records`` does not apply:
        it is sized for lists of Python objects, not columns). An empty table
        means nothing arrived within ``timeout_s``.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        self._raise_partition_error()
        self._kick()
        schema = record_schema(include_headers)
        while True:
            batches = self._drain_columns(include_headers, max_records)
            if batches:
                return pa.Table.from_batches(batches, schema=schema)
            self._raise_partition_error()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return schema.empty_table()
            self._data.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._data.wait()

    def _drain_columns(self, include_headers: bool, limit: int | None) -> list[pa.RecordBatch]:
        """``_drain`` for columns: buffered fetches as record batches, frees fetch budget."""
        out: list[pa.RecordBatch] = []
        rows = 0
        buffer = self._buffer
        while buffer and (limit is None or rows < limit):
            item = buffer[0]
            tp = item.fetch.tp
            state = self._states.get(tp)
            if state is None or state.generation != item.generation or state.position is None:
                buffer.popleft()
                self._delivered(item)
                continue
            want = None if limit is None else limit - rows
            try:
                columns = item.fetch.take_columns(state.position, want, include_headers)
            except KafkaError as exc:
                state.error = exc
                state.generation += 1
                state.fetch_offset = None
                buffer.popleft()
                self._delivered(item)
                break
            n = columns.num_rows
            if n:
                state.position = columns.column("offset")[n - 1].as_py() + 1
                out.append(to_record_batch(tp.topic, tp.partition, columns, include_headers))
                rows += n
            if want is None or n < want:
                state.position = max(state.position, item.fetch.next_fetch_offset)
                buffer.popleft()
                self._delivered(item)
        return out

    def _raise_partition_error(self) -> None:
        self._group_poll()
        for tp, state in self._states.items():
            if state.error is not None:
                error, state.error = state.error, None
                log.debug("raising %s for %s", error, tp)
                raise error

    def _drain(self) -> list[ConsumerRecord]:
        """Hand out buffered records, at most ``max.poll.records``; frees fetch budget."""
        limit = self.config.max_poll_records or None
        out: list[ConsumerRecord] = []
        buffer = self._buffer
        while buffer and (limit is None or len(out) < limit):
            item = buffer[0]
            state = self._states.get(item.fetch.tp)
            if state is None or state.generation != item.generation or state.position is None:
                buffer.popleft()
                self._delivered(item)
                continue
            want = None if limit is None else limit - len(out)
            try:
                records = item.fetch.take(state.position, want)
            except KafkaError as exc:
                # The data will not decode: pause the partition at its position.
                state.error = exc
                state.generation += 1
                state.fetch_offset = None
                buffer.popleft()
                self._delivered(item)
                break
            if records:
                state.position = records[-1].offset + 1
                out.extend(records)
            if want is None or len(records) < want:
                state.position = max(state.position, item.fetch.next_fetch_offset)
                buffer.popleft()
                self._delivered(item)
        return out

    def _delivered(self, item: _Buffered) -> None:
        node = self._nodes.get(item.node_id)
        if node is None:
            return
        left = node.undelivered.get(item.response_id, 0) - 1
        if left > 0:
            node.undelivered[item.response_id] = left
            return
        node.undelivered.pop(item.response_id, None)
        # The chapter's poll() step 4: the next fetch goes out before we return.
        self._maybe_send(item.node_id)

    # -- fetching --------------------------------------------------------------------

    def _kick(self) -> None:
        """Start whatever is needed now: metadata, offset resets, fetches."""
        if self._closed:
            return
        cluster = self._cluster
        now = asyncio.get_running_loop().time()
        nodes: set[int] = set()
        need_metadata = self._metadata_stale
        need_reset = False
        for tp, state in self._states.items():
            if cluster.leader(tp) is None:
                need_metadata = True
            else:
                node_id = self._fetch_node(tp, now)
                if node_id is not None:
                    nodes.add(node_id)
            if state.reset is not None:
                need_reset = True
        need_metadata = need_metadata or self._metadata_stale  # a replica failed just now
        if need_metadata and (self._metadata_task is None or self._metadata_task.done()):
            self._metadata_task = asyncio.ensure_future(self._refresh_metadata())
        if need_reset and (self._reset_task is None or self._reset_task.done()):
            self._reset_task = asyncio.ensure_future(self._run_resets())
        for node_id in nodes:
            self._maybe_send(node_id)

    def _fetch_node(self, tp: TopicPartition, now: float) -> int | None:
        """The broker ``tp`` is fetched from now: its preferred read replica, else its leader."""
        cluster = self._cluster
        leader = cluster.leader(tp)
        if leader is None:
            return None
        node_id = self._replicas.preferred(tp, now)
        if node_id is None or node_id == leader:
            return leader
        meta = cluster.topics[tp.topic].partitions[tp.partition]
        if node_id not in meta.isr or node_id not in cluster.brokers:
            # Out of sync, moved away or gone from the cluster, as the metadata
            # already shows (Java checks only the last two: nodeIfOnline). A
            # failure: the leader may name it a while yet.
            self._replica_failed(node_id, [tp], KafkaError(6, "not a live in-sync replica"))
            return leader
        return node_id

    def _node(self, node_id: int) -> _Node:
        node = self._nodes.get(node_id)
        if node is None:
            handler = FetchSessionHandler(
                node_id, enabled=self.config.headwater_fetch_session_enable
            )
            node = self._nodes[node_id] = _Node(node_id, handler)
        return node

    def _wake_at(self, node: _Node, when: float) -> None:
        if node.wake is not None:
            node.wake.cancel()
        loop = asyncio.get_running_loop()
        node.wake = loop.call_at(when, self._kick)

    def _maybe_send(self, node_id: int) -> None:
        """Send the next fetch to ``node_id`` if the budget allows and it has partitions."""
        node = self._node(node_id)
        if self._closed or node.in_flight is not None:
            return
        if len(node.undelivered) >= MAX_BUFFERED_RESPONSES:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < node.not_before:
            self._wake_at(node, node.not_before)
            return
        conn = self._cluster.ready_connection(node_id)
        if conn is None:
            if node.connecting is None or node.connecting.done():
                node.connecting = asyncio.ensure_future(self._cluster.connection(node_id))
                node.connecting.add_done_callback(functools.partial(self._connected, node_id))
            return
        cluster = self._cluster
        states = self._states
        now = loop.time()
        fetch_node = self._fetch_node
        targets = [
            tp
            for tp, s in states.items()
            if s.fetch_offset is not None and s.error is None and fetch_node(tp, now) == node_id
        ]
        if not targets:
            return
        version = conn.versions.get(ApiKey.FETCH)
        if version is None:
            for tp in targets:
                states[tp].error = KafkaError(35, "the broker does not support Fetch")
            self._data.set()
            return
        topic_ids = {tp.topic: cluster.topic_id(tp.topic) for tp in targets}
        if version > LAST_NAME_ONLY_FETCH_VERSION and ZERO_UUID in topic_ids.values():
            version = LAST_NAME_ONLY_FETCH_VERSION  # as librdkafka: ids unknown, use names
        max_partition_bytes = self.config.max_partition_fetch_bytes
        partitions = []
        sent: dict[TopicPartition, _Sent] = {}
        for tp in targets:
            state = states[tp]
            offset = state.fetch_offset
            assert offset is not None
            partitions.append(
                PartitionFetch(
                    topic_ids[tp.topic], tp.topic, tp.partition, offset, -1, max_partition_bytes
                )
            )
            sent[tp] = _Sent(state.generation, offset, cluster.leader(tp) != node_id)
        c = self.config
        req = node.handler.build(
            partitions,
            version=version,
            max_wait_ms=c.fetch_max_wait_ms,
            min_bytes=c.fetch_min_bytes,
            max_bytes=c.fetch_max_bytes,
            isolation_level=c.isolation,
            rack_id=self._request_rack(sent, now),
        )
        try:
            future = conn.send_fetch(req)
        except KafkaError as exc:
            node.handler.handle_error(exc)
            node.not_before = loop.time() + c.retry_backoff_ms / 1000
            self._wake_at(node, node.not_before)
            return
        node.in_flight = asyncio.ensure_future(self._complete_fetch(node, conn, future, req, sent))

    def _request_rack(self, sent: Mapping[TopicPartition, _Sent], now: float) -> str:
        """``client.rack``, unless a partition asked of its leader avoids a failed replica.

        A rack-aware leader keeps naming a dead follower until it leaves the
        ISR; only a fetch without a rack makes the leader serve it meanwhile.
        """
        rack = self.config.client_rack
        if rack and self._replicas.has_avoidances:
            avoiding = self._replicas.avoiding
            if any(not s.via_replica and avoiding(tp, now) is not None for tp, s in sent.items()):
                return ""
        return rack

    def _connected(self, node_id: int, task: asyncio.Task[BrokerConnection]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.info("consumer cannot reach broker %d yet: %s", node_id, error)
            # A leader we have no address for: the broker list is out of date.
            leaders = {self._cluster.leader(tp) for tp in self._states}
            if not leaders <= set(self._cluster.brokers):
                self._metadata_stale = True
            self._replica_failed(node_id, self._replicas.leased_to(node_id), error)
        if not self._closed:
            asyncio.get_running_loop().call_soon(self._kick)

    async def _complete_fetch(
        self,
        node: _Node,
        conn: BrokerConnection,
        future: asyncio.Future[FetchResponseData],
        req: FetchRequestData,
        sent: dict[TopicPartition, _Sent],
    ) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.config.retry_backoff_ms / 1000
        try:
            response = await conn.wait(future, req.max_wait_ms)
        except asyncio.CancelledError:
            node.in_flight = None
            raise
        except Exception as exc:
            node.in_flight = None
            node.handler.handle_error(exc)
            if not isinstance(exc, KafkaError):
                conn.close(f"sent an unreadable fetch response: {exc}")
            node.not_before = loop.time() + backoff
            self._replica_failed(node.node_id, [tp for tp, s in sent.items() if s.via_replica], exc)
            self._kick()
            return
        node.in_flight = None
        if not node.handler.handle_response(response):
            if response.error_code == FETCH_SESSION_TOPIC_ID_ERROR:
                self._metadata_stale = True
            if response.error_code:
                node.not_before = loop.time() + backoff
        else:
            self._process(node, response, sent)
        self._kick()

    def _replica_failed(
        self, node_id: int, tps: Iterable[TopicPartition], error: BaseException
    ) -> None:
        """``node_id`` failed as the preferred replica of ``tps``: back to their leaders."""
        cluster = self._cluster
        now = asyncio.get_running_loop().time()
        moved = False
        for tp in tps:
            if cluster.leader(tp) == node_id:
                continue  # it is the leader now: the leader's own retry rules apply
            span = self._replicas.failed(tp, node_id, now)
            log.info(
                "preferred replica %d of %s-%d failed (%s): fetching from the leader, "
                "avoiding it for %.1f s",
                node_id,
                tp.topic,
                tp.partition,
                error,
                span,
            )
            moved = True
        if moved:
            self._metadata_stale = True

    def _move(self, tp: TopicPartition, node_id: int, served_by: int, now: float) -> None:
        """A broker named ``node_id`` as the replica to fetch ``tp`` from."""
        replicas = self._replicas
        if node_id == self._cluster.leader(tp):
            replicas.clear(tp)
        elif replicas.avoiding(tp, now) == node_id:
            # An answer to a fetch sent before that replica failed: stay on the leader.
            return
        else:
            log.debug("node %d names %d as preferred replica of %s-%d", served_by, node_id, *tp)
            replicas.prefer(tp, node_id, now)
        if node_id not in self._cluster.brokers:
            self._metadata_stale = True

    def _process(
        self, node: _Node, response: FetchResponseData, sent: dict[TopicPartition, _Sent]
    ) -> None:
        states = self._states
        c = self.config
        cluster = self._cluster
        replicas = self._replicas
        now = asyncio.get_running_loop().time()
        response_id = next(self._response_ids)
        with_data: list[TopicPartition] = []
        woke = False
        for p in response.partitions:
            tp = TopicPartition(p.topic, p.partition)
            state = states.get(tp)
            asked = sent.get(tp)
            if (
                state is None
                or asked is None
                or asked.generation != state.generation
                or asked.fetch_offset != state.fetch_offset
            ):
                # Unassigned or sought since the request left, or already read
                # from another broker (a partition moving between replicas).
                continue
            code = p.error_code
            from_replica = asked.via_replica or cluster.leader(tp) != node.node_id
            action = decide(
                code, p.preferred_read_replica, served_by=node.node_id, from_replica=from_replica
            )
            if action is Action.MOVE:
                self._move(tp, p.preferred_read_replica, node.node_id, now)
                continue  # its records, if any, are dropped: the position stays
            if action is Action.USE:
                state.high_watermark = p.high_watermark
                records = p.records
                offset = state.fetch_offset
                if not isinstance(records, bytes) or not records or offset is None:
                    continue  # the client codec decodes record sets as bytes
                try:
                    fetched = CompletedFetch(
                        tp,
                        records,
                        offset,
                        high_watermark=p.high_watermark,
                        isolation_level=c.isolation,
                        aborted_transactions=p.aborted_transactions,
                        check_crcs=c.check_crcs,
                    )
                except KafkaError as exc:
                    state.error = exc
                    state.fetch_offset = None
                    woke = True
                    continue
                if not fetched.has_records:
                    continue  # only a partial batch: the broker will send it whole next time
                state.fetch_offset = fetched.next_fetch_offset
                self._buffer.append(_Buffered(node.node_id, response_id, state.generation, fetched))
                with_data.append(tp)
                if from_replica:
                    replicas.served(tp, node.node_id)
            elif action is Action.TO_LEADER:
                replicas.clear(tp)
                if code in LAGGING_ERRORS:
                    log.debug(
                        "replica %d is behind on %s-%d at %s (error %d, its high watermark "
                        "%d): asking the leader",
                        node.node_id,
                        tp.topic,
                        tp.partition,
                        state.fetch_offset,
                        code,
                        p.high_watermark,
                    )
                    # The leader may send us straight back: give the replica a moment.
                    node.not_before = now + c.retry_backoff_ms / 1000
                else:
                    self._replica_failed(node.node_id, [tp], KafkaError(code))
                    self._metadata_stale = True
            elif action is Action.RESET:
                log.info(
                    "offset %s out of range for %s-%d; applying auto.offset.reset=%s",
                    state.fetch_offset,
                    tp.topic,
                    tp.partition,
                    c.auto_offset_reset,
                )
                self._mark_reset(state, c.auto_offset_reset)
                woke = True
            elif action is Action.RETRY:
                replicas.clear(tp)
                self._metadata_stale = True
                node.not_before = now + c.retry_backoff_ms / 1000
            else:
                state.error = KafkaError(code, f"fetching {tp.topic}-{tp.partition}")
                state.fetch_offset = None
                woke = True
        if with_data:
            node.undelivered[response_id] = len(with_data)
            # KIP-74 round-robin: those that returned data go to the back of the line.
            for tp in with_data:
                states[tp] = states.pop(tp)
        if with_data or woke:
            self._data.set()

    # -- background work ---------------------------------------------------------

    async def _refresh_metadata(self) -> None:
        backoff = max(self.config.retry_backoff_ms / 1000, 0.05)
        while not self._closed:
            self._metadata_stale = False
            topics = {tp.topic for tp in self._states}
            try:
                await self._cluster.refresh_metadata(topics)
            except KafkaError as exc:
                log.info("metadata refresh failed: %s", exc)
                await asyncio.sleep(backoff)
                continue
            if all(self._cluster.leader(tp) is not None for tp in self._states):
                break
            await asyncio.sleep(max(backoff, 0.5))  # a topic that does not exist (yet)
        self._kick()

    async def _run_resets(self) -> None:
        backoff = max(self.config.retry_backoff_ms / 1000, 0.05)
        while not self._closed:
            pending = [(tp, s.reset, s.generation) for tp, s in self._states.items() if s.reset]
            if not pending:
                break
            failed = False
            for strategy, timestamp in (
                ("earliest", EARLIEST_TIMESTAMP),
                ("latest", LATEST_TIMESTAMP),
            ):
                group = [(tp, gen) for tp, s, gen in pending if s == strategy]
                if not group:
                    continue
                try:
                    offsets = await self._cluster.list_offsets(
                        [tp for tp, _ in group], timestamp, isolation_level=self.config.isolation
                    )
                except KafkaError as exc:
                    if exc.retriable:
                        log.info("offset reset (%s) will be retried: %s", strategy, exc)
                        failed = True
                        continue
                    for tp, gen in group:
                        state = self._states.get(tp)
                        if state is not None and state.generation == gen:
                            state.reset = None
                            state.error = exc
                    self._data.set()
                    continue
                for tp, gen in group:
                    state = self._states.get(tp)
                    if state is not None and state.generation == gen and state.reset == strategy:
                        state.position = state.fetch_offset = offsets[tp]
                        state.reset = None
            self._kick()
            if failed:
                await asyncio.sleep(backoff)

    # -- closing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("consumer is closed")

    async def close(self) -> None:
        """Close fetch sessions (best effort), cancel fetches, close connections."""
        if self._closed:
            return
        if self._group is not None:
            # Bounded: the blocking close waits 10 s for all of it.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(6.0):
                    await self.unsubscribe()
        self._closed = True
        tasks: list[asyncio.Future[Any]] = [
            t
            for t in (self._metadata_task, self._reset_task, self._auto_commit_task)
            if t is not None
        ]
        for node in self._nodes.values():
            tasks.extend(t for t in (node.in_flight, node.connecting) if t is not None)
            if node.wake is not None:
                node.wake.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._buffer.clear()
        # After the fetches in flight are gone: a parked fetch would otherwise
        # complete against the closed session and log a spurious error.
        await self._close_sessions()
        await self._cluster.close()

    async def _close_sessions(self) -> None:
        """Tell brokers to drop our sessions (epoch -1) instead of waiting for eviction."""
        waits = []
        for node in self._nodes.values():
            handler = node.handler
            conn = self._cluster.ready_connection(node.node_id)
            if handler.session_id == 0 or conn is None:
                continue
            version = conn.versions.get(ApiKey.FETCH, 0)
            if version < 7:
                continue
            req = FetchRequestData(
                version=min(version, LAST_NAME_ONLY_FETCH_VERSION),
                max_wait_ms=0,
                min_bytes=0,
                session_id=handler.session_id,
                session_epoch=FINAL_EPOCH,
            )
            with contextlib.suppress(KafkaError):
                waits.append(conn.send_fetch(req))
        if waits:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await asyncio.gather(*waits, return_exceptions=True)


class Consumer:
    """The blocking consumer: ``AsyncConsumer`` on a private event-loop thread.

    While the calling thread works on the records of one ``poll``, the loop
    thread already has the next fetch on the wire.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._consumer = AsyncConsumer(config, **kwargs)
        self.config = self._consumer.config
        self._thread = EventLoopThread("headwater-consumer")
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)

        return self._thread.run(call())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._consumer.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        result: set[TopicPartition] = self._call(self._consumer.assignment)
        return result

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: object | None = None,
    ) -> None:
        """See ``AsyncConsumer.subscribe``. The listener runs on the consumer's loop
        thread, so it must not call this blocking consumer's methods."""
        names = None if topics is None else list(topics)

        async def call() -> None:
            self._consumer.subscribe(names, pattern=pattern, listener=listener)

        self._thread.run(call())

    def unsubscribe(self) -> None:
        self._thread.run(self._consumer.unsubscribe())

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._thread.run(self._consumer.commit(None if offsets is None else dict(offsets)))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._consumer.committed(list(partitions)))

    def member_id(self) -> str:
        result: str = self._call(self._consumer.member_id)
        return result

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._call(self._consumer.seek, tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._call(
            self._consumer.seek_to_beginning, None if partitions is None else list(partitions)
        )

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._call(self._consumer.seek_to_end, None if partitions is None else list(partitions))

    def position(self, tp: TopicPartition) -> int:
        return self._thread.run(self._consumer.position(tp))

    def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        return self._thread.run(self._consumer.poll(timeout_s))

    def poll_arrow(
        self,
        timeout_s: float = 1.0,
        *,
        include_headers: bool = False,
        max_records: int | None = None,
    ) -> pa.Table:
        """Records fetched so far as one Arrow table; see ``AsyncConsumer.poll_arrow``."""
        return self._thread.run(
            self._consumer.poll_arrow(
                timeout_s, include_headers=include_headers, max_records=max_records
            )
        )

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._consumer.beginning_offsets(list(partitions)))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._thread.run(self._consumer.end_offsets(list(partitions)))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        return self._thread.run(self._consumer.offsets_for_times(dict(timestamps)))

    def partitions_for(self, topic: str) -> set[int] | None:
        return self._thread.run(self._consumer.partitions_for(topic))

    def topics(self) -> set[str]:
        return self._thread.run(self._consumer.topics())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._consumer.close(), timeout=10)
        finally:
            self._thread.stop()
