"""Bit rot repaired from the other replicas (issue 31 item 4) on a real 3-broker
ZooKeeper cluster: one byte of a closed segment is flipped on disk (a real file) under
a running broker, and its scrubber finds it.

- A corrupt follower tells the controller (a log dir event notification), leaves
  the ISR, truncates to the bad batch and fetches the rest again from the leader.
- A corrupt leader does the same: the controller moves its leadership to another
  in-sync replica, and it repairs itself as a follower.

Afterwards the ISR is full again, the three copies are byte-identical, and a
consumer reads every record once with the bytes that were written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from headwater.records import iter_batch_headers
from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster

SCRUB = (
    "headwater.log.scrub.bytes.per.second=100000000",
    "headwater.log.scrub.pass.interval.ms=500",
)
BATCHES, PER_BATCH = 30, 10


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, overrides=SCRUB).start()
    try:
        yield c
    finally:
        c.stop()


def values() -> list[bytes]:
    return [b"v%03d-%d" % (batch, i) for batch in range(BATCHES) for i in range(PER_BATCH)]


def create_and_fill(cluster: Cluster, name: str, replicas: list[int]) -> None:
    admin = cluster.admin()
    topic = NewTopic(
        name,
        1,
        replica_assignment=[replicas],
        config={"segment.bytes": "1024", "min.insync.replicas": "2"},
    )
    admin.create_topics([topic], request_timeout=30)[name].result(30)
    wait_for(lambda: cluster.leader(name) == replicas[0], timeout=60, what=f"leader of {name}")
    wait_for(lambda: cluster.isr(name) == set(replicas), timeout=60, what=f"ISR of {name}")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
    )
    everything = values()
    for batch in range(BATCHES):
        for value in everything[batch * PER_BATCH : (batch + 1) * PER_BATCH]:
            producer.produce(name, value, partition=0)
        assert producer.flush(60) == 0  # one batch per flush


def replica_bytes(cluster: Cluster, broker: int, topic: str) -> bytes:
    folder = cluster.brokers[broker].data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


def flip_closed_segment(cluster: Cluster, broker: int, topic: str) -> tuple[int, int]:
    """Flip a record byte of the middle batch of the second segment; its offsets."""
    folder = cluster.brokers[broker].data_dir / f"{topic}-0"
    segments = sorted(folder.glob("*.log"))
    assert len(segments) >= 3, segments
    with open(segments[1], "r+b") as f:
        data = f.read()
        headers = list(iter_batch_headers(data))
        bad = headers[len(headers) // 2]
        position = bad.position + bad.size - 1
        f.seek(position)
        f.write(bytes([data[position] ^ 0xFF]))
    return bad.base_offset, bad.last_offset


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 90) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "check.crcs": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(msg.value())  # type: ignore[arg-type]
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.value() is not None:
                got.append(msg.value())  # type: ignore[arg-type]
    finally:
        consumer.close()
    return got


def repaired(cluster: Cluster, topic: str) -> bool:
    copies = [replica_bytes(cluster, b, topic) for b in range(3)]
    return cluster.isr(topic) == {0, 1, 2} and copies[0] == copies[1] == copies[2]


def test_a_corrupt_follower_is_repaired_from_the_leader(cluster: Cluster) -> None:
    create_and_fill(cluster, "f", [0, 1, 2])
    good = replica_bytes(cluster, 0, "f")
    first, last = flip_closed_segment(cluster, 2, "f")
    assert replica_bytes(cluster, 2, "f") != good
    wait_for(
        lambda: any("truncated there, re-fetching" in line for line in cluster.brokers[2].lines),
        timeout=60,
        what="broker 2 to find and cut the corrupt batch",
    )
    assert any(f"scrubber: f-0 offsets {first}-{last}" in x for x in cluster.brokers[2].lines)
    wait_for(lambda: repaired(cluster, "f"), timeout=90, what="a full ISR of identical copies")
    assert replica_bytes(cluster, 2, "f") == good
    assert cluster.leader("f") == 0
    assert read_all(cluster.bootstrap, "f", BATCHES * PER_BATCH) == values()


def test_a_corrupt_leader_hands_over_and_is_repaired(cluster: Cluster) -> None:
    create_and_fill(cluster, "l", [1, 0, 2])
    good = replica_bytes(cluster, 0, "l")
    first, last = flip_closed_segment(cluster, 1, "l")
    wait_for(lambda: cluster.leader("l") in (0, 2), timeout=60, what="leadership to move")
    assert any(f"scrubber: l-0 offsets {first}-{last}" in x for x in cluster.brokers[1].lines)
    wait_for(lambda: repaired(cluster, "l"), timeout=90, what="a full ISR of identical copies")
    assert replica_bytes(cluster, 1, "l") == good
    assert read_all(cluster.bootstrap, "l", BATCHES * PER_BATCH) == values()
