"""Our consumer's positions, resets and pipelining against a real broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client.admin import AdminClient
from headwater.client.consumer import AsyncConsumer, Consumer
from headwater.client.errors import KafkaError
from headwater.client.producer import Producer
from headwater.client.types import ConsumerRecord, TopicPartition
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.test_client_sessions import FULL, INCREMENTAL, _metrics

TOPIC = "positions"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
PER_PARTITION = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    metrics_port = free_port()
    b = BrokerProcess(
        Path(tmp_path_factory.mktemp("consumer")) / "data",
        overrides=[f"headwater.metrics.listen=127.0.0.1:{metrics_port}"],
    ).start()
    with AdminClient(b.bootstrap) as admin:
        admin.create_topics([(TOPIC, 2, None), ("pipelined", 1, None)])
    with Producer({"bootstrap.servers": b.bootstrap}) as producer:
        for i in range(PER_PARTITION):
            for p in (0, 1):
                producer.send(TOPIC, f"{p}:{i}".encode(), partition=p)
        for _ in range(400):
            producer.send("pipelined", b"x" * 200, partition=0)
        producer.flush()
    try:
        yield b, metrics_port
    finally:
        b.stop()


def config(b: BrokerProcess, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": b.bootstrap, "fetch.max.wait.ms": 100, **extra}


def poll_n(c: Consumer, n: int, timeout_s: float = 10) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(c.poll(0.2))
    return got


def test_offsets_positions_and_seeks(broker: tuple[BrokerProcess, int]) -> None:
    b, _ = broker
    with Consumer(config(b, **{"auto.offset.reset": "earliest"})) as c:
        assert c.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
        assert c.end_offsets([TP0, TP1]) == {TP0: PER_PARTITION, TP1: PER_PARTITION}
        assert c.partitions_for(TOPIC) == {0, 1}
        assert c.partitions_for("absent-topic") is None
        assert TOPIC in c.topics()

        c.assign([TP0])
        assert c.assignment() == {TP0}
        assert c.position(TP0) == 0
        c.seek(TP0, 90)
        got = poll_n(c, 10)
        assert [r.offset for r in got] == list(range(90, 100))
        assert c.position(TP0) == 100

        c.seek_to_beginning([TP0])
        assert [r.value for r in poll_n(c, 3)][:3] == [b"0:0", b"0:1", b"0:2"]
        c.seek_to_end()
        assert c.position(TP0) == PER_PARTITION
        assert c.poll(0.3) == []


def test_latest_reset_sees_only_new_records(broker: tuple[BrokerProcess, int]) -> None:
    b, _ = broker
    with Consumer(config(b)) as c:  # auto.offset.reset defaults to latest, as in Kafka
        c.assign([TP1])
        assert c.position(TP1) == PER_PARTITION
        with Producer({"bootstrap.servers": b.bootstrap}) as producer:
            producer.send(TOPIC, b"fresh", partition=1).result(10)
        got = poll_n(c, 1)
        assert [(r.offset, r.value) for r in got] == [(PER_PARTITION, b"fresh")]


def test_offset_out_of_range_applies_auto_offset_reset(broker: tuple[BrokerProcess, int]) -> None:
    b, _ = broker
    with Consumer(config(b, **{"auto.offset.reset": "earliest"})) as c:
        c.assign([TP0])
        c.seek(TP0, 10_000)
        got = poll_n(c, PER_PARTITION)
        assert [r.offset for r in got] == list(range(PER_PARTITION))

    with Consumer(config(b, **{"auto.offset.reset": "none"})) as c:
        c.assign([TP0])
        with pytest.raises(KafkaError) as no_position:
            c.poll(1)
        assert no_position.value.name == "OFFSET_OUT_OF_RANGE"
        c.seek(TP0, 10_000)
        with pytest.raises(KafkaError) as out_of_range:
            poll_n(c, 1, timeout_s=5)
        assert out_of_range.value.name == "OFFSET_OUT_OF_RANGE"
        c.seek(TP0, 98)
        assert [r.offset for r in poll_n(c, 2)] == [98, 99]


def test_max_poll_records_and_read_committed(broker: tuple[BrokerProcess, int]) -> None:
    b, _ = broker
    settings = {
        "auto.offset.reset": "earliest",
        "max.poll.records": 7,
        "isolation.level": "read_committed",
    }
    with Consumer(config(b, **settings)) as c:
        c.assign([TP0, TP1])
        sizes = []
        got: list[ConsumerRecord] = []
        while len(got) < 2 * PER_PARTITION:
            batch = c.poll(2)
            assert batch, "read_committed reads up to the last stable offset"
            sizes.append(len(batch))
            got.extend(batch)
        assert max(sizes) == 7
        assert sorted((r.partition, r.offset) for r in got)[:PER_PARTITION] == [
            (0, i) for i in range(PER_PARTITION)
        ]


def test_sessions_can_be_switched_off(broker: tuple[BrokerProcess, int]) -> None:
    b, metrics_port = broker
    before = _metrics(metrics_port)
    settings = {"auto.offset.reset": "earliest", "headwater.fetch.session.enable": "false"}
    with Consumer(config(b, **settings)) as c:
        c.assign([TP0, TP1])
        assert len(poll_n(c, 2 * PER_PARTITION)) >= 2 * PER_PARTITION
        c.poll(0.5)
    after = _metrics(metrics_port)
    assert after[INCREMENTAL] == before[INCREMENTAL]
    assert after[FULL] > before[FULL]


def test_next_fetch_is_on_the_wire_while_the_application_works(
    broker: tuple[BrokerProcess, int],
) -> None:
    """The chapter's poll() step 4, observed from the broker's side.

    After ``poll`` returns, the test blocks the event loop (the application
    is "working"), so the client cannot send anything more; the broker must
    nevertheless have received the next fetch already.
    """
    b, metrics_port = broker
    fetches = "headwater_requests_total{api=fetch}"

    async def go() -> None:
        consumer = AsyncConsumer(
            config(b, **{"auto.offset.reset": "earliest", "max.partition.fetch.bytes": 2048})
        )
        before = _metrics(metrics_port)[fetches]
        consumer.assign([TopicPartition("pipelined", 0)])
        try:
            first = await consumer.poll(5)
            assert first, "got a first chunk"
            time.sleep(0.3)  # the application works; the loop is blocked
            on_the_wire = _metrics(metrics_port)[fetches] - before
            assert on_the_wire >= 2, "the fetch that returned data and the next one"
            second = await consumer.poll(5)
            assert second and second[0].offset == first[-1].offset + 1
        finally:
            await consumer.close()

    asyncio.run(go())


def test_partitions_that_returned_data_go_to_the_back_of_full_requests(
    broker: tuple[BrokerProcess, int],
) -> None:
    """KIP-74 round-robin on the client: with room for one batch per response and
    full (sessionless) requests, every partition gets a turn before any gets two."""
    b, _ = broker
    topic, partitions, rounds = "fair", 5, 4
    with AdminClient(b.bootstrap) as admin:
        admin.create_topics([(topic, partitions, None)])
    with Producer({"bootstrap.servers": b.bootstrap}) as producer:
        for r in range(rounds):  # one batch per partition per round
            for p in range(partitions):
                producer.send(topic, f"{p}-{r}".encode(), partition=p)
            producer.flush()
    settings = {
        "auto.offset.reset": "earliest",
        "headwater.fetch.session.enable": "false",
        "fetch.max.bytes": 1,  # KIP-74: still one batch, from the first partition with data
    }
    with Consumer(config(b, **settings)) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        order: list[int] = []
        deadline = time.monotonic() + 20
        while len(order) < partitions * rounds and time.monotonic() < deadline:
            order.extend(r.partition for r in c.poll(0.5))
    assert sorted(order) == sorted(list(range(partitions)) * rounds)
    for turn in range(rounds):
        assert sorted(order[turn * partitions : (turn + 1) * partitions]) == list(range(partitions))


def test_poll_arrow_gives_the_same_records_as_poll(broker: tuple[BrokerProcess, int]) -> None:
    b, _ = broker
    with Consumer(config(b)) as rows, Consumer(config(b)) as cols:
        for c in (rows, cols):
            c.assign([TP0, TP1])
            c.seek(TP0, 10)
            c.seek(TP1, 0)
        ends = rows.end_offsets([TP0, TP1])  # earlier tests may have added records
        expected = poll_n(rows, ends[TP0] - 10 + ends[TP1])
        tables = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            cols.position(TP0) < ends[TP0] or cols.position(TP1) < ends[TP1]
        ):
            tables.append(cols.poll_arrow(0.2, include_headers=True))
        assert cols.position(TP0) == ends[TP0]
        assert cols.position(TP1) == ends[TP1]
    assert [t.schema for t in tables] == [tables[0].schema] * len(tables)
    rows_from_columns = [
        ConsumerRecord(
            r["topic"],
            r["partition"],
            r["offset"],
            int(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"]],
        )
        for t in tables
        for r in t.to_pylist()
    ]
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(rows_from_columns, key=key) == sorted(expected, key=key)
    assert {r.offset for r in rows_from_columns if r.partition == 0} >= set(range(10, 100))


def test_poll_arrow_respects_max_records_and_empty_polls(
    broker: tuple[BrokerProcess, int],
) -> None:
    b, _ = broker
    with Consumer(config(b)) as c:
        c.assign([TP0])
        c.seek(TP0, 0)
        first = c.poll_arrow(10, max_records=7)
        assert first.column("offset").to_pylist() == list(range(7))
        c.seek(TP0, PER_PARTITION)
        empty = c.poll_arrow(0.3)
        assert empty.num_rows == 0
        assert empty.schema == first.schema
