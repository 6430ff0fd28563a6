"""Headwater's transactional producer and read_committed consumer against a real broker.

Every reader in the ecosystem must agree on what a transaction left behind:
Headwater's consumer, kafka-python, confluent-kafka and aiokafka see exactly
the committed records under read_committed, and every data record (never a
control marker) under read_uncommitted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.producer import Producer, end_transactions
from headwater.client.transaction_manager import (
    ProducerFencedError,
    TransactionStateError,
    TxnState,
)
from headwater.client.types import TopicPartition, TransactionHandle
from tests.integration.broker_process import BrokerProcess

TOPIC = "txn-out"
PARTITIONS = 3

Reader = Callable[[str, str, str, int], list[bytes]]


def _create(bootstrap: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    with AdminClient(bootstrap) as admin:
        admin.create_topics([(topic, partitions, {})])


def _producer(bootstrap: str, tid: str, **extra: str) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": "2", **extra}
    )


def read_headwater(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    with Consumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest"
    ) as c:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for(topic) or ())]
        c.assign(tps)
        ends = c.end_offsets(tps)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(c.position(tp) < e for tp, e in ends.items()):
            got.extend(r.value or b"" for r in c.poll(0.5))
        # Nothing more arrives: the end offsets were the last word.
        got.extend(r.value or b"" for r in c.poll(0.3))
        # poll_arrow (the columnar path) must agree with poll.
        c.seek_to_beginning(tps)
        arrow: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(c.position(tp) < e for tp, e in ends.items()):
            arrow.extend(c.poll_arrow(0.5).column("value").to_pylist())
        assert sorted(arrow) == sorted(got)
        return got


def read_kafka_python(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        consumer_timeout_ms=4000,
        enable_auto_commit=False,
    )
    try:
        return [m.value for m in c]
    finally:
        c.close()


def read_confluent(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer as CKConsumer

    c = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ck-{isolation}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                if got and len(got) >= expected and time.monotonic() - idle_since > 2:
                    break
                continue
            if msg.error():
                continue
            got.append(msg.value())
            idle_since = time.monotonic()
        return got
    finally:
        c.close()


def read_aiokafka(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            enable_auto_commit=False,
        )
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            idle = 0
            while time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                records = [m.value for ms in batch.values() for m in ms]
                got.extend(records)
                idle = 0 if records else idle + 1
                if len(got) >= expected and idle >= 4:
                    break
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


READERS: dict[str, Reader] = {
    "headwater": read_headwater,
    "kafka-python": read_kafka_python,
    "confluent-kafka": read_confluent,
    "aiokafka": read_aiokafka,
}


def _send_all(producer: Producer, prefix: str, n: int) -> None:
    futures = [
        producer.send(TOPIC, b"%s-%d" % (prefix.encode(), i), partition=i % PARTITIONS)
        for i in range(n)
    ]
    producer.flush()
    for f in futures:
        f.result(timeout=10)


@pytest.fixture(scope="module")
def committed_and_aborted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, BrokerProcess]]:
    """A topic with: committed 'c1', aborted 'a1', committed 'c2' (after the abort)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("txn") / "data").start()
    try:
        _create(broker.bootstrap)
        with _producer(broker.bootstrap, "tx-commit-abort") as p:
            p.init_transactions()
            assert p.transaction_state is TxnState.READY
            p.begin_transaction()
            _send_all(p, "c1", 30)
            p.commit_transaction()
            p.begin_transaction()
            _send_all(p, "a1", 20)
            p.abort_transaction()
            p.begin_transaction()
            _send_all(p, "c2", 10)
            p.commit_transaction()
        yield broker.bootstrap, broker
    finally:
        broker.stop()


def _expected(*parts: tuple[str, int]) -> list[bytes]:
    return sorted(b"%s-%d" % (p.encode(), i) for p, n in parts for i in range(n))


@pytest.mark.parametrize("reader", sorted(READERS))
def test_read_committed_sees_exactly_the_committed_transactions(
    committed_and_aborted: tuple[str, BrokerProcess], reader: str
) -> None:
    bootstrap, _ = committed_and_aborted
    want = _expected(("c1", 30), ("c2", 10))
    got = READERS[reader](bootstrap, TOPIC, "read_committed", len(want))
    assert sorted(got) == want


@pytest.mark.parametrize("reader", sorted(READERS))
def test_read_uncommitted_sees_every_record_but_no_marker(
    committed_and_aborted: tuple[str, BrokerProcess], reader: str
) -> None:
    bootstrap, _ = committed_and_aborted
    want = _expected(("c1", 30), ("a1", 20), ("c2", 10))
    got = READERS[reader](bootstrap, TOPIC, "read_uncommitted", len(want))
    assert sorted(got) == want, "control batches must stay hidden"


def test_open_transaction_holds_read_committed_back(broker: BrokerProcess) -> None:
    _create(broker.bootstrap)
    with _producer(broker.bootstrap, "tx-open") as p:
        p.init_transactions()
        p.begin_transaction()
        _send_all(p, "open", 6)
        with Consumer(
            bootstrap_servers=broker.bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        ) as c:
            tps = [TopicPartition(TOPIC, q) for q in range(PARTITIONS)]
            assert set(c.end_offsets(tps).values()) == {0}, "LSO stays at the open txn"
            c.assign(tps)
            assert c.poll(1.0) == []
            p.commit_transaction()
            got: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(got) < 6 and time.monotonic() < deadline:
                got.extend(r.value or b"" for r in c.poll(0.5))
        assert sorted(got) == _expected(("open", 6))


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(broker: BrokerProcess) -> None:
    _create(broker.bootstrap)
    zombie = _producer(broker.bootstrap, "tx-zombie")
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        _send_all(zombie, "zombie", 9)
        with _producer(broker.bootstrap, "tx-zombie") as successor:
            successor.init_transactions()  # bumps the epoch: the zombie's txn is aborted
            successor.begin_transaction()
            _send_all(successor, "fresh", 5)
            successor.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction()
        assert zombie.transaction_state is TxnState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
    finally:
        zombie.close()
    got = read_headwater(broker.bootstrap, TOPIC, "read_committed", 5)
    assert sorted(got) == _expected(("fresh", 5))


def test_send_outside_a_transaction_is_refused(broker: BrokerProcess) -> None:
    _create(broker.bootstrap)
    with _producer(broker.bootstrap, "tx-misuse") as p:
        with pytest.raises(TransactionStateError):
            p.begin_transaction()  # before init_transactions
        p.init_transactions()
        with pytest.raises(TransactionStateError):
            p.send(TOPIC, b"x", partition=0)
        with pytest.raises(TransactionStateError):
            p.commit_transaction()


def test_consume_transform_produce_commits_offsets_with_the_output(broker: BrokerProcess) -> None:
    """Read 'in', write upper-cased to 'out' with the input offsets in the same
    transaction; one round is aborted: neither its output nor its offsets count."""
    bootstrap = broker.bootstrap
    _create(bootstrap, "in", 2)
    _create(bootstrap, TOPIC)
    group = "ctp-group"
    with Producer(bootstrap_servers=bootstrap) as plain:
        for i in range(60):
            plain.send("in", b"rec-%d" % i, partition=i % 2)
        plain.flush()
    tps = [TopicPartition("in", 0), TopicPartition("in", 1)]
    rounds = 0
    with (
        _producer(bootstrap, "tx-ctp") as p,
        Consumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            max_poll_records=13,
            isolation_level="read_committed",
        ) as c,
    ):
        p.init_transactions()
        c.assign(tps)
        done = 0
        deadline = time.monotonic() + 60
        while done < 60 and time.monotonic() < deadline:
            records = c.poll(1.0)
            if not records:
                continue
            p.begin_transaction()
            for r in records:
                p.send(TOPIC, (r.value or b"").upper(), partition=r.partition)
            next_offsets = {tp: c.position(tp) for tp in tps}
            p.send_offsets_to_transaction(next_offsets, group)
            rounds += 1
            if rounds == 2:
                p.abort_transaction()
                # Rewind to the last committed offsets, as an application does after an abort.
                with AdminClient(bootstrap) as admin:
                    committed = admin.list_consumer_group_offsets(group, require_stable=True)
                for tp in tps:
                    c.seek(tp, committed.get(tp, 0))
                continue
            p.commit_transaction()
            done += len(records)
    assert rounds >= 3
    with AdminClient(bootstrap) as admin:
        committed = admin.list_consumer_group_offsets(group, require_stable=True)
    assert committed == {tps[0]: 30, tps[1]: 30}
    got = read_headwater(bootstrap, TOPIC, "read_committed", 60)
    assert sorted(got) == sorted(b"REC-%d" % i for i in range(60))


def test_a_transaction_handed_off_is_ended_by_another_client(broker: BrokerProcess) -> None:
    _create(broker.bootstrap)
    handles: list[TransactionHandle] = []
    for task in range(3):
        with _producer(broker.bootstrap, f"tx-task-{task}") as p:
            p.init_transactions()
            p.begin_transaction()
            _send_all(p, f"task{task}", 4)
            handle = p.hand_off_transaction()
            assert handle is not None and handle.transactional_id == f"tx-task-{task}"
            handles.append(handle)
        # close() after the hand-off leaves the transaction open for its new owner
    assert read_headwater(broker.bootstrap, TOPIC, "read_committed", 0) == []
    end_transactions(handles[:2], True, bootstrap_servers=broker.bootstrap)
    end_transactions(handles[2:], False, bootstrap_servers=broker.bootstrap)
    got = read_headwater(broker.bootstrap, TOPIC, "read_committed", 8)
    assert sorted(got) == _expected(("task0", 4), ("task1", 4))
    # A fenced handle cannot be committed: the successor's init aborted it.
    with _producer(broker.bootstrap, "tx-task-9") as p:
        p.init_transactions()
        p.begin_transaction()
        _send_all(p, "task9", 2)
        stale = p.hand_off_transaction()
        assert stale is not None
    with _producer(broker.bootstrap, "tx-task-9") as successor:
        successor.init_transactions()
    with pytest.raises(ProducerFencedError):
        end_transactions([stale], True, bootstrap_servers=broker.bootstrap)
