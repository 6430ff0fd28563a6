"""CreateTopics refuses bad configs and counts with Kafka's errors, and the connection lives on.

Before, ``retention.ms=abc`` made the broker drop the connection (clients saw
NETWORK_EXCEPTION) and a non-positive replication factor was reported as
"larger than the 1 available broker". Driven by both admin clients a Kafka
user has: confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient

from tests.integration.broker_process import BrokerProcess

INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40


def _confluent_error(admin: AdminClient, topic: NewTopic) -> tuple[int, str]:
    future = admin.create_topics([topic], request_timeout=15)[topic.topic]
    with pytest.raises(KafkaException) as info:
        future.result(30)
    err = info.value.args[0]
    return err.code(), err.str()


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    yield client
    client.close()


@pytest.mark.parametrize(
    ("configs", "words"),
    [
        ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms"),
        ({"segment.bytes": "12"}, "segment.bytes"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"unclean.leader.election.enable": "maybe"}, "true or false"),
        ({"max.message.bytes": str(2**31)}, "Not a number of type INT"),
    ],
)
def test_confluent_bad_config_gets_invalid_config(
    admin: AdminClient, configs: dict[str, str], words: str
) -> None:
    code, message = _confluent_error(admin, NewTopic("bad-config", 1, 1, config=configs))
    assert code == INVALID_CONFIG
    assert words in message
    # Nothing was created, and the same client is still served.
    assert "bad-config" not in admin.list_topics(timeout=15).topics
    admin.create_topics([NewTopic("good", 1, 1, config={"retention.ms": "60000"})])["good"].result(
        30
    )
    assert "good" in admin.list_topics(timeout=15).topics


@pytest.mark.parametrize("partitions", [0])  # librdkafka refuses the others itself
def test_confluent_non_positive_partitions(admin: AdminClient, partitions: int) -> None:
    code, message = _confluent_error(admin, NewTopic("bad-count", partitions, 1))
    assert code == INVALID_PARTITIONS
    assert "non-positive" in message


@pytest.mark.parametrize("factor", [0])  # librdkafka refuses -2 itself
def test_confluent_non_positive_replication_factor(admin: AdminClient, factor: int) -> None:
    code, message = _confluent_error(admin, NewTopic("bad-rf", 1, factor))
    assert code == INVALID_REPLICATION_FACTOR
    assert "larger than 0" in message


def test_confluent_defaults_with_minus_one(admin: AdminClient) -> None:
    """-1 partitions and -1 replicas mean the broker's defaults, as in Kafka (KIP-464)."""
    admin.create_topics([NewTopic("defaults", -1, -1)])["defaults"].result(30)
    topic = admin.list_topics("defaults", timeout=15).topics["defaults"]
    assert len(topic.partitions) == 1  # num.partitions


def test_kafka_python_bad_config_keeps_the_connection(kp_admin: KafkaAdminClient) -> None:
    def create(name: str, **options: object) -> tuple[int, str]:
        result = kp_admin.create_topics({name: options}, raise_errors=False)
        (topic,) = result["topics"]
        assert topic["name"] == name
        return topic["error_code"], topic["error_message"] or ""

    code, message = create("bad-config", num_partitions=1, configs={"retention.ms": "abc"})
    assert code == INVALID_CONFIG
    assert "Invalid value abc for configuration retention.ms" in message
    # The same client (and connection) goes on: a good topic, then bad counts.
    assert create("good", num_partitions=2, replication_factor=1) == (0, "")
    assert "good" in kp_admin.list_topics()
    for partitions in (0, -2, -3):
        code, message = create("bad-count", num_partitions=partitions)
        assert code == INVALID_PARTITIONS
        assert "non-positive" in message
    for factor in (0, -2):
        code, message = create("bad-rf", num_partitions=1, replication_factor=factor)
        assert code == INVALID_REPLICATION_FACTOR
        assert "larger than 0" in message
    assert "bad-config" not in kp_admin.list_topics()
