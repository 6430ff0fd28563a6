"""Classic consumer groups with Headwater's own client: ``Consumer`` with the default
``group.protocol=classic`` (JoinGroup/SyncGroup/Heartbeat, eager, client-side assignors).

One broker serves the module (no initial rebalance delay); the consumers under
test use a 6 s session and 300 ms heartbeats. Topics and records are made with
confluent-kafka. Every wait has a deadline; none sleeps a fixed time.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from headwater.client import Consumer, KafkaError, TopicPartition
from headwater.records import columnar
from tests.integration.broker_process import BrokerProcess

# The same helpers as the KIP-848 client tests: topics, records, waits, a listener.
from tests.integration.test_client_consumer_group import (
    Recorder,
    create_topic,
    name,
    produce,
    wait_for,
)

OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "offsets.topic.num.partitions=2",
    "transaction.state.log.num.partitions=1",
)
#: A commit refused because a rebalance took the partitions (Kafka's CommitFailedException).
REBALANCE_ERRORS = (22, 25, 27)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # The first record decode compiles numba kernels on the consumer's loop, the
    # thread that also heartbeats: pay for it before any member joins.
    columnar.warm_up()
    b = BrokerProcess(tmp_path_factory.mktemp("hwclassic") / "data", overrides=OVERRIDES).start(
        timeout=60
    )
    try:
        yield b
    finally:
        b.stop()


def hw_consumer(broker: BrokerProcess, group: str, **extra: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    }
    config.update(extra)
    return Consumer(config)


def poll_commit(consumer: Consumer, counts: Counter[str]) -> None:
    for r in consumer.poll(0.1):
        assert r.value is not None
        counts[r.value.decode()] += 1
    try:
        consumer.commit()
    except KafkaError as exc:
        if exc.code not in REBALANCE_ERRORS:
            raise


def read_until(consumers: list[Consumer], counts: Counter[str], total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(counts.values()) < total:
        if time.monotonic() > deadline:
            raise AssertionError(f"read {sum(counts.values())} of {total} records")
        for c in consumers:
            poll_commit(c, counts)


def test_single_consumer_gets_every_partition_and_reads_each_record_once(
    broker: BrokerProcess,
) -> None:
    topic, group = name("solo"), name("g")
    create_topic(broker, topic, 3)
    produce(broker, topic, range(300))
    recorder = Recorder()
    with hw_consumer(broker, group) as consumer:
        consumer.subscribe([topic], listener=recorder)
        wait_for(lambda: len(consumer.assignment()) == 3, 20, "3 partitions")
        assert consumer.member_id()
        counts: Counter[str] = Counter()
        read_until([consumer], counts, 300, 30)
        assert set(counts) == {str(i) for i in range(300)}
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]
        committed = consumer.committed(consumer.assignment())
        assert sum(committed.values()) == 300, committed
    everything = {TopicPartition(topic, p) for p in range(3)}
    assert recorder.assigned == [everything], recorder.assigned
    assert recorder.revoked == [everything], recorder.revoked
    assert recorder.lost == []


def test_two_consumers_split_six_partitions_then_one_takes_all(broker: BrokerProcess) -> None:
    topic, group = name("pair"), name("g")
    create_topic(broker, topic, 6)
    produce(broker, topic, range(600))
    everything = {TopicPartition(topic, p) for p in range(6)}
    counts: Counter[str] = Counter()
    # Auto-commit: the positions are committed as the eager rebalance revokes them, so a
    # record polled just before is not read again by the partition's next owner.
    config = {"partition.assignment.strategy": "roundrobin", "enable.auto.commit": True}
    first = hw_consumer(broker, group, **config)
    second = hw_consumer(broker, group, **config)
    recorder = Recorder()
    try:
        first.subscribe([topic], listener=recorder)
        wait_for(lambda: len(first.assignment()) == 6, 20, "the first member to own all 6")
        second.subscribe([topic])

        def split() -> bool:
            for c in (first, second):
                poll_commit(c, counts)
            a, b = first.assignment(), second.assignment()
            return len(a) == 3 and len(b) == 3 and not a & b and a | b == everything

        wait_for(split, 30, "a 3/3 split")
        # Eager: the first member gave up all 6 before taking its 3.
        assert recorder.assigned[0] == everything and recorder.revoked[0] == everything
        assert recorder.assigned[-1] == first.assignment() and recorder.lost == []
        read_until([first, second], counts, 600, 30)
        second.close()

        def first_owns_all() -> bool:
            poll_commit(first, counts)
            return first.assignment() == everything

        wait_for(first_owns_all, 30, "the remaining member to own all 6")
        produce(broker, topic, range(600, 700))
        read_until([first], counts, 700, 30)
        assert set(counts) == {str(i) for i in range(700)}
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]
    finally:
        second.close()
        first.close()


def test_a_headwater_and_a_confluent_consumer_share_one_group(broker: BrokerProcess) -> None:
    topic, group = name("mixed"), name("g")
    create_topic(broker, topic, 4)
    produce(broker, topic, range(400))
    everything = {TopicPartition(topic, p) for p in range(4)}
    hw = hw_consumer(broker, group, **{"partition.assignment.strategy": "range"})
    ck_owned: set[TopicPartition] = set()

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        ck_owned.clear()
        ck_owned.update(TopicPartition(p.topic, p.partition) for p in partitions)

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        ck_owned.clear()

    ck = CKConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "partition.assignment.strategy": "range",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    counts: Counter[str] = Counter()
    try:
        hw.subscribe([topic])
        ck.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

        def ck_poll() -> None:
            got = [m for m in ck.consume(num_messages=500, timeout=0.05) if m.error() is None]
            for msg in got:
                counts[msg.value().decode()] += 1
            if got:
                # A rebalance may have taken the partitions meanwhile.
                with contextlib.suppress(KafkaException):
                    ck.commit(asynchronous=False)

        def split() -> bool:
            poll_commit(hw, counts)
            ck_poll()
            a = hw.assignment()
            return len(a) == 2 and len(ck_owned) == 2 and a | ck_owned == everything

        wait_for(split, 40, "a 2/2 split between the two clients")
        deadline = time.monotonic() + 30
        while sum(counts.values()) < 400:
            assert time.monotonic() < deadline, f"read {sum(counts.values())} of 400"
            poll_commit(hw, counts)
            ck_poll()
        assert set(counts) == {str(i) for i in range(400)}
    finally:
        ck.close()
        hw.close()


def test_commits_survive_a_new_consumer_joining(broker: BrokerProcess) -> None:
    topic, group = name("commits"), name("g")
    create_topic(broker, topic, 2)
    produce(broker, topic, range(200))
    counts: Counter[str] = Counter()
    with hw_consumer(broker, group) as first:
        first.subscribe([topic])
        read_until([first], counts, 200, 30)
        first.commit()
        tps = {TopicPartition(topic, p) for p in range(2)}
        assert sum(first.committed(tps).values()) == 200
        with hw_consumer(broker, group) as second:
            second.subscribe([topic])

            def split() -> bool:
                poll_commit(first, counts)
                poll_commit(second, counts)
                return len(first.assignment()) == 1 and len(second.assignment()) == 1

            wait_for(split, 30, "a 1/1 split")
            # The newcomer starts at the committed offsets: nothing is read again.
            produce(broker, topic, range(200, 300))
            read_until([first, second], counts, 300, 30)
            assert sum(second.committed(tps).values()) == 300
    assert set(counts) == {str(i) for i in range(300)}
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]


def test_a_static_member_comes_back_to_its_partitions_without_a_leave(
    broker: BrokerProcess,
) -> None:
    topic, group = name("static"), name("g")
    create_topic(broker, topic, 2)
    produce(broker, topic, range(100))
    everything = {TopicPartition(topic, p) for p in range(2)}
    counts: Counter[str] = Counter()
    # A long session: the comeback must not wait for the old member to expire.
    static = {"group.instance.id": "instance-1", "session.timeout.ms": 45000}
    with hw_consumer(broker, group, **static) as first:
        first.subscribe([topic])
        read_until([first], counts, 100, 30)
        first_id = first.member_id()
    # No LeaveGroup was sent: the same instance id takes its place back at once.
    with hw_consumer(broker, group, **static) as again:
        again.subscribe([topic])
        wait_for(lambda: again.assignment() == everything, 20, "the static member's comeback")
        assert again.member_id() != first_id
        produce(broker, topic, range(100, 150))
        read_until([again], counts, 150, 30)
    assert set(counts) == {str(i) for i in range(150)}
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]


def test_the_leader_rebalances_when_partitions_are_added(broker: BrokerProcess) -> None:
    topic, group = name("grow"), name("g")
    create_topic(broker, topic, 2)
    produce(broker, topic, range(50))
    counts: Counter[str] = Counter()
    # The leader looks at the group's topics every metadata.max.age.ms.
    with hw_consumer(broker, group, **{"metadata.max.age.ms": 500}) as consumer:
        consumer.subscribe([topic])
        read_until([consumer], counts, 50, 30)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        everything = {TopicPartition(topic, p) for p in range(4)}

        def grown() -> bool:
            poll_commit(consumer, counts)
            return consumer.assignment() == everything

        wait_for(grown, 30, "the new partitions to be assigned")
        produce(broker, topic, range(50, 150))
        read_until([consumer], counts, 150, 30)
    assert set(counts) == {str(i) for i in range(150)}
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1]
