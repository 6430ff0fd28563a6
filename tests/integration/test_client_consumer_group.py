"""KIP-848 with Headwater's own client: ``Consumer`` with ``group.protocol=consumer``.

One broker serves the module (a 6 s consumer session, 500 ms heartbeats);
topics and records are made with confluent-kafka, the consumers under test
are ``headwater.client.Consumer``. Every wait has a deadline; none sleeps
a fixed time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.client import Consumer, KafkaError, TopicPartition
from headwater.records import columnar
from tests.integration.broker_process import BrokerProcess

OVERRIDES = (
    "group.consumer.session.timeout.ms=6000",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    "offsets.topic.num.partitions=2",
    "transaction.state.log.num.partitions=1",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A consumer decodes fetched batches with numba kernels, and the first decode in a
    # process compiles them (or loads numba's cache) on the consumer's loop, the thread
    # that also heartbeats: seconds without a heartbeat, which a loaded machine made
    # longer than this module's 6 s session (the member was fenced, its commit answered
    # UNKNOWN_MEMBER_ID). This process pays for it here, before any member joins.
    columnar.warm_up()
    b = BrokerProcess(tmp_path_factory.mktemp("hwkip848") / "data", overrides=OVERRIDES).start(
        timeout=60
    )
    try:
        yield b
    finally:
        b.stop()


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(broker: BrokerProcess, topic: str, values: range) -> None:
    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in values:
        producer.produce(topic, str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def hw_consumer(broker: BrokerProcess, group: str, **extra: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    config.update(extra)
    return Consumer(config)


class Recorder:
    """A rebalance listener that records what it was told."""

    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []
        self.lost: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.revoked.append(partitions)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.assigned.append(partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.lost.append(partitions)


def read_until(consumers: list[Consumer], counts: Counter[str], total: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(counts.values()) < total:
        if time.monotonic() > deadline:
            raise AssertionError(f"read {sum(counts.values())} of {total} records")
        for c in consumers:
            for r in c.poll(0.1):
                assert r.value is not None
                counts[r.value.decode()] += 1
            c.commit()


def test_single_consumer_gets_every_partition_and_reads(broker: BrokerProcess) -> None:
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


def test_two_consumers_split_six_partitions_then_one_takes_all(broker: BrokerProcess) -> None:
    topic, group = name("pair"), name("g")
    create_topic(broker, topic, 6)
    produce(broker, topic, range(600))
    a = hw_consumer(broker, group)
    b = hw_consumer(broker, group)
    try:
        a.subscribe([topic])
        wait_for(lambda: len(a.assignment()) == 6, 20, "a owns 6")
        b.subscribe([topic])

        def split() -> bool:
            owned_a, owned_b = a.assignment(), b.assignment()
            # Polling lets each member's reconciliation be seen; never overlapping.
            assert not owned_a & owned_b
            return len(owned_a) == 3 and len(owned_b) == 3

        wait_for(split, 20, "3 partitions each")
        counts: Counter[str] = Counter()
        read_until([a, b], counts, 600, 30)
        assert max(counts.values()) == 1
        # Everything committed once: the group's offsets are at the log ends.
        offsets = a.committed(a.assignment()) | b.committed(b.assignment())
        assert sum(offsets.values()) == 600

        b.close()
        wait_for(lambda: len(a.assignment()) == 6, 20, "a takes b's partitions back")
        produce(broker, topic, range(600, 660))
        more: Counter[str] = Counter()
        read_until([a], more, 60, 20)
        assert set(more) == {str(i) for i in range(600, 660)}
    finally:
        a.close()
        b.close()


def test_regex_subscription_picks_up_a_later_topic(broker: BrokerProcess) -> None:
    prefix = name("rx")
    group = name("g")
    create_topic(broker, f"{prefix}-a", 2)
    with hw_consumer(broker, group) as consumer:
        consumer.subscribe(pattern=f"{prefix}-.*")
        wait_for(lambda: len(consumer.assignment()) == 2, 20, "the first topic's partitions")
        create_topic(broker, f"{prefix}-b", 2)
        produce(broker, f"{prefix}-b", range(20))
        wait_for(
            lambda: {tp.topic for tp in consumer.assignment()} == {f"{prefix}-a", f"{prefix}-b"},
            30,
            "the later topic",
        )
        counts: Counter[str] = Counter()
        read_until([consumer], counts, 20, 20)
        assert set(counts) == {str(i) for i in range(20)}


def test_headwater_and_confluent_consumers_share_a_group(broker: BrokerProcess) -> None:
    topic, group = name("mixed"), name("g")
    create_topic(broker, topic, 4)
    produce(broker, topic, range(400))
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    ck_owned: set[int] = set()

    def run_confluent() -> None:
        ck = CKConsumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        ck.subscribe([topic])
        try:
            while not stop.is_set():
                msg = ck.poll(0.1)
                ck_owned.clear()
                ck_owned.update(p.partition for p in ck.assignment())
                if msg is None or msg.error():
                    continue
                value = msg.value()
                assert value is not None
                with lock:
                    counts[value.decode()] += 1
                ck.commit(message=msg, asynchronous=False)
        finally:
            ck.close()

    thread = threading.Thread(target=run_confluent, daemon=True)
    with hw_consumer(broker, group) as hw:
        hw.subscribe([topic])
        wait_for(lambda: len(hw.assignment()) == 4, 20, "the headwater member owns all")
        thread.start()
        try:
            deadline = time.monotonic() + 40
            while True:
                for r in hw.poll(0.1):
                    assert r.value is not None
                    with lock:
                        counts[r.value.decode()] += 1
                hw.commit()
                with lock:
                    done = sum(counts.values()) >= 400
                owned = {tp.partition for tp in hw.assignment()}
                if done and len(owned) == 2 and len(ck_owned) == 2:
                    break
                assert time.monotonic() < deadline, (sum(counts.values()), owned, ck_owned)
        finally:
            stop.set()
            thread.join(30)
    assert not owned & ck_owned
    assert set(counts) == {str(i) for i in range(400)}
    assert max(counts.values()) == 1


def test_an_unknown_assignor_is_raised_by_poll(broker: BrokerProcess) -> None:
    topic, group = name("bad"), name("g")
    create_topic(broker, topic, 1)
    with hw_consumer(broker, group, **{"group.remote.assignor": "nonesuch"}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        with pytest.raises(KafkaError) as raised:
            while time.monotonic() < deadline:
                consumer.poll(0.1)
        assert raised.value.code == 112  # UNSUPPORTED_ASSIGNOR
        assert consumer.assignment() == set()


def test_a_static_member_leaves_with_minus_2_and_gets_its_partitions_back(
    broker: BrokerProcess,
) -> None:
    topic, group = name("static"), name("g")
    create_topic(broker, topic, 4)
    static = {"group.instance.id": "static-1"}
    a = hw_consumer(broker, group, **static)
    b = hw_consumer(broker, group)
    try:
        a.subscribe([topic])
        wait_for(lambda: len(a.assignment()) == 4, 20, "a owns all")
        b.subscribe([topic])
        wait_for(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 20, "a split")
        mine = a.assignment()
        a.close()  # epoch -2: the group keeps a's partitions for its session
        a = hw_consumer(broker, group, **static)
        a.subscribe([topic])
        wait_for(lambda: a.assignment() == mine, 20, "a's partitions back")
        assert len(b.assignment()) == 2 and not b.assignment() & mine
    finally:
        a.close()
        b.close()


def test_a_fenced_member_loses_its_partitions_and_rejoins(broker: BrokerProcess) -> None:
    topic, group = name("fenced"), name("g")
    create_topic(broker, topic, 4)
    recorder = Recorder()
    a = hw_consumer(broker, group)
    b = hw_consumer(broker, group)
    try:
        a.subscribe([topic], listener=recorder)
        b.subscribe([topic])
        wait_for(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 20, "a split")
        member = a._consumer._group
        assert member is not None

        async def stop_heartbeats() -> None:
            assert member._task is not None
            member._task.cancel()

        async def restart_heartbeats() -> None:
            member.start()

        a._thread.run(stop_heartbeats())
        # The session (6 s) expires: the coordinator removes a and b gets everything.
        wait_for(lambda: len(b.assignment()) == 4, 30, "b takes a's partitions")
        a._thread.run(restart_heartbeats())
        # a's next heartbeat is answered UNKNOWN_MEMBER_ID: it loses its partitions
        # without committing and rejoins with epoch 0.
        wait_for(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, "a back")
        assert len(recorder.lost) == 1 and len(recorder.lost[0]) == 2
        assert not a.assignment() & b.assignment()
    finally:
        a.close()
        b.close()


def test_auto_commit_commits_positions_while_polling_and_on_close(broker: BrokerProcess) -> None:
    topic, group = name("auto"), name("g")
    create_topic(broker, topic, 2)
    produce(broker, topic, range(100))
    config = {"enable.auto.commit": True, "auto.commit.interval.ms": 100}
    with hw_consumer(broker, group, **config) as consumer:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 100:
            assert time.monotonic() < deadline, seen
            seen += len(consumer.poll(0.1))

        def committed_all() -> bool:
            consumer.poll(0.05)  # auto-commits are started by poll
            return sum(consumer.committed(consumer.assignment()).values()) == 100

        wait_for(committed_all, 10, "auto-committed positions")
    produce(broker, topic, range(100, 110))
    with hw_consumer(broker, group, **config) as again:
        again.subscribe([topic])
        values: list[str] = []
        deadline = time.monotonic() + 20
        while len(values) < 10:
            assert time.monotonic() < deadline, values
            values += [r.value.decode() for r in again.poll(0.1) if r.value is not None]
        assert sorted(values, key=int) == [str(i) for i in range(100, 110)]
