"""Groups spread over the partitions of ``__consumer_offsets`` (issue 8, section 6)."""

from __future__ import annotations

from collections.abc import Callable

from kafka import KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient, NewTopic

from headwater.coordinator.placement import partition_for
from tests.integration.broker_process import BrokerProcess

OFFSETS = "__consumer_offsets"
TOPIC = "orders"
GROUPS = ["alpha", "beta", "gamma", "delta"]


def _create_topic(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()


def _consumer(broker: BrokerProcess, group_id: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group_id, enable_auto_commit=False
    )


def _commit(broker: BrokerProcess, group_id: str, offset: int) -> None:
    consumer = _consumer(broker, group_id)
    try:
        consumer.commit({KTP(TOPIC, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close(autocommit=False)


def _committed(broker: BrokerProcess, group_id: str) -> int | None:
    consumer = _consumer(broker, group_id)
    try:
        result = consumer.committed(KTP(TOPIC, 0))
        return None if result is None else int(result)
    finally:
        consumer.close(autocommit=False)


def _offsets_partition_ends(broker: BrokerProcess) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        partitions = consumer.partitions_for_topic(OFFSETS) or set()
        ends = consumer.end_offsets([KTP(OFFSETS, p) for p in partitions])
        return {tp.partition: int(end) for tp, end in ends.items()}
    finally:
        consumer.close()


def test_groups_live_in_their_kafka_partition_and_survive_kill_9(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory("offsets.topic.num.partitions=7")
    _create_topic(broker)
    for i, group_id in enumerate(GROUPS):
        _commit(broker, group_id, 100 + i)

    ends = _offsets_partition_ends(broker)
    assert sorted(ends) == list(range(7))
    used = {partition_for(g, 7) for g in GROUPS}
    assert len(used) > 1, "the test groups should spread over partitions"
    assert {p for p, end in ends.items() if end > 0} == used

    broker.kill()
    broker.start()
    assert [_committed(broker, g) for g in GROUPS] == [100, 101, 102, 103]


def test_an_existing_offsets_topic_keeps_its_partition_count(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # A data directory from before: __consumer_offsets has a single partition.
    old = broker_factory("offsets.topic.num.partitions=1")
    _create_topic(old)
    _commit(old, "legacy", 77)
    old.stop()
    restarted = BrokerProcess(old.data_dir).start()  # default: 50 for a new topic
    try:
        assert sorted(_offsets_partition_ends(restarted)) == [0]
        assert _committed(restarted, "legacy") == 77
        _commit(restarted, "newcomer", 5)
        assert _committed(restarted, "newcomer") == 5
    finally:
        restarted.stop()
