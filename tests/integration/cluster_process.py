"""A real Headwater cluster for integration tests: N broker processes on one ZooKeeper.

Each broker is a ``python -m headwater.cli serve`` process with
``broker.id`` and ``zookeeper.connect`` overrides, exactly as a user starts
one. Short ZooKeeper sessions and lag limits make failover take seconds.
Cluster state is read through confluent-kafka's admin client, the way an
operator's tools see it.
"""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.request
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.client.connection import BrokerConnection
from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import ZERO_UUID
from tests.integration.broker_process import BrokerProcess, free_port

T = TypeVar("T")

#: Failure detection in seconds, not Kafka's default 18 s / 30 s.
FAST_FAILOVER = (
    "zookeeper.session.timeout.ms=3000",
    "replica.lag.time.max.ms=3000",
    "replica.fetch.wait.max.ms=200",
    "replica.fetch.backoff.ms=200",
    "group.initial.rebalance.delay.ms=0",
    "offsets.topic.num.partitions=4",
)


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # the cluster may be between states
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class Cluster:
    """Brokers 0..n-1 on ``zk_connect``, each with its own data directory."""

    def __init__(
        self,
        root: Path,
        zk_connect: str,
        size: int = 3,
        overrides: Sequence[str] = (),
        *,
        metrics: bool = False,
        racks: Sequence[str | None] = (),
    ) -> None:
        """``racks[i]`` is broker i's ``broker.rack`` (None or missing: no rack)."""
        self.zk_connect = zk_connect
        self.metrics_ports = [free_port() for _ in range(size)] if metrics else []
        self.brokers = [
            BrokerProcess(
                root / f"broker-{i}",
                port=free_port(),
                overrides=[
                    f"broker.id={i}",
                    f"zookeeper.connect={zk_connect}",
                    *FAST_FAILOVER,
                    *overrides,
                    *([f"broker.rack={racks[i]}"] if i < len(racks) and racks[i] else []),
                    *(
                        [f"headwater.metrics.listen=127.0.0.1:{self.metrics_ports[i]}"]
                        if metrics
                        else []
                    ),
                ],
            )
            for i in range(size)
        ]
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.proc is not None)

    def start(self) -> Cluster:
        for b in self.brokers:
            b.start(timeout=60)
        wait_for(lambda: len(self.live_broker_ids()) == len(self.brokers), what="all brokers")
        return self

    def stop(self) -> None:
        for b in self.brokers:
            proc = b.proc
            if proc is None:
                continue
            try:
                b.stop()
            except Exception:
                # BrokerProcess.stop forgets the process even when it failed.
                proc.kill()
                proc.wait()
        self.print_logs()

    def print_logs(self, tail: int = 80) -> None:
        """Each broker's last log lines on stdout, which pytest shows only for a failed test:
        CI keeps nothing else of a cluster that misbehaved under load."""
        for broker_id, b in enumerate(self.brokers):
            print(f"----- broker {broker_id}: last {tail} log lines -----")
            for line in b.lines[-tail:]:
                print(line)

    def metric(self, broker_id: int, name: str) -> float:
        """One Prometheus sample of a broker's /metrics (the sum over its labels)."""
        url = f"http://127.0.0.1:{self.metrics_ports[broker_id]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith((name + " ", name + "{"))
        )

    def admin(self) -> AdminClient:
        # A fresh client each time: the set of live bootstrap brokers changes.
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def live_broker_ids(self) -> set[int]:
        md = self.admin().list_topics(timeout=5)
        return set(md.brokers)

    def controller_id(self) -> int:
        admin = self.admin()
        return int(admin.describe_cluster(request_timeout=5).result().controller.id)

    def create_topic(
        self, name: str, partitions: int = 1, replication: int = 3, **configs: str
    ) -> None:
        topic = NewTopic(name, partitions, replication, config=dict(configs))
        admin = self.admin()  # keep it alive until the future completes
        admin.create_topics([topic], request_timeout=30)[name].result(30)
        wait_for(lambda: self.all_have_leaders(name, partitions), what=f"leaders of {name}")
        wait_for(
            lambda: self.known_everywhere(name, partitions), what=f"every broker to know {name}"
        )

    def known_everywhere(self, topic: str, count: int) -> bool:
        """Every running broker's own Metadata answer lists ``count`` partitions of
        ``topic``, each with a leader.

        Each broker's cluster view follows ZooKeeper on its own, as Kafka's metadata
        caches do, so one broker may already name the leaders while another does not
        know the topic yet. A test that asks the admin client next may be answered by
        either (Kafka's own test utils wait for the same propagation).
        """
        return all(
            _run_in_thread(lambda b=b: _partitions_with_leaders(b.host, b.port, topic)) == count
            for b in self.brokers
            if b.proc is not None
        )

    def partitions(self, topic: str) -> dict[int, Any]:
        md = self.admin().list_topics(topic, timeout=5)
        return dict(md.topics[topic].partitions)

    def all_have_leaders(self, topic: str, count: int) -> bool:
        parts = self.partitions(topic)
        return len(parts) == count and all(p.leader >= 0 for p in parts.values())

    def leader(self, topic: str, partition: int = 0) -> int:
        return int(self.partitions(topic)[partition].leader)

    def isr(self, topic: str, partition: int = 0) -> set[int]:
        return set(self.partitions(topic)[partition].isrs)

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        self.brokers[broker_id].start(timeout=60)

    def pause(self, broker_id: int) -> None:
        proc = self.brokers[broker_id].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        proc = self.brokers[broker_id].proc
        assert proc is not None
        proc.send_signal(signal.SIGCONT)


def _run_in_thread(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(make())`` on a thread of its own: a test driving a browser through
    Playwright's sync API already runs an event loop on this one, where
    ``asyncio.run`` refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


async def _partitions_with_leaders(host: str, port: int, topic: str) -> int:
    """How many partitions of ``topic`` the broker at host:port names a leader for,
    asked of it alone (no auto-creation)."""
    conn = await BrokerConnection.open(host, port, request_timeout_ms=5_000, connect_timeout_s=5)
    try:
        data = {
            "topics": [{"name": topic, "topic_id": ZERO_UUID}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        }
        resp = await conn.request(ApiKey.METADATA, data)
        return sum(
            1
            for t in resp.topics
            if t.name == topic and int(t.error_code) == 0
            for p in t.partitions
            if int(p.leader_id) >= 0
        )
    finally:
        conn.close()


def read_committed(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout: float = 60,
    settle_s: float = 1.5,
    **config: Any,
) -> list[bytes]:
    """Every committed value of ``topic`` as a read_committed consumer sees it: up to
    ``expected`` within ``timeout``, then ``settle_s`` more, so that a duplicate or an
    aborted record arriving late is counted too. ``config``: more consumer settings."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **config,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values
