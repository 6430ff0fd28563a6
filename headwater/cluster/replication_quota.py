"""Replication throttles (KIP-73): a byte-rate cap on moving chosen replicas, sans-I/O.

Kafka's two sides, with its key names:

* broker ``leader.replication.throttled.rate`` (bytes/s) caps what a leader
  sends to followers of the throttled partitions, topic config
  ``leader.replication.throttled.replicas``;
* broker ``follower.replication.throttled.rate`` caps what a follower fetches
  for the partitions of ``follower.replication.throttled.replicas``.

A topic list is ``partition:broker,...`` (the broker being the one that
throttles: the leader on the leader side, the follower on the other) or
``*`` for every replica of the topic. As in Kafka, a replica in the ISR is
never throttled (the throttle is for catching up, e.g. after a
reassignment, not for steady replication), and the rate is one budget per
side shared by all throttled partitions, measured like client quotas
(``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds``). Over budget, the leader answers
a throttled partition with no records and the follower leaves it out of its
next fetch; both record the bytes that did move.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from headwater.security.quotas import Rate

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALL_REPLICAS = "*"


@functools.lru_cache(maxsize=1024)
def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions ``broker_id`` throttles under a topic list; None means all.

    Raises ValueError on a malformed list (topic configs are checked when set).
    """
    text = value.strip()
    if text == ALL_REPLICAS:
        return None
    out = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError(
                f"throttled replicas must be '*' or partition:broker,... (got {item!r})"
            )
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


def validate_throttled_replicas(value: str) -> None:
    throttled_partitions(value, -1)


@dataclass(frozen=True, slots=True)
class ReplicationQuotaConfig:
    leader_rate: float | None = None  # leader.replication.throttled.rate
    follower_rate: float | None = None  # follower.replication.throttled.rate
    window_ms: int = 1000  # replication.quota.window.size.seconds
    samples: int = 11  # replication.quota.window.num


class ReplicationQuota:
    """One side's budget: the bytes/s all its throttled partitions may move together."""

    def __init__(self, rate: float | None, window_ms: int, samples: int) -> None:
        self.bound = rate
        self._rate = Rate(window_ms, samples)

    @property
    def enabled(self) -> bool:
        return self.bound is not None

    def record(self, size: int, now_ms: float) -> None:
        if self.bound is not None and size > 0:
            self._rate.record(size, now_ms)

    def exceeded(self, now_ms: float) -> bool:
        return self.bound is not None and self._rate.rate(now_ms) > self.bound


#: topic -> its configs (empty when unknown).
TopicConfigs = Callable[[str], Mapping[str, str]]


class ReplicationThrottles:
    """Both sides of one broker: which replicas are throttled, and their budgets."""

    def __init__(
        self, local_id: int, topic_configs: TopicConfigs, config: ReplicationQuotaConfig
    ) -> None:
        self.local_id = local_id
        self.topic_configs = topic_configs
        self.leader = ReplicationQuota(config.leader_rate, config.window_ms, config.samples)
        self.follower = ReplicationQuota(config.follower_rate, config.window_ms, config.samples)

    def _listed(self, key: str, topic: str, partition: int) -> bool:
        value = self.topic_configs(topic).get(key)
        if not value:
            return False
        try:
            partitions = throttled_partitions(value, self.local_id)
        except ValueError:
            return False
        return partitions is None or partition in partitions

    def set_rates(self, leader: float | None, follower: float | None) -> None:
        """Dynamic broker configs changed the rates (None: no throttle on that side)."""
        self.leader.bound = leader
        self.follower.bound = follower

    def leader_throttled(self, topic: str, partition: int) -> bool:
        return self.leader.enabled and self._listed(LEADER_REPLICAS, topic, partition)

    def follower_throttled(self, topic: str, partition: int) -> bool:
        return self.follower.enabled and self._listed(FOLLOWER_REPLICAS, topic, partition)
