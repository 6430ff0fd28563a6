"""KIP-848 with a real client: confluent-kafka 2.16 (librdkafka) and ``group.protocol=consumer``.

librdkafka then speaks ConsumerGroupHeartbeat (68) and takes its partitions
from the coordinator's server-side assignor. One broker serves the module,
with a 6 s consumer session so a killed member is fenced quickly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess

SESSION_MS = 6000
OVERRIDES = (
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.heartbeat.interval.ms=500",
    "offsets.topic.num.partitions=4",
    "transaction.state.log.num.partitions=1",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", overrides=OVERRIDES).start(
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
        time.sleep(0.1)


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(broker: BrokerProcess, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in values:
        producer.produce(topic, str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def consumer_config(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **extra,
    }


class Member:
    """A consumer in a thread: reads, commits what it read after every batch and
    before giving a partition up, and records every (partition, offset) it saw."""

    def __init__(
        self, broker: BrokerProcess | str, group: str, topics: list[str], name: str
    ) -> None:
        self.name = name
        bootstrap = broker if isinstance(broker, str) else broker.bootstrap
        self.consumer = Consumer(consumer_config(bootstrap, group, **{"client.id": name}))
        self.seen: list[tuple[str, int, int]] = []
        self.errors: list[str] = []
        self._positions: dict[tuple[str, int], int] = {}
        #: What the rebalance callbacks said it owns (read from the test's thread:
        #: librdkafka's own calls must stay on the consumer's thread).
        self.owned: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _commit(self, partitions: list[TopicPartition] | None = None) -> None:
        wanted = (
            dict(self._positions)
            if partitions is None
            else {
                (p.topic, p.partition): self._positions[(p.topic, p.partition)]
                for p in partitions
                if (p.topic, p.partition) in self._positions
            }
        )
        if not wanted:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in wanted.items()]
        deadline = time.monotonic() + 15
        while True:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                # librdkafka documents STALE_MEMBER_EPOCH as retryable: the member moved to
                # a new epoch while the commit was in flight (Kafka answers the same), and
                # librdkafka does not retry a manual commit itself; it expedites the
                # heartbeat that brings the new epoch.
                stale = exc.args[0].code() == KafkaError.STALE_MEMBER_EPOCH
                if stale and time.monotonic() < deadline:
                    time.sleep(0.05)  # retry backoff while the heartbeat lands
                    continue
                self.errors.append(f"commit: {exc}")
            break
        for key in wanted:
            self._positions.pop(key, None)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit(partitions)
        self.owned -= {(p.topic, p.partition) for p in partitions}

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.owned -= {(p.topic, p.partition) for p in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.consumer.consume(100, 0.2)
            for message in batch:
                if message.error():
                    self.errors.append(str(message.error()))
                    continue
                key = (message.topic(), message.partition())
                self.seen.append((message.topic(), message.partition(), message.offset()))
                self._positions[key] = message.offset() + 1
            self._commit()

    def assignment(self) -> set[tuple[str, int]]:
        return set(self.owned)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self._commit()
        self.consumer.close()


def committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        answer = probe.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
        return {tp.partition: tp.offset for tp in answer}
    finally:
        probe.close()


def describe(broker: BrokerProcess, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30)


def test_a_group_grows_from_1_to_3_and_back_under_load_reading_each_record_once(
    broker: BrokerProcess,
) -> None:
    topic, partitions, total = "grow", 6, 6000
    create_topic(broker, topic, partitions)
    producing = threading.Thread(
        target=lambda: [
            (produce(broker, topic, range(i, i + 200)), time.sleep(0.2))
            for i in range(0, total, 200)
        ],
        daemon=True,
    )
    members = [Member(broker, "grow-g", [topic], "m0")]
    producing.start()
    wait_for(lambda: len(members[0].seen) > 200, 30, "the first member to read")
    members += [Member(broker, "grow-g", [topic], f"m{i}") for i in (1, 2)]
    wait_for(
        lambda: all(len(m.assignment()) == 2 for m in members),
        30,
        "three members with two partitions each",
    )
    counts = [len(m.seen) for m in members]
    wait_for(
        lambda: all(len(m.seen) > c for m, c in zip(members, counts, strict=True)),
        30,
        "all three reading",
    )
    for m in members[1:]:
        m.close()
    wait_for(lambda: len(members[0].assignment()) == partitions, 30, "m0 to own everything")
    producing.join(60)
    wait_for(lambda: sum(len(m.seen) for m in members) >= total, 60, "every record to be read")
    members[0].close()
    seen = Counter((t, p, o) for m in members for t, p, o in m.seen)
    assert sum(seen.values()) == total
    assert max(seen.values()) == 1, "a record was read twice"
    ends = Counter(p for _, p, _ in seen)
    assert committed(broker, "grow-g", topic, partitions) == {p: ends[p] for p in range(partitions)}
    assert all(not m.errors for m in members), [m.errors for m in members]


KILLABLE = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.2)
        if c.assignment():
            print("assigned", len(c.assignment()), flush=True)
    """
)


def test_a_member_killed_with_sigkill_loses_its_partitions_after_the_session_timeout(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, partitions = "killed", 4
    create_topic(broker, topic, partitions)
    survivor = Member(broker, "killed-g", [topic], "survivor")
    wait_for(lambda: len(survivor.assignment()) == partitions, 30, "the first member's assignment")
    victim = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, broker.bootstrap, "killed-g", topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert victim.stdout is not None
        line = victim.stdout.readline()
        assert line.startswith("assigned"), line
        wait_for(lambda: len(survivor.assignment()) == 2, 30, "the survivor to give up two")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: len(survivor.assignment()) == partitions, 30, "the victim's partitions")
        waited = time.monotonic() - killed_at
        assert waited > SESSION_MS / 1000 * 0.5, f"reassigned after {waited:.1f}s"
        group = describe(broker, "killed-g")
        assert [m.client_id for m in group.members] == ["survivor"]
    finally:
        if victim.poll() is None:
            victim.kill()
        survivor.close()


def test_a_regex_subscription_picks_up_a_topic_created_later(broker: BrokerProcess) -> None:
    create_topic(broker, "rx-first", 1)
    produce(broker, "rx-first", range(5))
    member = Member(broker, "rx-g", ["^rx-.*"], "rx")
    try:
        wait_for(lambda: len(member.seen) == 5, 30, "the first topic's records")
        create_topic(broker, "rx-later", 2)
        create_topic(broker, "other-later", 1)
        produce(broker, "rx-later", range(10))
        produce(broker, "other-later", range(3))
        wait_for(lambda: len(member.seen) == 15, 30, "the later topic's records")
        assert {t for t, _, _ in member.seen} == {"rx-first", "rx-later"}
        group = describe(broker, "rx-g")
        (described,) = group.members
        assigned = {(tp.topic, tp.partition) for tp in described.assignment.topic_partitions}
        assert assigned == {("rx-first", 0), ("rx-later", 0), ("rx-later", 1)}
    finally:
        member.close()


def test_consumer_group_describe_and_list_through_the_admin_client(broker: BrokerProcess) -> None:
    create_topic(broker, "described", 3)
    member = Member(broker, "described-g", ["described"], "d1")
    try:
        wait_for(lambda: len(member.assignment()) == 3, 30, "the assignment")
        group = describe(broker, "described-g")
        assert str(group.type).endswith("CONSUMER")
        assert group.partition_assignor == "uniform"
        assert str(group.state).endswith("STABLE")
        (m,) = group.members
        assert m.client_id == "d1"
        assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1, 2}
        assert {tp.partition for tp in m.target_assignment.topic_partitions} == {0, 1, 2}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups().result(30).valid
        types = {g.group_id: str(g.type) for g in listed}
        assert types["described-g"].endswith("CONSUMER")
        produce(broker, "described", range(9))
        wait_for(lambda: len(member.seen) == 9, 30, "the records")
        wait_for(lambda: not member._positions, 30, "the commit")
        listed_cli = headwater(broker, "groups", "list")
        assert "described-g\tconsumer\tStable\tconsumer" in listed_cli.splitlines()
        text = headwater(broker, "groups", "describe", "described-g")
        assert "Type: consumer\tState: Stable\tAssignor: uniform" in text
        assert "Group epoch: 1\tAssignment epoch: 1" in text
        assert "client=d1" in text and "epoch=1 assigned=described[0,1,2]" in text
        as_json = json.loads(headwater(broker, "groups", "describe", "described-g", "--json"))
        assert as_json["type"] == "consumer" and as_json["group_epoch"] == 1
        (m,) = as_json["members"]
        assert m["member_epoch"] == 1 and m["assignment"] == {"described": [0, 1, 2]}
        assert sum(p["committed_offset"] for p in as_json["partitions"]) == 9
        assert [p["lag"] for p in as_json["partitions"]] == [0, 0, 0]
        assert {p["owner"] for p in as_json["partitions"]} == {m["member_id"]}
    finally:
        member.close()


def headwater(broker: BrokerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args, "--bootstrap", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_members_keep_their_partitions_across_a_broker_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES).start(timeout=60)
    try:
        create_topic(b, "restart", 4)
        produce(b, "restart", range(40))
        members = [Member(b, "restart-g", ["restart"], f"r{i}") for i in range(2)]
        wait_for(
            lambda: [len(m.assignment()) for m in members] == [2, 2], 30, "two members, two each"
        )
        before = {m.name: sorted(p for _, p in m.assignment()) for m in members}
        epoch = group_epoch(b, "restart-g")
        b.stop()
        b.start()
        produce(b, "restart", range(40, 80))
        wait_for(lambda: sum(len(m.seen) for m in members) >= 80, 60, "reads after the restart")
        after = {m.name: sorted(p for _, p in m.assignment()) for m in members}
        assert after == before
        assert group_epoch(b, "restart-g") == epoch  # no rebalance
        for m in members:
            m.close()
        seen = Counter((p, o) for m in members for _, p, o in m.seen)
        assert len(seen) == 80
    finally:
        b.stop()


def group_epoch(broker: BrokerProcess, group: str) -> int:
    """The group epoch, through a raw ConsumerGroupDescribe (the admin client hides it)."""
    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest

    from headwater.protocol.messages import decode_response, encode_request
    from tests.integration.wire import WireClient

    wire = WireClient(broker.bootstrap)
    try:
        body = encode_request(
            ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
        )
        response = decode_response(69, 1, wire.request(69, 1, body))
        (described,) = response.groups  # type: ignore[attr-defined]
        return int(described.group_epoch)
    finally:
        wire.close()


def test_a_static_member_that_restarts_gets_its_partitions_back_without_a_rebalance(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, "static", 4)

    def member(name: str, instance: str) -> Member:
        m = Member.__new__(Member)
        m.name = name
        m.consumer = Consumer(
            consumer_config(broker.bootstrap, "static-g", **{"group.instance.id": instance})
        )
        m.seen, m.errors, m._positions, m.owned = [], [], {}, set()
        m._stop = threading.Event()
        m.consumer.subscribe(
            ["static"], on_assign=m._on_assign, on_revoke=m._on_revoke, on_lost=m._on_lost
        )
        m.thread = threading.Thread(target=m._run, name=name, daemon=True)
        m.thread.start()
        return m

    a, b = member("a", "instance-a"), member("b", "instance-b")
    try:
        wait_for(lambda: [len(a.assignment()), len(b.assignment())] == [2, 2], 30, "two each")
        mine = a.assignment()
        epoch = group_epoch(broker, "static-g")
        a.close()  # a static member leaves with epoch -2: its partitions wait for it
        time.sleep(1.5)  # b heartbeats meanwhile: it must not take a's partitions
        assert len(b.assignment()) == 2
        a = member("a-again", "instance-a")
        wait_for(lambda: a.assignment() == mine, 30, "a's old partitions")
        assert group_epoch(broker, "static-g") == epoch
    finally:
        a.close()
        b.close()
