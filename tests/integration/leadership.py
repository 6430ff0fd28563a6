"""Who answers as a partition's leader, asked of every broker (issue 31).

After a network partition heals, no broker may serve or claim a leadership
at a stale epoch. The check asks each broker directly (Headwater's own
``BrokerConnection``, so no client routes the question to the leader it
believes in) a ListOffsets for every partition, with no current leader
epoch: a broker that answers without error serves as leader, and says the
epoch it leads at. ZooKeeper's partition states are the truth: exactly the
broker they name, at their epoch, may answer so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from headwater.client.connection import BrokerConnection
from headwater.cluster.store import PartitionState, ZkClusterStore
from headwater.protocol.apis import ApiKey

Key = tuple[str, int]


def zookeeper_states(zk_connect: str) -> dict[Key, PartitionState]:
    """Every partition state in ZooKeeper (``zk_connect`` with its chroot)."""
    return zookeeper_partitions(zk_connect)[1]


def zookeeper_partitions(
    zk_connect: str,
) -> tuple[dict[Key, tuple[int, ...]], dict[Key, PartitionState]]:
    """(every partition's replicas, every partition's state) as ZooKeeper holds them."""
    store = ZkClusterStore(zk_connect, session_timeout_ms=10_000)
    store.start(30.0)
    try:
        assignments = store.topic_assignments(store.topics())
        replicas = {
            (t.name, p): tuple(r) for t in assignments.values() for p, r in t.replicas.items()
        }
        return replicas, store.partition_states(list(replicas))
    finally:
        store.close()


def short_isrs(zk_connect: str) -> dict[Key, tuple[int, tuple[int, ...]]]:
    """The partitions without a leader or with an ISR short of their replicas, per
    ZooKeeper (the truth; a broker's metadata may lag behind it): key -> (leader, ISR)."""
    replicas, states = zookeeper_partitions(zk_connect)
    short = {}
    for key, assigned in replicas.items():
        state = states.get(key)
        if state is None or state.leader < 0 or set(state.isr) != set(assigned):
            short[key] = (state.leader, tuple(state.isr)) if state else (-1, ())
    return short


async def _claims(host: str, port: int, keys: list[Key]) -> dict[Key, int]:
    """The partitions the broker at host:port answers as leader, with its epoch."""
    conn = await BrokerConnection.open(host, port, request_timeout_ms=20_000)
    try:
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
            )
        data = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        }
        resp = await conn.request(ApiKey.LIST_OFFSETS, data, version=4)
        return {
            (t.name, int(p.partition_index)): int(p.leader_epoch)
            for t in resp.topics
            for p in t.partitions
            if int(p.error_code) == 0
        }
    finally:
        conn.close()


def stale_leaders(zk_connect: str, brokers: Mapping[int, tuple[str, int]]) -> list[str]:
    """Every leadership a broker claims that ZooKeeper does not give it, at that epoch,
    and every partition no broker serves: empty when all is as ZooKeeper says."""
    states = zookeeper_states(zk_connect)
    keys = sorted(states)
    problems: list[str] = []
    served: dict[Key, list[int]] = {}
    for broker_id, (host, port) in sorted(brokers.items()):
        claims = asyncio.run(_claims(host, port, keys))
        for key, epoch in claims.items():
            served.setdefault(key, []).append(broker_id)
            state = states[key]
            if state.leader != broker_id or state.leader_epoch != epoch:
                problems.append(
                    f"broker {broker_id} serves {key[0]}-{key[1]} as leader at epoch {epoch}; "
                    f"ZooKeeper: leader {state.leader} at epoch {state.leader_epoch}"
                )
    for key in keys:
        if states[key].leader >= 0 and not served.get(key):
            problems.append(
                f"{key[0]}-{key[1]}: its leader {states[key].leader} (epoch "
                f"{states[key].leader_epoch}) does not serve it"
            )
    return problems


async def _list_offsets_error(host: str, port: int, topic: str, partition: int) -> int:
    conn = await BrokerConnection.open(host, port, request_timeout_ms=5_000, connect_timeout_s=5)
    try:
        data = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        }
        resp = await conn.request(ApiKey.LIST_OFFSETS, data, version=4)
        return int(resp.topics[0].partitions[0].error_code)
    finally:
        conn.close()


def leader_answer(host: str, port: int, topic: str, partition: int) -> int:
    """The error code the broker at host:port answers a ListOffsets for the partition
    with (0: it serves as leader; 6: NOT_LEADER_OR_FOLLOWER); -1 when unreachable."""
    try:
        return asyncio.run(_list_offsets_error(host, port, topic, partition))
    except Exception:
        return -1
