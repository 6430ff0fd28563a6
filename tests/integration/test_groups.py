"""Consumer groups with real clients and their default settings (issue 4)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import CommitFailedError

from tests.integration.broker_process import BrokerProcess

TOPIC = "orders"
PARTITIONS = 6


def _create(broker: BrokerProcess, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _produce(broker: BrokerProcess, start: int, count: int, topic: str = TOPIC) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class KafkaPythonMember(threading.Thread):
    """A kafka-python group member that commits after each processed poll.

    A batch whose commit fails (the group rebalanced meanwhile) is not counted
    as processed: its records will be delivered again to their new owner. So
    ``processed`` holds the records consumed exactly once per committed offset.
    """

    def __init__(self, broker: BrokerProcess, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=broker.bootstrap,
            group_id="g-kp",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id=name,
        )
        self.processed: list[tuple[int, int, bytes]] = []
        self.assigned: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.consumer.poll(timeout_ms=100)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                if not batch:
                    continue
                records = [(r.partition, r.offset, r.value) for rs in batch.values() for r in rs]
                try:
                    self.consumer.commit()
                except CommitFailedError:
                    continue
                self.processed.extend(records)
        finally:
            self.consumer.close()  # LeaveGroup: partitions move at once


def test_kafka_python_group_splits_rebalances_and_commits_exactly_once(
    broker: BrokerProcess,
) -> None:
    _create(broker)
    members = [KafkaPythonMember(broker, f"m{i}") for i in range(3)]
    a, b, c = members
    a.start()
    b.start()
    _wait(lambda: len(a.assigned) == 3 and len(b.assigned) == 3, 30, "a 3/3 split")
    assert a.assigned.isdisjoint(b.assigned)
    _produce(broker, 0, 600)

    c.start()
    _wait(lambda: all(len(m.assigned) == 2 for m in members), 30, "a 2/2/2 split")
    assert set().union(*(m.assigned for m in members)) == set(range(PARTITIONS))
    _produce(broker, 600, 600)

    b.stop.set()
    b.join(30)
    _wait(lambda: len(a.assigned) == 3 and len(c.assigned) == 3, 30, "b's partitions moving")
    _produce(broker, 1200, 600)

    _wait(lambda: sum(len(m.processed) for m in members) >= 1800, 60, "all records")
    for m in (a, c):
        m.stop.set()
        m.join(30)
    counts = Counter((p, o) for m in members for p, o, _ in m.processed)
    assert len(counts) == 1800, "no gaps"
    assert max(counts.values()) == 1, "each committed record processed exactly once"
    values = sorted(int(v) for m in members for _, _, v in m.processed)
    assert values == list(range(1800))

    check = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g-kp")
    try:
        for p in range(PARTITIONS):
            assert check.committed(KTP(TOPIC, p)) == 300
    finally:
        check.close()


def test_confluent_group_with_auto_commit(broker: BrokerProcess) -> None:
    _create(broker)
    _produce(broker, 0, 1200)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()
    assignments: dict[str, int] = {}

    def member(name: str, until: threading.Event) -> None:
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "g-ck",
                "auto.offset.reset": "earliest",
                "client.id": name,
                "auto.commit.interval.ms": 200,
            }
        )
        c.subscribe([TOPIC])
        try:
            while not until.is_set():
                m = c.poll(0.1)
                assignments[name] = len(c.assignment())
                if m is None or m.error():
                    continue
                with lock:
                    seen.append((m.partition(), m.offset()))
        finally:
            c.close()  # commits the final positions (auto commit's default on close)

    leave_b = threading.Event()
    threads = [
        threading.Thread(target=member, args=("a", stop), daemon=True),
        threading.Thread(target=member, args=("b", leave_b), daemon=True),
    ]
    for t in threads:
        t.start()
    _wait(lambda: assignments.get("a") == 3 and assignments.get("b") == 3, 40, "3/3")
    leave_b.set()
    threads[1].join(30)
    _wait(lambda: assignments.get("a") == 6, 40, "a taking b's partitions")
    _produce(broker, 1200, 600)
    _wait(lambda: len(set(seen)) >= 1800, 60, "every record")
    stop.set()
    threads[0].join(30)
    assert len(set(seen)) == 1800, "no gaps"

    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-ck"})
    try:
        committed = probe.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
        assert [tp.offset for tp in committed] == [300] * PARTITIONS
    finally:
        probe.close()


def test_aiokafka_group_members_split_and_commit(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    _create(broker)
    _produce(broker, 0, 600)

    async def main() -> tuple[list[tuple[int, int]], list[set[int]]]:
        consumers = [
            AIOKafkaConsumer(
                TOPIC,
                bootstrap_servers=broker.bootstrap,
                group_id="g-aio",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            for _ in range(2)
        ]
        for c in consumers:
            await c.start()
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        parts: list[set[int]] = [set(), set()]
        while time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                batch = await c.getmany(timeout_ms=100)
                parts[i] = {tp.partition for tp in c.assignment()}
                for recs in batch.values():
                    got.extend((r.partition, r.offset) for r in recs)
                if batch:
                    await c.commit()
            if len(got) >= 600 and all(len(p) == 3 for p in parts):
                break
        for c in consumers:
            await c.stop()
        return got, parts

    got, parts = asyncio.run(main())
    assert all(len(p) == 3 for p in parts) and parts[0].isdisjoint(parts[1])
    assert len(set(got)) == 600


def test_committed_offsets_survive_kill_9(broker: BrokerProcess) -> None:
    _create(broker)
    _produce(broker, 0, 600)
    c = KafkaConsumer(
        TOPIC,
        bootstrap_servers=broker.bootstrap,
        group_id="g-crash",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    got = 0
    deadline = time.monotonic() + 30
    while got < 600 and time.monotonic() < deadline:
        got += sum(len(rs) for rs in c.poll(timeout_ms=200).values())
    c.commit(
        {
            KTP(TOPIC, p): __import__("kafka").OffsetAndMetadata(50 + p, "meta", -1)
            for p in range(PARTITIONS)
        }
    )
    c.close(autocommit=False)
    broker.kill()
    broker.start()
    c2 = KafkaConsumer(
        TOPIC,
        bootstrap_servers=broker.bootstrap,
        group_id="g-crash",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        for p in range(PARTITIONS):
            om = c2._coordinator.fetch_committed_offsets([KTP(TOPIC, p)])[KTP(TOPIC, p)]
            assert (om.offset, om.metadata) == (50 + p, "meta")
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            for tp, rs in c2.poll(timeout_ms=200).items():
                first.setdefault(tp.partition, rs[0].offset)
        assert first == {p: 50 + p for p in range(PARTITIONS)}, "resumed at the commits"
    finally:
        c2.close()


_VICTIM = textwrap.dedent(
    """
    import sys, time
    from kafka import KafkaConsumer
    c = KafkaConsumer(sys.argv[2], bootstrap_servers=sys.argv[1], group_id="g-timeout",
                      session_timeout_ms=6000, heartbeat_interval_ms=1000)
    while True:
        c.poll(timeout_ms=100)
        if c.assignment():
            print("assigned", len(c.assignment()), flush=True)
    """
)


def test_silent_member_is_expelled_after_session_timeout(broker: BrokerProcess) -> None:
    _create(broker)
    victim = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, broker.bootstrap, TOPIC],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().startswith("assigned")
        survivor = KafkaConsumer(
            TOPIC,
            bootstrap_servers=broker.bootstrap,
            group_id="g-timeout",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        try:
            deadline = time.monotonic() + 40
            while len(survivor.assignment()) != 3 and time.monotonic() < deadline:
                survivor.poll(timeout_ms=100)
            assert len(survivor.assignment()) == 3
            victim.kill()  # no LeaveGroup, no more heartbeats
            killed = time.monotonic()
            while len(survivor.assignment()) != PARTITIONS and time.monotonic() < killed + 40:
                survivor.poll(timeout_ms=100)
            took = time.monotonic() - killed
            assert len(survivor.assignment()) == PARTITIONS
            # session.timeout.ms (6 s) plus one rebalance; generous for a noisy machine.
            assert took < 6 + 10, f"expelled after {took:.1f}s"
        finally:
            survivor.close()
    finally:
        victim.kill()
        victim.wait()


def test_groups_cli_lists_and_describes_with_lag(broker: BrokerProcess) -> None:
    _create(broker)
    _produce(broker, 0, 600)
    c = KafkaConsumer(
        TOPIC,
        bootstrap_servers=broker.bootstrap,
        group_id="g-cli",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="cli-test",
    )
    try:
        _wait(lambda: bool(c.poll(timeout_ms=200)) or bool(c.assignment()), 30, "assignment")
        c.commit(
            {
                KTP(TOPIC, p): __import__("kafka").OffsetAndMetadata(10 * p, "", -1)
                for p in range(PARTITIONS)
            }
        )

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "headwater.cli",
                    "groups",
                    *args,
                    "--bootstrap",
                    broker.bootstrap,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )

        listed = cli("list")
        assert listed.returncode == 0 and listed.stdout.split("\t")[0] == "g-cli"
        described = cli("describe", "g-cli")
        assert described.returncode == 0, described.stderr
        out = described.stdout
        assert "client=cli-test" in out and "State: Stable" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith(f"  {TOPIC}\t")]
        lag = {int(r[1]): (int(r[2]), int(r[3]), int(r[4])) for r in rows}
        assert lag == {p: (10 * p, 100, 100 - 10 * p) for p in range(PARTITIONS)}
        missing = cli("describe", "no-such-group")
        assert missing.returncode == 1 and "does not exist" in missing.stderr
    finally:
        c.close(autocommit=False)
