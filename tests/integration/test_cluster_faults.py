"""Faults on a real 3-broker cluster on a real ZooKeeper (issue 20).

A broker paused past its ZooKeeper session (SIGSTOP, then SIGCONT) is the
hostile case: its session expires, the controller moves its leaderships and
takes it out of every ISR, and it wakes up with a picture of the cluster that
is several seconds old.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from tests.integration.cluster_process import Cluster, wait_for

pytestmark = pytest.mark.cluster

SESSION_MS = 3000  # the cluster fixture's zookeeper.session.timeout.ms
#: Longer than the session: the controller has moved everything away meanwhile.
PAUSE_S = SESSION_MS / 1000 + 3


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect).start()
    try:
        yield c
    finally:
        c.stop()


def create(cluster: Cluster, name: str, replicas: list[int], **configs: str) -> None:
    """One partition with ``replicas`` in order (the first is the preferred leader)."""
    admin = cluster.admin()
    topic = NewTopic(name, num_partitions=1, replica_assignment=[replicas], config=dict(configs))
    admin.create_topics([topic], request_timeout=30)[name].result(30)
    wait_for(lambda: cluster.leader(name) == replicas[0], timeout=30, what=f"leader of {name}")
    wait_for(lambda: cluster.isr(name) == set(replicas), timeout=30, what=f"full ISR of {name}")


class BusyWriter:
    """An ``acks=1`` producer writing as fast as it can; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[int] = []
        self.acked_at: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "1",
                "linger.ms": 2,
                "message.timeout.ms": 60_000,
                "retries": 1_000_000,
            }
        )
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.acked.append(int(msg.value()))  # type: ignore[attr-defined]
        self.acked_at.append(time.monotonic())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    self.topic, value=str(i).encode(), on_delivery=self._delivered
                )
                i += 1
            except BufferError:
                pass
            self._producer.poll(0.001 if i % 50 else 0.01)

    def start(self) -> BusyWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(60)


def pause_past_the_session(cluster: Cluster, broker: int, others: list[int]) -> None:
    """SIGSTOP ``broker`` until the others see it gone, a little longer, then SIGCONT."""
    cluster.pause(broker)
    try:
        started = time.monotonic()
        admin_bootstrap = ",".join(cluster.brokers[b].bootstrap for b in others)

        def gone() -> bool:
            from confluent_kafka.admin import AdminClient

            md = AdminClient({"bootstrap.servers": admin_bootstrap}).list_topics(timeout=5)
            return broker not in md.brokers

        wait_for(gone, timeout=60, what=f"the session of broker {broker} to expire")
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - started)))
    finally:
        cluster.resume(broker)


def test_a_returning_follower_rejoins_the_isr_of_an_idle_partition(cluster: Cluster) -> None:
    """Item 1: V leads a busy partition and follows an idle one; paused past its
    session, it leaves both ISRs. Back, it rejoins the idle partition's ISR though
    nothing is written there (Kafka: within replica.lag.time.max.ms)."""
    v, a, b = 0, 1, 2
    create(cluster, "busy", [v, a, b])
    create(cluster, "quiet", [a, v, b])
    seed = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    seed.produce("quiet", value=b"only")
    assert seed.flush(30) == 0
    writer = BusyWriter(cluster.bootstrap, "busy").start()
    try:
        wait_for(lambda: len(writer.acked) > 100, timeout=30, what="writes to busy")
        pause_past_the_session(cluster, v, [a, b])
        wait_for(lambda: v not in cluster.isr("quiet"), timeout=30, what="V out of quiet's ISR")
        resumed = time.monotonic()
        # Nothing writes to "quiet" from here on.
        wait_for(lambda: v in cluster.isr("quiet"), timeout=30, what="V back in quiet's ISR")
        rejoined_s = time.monotonic() - resumed
        wait_for(lambda: v in cluster.isr("busy"), timeout=60, what="V back in busy's ISR")
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    print(f"rejoined the idle ISR {rejoined_s:.1f} s after the resume")
