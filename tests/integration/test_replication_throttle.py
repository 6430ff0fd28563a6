"""KIP-73 replication throttles in a 3-broker cluster: a follower catching up is held
to the throttled rate, on the leader's side or on its own.

Broker 2 is stopped while 1 MB is written, then restarted: it must copy that
backlog from the leader. With a 100 kB/s throttle (and a 2 s quota window, so
the first window's allowance is small) that takes several seconds; without
the throttle it takes well under one. The in-sync replicas keep replicating
unthrottled meanwhile (acks=all with two of three in the ISR).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster

RATE = 100_000
BACKLOG = 1_000_000


@pytest.fixture(params=["leader", "follower"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    side = request.param
    c = Cluster(
        tmp_path,
        zk_connect,
        overrides=[
            f"{side}.replication.throttled.rate={RATE}",
            "replication.quota.window.num=2",
            "replica.lag.time.max.ms=10000",
            # One fetch moves what it was allowed before the budget runs out: keep it small.
            "replica.fetch.max.bytes=50000",
            "replica.fetch.response.max.bytes=50000",
        ],
    ).start()
    try:
        yield c
    finally:
        c.stop()


def test_a_lagging_follower_catches_up_at_the_throttled_rate(cluster: Cluster) -> None:
    cluster.create_topic(
        "moved",
        partitions=1,
        replication=3,
        **{
            "min.insync.replicas": "2",
            "leader.replication.throttled.replicas": "*",
            "follower.replication.throttled.replicas": "*",
        },
    )
    leader = cluster.leader("moved")
    lagging = next(b for b in (0, 1, 2) if b != leader)
    cluster.kill(lagging)
    wait_for(lambda: lagging not in cluster.isr("moved"), timeout=30, what="ISR shrink")
    # One record per batch: a batch is sent whole, however large (KIP-74).
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 1}
    )
    failed: list[object] = []
    for _ in range(BACKLOG // 10_000):
        producer.produce("moved", b"x" * 10_000, on_delivery=lambda e, _m: e and failed.append(e))
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed
    cluster.restart(lagging)
    started = time.monotonic()
    wait_for(lambda: lagging in cluster.isr("moved"), timeout=90, what="catch-up")
    took = time.monotonic() - started
    print(f"caught up {BACKLOG} B in {took:.1f} s at a {RATE} B/s throttle")
    # At most one 2 s window's allowance moves unthrottled; the rest takes >= 6 s.
    assert took >= (BACKLOG - 2 * RATE) / RATE * 0.75, took
