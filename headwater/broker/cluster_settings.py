"""The cluster's settings read from the broker's config (Kafka's key names)."""

from __future__ import annotations

from headwater.broker.config import BrokerConfig
from headwater.cluster.node import ControllerConfig
from headwater.cluster.replica_fetcher import FetcherConfig
from headwater.cluster.replica_manager import ReplicationConfig
from headwater.cluster.replication_quota import ReplicationQuotaConfig


def replication_config(c: BrokerConfig) -> ReplicationConfig:
    return ReplicationConfig(
        replica_lag_time_max_ms=c.replica_lag_time_max_ms,
        min_insync_replicas=c.min_insync_replicas,
        num_replica_fetchers=c.num_replica_fetchers,
        high_watermark_checkpoint_interval_ms=c.replica_high_watermark_checkpoint_interval_ms,
        fetcher=FetcherConfig(
            max_bytes=c.replica_fetch_max_bytes,
            response_max_bytes=c.replica_fetch_response_max_bytes,
            max_wait_ms=c.replica_fetch_wait_max_ms,
            min_bytes=c.replica_fetch_min_bytes,
            backoff_ms=c.replica_fetch_backoff_ms,
            sessions=c.replica_fetch_sessions_enable,
        ),
        throttles=ReplicationQuotaConfig(
            leader_rate=c.leader_replication_throttled_rate,
            follower_rate=c.follower_replication_throttled_rate,
            window_ms=c.replication_quota_window_size_seconds * 1000,
            samples=c.replication_quota_window_num,
        ),
        replica_selector=c.replica_selector,
    )


def controller_config(c: BrokerConfig) -> ControllerConfig:
    return ControllerConfig(
        unclean_leader_election_enable=c.unclean_leader_election_enable,
        auto_leader_rebalance_enable=c.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_seconds=c.leader_imbalance_check_interval_seconds,
    )
