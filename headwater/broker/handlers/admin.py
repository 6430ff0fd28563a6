"""Topic auto-creation for the data path, and InitProducerId for idempotent producers.

Metadata and topic administration are ``cluster_admin``'s (one implementation,
since a single broker is a cluster of one). Handlers take a kio request entity
and return a plain dict shaped like the response schema;
``headwater.protocol.messages.build_response`` turns it into the entity of the
requested version, so one handler serves every version.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.config import BrokerConfig
from headwater.broker.connection import RequestContext
from headwater.broker.producer_ids import ProducerIdAllocator
from headwater.log.errors import InvalidTopicError
from headwater.log.log_directory import LogDirectory, TopicInfo, validate_topic_name
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

#: Topic-level keys DescribeConfigs reports, with the broker-level key they default to.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    # KIP-73: replicas whose replication is throttled ("partition:broker,..." or "*").
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    # log compaction (headwater.log.cleaner)
    "delete.retention.ms": "86400000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
}


def is_valid_topic_name(name: str | None) -> bool:
    try:
        validate_topic_name(name or "")
    except InvalidTopicError:
        return False
    return True


class AdminApis:
    """Auto-creation of topics a client names (Produce), and InitProducerId."""

    def __init__(
        self,
        config: BrokerConfig,
        logs: LogDirectory,
        producer_ids: ProducerIdAllocator,
        *,
        auto_create: Callable[[str], None],
        topic_exists: Callable[[str], bool],
        is_creating: Callable[[str], bool],
        wait_for_leaders: Callable[[list[str], int], Awaitable[bool]],
    ) -> None:
        self.config = config
        self.logs = logs
        self.producer_ids = producer_ids
        #: Starts creating a topic in the cluster's metadata (the controller elects leaders).
        self.auto_create = auto_create
        #: Whether the metadata knows the topic (this broker may hold no replica of it).
        self.topic_exists = topic_exists
        #: Whether an auto-creation of the topic is under way, and a wait for its leaders.
        self.is_creating = is_creating
        self.wait_for_leaders = wait_for_leaders

    @staticmethod
    def may_create(ctx: RequestContext, topic: str) -> bool:
        """Kafka: CREATE on the cluster, or on the topic itself."""
        return ctx.authorize(
            AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
        ) or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, topic)

    @staticmethod
    def may_on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
        return ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def ensure_topic(
        self, name: str, may_create: Callable[[], bool] = lambda: True
    ) -> TopicInfo | None:
        """Auto-create ``name`` when ``auto.create.topics.enable`` (and ACLs) allow it.

        ``may_create`` (the CREATE authorization) is asked only for a topic that
        does not exist, as in Kafka: asking for every request of an existing
        topic logged false "Denied Operation = CREATE" audit lines.
        """
        info = self.logs.topics().get(name)
        if info is not None or not self.config.auto_create_topics:
            return info
        if self.topic_exists(name) or not may_create():
            return None
        if is_valid_topic_name(name):
            self.auto_create(name)
        return None  # the client retries once the controller elected leaders

    # -- Idempotent producers ------------------------------------------------------

    def init_producer_id(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if req.transactional_id is None and not (
            self.may_on_cluster(ctx, AclOperation.IDEMPOTENT_WRITE)
            or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)
        ):
            # Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
            return {
                "error_code": int(E.cluster_authorization_failed),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        if req.transactional_id is not None:
            # Transactional producers are the transaction coordinator's
            # (headwater.broker.handlers.transactions); it takes over this API
            # once built, so one arriving here is early: retry shortly.
            return {
                "error_code": int(E.coordinator_not_available),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        existing = getattr(req, "producer_id", -1)
        epoch = getattr(req, "producer_epoch", -1)
        if existing >= 0 and 0 <= epoch < 32766:
            # KIP-360: a producer may bump its own epoch to recover from errors.
            return {"error_code": 0, "producer_id": existing, "producer_epoch": epoch + 1}
        return {"error_code": 0, "producer_id": self.producer_ids.allocate(), "producer_epoch": 0}
