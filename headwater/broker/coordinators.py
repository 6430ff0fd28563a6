"""The group and transaction coordinators, wired once over the partitions of their
state topics (``__consumer_offsets``, ``__transaction_state``) that this broker leads.

Leadership of a state partition loads its groups or transactional ids, and
losing it unloads them; writes wait for the partition's ISR. A single broker is
a cluster of one, so it leads (and loads) every partition; the internal topics
are created on first need (FindCoordinator), as Kafka does, and at start in a
cluster of one so that the first client finds its coordinator ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from headwater.broker.config import BrokerConfig
from headwater.broker.handlers.cluster_admin import ClusterAdminApis
from headwater.broker.internal_topics import INTERNAL_TOPIC_CONFIGS, compacted_configs
from headwater.cluster.cluster_view import ClusterChange
from headwater.cluster.node import ClusterNode
from headwater.coordinator.partition_state_log import OFFSETS_TOPIC, PartitionStateLog
from headwater.coordinator.runtime import StateTopicRuntime
from headwater.group.assignors import ASSIGNORS
from headwater.group.consumer_group_coordinator import MIGRATION_POLICIES, ConsumerGroupConfig
from headwater.group.coordinator import GroupConfig
from headwater.group.service import GroupService
from headwater.group.topics_image import ClusterTopics
from headwater.log.log_directory import LogDirectory
from headwater.txn import TRANSACTION_STATE_TOPIC
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarkerWriter
from headwater.txn.service import TransactionCoordinatorService, TxnConfig

log = logging.getLogger(__name__)


def advertise_coordinator(response: dict[str, Any], node_id: int, host: str, port: int) -> None:
    """When this broker is the coordinator, name the listener the client came in on.

    Another broker (in a cluster) keeps the address it registered.
    """
    for answer in response.get("coordinators", [response]):
        if answer.get("node_id", -1) == node_id:
            answer["host"], answer["port"] = host, port


def advertise_peer_coordinators(
    response: dict[str, Any], cluster: ClusterNode, listener: str
) -> None:
    """A peer coordinator at its endpoint on the client's listener, as in Metadata."""
    brokers = cluster.view.brokers
    for answer in response.get("coordinators", [response]):
        registration = brokers.get(answer.get("node_id", -1))
        endpoint = registration.endpoint(listener) if registration is not None else None
        if endpoint is not None:
            answer["host"], answer["port"] = endpoint


class Coordinators:
    """Builds the coordinator services over this broker's cluster membership."""

    def __init__(
        self,
        config: BrokerConfig,
        cluster: ClusterNode,
        logs: LogDirectory,
        cluster_admin: ClusterAdminApis,
        spawn: Callable[[Awaitable[None], str], None],
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.logs = logs
        self.cluster_admin = cluster_admin
        self._spawn = spawn

    def group_config(self) -> GroupConfig:
        c = self.config
        return GroupConfig(
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            max_size=c.group_max_size,
            max_metadata_bytes=c.offset_metadata_max_bytes,
            empty_group_retention_ms=c.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=c.offsets_retention_check_interval_ms,
        )

    def consumer_group_config(self) -> ConsumerGroupConfig:
        """KIP-848 settings, checked as Kafka checks them at start."""
        c = self.config
        low, high = c.group_consumer_min_session_timeout_ms, c.group_consumer_max_session_timeout_ms
        if not low <= c.group_consumer_session_timeout_ms <= high:
            raise ValueError(
                f"group.consumer.session.timeout.ms={c.group_consumer_session_timeout_ms} must "
                f"be within group.consumer.min.session.timeout.ms={low} and "
                f"group.consumer.max.session.timeout.ms={high}"
            )
        if c.group_consumer_heartbeat_interval_ms >= c.group_consumer_session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be lower than "
                "group.consumer.session.timeout.ms"
            )
        if c.group_consumer_migration_policy not in MIGRATION_POLICIES:
            raise ValueError(
                f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}"
            )
        unknown = [name for name in c.group_consumer_assignors if name not in ASSIGNORS]
        if unknown or not c.group_consumer_assignors:
            raise ValueError(
                f"group.consumer.assignors must name assignors among {', '.join(ASSIGNORS)}"
                + (f", not {', '.join(unknown)}" if unknown else "")
            )
        return ConsumerGroupConfig(
            heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=c.group_consumer_session_timeout_ms,
            max_size=c.group_consumer_max_size,
            assignors=c.group_consumer_assignors,
            migration_policy=c.group_consumer_migration_policy,
        )

    def _runtime(
        self, topic: str, default_partitions: int, create: Callable[[int], None], timeout_ms: int
    ) -> StateTopicRuntime:
        cluster = self.cluster
        return StateTopicRuntime(
            topic,
            default_partitions,
            cluster.view,
            cluster.replicas,
            self.logs,
            create=create,
            write_timeout_s=timeout_ms / 1000,
            spawn=self._spawn,
        )

    def group_service(self, host: str, port: int) -> GroupService:
        """A group's coordinator leads its ``__consumer_offsets`` partition.

        The offsets topic is created on first need (FindCoordinator), like
        Kafka, with ``offsets.topic.replication.factor`` replicas, or as many
        as there are live brokers when fewer. Leadership of its partitions
        loads and unloads their groups; commits are answered once the ISR has
        them.
        """
        c = self.config
        view = self.cluster.view

        def create(num_partitions: int) -> None:
            rf = max(1, min(c.offsets_topic_replication_factor, len(view.brokers)))
            self.cluster_admin.auto_create(
                OFFSETS_TOPIC, num_partitions, rf, configs=dict(INTERNAL_TOPIC_CONFIGS)
            )

        runtime = self._runtime(
            OFFSETS_TOPIC, c.offsets_topic_num_partitions, create, c.offsets_commit_timeout_ms
        )
        groups = GroupService.create(
            lambda topic, partition: self.logs.existing_log(topic, partition) is not None,
            num_partitions=runtime.num_partitions,
            node_id=c.node_id,
            host=host,
            port=port,
            coordinator_of=runtime.coordinator_of,
            wait_replicated=runtime.wait_replicated,
            config=self.group_config(),
            consumer_config=self.consumer_group_config(),
            topics=ClusterTopics(view),
        )

        def topics_changed(change: ClusterChange) -> None:
            if change.topics_added or change.topics_removed or change.partitions_changed:
                groups.topics_changed()

        view.on_change(topics_changed)

        async def load(partition: int, state_log: PartitionStateLog, _epoch: int) -> None:
            await groups.load_partition(partition, state_log)

        runtime.follow_leadership(load, groups.unload_partition, "load")
        return groups

    def txn_config(self, num_partitions: int) -> TxnConfig:
        c = self.config
        return TxnConfig(
            num_partitions=num_partitions,
            max_timeout_ms=c.transaction_max_timeout_ms,
            abort_interval_ms=c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            expiration_ms=c.transactional_id_expiration_ms,
            removal_interval_ms=c.transaction_remove_expired_transaction_cleanup_interval_ms,
        )

    def transaction_service(
        self,
        host: str,
        port: int,
        new_producer_id: Callable[[], int],
        txn_markers: Callable[[], TxnMarkerWriter],
    ) -> TransactionCoordinatorService:
        """An id's coordinator leads its ``__transaction_state``
        partition; the coordinator epoch is that partition's leader epoch.

        The topic is created on first need (FindCoordinator) with
        ``transaction.state.log.replication.factor`` replicas and
        ``transaction.state.log.min.isr``, both capped by the live brokers.
        """
        c = self.config
        view = self.cluster.view

        def create(num_partitions: int) -> None:
            rf = max(1, min(c.transaction_state_log_replication_factor, len(view.brokers)))
            min_isr = max(1, min(c.transaction_state_log_min_isr, rf))
            self.cluster_admin.auto_create(
                TRANSACTION_STATE_TOPIC,
                num_partitions,
                rf,
                configs={**INTERNAL_TOPIC_CONFIGS, "min.insync.replicas": str(min_isr)},
            )

        runtime = self._runtime(
            TRANSACTION_STATE_TOPIC,
            c.transaction_state_log_num_partitions,
            create,
            c.request_timeout_ms,
        )

        def leader_of(topic: str, partition: int) -> int | None:
            state = view.partition_states.get((topic, partition))
            return None if state is None or state.leader < 0 else state.leader

        service = TransactionCoordinatorService(
            node_id=c.node_id,
            host=host,
            port=port,
            config=self.txn_config(runtime.num_partitions),
            new_producer_id=new_producer_id,
            markers=MarkerSender(
                c.node_id,
                txn_markers,
                leader_of=leader_of,
                partition_exists=lambda t, p: (t, p) in view.partition_states,
                connector=self.cluster.replicas.connector,
            ),
            coordinator_of=runtime.coordinator_of,
            wait_replicated=runtime.wait_replicated,
        )
        runtime.follow_leadership(service.load_partition, service.unload_partition, "txn-load")
        return service

    async def compact_internal_topics(self) -> None:
        """Internal topics from before Headwater compacted them switch to
        ``cleanup.policy=compact`` (through the metadata, so every replica follows)."""
        loop = asyncio.get_running_loop()
        cluster = self.cluster
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            assignment = cluster.view.topics.get(topic)
            if assignment is None:
                continue
            configs = compacted_configs(assignment.configs)
            if configs is None:
                continue
            await loop.run_in_executor(None, cluster.store.set_topic_configs, topic, configs)
            log.info(
                "%s switched to cleanup.policy=compact (was %s)",
                topic,
                assignment.configs.get("cleanup.policy", "the broker default"),
            )

    async def create_internal_topics(self) -> None:
        """A cluster of one creates ``__consumer_offsets`` and ``__transaction_state`` at
        start, so the first group or transactional producer finds its coordinator ready
        (a cluster creates them on first need, as Kafka does)."""
        c = self.config
        cluster = self.cluster
        wanted = (
            (OFFSETS_TOPIC, c.offsets_topic_num_partitions, INTERNAL_TOPIC_CONFIGS),
            (
                TRANSACTION_STATE_TOPIC,
                c.transaction_state_log_num_partitions,
                {**INTERNAL_TOPIC_CONFIGS, "min.insync.replicas": "1"},
            ),
        )
        admin = self.cluster_admin
        for topic, partitions, configs in wanted:
            if topic not in cluster.view.topics:
                admin.auto_create(topic, partitions, 1, configs=dict(configs))
        await admin.wait_for_leaders([topic for topic, _, _ in wanted], c.request_timeout_ms)
