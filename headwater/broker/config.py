"""Broker configuration under Kafka's own key names.

Operators already know ``log.dirs``, ``listeners`` and ``fetch.max.bytes``;
Headwater reads the same keys from a ``server.properties`` file and from
``--override key=value`` flags, so an existing Kafka config mostly works.
Keys Headwater does not know are kept (and logged) rather than rejected,
because real Kafka property files carry many keys irrelevant here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headwater.addresses import split_host_port
from headwater.broker.connection_limits import ConnectionLimits
from headwater.fetch.replica_selector import parse_replica_selector
from headwater.log.cleaner_manager import CleanerConfig
from headwater.log.config import LogConfig
from headwater.security.config import SecurityConfig, is_security_key
from headwater.security.listeners import Listener, SecurityProtocol, parse_listeners

log = logging.getLogger(__name__)

DEFAULT_PORT = 9092


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-style ``key=value`` / ``key: value`` lines (comments with # or !)."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                props[key.strip()] = value.strip()
                break
        else:
            props[line] = ""
    return props


def parse_host_port(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """The first listener of ``text``; an empty host means every interface."""
    host, port = split_host_port(text.split(",")[0], default_port)
    return host or "0.0.0.0", port


#: Kafka's class names for the server-side assignors, accepted for their short names.
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list, trimmed, lower-case where Kafka compares so."""
    return tuple(name.strip() for name in value.split(",") if name.strip())


def _bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker reads at start-up; immutable afterwards."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertised_host: str | None = None
    advertised_port: int | None = None
    data_dir: Path = Path("headwater-data")
    #: ``log.dirs=A,B,C``: B and C (JBOD); the first is ``data_dir``.
    extra_data_dirs: tuple[Path, ...] = ()
    node_id: int = 0
    cluster_id: str = "headwater-cluster"
    #: ``broker.rack``: registered with the broker (KIP-36); None for no rack.
    broker_rack: str | None = None
    #: ``replica.selector.class``: the KIP-392 selector's short name ("rack-aware"), or None.
    replica_selector: str | None = None
    num_partitions: int = 1
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 104_857_600
    fetch_max_bytes: int = 57_671_680
    zero_copy: bool = True
    event_loop: str = "asyncio"
    max_incremental_fetch_session_cache_slots: int = 1000
    min_incremental_fetch_session_eviction_ms: int = 120_000
    min_incremental_fetch_session_size: int = 0
    incremental_fetch_session_consumer_cache_slots: int | None = None
    max_incremental_fetch_session_cache_slots_per_principal: int | None = None
    fetch_session_retransmit: bool = True
    fetch_session_slots_per_client: int | None = None
    # headwater.malloc.trim.interval.ms: how often free C-heap pages go back to
    # the system (headwater.malloc_policy); 0 never.
    malloc_trim_interval_ms: int = 30_000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    # KIP-848 consumer groups: group.coordinator.rebalance.protocols, group.consumer.*
    group_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_migration_policy: str = "bidirectional"
    offset_metadata_max_bytes: int = 4096
    # Partitions of __consumer_offsets when it is created (an existing topic keeps its count).
    offsets_topic_num_partitions: int = 50
    # Stored for the cluster mode; a single broker has one replica of everything.
    offsets_topic_replication_factor: int = 3
    offsets_retention_minutes: int = 10_080  # committed offsets of empty groups (KIP-211)
    offsets_retention_check_interval_ms: int = 600_000
    metrics_host: str | None = None
    metrics_port: int | None = None
    housekeeping_interval_ms: int = 1000
    #: headwater.log.scrub.bytes.per.second: the scrubber's read rate; 0: off.
    log_scrub_bytes_per_second: int = 4 << 20
    #: headwater.log.scrub.pass.interval.ms: the rest between two scrubber passes.
    log_scrub_pass_interval_ms: int = 60_000
    retention_check_interval_ms: int = 300_000
    # -- cluster mode (ZooKeeper); without zookeeper.connect this is one broker --------
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int | None = None
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    #: Kafka's controlled shutdown: move leaderships away before stopping (defaults as Kafka's).
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5_000
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    num_replica_fetchers: int = 1
    replica_fetch_sessions_enable: bool = True
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    request_timeout_ms: int = 30_000
    offsets_commit_timeout_ms: int = 5000
    # KIP-73 replication throttles (bytes/s; None: unthrottled, Kafka's Long.MAX_VALUE).
    leader_replication_throttled_rate: int | None = None
    follower_replication_throttled_rate: int | None = None
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    # -- transactions (the transaction coordinator; Kafka's names and defaults) --------
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    log: LogConfig = field(default_factory=LogConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)  # log.cleaner.*
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: Every listener with its security protocol; empty means one PLAINTEXT on host:port.
    listeners: tuple[Listener, ...] = ()
    security: SecurityConfig = field(default_factory=SecurityConfig)
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.offsets_topic_num_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be at least 1")
        if self.offsets_topic_replication_factor < 1:
            raise ValueError("offsets.topic.replication.factor must be at least 1")
        for name, value in (
            ("transaction.state.log.num.partitions", self.transaction_state_log_num_partitions),
            (
                "transaction.state.log.replication.factor",
                self.transaction_state_log_replication_factor,
            ),
            ("transaction.state.log.min.isr", self.transaction_state_log_min_isr),
            ("transaction.max.timeout.ms", self.transaction_max_timeout_ms),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                self.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            ),
            ("transactional.id.expiration.ms", self.transactional_id_expiration_ms),
            (
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                self.transaction_remove_expired_transaction_cleanup_interval_ms,
            ),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1")

    @property
    def all_listeners(self) -> tuple[Listener, ...]:
        if self.listeners:
            return self.listeners
        return (
            Listener(
                "PLAINTEXT",
                SecurityProtocol.PLAINTEXT,
                self.host,
                self.port,
                self.advertised_host,
                self.advertised_port,
            ),
        )

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, self.advertised_port or self.port

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Build a config from Kafka-named keys; unknown keys are kept in ``extra``."""
        kw: dict[str, object] = {}
        extra: dict[str, str] = {}
        ints = {
            "node.id": "node_id",
            "broker.id": "node_id",
            "num.partitions": "num_partitions",
            "socket.request.max.bytes": "socket_request_max_bytes",
            "fetch.max.bytes": "fetch_max_bytes",
            "max.incremental.fetch.session.cache.slots": (
                "max_incremental_fetch_session_cache_slots"
            ),
            "min.incremental.fetch.session.eviction.ms": (
                "min_incremental_fetch_session_eviction_ms"
            ),
            "min.incremental.fetch.session.size": "min_incremental_fetch_session_size",
            "incremental.fetch.session.consumer.cache.slots": (
                "incremental_fetch_session_consumer_cache_slots"
            ),
            "max.incremental.fetch.session.cache.slots.per.principal": (
                "max_incremental_fetch_session_cache_slots_per_principal"
            ),
            "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
            "group.min.session.timeout.ms": "group_min_session_timeout_ms",
            "group.max.session.timeout.ms": "group_max_session_timeout_ms",
            "group.max.size": "group_max_size",
            "group.consumer.heartbeat.interval.ms": "group_consumer_heartbeat_interval_ms",
            "group.consumer.session.timeout.ms": "group_consumer_session_timeout_ms",
            "group.consumer.min.session.timeout.ms": "group_consumer_min_session_timeout_ms",
            "group.consumer.max.session.timeout.ms": "group_consumer_max_session_timeout_ms",
            "group.consumer.max.size": "group_consumer_max_size",
            "offset.metadata.max.bytes": "offset_metadata_max_bytes",
            "offsets.topic.num.partitions": "offsets_topic_num_partitions",
            "offsets.topic.replication.factor": "offsets_topic_replication_factor",
            "offsets.retention.minutes": "offsets_retention_minutes",
            "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
            "headwater.housekeeping.interval.ms": "housekeeping_interval_ms",
            "headwater.log.scrub.bytes.per.second": "log_scrub_bytes_per_second",
            "headwater.log.scrub.pass.interval.ms": "log_scrub_pass_interval_ms",
            "log.retention.check.interval.ms": "retention_check_interval_ms",
            "zookeeper.session.timeout.ms": "zookeeper_session_timeout_ms",
            "zookeeper.connection.timeout.ms": "zookeeper_connection_timeout_ms",
            "default.replication.factor": "default_replication_factor",
            "min.insync.replicas": "min_insync_replicas",
            "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
            "controlled.shutdown.max.retries": "controlled_shutdown_max_retries",
            "controlled.shutdown.retry.backoff.ms": "controlled_shutdown_retry_backoff_ms",
            "replica.lag.time.max.ms": "replica_lag_time_max_ms",
            "replica.fetch.max.bytes": "replica_fetch_max_bytes",
            "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
            "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
            "replica.fetch.min.bytes": "replica_fetch_min_bytes",
            "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
            "num.replica.fetchers": "num_replica_fetchers",
            "replica.high.watermark.checkpoint.interval.ms": (
                "replica_high_watermark_checkpoint_interval_ms"
            ),
            "request.timeout.ms": "request_timeout_ms",
            "offsets.commit.timeout.ms": "offsets_commit_timeout_ms",
            "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
            "transaction.state.log.replication.factor": (
                "transaction_state_log_replication_factor"
            ),
            "transaction.state.log.min.isr": "transaction_state_log_min_isr",
            "transaction.max.timeout.ms": "transaction_max_timeout_ms",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
                "transaction_abort_timed_out_transaction_cleanup_interval_ms"
            ),
            "transactional.id.expiration.ms": "transactional_id_expiration_ms",
            "transaction.remove.expired.transaction.cleanup.interval.ms": (
                "transaction_remove_expired_transaction_cleanup_interval_ms"
            ),
            "headwater.fetch.session.slots.per.client": "fetch_session_slots_per_client",
            "headwater.malloc.trim.interval.ms": "malloc_trim_interval_ms",
            "leader.replication.throttled.rate": "leader_replication_throttled_rate",
            "follower.replication.throttled.rate": "follower_replication_throttled_rate",
            "replication.quota.window.num": "replication_quota_window_num",
            "replication.quota.window.size.seconds": "replication_quota_window_size_seconds",
        }
        bools = {
            "auto.create.topics.enable": "auto_create_topics",
            "headwater.zero.copy.enable": "zero_copy",
            "headwater.fetch.session.retransmit.enable": "fetch_session_retransmit",
            "unclean.leader.election.enable": "unclean_leader_election_enable",
            "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
            "controlled.shutdown.enable": "controlled_shutdown_enable",
            "headwater.replica.fetch.sessions.enable": "replica_fetch_sessions_enable",
        }
        log_keys: dict[str, str] = {}
        connection_keys: dict[str, str] = {}
        if "listeners" in props:
            kw["listeners"] = parse_listeners(
                props["listeners"],
                props.get("listener.security.protocol.map"),
                props.get("advertised.listeners"),
            )
        kw["security"] = SecurityConfig.from_properties(props)
        for key, value in props.items():
            if key in ConnectionLimits.KEYS:
                connection_keys[key] = value
            elif key in ints:
                kw[ints[key]] = int(value)
            elif key in bools:
                kw[bools[key]] = _bool(value)
            elif key == "listeners":
                kw["host"], kw["port"] = parse_host_port(value)
            elif key == "advertised.listeners":
                kw["advertised_host"], kw["advertised_port"] = parse_host_port(value)
            elif key in ("log.dirs", "log.dir"):
                dirs = [Path(d.strip()) for d in value.split(",") if d.strip()]
                kw["data_dir"] = dirs[0]
                kw["extra_data_dirs"] = tuple(dirs[1:])
            elif key == "cluster.id":
                kw["cluster_id"] = value
            elif key == "group.coordinator.rebalance.protocols":
                kw["group_rebalance_protocols"] = _names(value)
            elif key == "group.consumer.assignors":
                kw["group_consumer_assignors"] = tuple(
                    _ASSIGNOR_CLASSES.get(name, name) for name in _names(value)
                )
            elif key == "group.consumer.migration.policy":
                kw["group_consumer_migration_policy"] = value.strip().lower()
            elif key == "broker.rack":
                kw["broker_rack"] = value.strip() or None
            elif key == "replica.selector.class":
                kw["replica_selector"] = parse_replica_selector(value)
            elif key == "zookeeper.connect":
                kw["zookeeper_connect"] = value.strip() or None
            elif key == "headwater.event.loop":
                if value not in ("asyncio", "uvloop"):
                    raise ValueError("headwater.event.loop must be asyncio or uvloop")
                kw["event_loop"] = value
            elif key == "headwater.metrics.listen":
                kw["metrics_host"], kw["metrics_port"] = parse_host_port(value, 9308)
            elif key.startswith(("log.", "message.", "headwater.log.")):
                log_keys[key] = value
            elif is_security_key(key):
                pass  # read by SecurityConfig above
            else:
                extra[key] = value
        kw["log"] = LogConfig.from_properties(log_keys)
        kw["cleaner"] = CleanerConfig.from_properties(props)
        kw["connections"] = ConnectionLimits.from_properties(
            connection_keys, int(str(kw.get("socket_request_max_bytes", 104_857_600)))
        )
        kw["extra"] = extra
        if extra:
            log.debug("config keys not used by Headwater: %s", ", ".join(sorted(extra)))
        return cls(**kw)  # type: ignore[arg-type]
