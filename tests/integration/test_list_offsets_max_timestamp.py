"""ListOffsets v7+ (KIP-734): the offset of the record with the largest timestamp."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.integration.broker_process import BrokerProcess


def test_max_timestamp_through_the_confluent_admin_client(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i, ts in enumerate([base + 100, base + 900, base + 300, base + 900, base + 200]):
        producer.produce("stamped", value=b"v%d" % i, partition=0, timestamp=ts)
        producer.flush()  # one batch each: the max lies inside the log, not at its end
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition("stamped", 0)
    futures = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=15)
    info = futures[tp].result(15)
    assert (info.offset, info.timestamp) == (1, base + 900)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(15)
    assert earliest.offset == 0
