"""Worker-side scenarios of ``test_network_partitions.py``: they run inside the client
namespace (``netns.run_in``) and return what they measured; the test asserts on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.integration.cluster_process import read_committed, wait_for
from tests.integration.fault_campaign import (
    SESSION_MS,
    ZK_NODE,
    Campaign,
    broker_node,
    campaign_network,
    log,
)
from tests.integration.leadership import leader_answer, stale_leaders, zookeeper_states

#: FAST_FAILOVER's replica.lag.time.max.ms (tests/integration/cluster_process.py).
LAG_MS = 3000
NOT_LEADER_OR_FOLLOWER = 6


def _produce(bootstrap: str, topic: str, count: int, tag: str) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2})
    acked: list[str] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value().decode())

    for i in range(count):
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=0, on_delivery=done)
    assert producer.flush(60) == 0
    return acked


def cut_leader_steps_down(prefix: str, root: str) -> dict[str, Any]:
    network = campaign_network(prefix)
    with Campaign(Path(root), 0, network=network) as campaign:
        cluster = campaign.cluster
        assert cluster is not None
        cluster.create_topic("steps", 1, 3, **{"min.insync.replicas": "2"})
        acked = _produce(cluster.bootstrap, "steps", 50, "before")
        leader = cluster.leader("steps")
        host, port = campaign.broker_addresses()[leader]
        before = zookeeper_states(campaign.zk_connect)[("steps", 0)]
        others = [broker_node(b) for b in range(len(cluster.brokers)) if b != leader]
        network.cut_off(broker_node(leader), [ZK_NODE, *others])
        cut_at = time.monotonic()
        log(f"broker {leader} (leader of steps-0 at epoch {before.leader_epoch}) cut")
        # An acks=all write sent to the cut leader alone (it cannot replicate).
        lone = Producer(
            {
                "bootstrap.servers": f"{host}:{port}",
                "acks": "all",
                "message.timeout.ms": 20_000,
                "log_level": 2,
            }
        )
        outcome: list[str] = []
        lone.produce(
            "steps",
            value=b"during-cut",
            partition=0,
            on_delivery=lambda err, msg: outcome.append(
                "failed" if err is not None else f"acknowledged at {msg.offset()}"
            ),
        )
        stepped_down_after = float("inf")
        while time.monotonic() - cut_at < 90:
            lone.poll(0)
            if leader_answer(host, port, "steps", 0) == NOT_LEADER_OR_FOLLOWER:
                stepped_down_after = time.monotonic() - cut_at
                break
            time.sleep(0.2)
        log(f"the cut leader answered NOT_LEADER_OR_FOLLOWER after {stepped_down_after:.1f} s")
        lone.flush(60)
        after = wait_for(
            lambda: (
                (s := zookeeper_states(campaign.zk_connect)[("steps", 0)]).leader != leader and s
            ),
            timeout=60,
            what="a new leader",
        )
        network.heal()
        healed_at = time.monotonic()
        wait_for(campaign._isrs_full, timeout=60, what="full ISRs")
        full_isr_s = time.monotonic() - healed_at
        stale: list[str] = []

        def agree() -> bool:
            stale[:] = stale_leaders(campaign.zk_connect, campaign.broker_addresses())
            return not stale

        wait_for(agree, timeout=30, what="leaders as ZooKeeper says")
        values = {v.decode() for v in read_committed(cluster.bootstrap, "steps", len(acked))}
    return {
        "cut_leader": leader,
        "epoch_before": before.leader_epoch,
        "new_leader": after.leader,
        "epoch_after": after.leader_epoch,
        "stepped_down_after_s": round(stepped_down_after, 2),
        # Both clocks run from the cut; kazoo notices the drop within about 2/3 of a
        # session, the check runs every 0.75 s: 10 s of slack for a loaded machine.
        "bound_s": (SESSION_MS + max(SESSION_MS, LAG_MS)) / 1000 + 10,
        "acks_all_during_cut": outcome[0].split(" ")[0] if outcome else "no answer",
        "acks_all_outcome": outcome,
        "full_isr_after_heal_s": round(full_isr_s, 2),
        "lost": len(set(acked) - values),
        "stale": stale,
    }


def only_zookeeper_cut(prefix: str, root: str) -> dict[str, Any]:
    network = campaign_network(prefix)
    with Campaign(Path(root), 0, network=network) as campaign:
        cluster = campaign.cluster
        assert cluster is not None
        cluster.create_topic("zkcut", 1, 3, **{"min.insync.replicas": "2"})
        _produce(cluster.bootstrap, "zkcut", 20, "before")
        leader = cluster.leader("zkcut")
        host, port = campaign.broker_addresses()[leader]
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "message.timeout.ms": 30_000,
                "log_level": 2,
            }
        )
        acked: list[str] = []
        failed: list[str] = []

        def done(err: Any, msg: Any) -> None:
            (failed if err is not None else acked).append(str(err or msg.offset()))

        for b in range(len(cluster.brokers)):
            network.cut(ZK_NODE, broker_node(b))
        cut_at = time.monotonic()
        not_leader = 0
        hold_s = (SESSION_MS + LAG_MS) / 1000 + 6
        i = 0
        while time.monotonic() - cut_at < hold_s:
            producer.produce("zkcut", value=f"cut-{i}".encode(), partition=0, on_delivery=done)
            i += 1
            producer.poll(0.2)
            if leader_answer(host, port, "zkcut", 0) == NOT_LEADER_OR_FOLLOWER:
                not_leader += 1
        acked_during, failed_during = len(acked), len(failed)
        in_flight = producer.flush(0)
        network.heal()
        producer.flush(60)
        log(
            f"ZooKeeper cut {hold_s:.1f} s: {acked_during} acknowledged, {failed_during} "
            f"failed, {in_flight} in flight; {not_leader} NOT_LEADER answers from {leader}"
        )
    return {
        "hold_s": hold_s,
        "produced_during_cut": i,
        "acked_during_cut": acked_during,
        "failed_during_cut": failed_during,
        "failed_in_all": len(failed),
        "not_leader_answers": not_leader,
    }
