"""The configs Headwater describes and lets clients alter, with Kafka's types and sources.

Admin tools read more than a value from DescribeConfigs: the type (to parse
it), the source (why it has this value: a topic override, a dynamic broker
setting, the static server.properties, or the default), the synonyms in
precedence order, and whether it is sensitive. This module is the one table
of those facts; the handler only looks things up in it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from headwater.log.config import LONG_MAX, LogConfig


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ ``config_type``."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs v1+ ``config_source``."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


def _ms(value: int | None) -> str:
    return str(LONG_MAX if value is None else value)


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """A topic config, the broker config it defaults to, and how to read that from LogConfig."""

    name: str
    broker_name: str
    type: ConfigType
    default: str
    from_log_config: Callable[[LogConfig], str] | None = None


TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef(
        "cleanup.policy", "log.cleanup.policy", ConfigType.LIST, "delete",
        lambda c: ",".join(c.cleanup_policy),
    ),
    TopicConfigDef("compression.type", "compression.type", ConfigType.STRING, "producer"),
    TopicConfigDef(
        "flush.messages", "log.flush.interval.messages", ConfigType.LONG, str(LONG_MAX),
        lambda c: str(c.flush_interval_messages),
    ),
    TopicConfigDef(
        "flush.ms", "log.flush.interval.ms", ConfigType.LONG, str(LONG_MAX),
        lambda c: _ms(c.flush_interval_ms),
    ),
    TopicConfigDef(
        "index.interval.bytes", "log.index.interval.bytes", ConfigType.INT, "4096",
        lambda c: str(c.index_interval_bytes),
    ),
    TopicConfigDef(
        "max.message.bytes", "message.max.bytes", ConfigType.INT, "1048588",
        lambda c: str(c.max_message_bytes),
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms",
        ConfigType.LONG, str(LONG_MAX), lambda c: str(c.message_timestamp_after_max_ms),
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms",
        ConfigType.LONG, str(LONG_MAX), lambda c: str(c.message_timestamp_before_max_ms),
    ),
    TopicConfigDef(
        "message.timestamp.type", "log.message.timestamp.type", ConfigType.STRING, "CreateTime",
        lambda c: ("CreateTime", "LogAppendTime")[c.message_timestamp_type],
    ),
    TopicConfigDef("min.insync.replicas", "min.insync.replicas", ConfigType.INT, "1"),
    TopicConfigDef(
        "retention.bytes", "log.retention.bytes", ConfigType.LONG, "-1",
        lambda c: str(c.retention_bytes),
    ),
    TopicConfigDef(
        "retention.ms", "log.retention.ms", ConfigType.LONG, "604800000",
        lambda c: str(c.retention_ms),
    ),
    TopicConfigDef(
        "segment.bytes", "log.segment.bytes", ConfigType.INT, "1073741824",
        lambda c: str(c.segment_bytes),
    ),
    TopicConfigDef(
        "segment.ms", "log.roll.ms", ConfigType.LONG, "604800000", lambda c: str(c.segment_ms)
    ),
    # -- log compaction (headwater.log.cleaner) --
    TopicConfigDef(
        "delete.retention.ms", "log.cleaner.delete.retention.ms", ConfigType.LONG, "86400000",
        lambda c: str(c.delete_retention_ms),
    ),
    TopicConfigDef(
        "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", ConfigType.LONG,
        str(LONG_MAX), lambda c: str(c.max_compaction_lag_ms),
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, "0.5",
        lambda c: str(c.min_cleanable_dirty_ratio),
    ),
    TopicConfigDef(
        "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", ConfigType.LONG, "0",
        lambda c: str(c.min_compaction_lag_ms),
    ),
)  # fmt: skip
TOPIC_CONFIG_BY_NAME = {d.name: d for d in TOPIC_CONFIGS}

#: Broker configs Kafka updates without a restart that Headwater applies live
#: too: the log defaults every topic inherits, and the connection limits.
DYNAMIC_BROKER_CONFIGS: dict[str, ConfigType] = {
    **{d.broker_name: d.type for d in TOPIC_CONFIGS if d.from_log_config is not None},
    "max.connections": ConfigType.INT,
    "max.connections.per.ip": ConfigType.INT,
    "max.connections.per.ip.overrides": ConfigType.STRING,
    "max.connection.creation.rate": ConfigType.INT,
    # the log cleaner's threads (headwater.log.cleaner_manager), live as in Kafka
    "log.cleaner.threads": ConfigType.INT,
    "log.cleaner.io.max.bytes.per.second": ConfigType.DOUBLE,
    "log.cleaner.dedupe.buffer.size": ConfigType.LONG,
    "log.cleaner.backoff.ms": ConfigType.LONG,
    # KIP-73 replication throttles (bytes/s), applied to the replica fetchers at once.
    "leader.replication.throttled.rate": ConfigType.LONG,
    "follower.replication.throttled.rate": ConfigType.LONG,
    # fetchers per leader (headwater.cluster.fetcher_assignment), resized live as in Kafka
    "num.replica.fetchers": ConfigType.INT,
}

#: A listener's SSL keys Kafka reloads without a restart, per broker only, as
#: ``listener.name.<listener>.<key>``: the keystore and truststore, applied to
#: the listener's new connections (headwater.security.tls.ListenerTlsContexts).
LISTENER_SSL_CONFIGS: dict[str, ConfigType] = {
    "ssl.keystore.location": ConfigType.STRING,
    "ssl.keystore.password": ConfigType.PASSWORD,
    "ssl.key.password": ConfigType.PASSWORD,
    "ssl.keystore.key": ConfigType.PASSWORD,
    "ssl.keystore.certificate.chain": ConfigType.PASSWORD,
    "ssl.truststore.location": ConfigType.STRING,
}
LISTENER_PREFIX = "listener.name."


def listener_ssl_config(name: str) -> tuple[str, str] | None:
    """(listener, ssl key) of a dynamic listener SSL config name, else None."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, key = name[len(LISTENER_PREFIX) :].partition(".")
    if not listener or key not in LISTENER_SSL_CONFIGS:
        return None
    return listener, key


def dynamic_broker_config_type(name: str) -> ConfigType | None:
    """The type of a broker config that can be altered dynamically, else None."""
    kind = DYNAMIC_BROKER_CONFIGS.get(name)
    if kind is None and (parsed := listener_ssl_config(name)) is not None:
        kind = LISTENER_SSL_CONFIGS[parsed[1]]
    return kind


#: Read-only broker configs DescribeConfigs also reports, with their types.
STATIC_BROKER_CONFIGS: dict[str, ConfigType] = {
    "auto.create.topics.enable": ConfigType.BOOLEAN,
    "broker.rack": ConfigType.STRING,
    # Where this broker's Prometheus /metrics is served: how a console or any
    # tool finds every broker's endpoint from one bootstrap address.
    "headwater.metrics.listen": ConfigType.STRING,
    "log.cleaner.enable": ConfigType.BOOLEAN,
    "log.dir.free.space.min.bytes": ConfigType.LONG,
    "headwater.log.scrub.bytes.per.second": ConfigType.LONG,
    "headwater.log.scrub.pass.interval.ms": ConfigType.LONG,
    # A status, not a setting (read-only): what the scrubber found, for `headwater health`.
    "headwater.log.corrupt.partitions": ConfigType.STRING,
    "connections.max.idle.ms": ConfigType.LONG,
    "fetch.max.bytes": ConfigType.INT,
    "log.dirs": ConfigType.STRING,
    "node.id": ConfigType.INT,
    "num.partitions": ConfigType.INT,
    "queued.max.request.bytes": ConfigType.LONG,
    "replica.selector.class": ConfigType.CLASS,
    "socket.request.max.bytes": ConfigType.INT,
    "transaction.state.log.num.partitions": ConfigType.INT,
    "transaction.state.log.replication.factor": ConfigType.SHORT,
    "transaction.state.log.min.isr": ConfigType.INT,
    "transaction.max.timeout.ms": ConfigType.INT,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ConfigType.INT,
    "transactional.id.expiration.ms": ConfigType.INT,
    "transaction.remove.expired.transaction.cleanup.interval.ms": ConfigType.INT,
}

#: Names whose values are secrets: described with a null value and is_sensitive
#: (Kafka's PASSWORD-typed configs; a keystore's location is not one).
SENSITIVE_MARKERS = ("password", "secret", "sasl.jaas.config")
SENSITIVE_SUFFIXES = (
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates",
)


def is_sensitive(name: str) -> bool:
    return any(marker in name for marker in SENSITIVE_MARKERS) or name.endswith(SENSITIVE_SUFFIXES)
