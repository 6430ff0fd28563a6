"""Metadata and topic administration of a broker in a cluster.

Every broker answers from the same source, ZooKeeper, as seen through its
:class:`~headwater.cluster.cluster_view.ClusterView`: all live brokers, and
per partition the leader, leader epoch, replicas and ISR. CreateTopics and
DeleteTopics work on any broker: it writes the topic's znodes (as Kafka's
AdminZkClient does) and waits, up to the request timeout, until the
controller has elected leaders or finished the deletion, so a client that
creates a topic and produces at once finds a leader.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.config import BrokerConfig
from headwater.broker.connection import RequestContext
from headwater.broker.handlers.admin import TOPIC_CONFIG_DEFAULTS, AdminApis, is_valid_topic_name
from headwater.broker.topic_config_validation import (
    partitions_error,
    replication_factor_error,
    topic_configs_error,
)
from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.controller import add_partitions, create_topic
from headwater.cluster.leaders_awaited import LeadersAwaited, TopicPartition
from headwater.cluster.replica_placement import AdminOperationError, RackAwareMode
from headwater.cluster.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    validate_throttled_replicas,
)
from headwater.cluster.store import ClusterStore
from headwater.protocol.metadata_codec import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_response,
)
from headwater.security.acl import AclOperation

log = logging.getLogger(__name__)

#: Topics clients may use but not create (Kafka creates them on first use itself).
INTERNAL_PREFIX = "__"


def _bad_throttled_replicas(configs: dict[str, str]) -> str | None:
    for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        if key in configs:
            try:
                validate_throttled_replicas(configs[key])
            except ValueError as exc:
                return f"{key}: {exc}"
    return None


class ClusterAdminApis:
    """Metadata, CreateTopics, DeleteTopics for a broker whose truth is in ZooKeeper."""

    def __init__(
        self,
        config: BrokerConfig,
        view: ClusterView,
        store: ClusterStore,
    ) -> None:
        self.config = config
        self.view = view
        self.store = store
        self._creating: dict[str, asyncio.Future[tuple[int, str | None]]] = {}
        #: Metadata entries by topic, dropped when the view changes what they say.
        self._entries: dict[str, MetadataTopic] = {}
        view.on_change(self._forget_entries)

    def _forget_entries(self, change: ClusterChange) -> None:
        if change.brokers_changed:  # leaders and offline replicas depend on who is live
            self._entries.clear()
            return
        for name in change.topics_added | change.topics_removed:
            self._entries.pop(name, None)
        for name, _ in change.partitions_changed:
            self._entries.pop(name, None)

    # -- Metadata ------------------------------------------------------------------

    def _brokers(self, listener: str | None = None) -> list[MetadataBroker]:
        """Every live broker at its endpoint on ``listener`` (the one the client came in
        on, as Kafka answers); a broker registered without that listener keeps its
        default address."""
        out = []
        for _, b in sorted(self.view.brokers.items()):
            host, port = b.endpoint(listener) or (b.host, b.port)
            out.append(MetadataBroker(b.broker_id, host, port, b.rack))
        return out

    def topic_entry(self, name: str) -> MetadataTopic | None:
        entry = self._entries.get(name)
        if entry is None:
            entry = self._topic_entry(name)
            if entry is not None:
                self._entries[name] = entry
        return entry

    def _topic_entry(self, name: str) -> MetadataTopic | None:
        assignment = self.view.topics.get(name)
        if assignment is None:
            return None
        live = self.view.brokers
        states = self.view.partition_states
        parts: list[MetadataPartition] = []
        for index, replicas in sorted(assignment.replicas.items()):
            state = states.get((name, index))
            offline = tuple(r for r in replicas if r not in live)
            if state is None:
                parts.append(
                    MetadataPartition(
                        index, -1, -1, tuple(replicas), (), offline, int(E.leader_not_available)
                    )
                )
                continue
            leader = state.leader if state.leader in live else -1
            parts.append(
                MetadataPartition(
                    index,
                    leader,
                    state.leader_epoch,
                    tuple(replicas),
                    tuple(state.isr),
                    offline,
                    0 if leader >= 0 else int(E.leader_not_available),
                )
            )
        return MetadataTopic(
            0,
            name,
            assignment.topic_id,
            is_internal=name.startswith(INTERNAL_PREFIX),
            partitions=tuple(parts),
            encoded={},
        )

    def metadata(self, ctx: RequestContext, req: Any) -> bytes:
        version = ctx.header.api_version
        requested = req.topics
        allow_create = getattr(req, "allow_auto_topic_creation", True)
        topics: list[MetadataTopic] = []
        may_describe = ctx.topic_check(AclOperation.DESCRIBE)
        if requested is None or (version == 0 and not requested):
            # Topics the principal may not describe are left out, not errored.
            for name in sorted(self.view.topics):
                entry = self.topic_entry(name) if may_describe(name) else None
                if entry is not None:
                    topics.append(entry)
        else:
            for t in requested:
                name = t.name or ""
                topic_id = getattr(t, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    found = self._name_of(topic_id)
                    if found is None:
                        topics.append(MetadataTopic(int(E.unknown_topic_id), None, topic_id))
                        continue
                    name = found
                if not may_describe(name):
                    code = int(E.topic_authorization_failed)
                    topics.append(MetadataTopic(code, name, uuid.UUID(int=0)))
                    continue
                entry = self.topic_entry(name)
                if entry is not None:
                    topics.append(entry)
                elif not is_valid_topic_name(name):
                    topics.append(
                        MetadataTopic(int(E.invalid_topic_exception), name, uuid.UUID(int=0))
                    )
                elif (
                    allow_create
                    and self.config.auto_create_topics
                    and AdminApis.may_create(ctx, name)
                ):
                    self.auto_create(name)
                    topics.append(
                        MetadataTopic(int(E.leader_not_available), name, uuid.UUID(int=0))
                    )
                else:
                    topics.append(
                        MetadataTopic(int(E.unknown_topic_or_partition), name, uuid.UUID(int=0))
                    )
        controller = self.view.controller_id
        return encode_metadata_response(
            version,
            self._brokers(ctx.listener.name),
            topics,
            cluster_id=self.config.cluster_id,
            controller_id=controller if controller is not None else -1,
            throttle_time_ms=ctx.request_throttle_ms(),
        )

    def _name_of(self, topic_id: uuid.UUID) -> str | None:
        return next((n for n, a in self.view.topics.items() if a.topic_id == topic_id), None)

    def describe_cluster(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """Every live broker and the controller, as ZooKeeper says (DescribeCluster, KIP-700)."""
        controller = self.view.controller_id
        return {
            "throttle_time": 0,
            "error_code": 0,
            "cluster_id": self.config.cluster_id,
            "controller_id": controller if controller is not None else -1,
            "brokers": [
                {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in self._brokers(ctx.listener.name)
            ],
        }

    # -- topic creation ------------------------------------------------------------

    def replication_factor_for(self, name: str) -> int:
        if name.startswith(INTERNAL_PREFIX):
            return min(3, len(self.view.brokers)) or 1
        return self.config.default_replication_factor

    def auto_create(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
    ) -> None:
        """Start creating ``name`` (by default with the broker's defaults); clients retry.

        Placement is Kafka's ``RackAwareMode.Safe`` here: a cluster with mixed racks
        still gets its auto-created and internal topics, placed as if without racks.
        """
        if name in self._creating or name in self.view.topics:
            return
        future: asyncio.Future[tuple[int, str | None]] = asyncio.ensure_future(
            self._create(
                name,
                partitions or self.config.num_partitions,
                replication_factor or self.replication_factor_for(name),
                dict(configs or {}),
                mode=RackAwareMode.SAFE,
            )
        )
        self._creating[name] = future
        future.add_done_callback(lambda _: self._creating.pop(name, None))

    async def _create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        explicit: dict[int, list[int]] | None = None,
        *,
        mode: RackAwareMode = RackAwareMode.ENFORCED,
    ) -> tuple[int, str | None]:
        """Write the topic through the controller module's ``create_topic`` (Kafka's
        AdminZkClient: rack-aware placement, or ``explicit`` checked).

        (error code, message): as Kafka's ``ApiError.fromThrowable``, an unknown
        error goes without its message. Mixed racks (Kafka's AdminOperationException)
        keep Kafka's code, UNKNOWN_SERVER_ERROR, but carry Kafka's message: ZooKeeper-mode
        Kafka only logged it, which left the operator with "unknown server error".
        """
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(
                None,
                functools.partial(
                    create_topic,
                    self.store,
                    name,
                    partitions,
                    replication_factor,
                    configs,
                    replica_assignment=explicit or None,
                    rack_aware_mode=mode,
                ),
            )
        except Exception as exc:
            code = getattr(exc, "kafka_error_code", None)
            if code is None:
                log.warning("cannot create topic %s in ZooKeeper: %s", name, exc)
                return int(E.unknown_server_error), None
            if isinstance(exc, AdminOperationError):
                log.error("cannot create topic %s: %s", name, exc)
                return int(code), str(exc)
            if code == E.unknown_server_error:
                log.error("cannot create topic %s: %s", name, exc)
                return int(code), None
            log.info("cannot create topic %s: %s", name, exc)
            return int(code), str(exc)
        log.info(
            "created topic %s with %d partitions, replication factor %d",
            name,
            partitions,
            replication_factor,
        )
        return 0, None

    async def _wait_until(self, done: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while not done():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def is_creating(self, name: str) -> bool:
        """An auto-creation of ``name`` started here is under way."""
        return name in self._creating

    async def wait_for_leaders(self, names: list[str], timeout_ms: int) -> bool:
        """Until every partition of ``names`` has a leader (False: not within the timeout)."""
        return not await self._wait_for_first_leaders(names, timeout_ms)

    def _is_gone(self, name: str) -> bool:
        return name not in self.view.topics

    def _has_leaders(self, name: str) -> bool:
        assignment = self.view.topics.get(name)
        if assignment is None:
            return False
        states = self.view.partition_states
        return all(
            (s := states.get((name, p))) is not None and s.leader >= 0 for p in assignment.replicas
        )

    async def create_topics(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """Check every topic, write every valid one to ZooKeeper, then wait for all
        their leaders together (Kafka's ``ZkAdminManager.createTopics`` and one
        ``DelayedCreatePartitions``).

        Writing all topics before waiting matters at scale: waiting topic by topic
        made a 50-topic request last longer than the client's timeout, and the
        topics not yet written when the client gave up were never created.
        """
        timeout_ms = getattr(req, "timeout_ms", 30_000)
        names = [t.name for t in req.topics]
        duplicates = {n for n, count in collections.Counter(names).items() if count > 1}
        results: list[dict[str, Any]] = []
        to_create: list[tuple[dict[str, Any], int, int, dict[str, str], dict[int, list[int]]]] = []
        for t in req.topics:
            result: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            results.append(result)
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            num = t.num_partitions if t.num_partitions != -1 else self.config.num_partitions
            rf = (
                t.replication_factor
                if t.replication_factor != -1
                else self.config.default_replication_factor
            )
            explicit = {a.partition_index: list(a.broker_ids) for a in t.assignments or ()}
            if explicit:
                num = len(explicit)
                rf = len(next(iter(explicit.values())))
            live = len(self.view.brokers)
            if t.name in duplicates:  # as Kafka 4's controller answers
                result["error_code"] = int(E.invalid_request)
                result["error_message"] = "Duplicate topic name."
            elif not AdminApis.may_create(ctx, t.name):
                result["error_code"] = int(E.topic_authorization_failed)
            elif not is_valid_topic_name(t.name):
                result["error_code"] = int(E.invalid_topic_exception)
                result["error_message"] = f"illegal topic name {t.name!r}"
            elif t.name in self.view.topics:
                result["error_code"] = int(E.topic_already_exists)
                result["error_message"] = f"topic {t.name!r} already exists"
            elif bad_num := partitions_error(num):
                result["error_code"] = int(E.invalid_partitions)
                result["error_message"] = bad_num
            elif bad_rf := replication_factor_error(rf):
                result["error_code"] = int(E.invalid_replication_factor)
                result["error_message"] = bad_rf
            elif rf > live:
                result["error_code"] = int(E.invalid_replication_factor)
                result["error_message"] = (
                    f"replication factor {rf} is not between 1 and the {live} live brokers"
                )
            elif unknown := sorted(set(configs) - set(TOPIC_CONFIG_DEFAULTS)):
                result["error_code"] = int(E.invalid_config)
                result["error_message"] = f"unknown topic config {', '.join(unknown)}"
            elif bad := _bad_throttled_replicas(configs):
                result["error_code"] = int(E.invalid_config)
                result["error_message"] = bad
            elif bad_config := topic_configs_error(configs, self.config.log):
                result["error_code"] = int(E.invalid_config)
                result["error_message"] = bad_config
            elif req.validate_only:
                result.update(num_partitions=num, replication_factor=rf)
            else:
                to_create.append((result, num, rf, configs, explicit))
        # Every write is started before any is awaited: a client that gives up and
        # closes its connection cancels this request, not the writes under way.
        writes = [
            asyncio.ensure_future(self._create(r["name"], num, rf, configs, explicit))
            for r, num, rf, configs, explicit in to_create
        ]
        created = []
        for (result, num, rf, configs, _), write in zip(to_create, writes, strict=True):
            code, message = await write
            if code:
                result["error_code"] = code
                result["error_message"] = message
            else:
                created.append((result, num, rf, configs))
        # A client that would not wait (timeout 0) is answered at once, as Kafka does.
        late = (
            await self._wait_for_first_leaders([r["name"] for r, *_ in created], timeout_ms)
            if timeout_ms > 0
            else set()
        )
        for result, num, rf, configs in created:
            if result["name"] in late:
                result["error_code"] = int(E.request_timed_out)
                result["error_message"] = "topic created; leaders not elected in time"
                continue
            assignment = self.view.topics.get(result["name"])
            if assignment is not None:  # unknown yet only when the client would not wait
                result["topic_id"] = assignment.topic_id
            result.update(
                num_partitions=num,
                replication_factor=rf,
                configs=[
                    {
                        "name": k,
                        "value": v,
                        "read_only": False,
                        "config_source": 1 if k in configs else 5,
                        "is_sensitive": False,
                    }
                    for k, v in {**TOPIC_CONFIG_DEFAULTS, **configs}.items()
                ],
            )
        for result in results:
            if result["error_code"]:
                result.update(num_partitions=-1, replication_factor=-1)
        return {"topics": results}

    def _new_partitions(self, names: list[str]) -> list[TopicPartition]:
        """Every partition of ``names`` the view knows; a topic it does not know yet
        stands for its partition 0 until it shows up."""
        out: list[TopicPartition] = []
        for name in names:
            assignment = self.view.topics.get(name)
            if assignment is None:
                out.append((name, 0))
            else:
                out.extend((name, p) for p in assignment.replicas)
        return out

    def _partition_has_leader(self, key: TopicPartition) -> bool:
        assignment = self.view.topics.get(key[0])
        if assignment is None or key[1] not in assignment.replicas:
            return False
        state = self.view.partition_states.get(key)
        return state is not None and state.leader >= 0

    async def _wait_for_first_leaders(self, names: list[str], timeout_ms: int) -> set[str]:
        """Wait until every partition of ``names`` has had a leader, fed by the
        view's changes (O(changed), see ``LeadersAwaited``). Returns the topics
        still without leaders when ``timeout_ms`` ran out."""
        if not names:
            return set()
        awaited = LeadersAwaited(self._new_partitions(names), self._partition_has_leader)
        if awaited.done or timeout_ms <= 0:
            return awaited.topics_pending()

        all_there = asyncio.Event()
        # Topics the view does not know yet stand for their partition 0 (see
        # _new_partitions) until they show up. Only these are looked up on a
        # change, never the pending set: at 50,000 partitions rebuilding a set of
        # the pending topics on every change kept the loop at 100 %.
        unknown = {n for n in names if n not in self.view.topics}

        def on_change(change: ClusterChange) -> None:
            keys: list[TopicPartition] = list(change.partitions_changed)
            if unknown and change.topics_added:
                for name in change.topics_added & unknown:
                    unknown.discard(name)
                    partitions = self._new_partitions([name])  # all known now
                    awaited.pending.update(partitions)
                    keys.extend(partitions)
            if awaited.changed(keys):
                all_there.set()

        stop_listening = self.view.on_change(on_change)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await all_there.wait()
        except TimeoutError:
            pass
        finally:
            stop_listening()
        return awaited.topics_pending()

    async def create_partitions(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """Grow topics in ZooKeeper (Kafka's AdminZkClient.addPartitions), from any broker."""
        loop = asyncio.get_running_loop()
        timeout_ms = getattr(req, "timeout_ms", 30_000)
        results = []
        may_alter = ctx.topic_check(AclOperation.ALTER)
        for t in req.topics:
            entry: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            assignment = self.view.topics.get(t.name)
            if not may_alter(t.name):
                entry["error_code"] = int(E.topic_authorization_failed)
            elif assignment is None:
                entry["error_code"] = int(E.unknown_topic_or_partition)
            elif t.count <= len(assignment.replicas):
                entry["error_code"] = int(E.invalid_partitions)
                entry["error_message"] = (
                    f"topic has {len(assignment.replicas)} partitions; "
                    f"new count {t.count} must be larger"
                )
            elif not req.validate_only:
                explicit = None
                if t.assignments:
                    first_new = len(assignment.replicas)
                    explicit = {
                        first_new + i: list(a.broker_ids) for i, a in enumerate(t.assignments)
                    }
                try:
                    await loop.run_in_executor(
                        None,
                        functools.partial(
                            add_partitions,
                            self.store,
                            t.name,
                            t.count,
                            replica_assignment=explicit,
                        ),
                    )
                except Exception as exc:
                    code = int(getattr(exc, "kafka_error_code", E.unknown_server_error))
                    entry["error_code"] = code
                    if isinstance(exc, AdminOperationError):  # mixed racks: say why
                        log.error("cannot add partitions to %s: %s", t.name, exc)
                        entry["error_message"] = str(exc)
                    elif code == E.unknown_server_error:  # as Kafka: logged, not answered
                        log.error("cannot add partitions to %s: %s", t.name, exc)
                    else:
                        entry["error_message"] = str(exc)
                else:
                    if not await self._wait_until(
                        functools.partial(self._has_count, t.name, t.count), timeout_ms
                    ):
                        entry["error_code"] = int(E.request_timed_out)
            results.append(entry)
        return {"results": results}

    def _has_count(self, name: str, count: int) -> bool:
        assignment = self.view.topics.get(name)
        return (
            assignment is not None and len(assignment.replicas) >= count and self._has_leaders(name)
        )

    async def delete_topics(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        names: list[tuple[str | None, uuid.UUID | None]] = []
        if getattr(req, "topics", None):
            names = [(t.name, t.topic_id) for t in req.topics]
        else:
            names = [(n, None) for n in getattr(req, "topic_names", ())]
        timeout_ms = getattr(req, "timeout_ms", 30_000)
        loop = asyncio.get_running_loop()
        responses = []
        may_delete = ctx.topic_check(AclOperation.DELETE)
        for name, topic_id in names:
            if not name and topic_id is not None and topic_id.int != 0:
                name = self._name_of(topic_id)
            if name and not may_delete(name):
                code = int(E.topic_authorization_failed)
                responses.append({"name": name, "topic_id": topic_id, "error_code": code})
                continue
            assignment = self.view.topics.get(name) if name else None
            if name is None or assignment is None:
                code = E.unknown_topic_or_partition if name else E.unknown_topic_id
                responses.append({"name": name, "topic_id": topic_id, "error_code": int(code)})
                continue
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": assignment.topic_id,
                "error_code": 0,
            }
            try:
                await loop.run_in_executor(None, self.store.delete_topic, name)
            except Exception as exc:
                log.warning("cannot delete topic %s: %s", name, exc)
                entry["error_code"] = int(E.unknown_server_error)
            else:
                if not await self._wait_until(functools.partial(self._is_gone, name), timeout_ms):
                    entry["error_code"] = int(E.request_timed_out)
                else:
                    log.info("deleted topic %s", name)
            responses.append(entry)
        return {"responses": responses}
