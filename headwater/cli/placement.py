"""Replica plans the tools make themselves (``--disable-rack-aware``, ``--generate``).

A Kafka admin client cannot ask a broker to ignore racks; kafka-topics.sh in
ZooKeeper mode computed the assignment itself and wrote it. Here the command
computes it from Metadata's brokers with the same placement the brokers use
(``headwater.cluster.replica_placement``) and sends explicit replicas, which
a broker takes as given. Placement errors become one-line ``ValueError``s
with Kafka's messages.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from headwater.client.types import BrokerMetadata
from headwater.cluster.replica_placement import RackAwareMode, assign_replicas, placement_racks
from headwater.records.errors import KafkaApiError


def rack_map(brokers: Mapping[int, BrokerMetadata]) -> dict[int, str | None]:
    """broker id -> rack (None: no rack), from Metadata."""
    return {b: m.rack or None for b, m in sorted(brokers.items())}


def mode(disable_rack_aware: bool) -> RackAwareMode:
    """The tools' mode: Kafka's ``Enforced`` unless ``--disable-rack-aware``."""
    return RackAwareMode.DISABLED if disable_rack_aware else RackAwareMode.ENFORCED


def check_racks(racks: Mapping[int, str | None], rack_mode: RackAwareMode) -> None:
    """Refuse mixed racks under ENFORCED with kafka-topics' hint to add --disable-rack-aware."""
    try:
        placement_racks(racks, rack_mode)
    except KafkaApiError as exc:
        raise ValueError(str(exc)) from None


def plan(
    racks: Mapping[int, str | None],
    rack_mode: RackAwareMode,
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Kafka's ``assignReplicasToBrokers`` over ``racks`` under ``rack_mode``."""
    try:
        return assign_replicas(
            placement_racks(racks, rack_mode),
            partitions,
            replication_factor,
            start_index=start_index,
            start_partition=start_partition,
            rng=rng,
        )
    except KafkaApiError as exc:
        raise ValueError(str(exc)) from None
