"""Log compaction in a 3-broker cluster on a real ZooKeeper (issue 16, "In a cluster").

Each replica compacts its own copy, as in Kafka: the leader and both
followers must each log a clean. Every copy holds, at each offset it kept,
exactly the record written at that offset (a follower's copy is consistent
with the leader's for the offsets it fetched). After a leader failover a
consumer still reads the latest value of every key once, and a replica that
copies a cleaned log from scratch gets the gaps, not the removed records.
The internal topics switch to ``cleanup.policy=compact`` on upgrade.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource
from kazoo.client import KazooClient

from headwater.cluster import zk_layout as zk
from headwater.records.record import decode_batches
from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster

FAST_CLEANER = ("log.cleaner.backoff.ms=100", "log.retention.check.interval.ms=200")
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "8192",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
}
Entry = tuple[bytes | None, bytes | None]
Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, overrides=FAST_CLEANER).start()
    try:
        yield c
    finally:
        c.stop()


def _produce(bootstrap: str, topic: str, pairs: list[Entry]) -> dict[int, Entry]:
    """Write ``pairs`` (idempotent, acks=all); returns what went to each offset."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 2048,
        }
    )
    written: dict[int, Entry] = {}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, message: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            written[int(message.offset() or 0)] = (message.key(), message.value())

    for key, value in pairs:
        producer.produce(topic, value, key, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    return written


def _cleaned_to(lines: list[str], name: str) -> int:
    """The highest offset a broker's log lines say it cleaned ``name`` to (-1: none)."""
    pattern = re.compile(rf"log cleaner cleaned {re.escape(name)}: .* cleaned to offset (\d+)")
    return max((int(m.group(1)) for line in lines if (m := pattern.search(line))), default=-1)


def _copy_on_disk(partition_dir: Path) -> list[Row]:
    """Every data record of a replica's segment files, in file order.

    Raises while the broker swaps a clean in (a ``.swap`` file, or the list
    of segments changed during the read): callers read again.
    """

    def listing() -> list[Path]:
        names = sorted(partition_dir.iterdir())
        if any(p.name.endswith(".swap") for p in names):
            raise RuntimeError("a clean is being swapped in")
        return [p for p in names if p.suffix == ".log"]

    before = listing()
    out: list[Row] = []
    for path in before:
        for batch in decode_batches(path.read_bytes()):
            if not batch.header.is_control:
                out.extend((r.offset, r.key, r.value) for r in batch.records)
    if listing() != before:
        raise RuntimeError("the segments changed during the read")
    return out


def _read_through(bootstrap: str, topic: str) -> tuple[list[Row], int]:
    """A consumer's read from the beginning to the end offset: (offset, key, value), end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        _, end = consumer.get_watermark_offsets(tp, timeout=15)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[Row] = []
        position = 0
        deadline = time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                # the tail of a compacted log may be gone: ask where the consumer is
                position = max(position, consumer.position([tp])[0].offset)
                continue
            offset = int(message.offset() or 0)
            out.append((offset, message.key(), message.value()))
            position = offset + 1
        assert position >= end, f"read to {position} of {end}"
        return out, end
    finally:
        consumer.close()


def _latest(
    records: list[Row],
) -> dict[bytes | None, bytes | None]:
    model: dict[bytes | None, bytes | None] = {}
    for _, key, value in records:
        model[key] = value
    return model


def test_every_replica_compacts_its_copy_and_a_failover_keeps_the_latest_values(
    cluster: Cluster,
) -> None:
    cluster.create_topic("kv", 1, 3, **COMPACTED)
    pairs: list[Entry] = [(b"k%d" % (i % 20), b"v%d-" % i + b"x" * 100) for i in range(600)]
    pairs += [(b"k0", None), (b"k1", None)]  # tombstones (delete.retention.ms: a day)
    written = _produce(cluster.bootstrap, "kv", pairs)
    assert sorted(written) == list(range(len(pairs)))
    model = _latest([(o, *written[o]) for o in sorted(written)])
    last = len(pairs) - 1

    # New records roll the active segment (segment.ms) so that all of the
    # above becomes cleanable; wait until every replica has cleaned past it.
    fill = 0

    def all_cleaned() -> bool:
        nonlocal fill
        written.update(_produce(cluster.bootstrap, "kv", [(b"dirty", b"%d" % fill)]))
        fill += 1
        return all(_cleaned_to(b.lines, "kv-0") > last for b in cluster.brokers)

    wait_for(all_cleaned, 120, "the leader and both followers to clean kv-0")
    end = max(written) + 1
    leader = cluster.leader("kv")
    cluster.kill(leader)
    wait_for(lambda: cluster.leader("kv") not in (-1, leader), 60, "a new leader for kv-0")

    # Each copy holds at every offset it kept exactly what was written there,
    # the latest value of every key, and the cleaned part has gaps.
    for broker_id, b in enumerate(cluster.brokers):
        # a live follower may still be swapping a clean in: read again if a file went
        directory = b.data_dir / "kv-0"
        copy = wait_for(lambda: _copy_on_disk(directory), 30, f"broker {broker_id}'s copy")  # noqa: B023
        offsets = [o for o, _, _ in copy]
        assert offsets == sorted(set(offsets)), f"broker {broker_id}"
        assert all(written[o] == (k, v) for o, k, v in copy), f"broker {broker_id}"
        got = {k: v for k, v in _latest(copy).items() if k != b"dirty"}
        assert got == {k: v for k, v in model.items() if k != b"dirty"}, f"broker {broker_id}"
        assert sum(1 for o in offsets if o <= last) <= 40, f"broker {broker_id} did not compact"

    records, end_now = _read_through(cluster.bootstrap, "kv")
    assert end_now == end  # the log end never moves
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    keys = [k for _, k, _ in records if k != b"dirty"]
    assert len(keys) == len(set(keys)) == 20  # every key once, k0/k1 as tombstones
    assert {k: v for _, k, v in records if k != b"dirty"} == {
        k: v for k, v in model.items() if k != b"dirty"
    }

    # The old leader comes back with an empty copy: it fetches the cleaned log
    # from the new leader and gets its gaps, not the removed records.
    shutil.rmtree(cluster.brokers[leader].data_dir / "kv-0")
    cluster.restart(leader)
    wait_for(lambda: cluster.isr("kv") == {0, 1, 2}, 60, "the wiped replica back in the ISR")
    copy = wait_for(
        lambda: (
            (c := _copy_on_disk(cluster.brokers[leader].data_dir / "kv-0"))
            and c[-1][0] == end - 1
            and c
        ),
        30,
        "the wiped replica to copy the log",
    )
    assert all(written[o] == (k, v) for o, k, v in copy)
    assert sum(1 for o, _, _ in copy if o <= last) <= 40
    assert {k: v for k, v in _latest(copy).items() if k != b"dirty"} == {
        k: v for k, v in model.items() if k != b"dirty"
    }


def test_internal_topics_switch_to_compact_on_upgrade(cluster: Cluster) -> None:
    """``__consumer_offsets`` and ``__transaction_state`` configured by an older release."""
    internal = ("__consumer_offsets", "__transaction_state")
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in internal]

    # A group's first commit and a transactional producer create them (compacted from the start).
    cluster.create_topic("t", 1, 3)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g"})
    consumer.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    consumer.close()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx"})
    producer.init_transactions(30)
    del producer
    admin = cluster.admin()
    for resource, described in admin.describe_configs(resources).items():
        assert described.result(15)["cleanup.policy"].value == "compact", resource

    # An older release's configs: time retention only.
    for b in cluster.brokers:
        b.stop()
    hosts, _, chroot = cluster.zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(15)
    try:
        for topic in internal:
            old = {"cleanup.policy": "delete", "segment.bytes": "1048576"}
            client.set(f"/{chroot}{zk.topic_config_path(topic)}", zk.encode_configs(old))
    finally:
        client.stop()
        client.close()

    for b in cluster.brokers:
        b.start(timeout=60)
    wait_for(lambda: len(cluster.live_broker_ids()) == 3, 60, "all brokers back")

    def compact_everywhere() -> bool:
        for b in cluster.brokers:
            one = AdminClient({"bootstrap.servers": b.bootstrap})
            for described in one.describe_configs(resources).values():
                configs = described.result(15)
                if configs["cleanup.policy"].value != "compact":
                    return False
                assert configs["segment.bytes"].value == "1048576"  # other overrides stay
        return True

    wait_for(compact_everywhere, 30, "cleanup.policy=compact on every broker")
    for topic in internal:
        assert any(
            f"{topic} switched to cleanup.policy=compact (was delete)" in line
            for b in cluster.brokers
            for line in b.lines
        ), topic
    # the committed offset survived the switch
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g"})
    try:
        committed = consumer.committed([TopicPartition("t", 0)], timeout=15)
        assert committed[0].offset == 1
    finally:
        consumer.close()
