"""acks=all at replication factor 3 waits for the followers' copies, not for their fetch timeout.

A follower long-polls its leader with ``replica.fetch.wait.max.ms``. The
leader's append must answer that parked fetch at once, the follower must
fetch again at once, and that fetch moves the high watermark that completes
the waiting produce (issue 21). Were any of the three steps left to a timer,
each ``acks=all`` write here would take the 5 s fetch wait.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from tests.integration.cluster_process import Cluster

pytestmark = pytest.mark.cluster

FETCH_WAIT_MS = 5000


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        zk_connect,
        overrides=[
            f"replica.fetch.wait.max.ms={FETCH_WAIT_MS}",
            # Idle followers must not drop out of the ISR on a loaded machine.
            "replica.lag.time.max.ms=60000",
        ],
    ).start()
    try:
        yield c
    finally:
        c.stop()


def test_acks_all_is_answered_long_before_the_follower_fetch_wait(cluster: Cluster) -> None:
    # All three replicas must have each record: the ack needs both followers.
    cluster.create_topic("lat", partitions=1, replication=3, **{"min.insync.replicas": "3"})
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
        }
    )
    errors: list[KafkaError] = []

    def produce_one(value: bytes) -> float:
        started = time.monotonic()
        producer.produce(
            "lat",
            value,
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
        assert producer.flush(3 * FETCH_WAIT_MS / 1000) == 0
        return time.monotonic() - started

    produce_one(b"warm-up")  # connections, producer id, follower sessions
    took = []
    for i in range(5):
        # An idle gap: by now both followers' next fetches are parked at the leader.
        time.sleep(0.2)
        took.append(produce_one(f"r{i}".encode()))
    assert not errors
    # Each write needs the parked fetches woken by the append and the followers'
    # next fetches; a timer in the path would make every one >= FETCH_WAIT_MS.
    # The median, so that one write slowed by a loaded machine cannot fail it.
    assert statistics.median(took) < FETCH_WAIT_MS / 1000 / 2, took
    assert cluster.isr("lat") == {0, 1, 2}
