"""DescribeLogDirs answers with the data directory and each partition's bytes."""

from __future__ import annotations

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from tests.integration.broker_process import BrokerProcess


def test_describe_log_dirs_reports_partition_sizes(broker: BrokerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for _ in range(20):
        producer.send("sized", b"x" * 1000, partition=0)
    producer.flush()
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.describe_log_dirs()
    finally:
        admin.close()
    [per_broker] = result
    [log_dir] = per_broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.data_dir.resolve())
    assert log_dir["total_bytes"] > 0
    sizes = {
        (topic["name"], p["partition_index"]): p["partition_size"]
        for topic in log_dir["topics"]
        for p in topic["partitions"]
    }
    on_disk = sum(
        f.stat().st_size for f in (broker.data_dir / "sized-0").iterdir() if f.suffix == ".log"
    )
    assert sizes[("sized", 0)] == on_disk >= 20 * 1000
