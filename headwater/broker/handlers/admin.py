"""Cold-path APIs: Metadata, topic administration, configs, producer ids.

Each handler takes a kio request entity and returns a plain dict shaped
like the response schema; ``headwater.protocol.messages.build_response``
turns it into the entity of the requested version (fields a version lacks
are dropped, missing ones defaulted), so one handler serves every version.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode as E

from headwater.broker.config import BrokerConfig
from headwater.broker.connection import RequestContext
from headwater.broker.producer_ids import ProducerIdAllocator
from headwater.broker.topic_config_validation import (
    partitions_error,
    replication_factor_error,
    topic_configs_error,
)
from headwater.log.errors import InvalidTopicError, TopicExistsError
from headwater.log.log_directory import LogDirectory, TopicInfo, validate_topic_name
from headwater.protocol.metadata_codec import (
    MetadataBroker,
    MetadataTopic,
    encode_metadata_response,
)
from headwater.records.errors import KafkaApiError
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
    """Metadata, CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, InitProducerId."""

    def __init__(
        self,
        config: BrokerConfig,
        logs: LogDirectory,
        producer_ids: ProducerIdAllocator,
    ) -> None:
        self.config = config
        self.logs = logs
        self.producer_ids = producer_ids
        #: In a cluster, topics are created in ZooKeeper, not here: this starts that.
        self.cluster_auto_create: Callable[[str], None] | None = None
        #: In a cluster, whether ZooKeeper knows the topic (this broker may hold no replica).
        self.cluster_topic_exists: Callable[[str], bool] = lambda _name: False

    # -- Metadata -------------------------------------------------------------

    def _topic_entry(self, info: TopicInfo) -> MetadataTopic:
        return MetadataTopic(
            error_code=0,
            name=info.name,
            topic_id=info.topic_id,
            is_internal=info.name.startswith("__"),
            num_partitions=info.num_partitions,
            leader=self.config.node_id,
        )

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
        if self.cluster_topic_exists(name) or not may_create():
            return None
        if self.cluster_auto_create is not None:
            if is_valid_topic_name(name):
                self.cluster_auto_create(name)
            return None  # the client retries once the controller elected leaders
        try:
            info = self.logs.create_topic(name, self.config.num_partitions)
        except TopicExistsError:
            return self.logs.topics().get(name)
        except InvalidTopicError:
            return None
        log.info("auto-created topic %s with %d partitions", name, info.num_partitions)
        return info

    def metadata(self, ctx: RequestContext, req: Any) -> bytes:
        """Encoded by hand (``metadata_codec``): at 100k partitions it is a hot path."""
        version = ctx.header.api_version
        requested = req.topics
        allow_create = getattr(req, "allow_auto_topic_creation", True)
        topics: list[MetadataTopic] = []
        may_describe = ctx.topic_check(AclOperation.DESCRIBE)
        if requested is None or (version == 0 and not requested):
            infos: Iterable[TopicInfo] = sorted(self.logs.topics().values(), key=lambda t: t.name)
            # Topics the principal may not describe are left out, not errored.
            topics = [self._topic_entry(i) for i in infos if may_describe(i.name)]
        else:
            for t in requested:
                name = t.name
                topic_id = getattr(t, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    by_id = self.logs.topic_by_id(topic_id)
                    if by_id is None:
                        topics.append(MetadataTopic(int(E.unknown_topic_id), None, topic_id))
                    elif not may_describe(by_id.name):
                        code = int(E.topic_authorization_failed)
                        topics.append(MetadataTopic(code, None, topic_id))
                    else:
                        topics.append(self._topic_entry(by_id))
                    continue
                if not may_describe(name):
                    code = int(E.topic_authorization_failed)
                    topics.append(MetadataTopic(code, name, uuid.UUID(int=0)))
                    continue
                info = self.logs.topics().get(name)
                if info is None and allow_create:
                    info = self.ensure_topic(name, partial(self.may_create, ctx, name))
                if info is None:
                    valid = is_valid_topic_name(name)
                    code = E.unknown_topic_or_partition if valid else E.invalid_topic_exception
                    topics.append(MetadataTopic(int(code), name, uuid.UUID(int=0)))
                else:
                    topics.append(self._topic_entry(info))
        # The address of the listener the request came in on (Kafka's per-listener endpoints).
        host, port = ctx.listener.advertised if ctx.listener.port else self.config.advertised
        return encode_metadata_response(
            version,
            [MetadataBroker(self.config.node_id, host, port)],
            topics,
            cluster_id=self.config.cluster_id,
            controller_id=self.config.node_id,
            throttle_time_ms=ctx.request_throttle_ms(),
        )

    def describe_cluster(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        """One broker: it is the whole cluster and its controller, at the address of the
        listener the request came in on (as Metadata: a SASL_SSL client stays on SASL_SSL)."""
        host, port = ctx.listener.advertised if ctx.listener.port else self.config.advertised
        return {
            "throttle_time": 0,
            "error_code": 0,
            "cluster_id": self.config.cluster_id,
            "controller_id": self.config.node_id,
            "brokers": [{"broker_id": self.config.node_id, "host": host, "port": port}],
        }

    # -- Topic administration ---------------------------------------------------

    def create_topics(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        results = []
        for t in req.topics:
            result: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
            num = t.num_partitions if t.num_partitions != -1 else self.config.num_partitions
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            if t.assignments:
                num = len(t.assignments)
            rf = t.replication_factor if t.replication_factor != -1 else 1
            if not self.may_create(ctx, t.name):
                result["error_code"] = int(E.topic_authorization_failed)
            elif bad_rf := replication_factor_error(rf):
                result["error_code"] = int(E.invalid_replication_factor)
                result["error_message"] = bad_rf
            elif rf != 1:
                result["error_code"] = int(E.invalid_replication_factor)
                result["error_message"] = (
                    f"replication factor {rf} is larger than the 1 available broker"
                )
            elif bad_num := partitions_error(num):
                result["error_code"] = int(E.invalid_partitions)
                result["error_message"] = bad_num
            elif unknown := sorted(set(configs) - set(TOPIC_CONFIG_DEFAULTS)):
                result["error_code"] = int(E.invalid_config)
                result["error_message"] = f"unknown topic config {', '.join(unknown)}"
            elif bad_config := topic_configs_error(configs, self.config.log):
                result["error_code"] = int(E.invalid_config)
                result["error_message"] = bad_config
            elif t.name in self.logs.topics():
                result["error_code"] = int(E.topic_already_exists)
                result["error_message"] = f"topic {t.name!r} already exists"
            elif not is_valid_topic_name(t.name):
                result["error_code"] = int(E.invalid_topic_exception)
                result["error_message"] = f"illegal topic name {t.name!r}"
            elif req.validate_only:
                result.update(num_partitions=num, replication_factor=1)
            else:
                try:
                    info = self.logs.create_topic(t.name, num, configs)
                except KafkaApiError as exc:  # exists, bad name, bad config: never a dropped link
                    result["error_code"] = int(exc.kafka_error_code)
                    result["error_message"] = str(exc)
                else:
                    log.info("created topic %s with %d partitions", t.name, num)
                    result.update(
                        topic_id=info.topic_id,
                        num_partitions=num,
                        replication_factor=1,
                        configs=[
                            {
                                "name": k,
                                "value": v,
                                "read_only": False,
                                "config_source": 1 if k in configs else 5,
                                "is_sensitive": False,
                            }
                            for k, v in self.topic_configs(info).items()
                        ],
                    )
            if result["error_code"]:
                result.update(num_partitions=-1, replication_factor=-1)
            results.append(result)
        return {"topics": results}

    def delete_topics(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        names: list[tuple[str | None, uuid.UUID | None]] = []
        if getattr(req, "topics", None):
            names = [(t.name, t.topic_id) for t in req.topics]
        else:
            names = [(n, None) for n in getattr(req, "topic_names", ())]
        responses = []
        may_delete = ctx.topic_check(AclOperation.DELETE)
        for name, topic_id in names:
            info = None
            if name:
                info = self.logs.topics().get(name)
            elif topic_id is not None and topic_id.int != 0:
                info = self.logs.topic_by_id(topic_id)
            target = name or (info.name if info is not None else None)
            if target and not may_delete(target):
                code = int(E.topic_authorization_failed)
                responses.append({"name": name, "topic_id": topic_id, "error_code": code})
                continue
            if info is None:
                code = E.unknown_topic_or_partition if name else E.unknown_topic_id
                responses.append({"name": name, "topic_id": topic_id, "error_code": int(code)})
                continue
            self.logs.delete_topic(info.name)
            log.info("deleted topic %s", info.name)
            responses.append({"name": info.name, "topic_id": info.topic_id, "error_code": 0})
        return {"responses": responses}

    def create_partitions(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        results = []
        may_alter = ctx.topic_check(AclOperation.ALTER)
        for t in req.topics:
            info = self.logs.topics().get(t.name)
            if not may_alter(t.name):
                results.append({"name": t.name, "error_code": int(E.topic_authorization_failed)})
            elif info is None:
                results.append({"name": t.name, "error_code": int(E.unknown_topic_or_partition)})
            elif t.count <= info.num_partitions:
                results.append(
                    {
                        "name": t.name,
                        "error_code": int(E.invalid_partitions),
                        "error_message": (
                            f"topic has {info.num_partitions} partitions; "
                            f"new count {t.count} must be larger"
                        ),
                    }
                )
            else:
                if not req.validate_only:
                    self.logs.create_partitions(t.name, t.count)
                results.append({"name": t.name, "error_code": 0, "error_message": None})
        return {"results": results}

    # -- Configs -----------------------------------------------------------------

    def topic_configs(self, info: TopicInfo) -> dict[str, str]:
        merged = dict(TOPIC_CONFIG_DEFAULTS)
        merged.update(info.configs)
        return merged

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
