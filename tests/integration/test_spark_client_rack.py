"""The ``headwater`` Spark source with ``kafka.client.rack`` on 3 brokers in racks a, b, c.

Spark ``local[2]`` runs the tasks; every partition is led by broker 0 (rack a)
with a follower on broker 1 (rack b), and the brokers run Kafka's
``RackAwareReplicaSelector``. A batch read with ``kafka.client.rack=b`` must
return every record while broker 1 serves the bytes (per-topic bytes-out).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka.admin import NewTopic

from headwater.client.producer import Producer
from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.zookeeper import fresh_chroot_connect

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

SELECTOR = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_total"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer
) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("spark-rack"),
        fresh_chroot_connect(zookeeper),
        overrides=[SELECTOR],
        metrics=True,
        racks=["a", "b", "c"],
    ).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import headwater.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-spark-rack-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    headwater.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


def bytes_out(cluster: Cluster, broker: int, topic: str) -> float:
    return cluster.metric(broker, f'{BYTES_OUT}{{topic="{topic}"}}')


def test_batch_read_with_client_rack_reads_from_the_follower_in_that_rack(
    spark: Any, cluster: Cluster
) -> None:
    topic = f"spark-rack-{uuid.uuid4().hex[:8]}"
    placement = [[0, 1, 2], [0, 2, 1]]  # both led in rack a, a copy in rack b
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, num_partitions=2, replica_assignment=placement)])[
        topic
    ].result(30)
    for p in (0, 1):
        wait_for(lambda p=p: cluster.isr(topic, p) == {0, 1, 2}, what=f"full ISR of {p}")
    per_partition = 1500
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for i in range(per_partition):
            for p in (0, 1):
                producer.send(topic, b"%d:%d" % (p, i), partition=p)
        producer.flush(60)

    rows = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("kafka.client.rack", "b")
        .option("minPartitions", 4)  # several tasks per partition, each starting fresh
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    want = [(p, i, b"%d:%d" % (p, i)) for p in (0, 1) for i in range(per_partition)]
    assert got == want
    assert bytes_out(cluster, 1, topic) > 0  # rack b's follower served the tasks
    assert bytes_out(cluster, 0, topic) == 0  # the leader served no record
    assert bytes_out(cluster, 2, topic) == 0
