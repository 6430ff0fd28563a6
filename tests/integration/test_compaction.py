"""Log compaction end to end: real broker processes, confluent-kafka and kafka-python clients."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.integration.broker_process import BrokerProcess

BrokerFactory = Callable[..., BrokerProcess]

# Quick cleaning for tests: look for dirty logs every 100 ms, roll and check often.
FAST = (
    "log.cleaner.backoff.ms=100",
    "log.retention.check.interval.ms=200",
)
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "8192",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
}


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _create(b: BrokerProcess, name: str, configs: dict[str, str]) -> None:
    admin = _admin(b)  # kept alive until the answer is in
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(15)


def _produce(b: BrokerProcess, topic: str, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 2048})
    errors: list[KafkaError] = []
    for key, value in pairs:
        producer.produce(
            topic, value, key, on_delivery=lambda err, _m: errors.append(err) if err else None
        )
    assert producer.flush(30) == 0
    assert not errors, errors


def _read(b: BrokerProcess, topic: str) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
    """Every record from the beginning (offset, key, value), and the end offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        position = 0
        while position < end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                # the tail of a compacted log may be gone: ask where the consumer is
                positions = consumer.position([TopicPartition(topic, 0)])
                position = max(position, positions[0].offset)
                continue
            out.append((message.offset(), message.key(), message.value()))
            position = message.offset() + 1
        return out, end
    finally:
        consumer.close()


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _latest(pairs: list[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    model: dict[bytes, bytes | None] = {}
    for key, value in pairs:
        assert key is not None
        model[key] = value
    return model


def test_latest_value_per_key_then_tombstones_go(broker_factory: BrokerFactory) -> None:
    b = broker_factory(*FAST)
    _create(b, "kv", COMPACTED)
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (b"k%d" % (i % 10), b"v%d-" % i + b"x" * 100) for i in range(300)
    ]
    pairs += [(b"k0", None), (b"k1", None)]
    _produce(b, "kv", pairs)
    model = _latest(pairs)
    _produce(b, "kv", [(b"dirty", b"1")])  # past the segments under test

    def cleaned() -> bool:
        records, _ = _read(b, "kv")
        keys = [k for _, k, _ in records if k != b"dirty"]
        return len(keys) == len(set(keys))

    _wait_for(cleaned, 60, "the cleaner to keep one record per key")
    records, end = _read(b, "kv")
    assert end == len(pairs) + 1  # the log end never moves
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    got = {k: v for _, k, v in records if k != b"dirty"}
    assert got == model  # tombstones still there: within delete.retention.ms
    assert got[b"k0"] is None

    # after delete.retention.ms, the next clean (it needs new dirty data) removes them
    time.sleep(1.6)
    _produce(b, "kv", [(b"dirty", b"2")])

    def tombstones_gone() -> bool:
        found = {k for _, k, _ in _read(b, "kv")[0]}
        return b"k0" not in found and b"k1" not in found

    _wait_for(tombstones_gone, 60, "tombstones to go after delete.retention.ms")
    records, end = _read(b, "kv")
    assert end == len(pairs) + 2
    assert {k: v for _, k, v in records if k != b"dirty"} == {
        k: v for k, v in model.items() if v is not None
    }
    assert any("log cleaner cleaned kv-0" in line for line in b.lines)


def test_null_keys_are_refused_and_configs_are_validated(broker_factory: BrokerFactory) -> None:
    b = broker_factory(*FAST)
    _create(b, "nokey", {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": b.bootstrap, "retries": 0})
    errors: list[KafkaError] = []
    producer.produce("nokey", b"v", None, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    assert errors and errors[0].code() == KafkaError.INVALID_RECORD

    admin = _admin(b)
    for bad in (
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.compaction.lag.ms": "-3"},
    ):
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic("bad", 1, 1, config=bad)])["bad"].result(15)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert info.value.args[0].str()
    topic = ConfigResource(ConfigResource.Type.TOPIC, "nokey")
    topic.add_incremental_config(
        ConfigEntry("max.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([topic], request_timeout=15)[topic].result(15)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG

    # live switch to compact,delete; DescribeConfigs shows it and the internal topics' policy
    topic = ConfigResource(ConfigResource.Type.TOPIC, "nokey")
    topic.add_incremental_config(
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)
    )
    admin.incremental_alter_configs([topic], request_timeout=15)[topic].result(15)
    described = admin.describe_configs([topic])[topic].result(15)
    assert described["cleanup.policy"].value == "compact,delete"
    offsets = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    assert (
        admin.describe_configs([offsets])[offsets].result(15)["cleanup.policy"].value == "compact"
    )
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    broker.add_incremental_config(
        ConfigEntry(
            "log.cleaner.io.max.bytes.per.second", "-1", incremental_operation=AlterConfigOpType.SET
        )
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([broker], request_timeout=15)[broker].result(15)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_compact_delete_also_deletes_old_segments(broker_factory: BrokerFactory) -> None:
    b = broker_factory(*FAST)
    _create(b, "cd", {**COMPACTED, "cleanup.policy": "compact,delete", "retention.ms": "2000"})
    _produce(b, "cd", [(b"k%d" % (i % 5), b"x" * 200) for i in range(100)])
    time.sleep(2.5)
    _produce(b, "cd", [(b"fresh", b"1")])

    def old_gone() -> bool:
        # new records keep coming (retention takes every record once it is 2 s old)
        _produce(b, "cd", [(b"fresh", b"1")])
        keys = {k for _, k, _ in _read(b, "cd")[0]}
        return keys == {b"fresh"}

    _wait_for(old_gone, 60, "retention to delete the old segments of a compact,delete topic")


def test_a_group_commit_survives_time_retention_and_a_restart(tmp_path: Path) -> None:
    """The scenario of issue 16: __consumer_offsets is compacted, not expired by time."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    overrides = (
        "log.retention.ms=3000",
        "log.roll.ms=1000",
        "log.retention.check.interval.ms=500",
        "offsets.topic.num.partitions=1",
        "log.cleaner.backoff.ms=200",
    )
    b = BrokerProcess(tmp_path / "data", overrides=overrides).start()
    try:
        _create(b, "t", {})
        _produce(b, "t", [(b"k", b"v%d" % i) for i in range(10)])
        tp = KTopicPartition("t", 0)

        def commit(group: str, offset: int) -> None:
            consumer = KafkaConsumer(
                bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False
            )
            consumer.assign([tp])
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
            consumer.close()

        commit("weekly-job", 7)
        busy = KafkaConsumer(
            bootstrap_servers=b.bootstrap, group_id="busy", enable_auto_commit=False
        )
        busy.assign([tp])
        deadline = time.monotonic() + 12
        i = 0
        while time.monotonic() < deadline:
            busy.commit({tp: OffsetAndMetadata(i % 10, "", -1)})
            i += 1
            time.sleep(0.05)
        busy.close()
        b.stop()
        b.start()
        reader = KafkaConsumer(
            bootstrap_servers=b.bootstrap, group_id="weekly-job", enable_auto_commit=False
        )
        assert reader.committed(tp) == 7
        reader.close()
    finally:
        b.stop()


def test_kill_9_during_a_clean_then_recovery(tmp_path: Path) -> None:
    overrides = (*FAST, "log.cleaner.io.max.bytes.per.second=300000")
    b = BrokerProcess(tmp_path / "data", overrides=overrides).start()
    try:
        _create(b, "crash", {**COMPACTED, "segment.bytes": "100000"})
        pairs: list[tuple[bytes | None, bytes | None]] = [
            (b"k%d" % (i % 50), b"%d-" % i + b"y" * 500) for i in range(3000)
        ]
        _produce(b, "crash", pairs)
        _produce(b, "crash", [(b"dirty", b"1")])
        partition = tmp_path / "data" / "crash-0"

        def cleaning() -> bool:
            return any(n.endswith(".cleaned") for n in os.listdir(partition))

        _wait_for(cleaning, 60, "a clean in progress")
        b.kill()
        b.start()
        records, end = _read(b, "crash")
        assert end == len(pairs) + 1
        got = {k: v for _, k, v in records if k != b"dirty"}
        assert got == _latest(pairs)
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(offsets)
        # and the clean finishes after the restart
        _wait_for(
            lambda: len(_read(b, "crash")[0]) == 51, 60, "the clean to finish after the restart"
        )
    finally:
        b.kill()


def test_a_transactional_id_is_still_fenced_after_a_quiet_period_and_a_restart(
    tmp_path: Path,
) -> None:
    """__transaction_state is compacted: time retention does not forget producer epochs."""
    import asyncio

    from headwater.client.connection import BrokerConnection
    from headwater.protocol.apis import ApiKey

    overrides = (
        "log.retention.ms=3000",
        "log.roll.ms=1000",
        "log.retention.check.interval.ms=500",
        "transaction.state.log.num.partitions=1",
        "log.cleaner.backoff.ms=200",
    )
    b = BrokerProcess(tmp_path / "data", overrides=overrides).start()

    async def init(transactional_id: str) -> tuple[int, int]:
        conn = await BrokerConnection.open("127.0.0.1", b.port)
        try:
            answer = await conn.request(
                ApiKey.INIT_PRODUCER_ID,
                {"transactional_id": transactional_id, "transaction_timeout": 5000},
            )
            assert int(answer.error_code) == 0
            return int(answer.producer_id), int(answer.producer_epoch)
        finally:
            conn.close()

    try:
        first = asyncio.run(init("quiet"))
        deadline = time.monotonic() + 8  # others keep the transaction log rolling
        i = 0
        while time.monotonic() < deadline:
            asyncio.run(init(f"busy-{i % 3}"))
            i += 1
            time.sleep(0.1)
        b.stop()
        b.start()
        again = asyncio.run(init("quiet"))
        # the same producer id with a higher epoch: the old instance is fenced
        assert again[0] == first[0] and again[1] > first[1]

        async def zombie_end() -> int:
            conn = await BrokerConnection.open("127.0.0.1", b.port)
            try:
                ended = await conn.request(
                    ApiKey.END_TXN,
                    {"transactional_id": "quiet", "producer_id": first[0],
                     "producer_epoch": first[1], "committed": True},
                )  # fmt: skip
                return int(ended.error_code)
            finally:
                conn.close()

        assert asyncio.run(zombie_end()) in (47, 90)  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
    finally:
        b.stop()


def test_a_group_reads_across_gaps_commits_and_resumes_in_a_gap(
    broker_factory: BrokerFactory,
) -> None:
    """A consumer group (confluent-kafka, then kafka-python) reads a cleaned log.

    The committed offset sits in a gap left by the cleaner: the restarted
    member's first fetch there returns the next batch.
    """
    from kafka import KafkaConsumer

    b = broker_factory(*FAST)
    _create(b, "gaps", COMPACTED)
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (b"k%d" % (i % 30), b"v%d-" % i + b"x" * 100) for i in range(540)
    ]
    # each key twice in a row at the end: its survivors are every other offset
    pairs += [(b"k%d" % (i // 2), b"w%d-" % i + b"x" * 100) for i in range(60)]
    _produce(b, "gaps", pairs)
    fill = 0

    def cleaned() -> bool:
        nonlocal fill
        _produce(b, "gaps", [(b"dirty", b"%d" % fill)])  # rolls the segments under test
        fill += 1
        records, _ = _read(b, "gaps")
        keys = [k for o, k, _ in records if o < len(pairs)]
        return len(keys) == len(set(keys))

    _wait_for(cleaned, 60, "the cleaner to keep one record per key")
    survivors, end = _read(b, "gaps")
    # the keyed records are cleaned for good; the "dirty" tail may still shrink
    offsets = [o for o, _, _ in survivors if o < len(pairs)]
    # stop after a record followed by a gap: the commit points into the gap
    gaps = [i for i in range(len(offsets) - 1) if offsets[i + 1] > offsets[i] + 1]
    stop = gaps[len(gaps) // 2]
    committed = offsets[stop] + 1
    assert committed not in offsets

    first = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "across-gaps",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    seen: list[int] = []
    deadline = time.monotonic() + 30
    try:
        first.subscribe(["gaps"])
        while len(seen) <= stop and time.monotonic() < deadline:
            message = first.poll(0.5)
            if message is None or message.error():
                continue
            seen.append(int(message.offset() or 0))
        assert seen[: stop + 1] == offsets[: stop + 1]
        first.commit(offsets=[TopicPartition("gaps", 0, committed)], asynchronous=False)
    finally:
        first.close()

    second = KafkaConsumer(
        "gaps",
        bootstrap_servers=b.bootstrap,
        group_id="across-gaps",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
    )
    try:
        rest: list[int] = []
        for message in second:
            rest.append(message.offset)
            if message.offset >= end - 1:
                break
    finally:
        second.close()
    assert rest[0] > committed  # resumed in the gap: the next batch, nothing earlier
    assert rest == sorted(set(rest)) and rest[-1] == end - 1
    # every survivor after the commit, once, in order
    assert [o for o in rest if o < len(pairs)] == offsets[stop + 1 :]
