"""An abort begun while the previous commit's markers are still being written.

The fault campaigns' transactional client met a fatal INVALID_TXN_STATE from
``abort_transaction`` twice in one CI run (2026-11-29). The cause is in
librdkafka, and the broker answers as Kafka's does:

* A commit is answered once its PrepareCommit is durable; the markers follow.
  Until they are all written, the coordinator refuses to add partitions to the
  next transaction with CONCURRENT_TRANSACTIONS (Kafka's
  ``TransactionCoordinator.handleAddPartitionsToTransaction``), and librdkafka
  retries.
* librdkafka counts an AddPartitionsToTxn as "maybe received" on every answer
  but success (``rdkafka_txnmgr.c``, ``txn_req_cnt``), so an abort sends
  EndTxn(abort) although the coordinator never took a partition of this
  transaction.
* The coordinator is still at PrepareCommit (or CompleteCommit) of the previous
  transaction, where Kafka's ``endTransaction`` answers an abort with
  INVALID_TXN_STATE, and librdkafka makes that fatal
  (confluentinc/librdkafka#4849, open).

Faults stall markers (a partition without a leader), which is why the campaigns
met it. The workaround an application can use, and the campaigns do: flush the
transaction's records before aborting, so the coordinator has taken its
partitions and the abort ends a transaction it knows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from headwater.coordinator.placement import partition_for
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.idempotence_forensics import ClientLogHandler, TimedLines

pytestmark = pytest.mark.cluster

TXN_PARTITIONS = 4


def transactional_producer(bootstrap: str, transactional_id: str, log: TimedLines) -> Producer:
    logger = logging.getLogger(f"test.txn.{transactional_id}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(ClientLogHandler(log, transactional_id))
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "debug": "eos",
            "log_level": 7,
            "logger": logger,
        }
    )
    producer.init_transactions(60)
    return producer


def refused(producer: Producer, log: TimedLines) -> bool:
    """The coordinator answered the partition CONCURRENT_TRANSACTIONS (librdkafka hands
    its ``debug=eos`` lines over in ``poll``)."""
    producer.poll(0.1)
    return any(
        "another concurrent operation on the same transaction" in line for line in log.lines()
    )


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        zk_connect,
        overrides=[
            f"transaction.state.log.num.partitions={TXN_PARTITIONS}",
            "transaction.state.log.min.isr=2",
        ],
    ).start()
    try:
        yield c
    finally:
        c.stop()


def test_an_abort_while_the_previous_commits_markers_stall(cluster: Cluster) -> None:
    plain_log, flushing_log = TimedLines(), TimedLines()
    plain = transactional_producer(cluster.bootstrap, "stall-plain", plain_log)
    flushing = transactional_producer(cluster.bootstrap, "stall-flushing", flushing_log)
    coordinators = {
        cluster.leader("__transaction_state", partition_for(tid, TXN_PARTITIONS))
        for tid in ("stall-plain", "stall-flushing")
    }
    # The victim leads the only replica of partition 0 and coordinates neither id;
    # partition 1 lives elsewhere.
    victim = next(b for b in range(3) if b not in coordinators)
    elsewhere = next(b for b in range(3) if b != victim)
    admin = cluster.admin()
    admin.create_topics(
        [NewTopic("stall", num_partitions=2, replica_assignment=[[victim], [elsewhere]])],
        request_timeout=30,
    )["stall"].result(30)
    wait_for(lambda: cluster.known_everywhere("stall", 2), what="every broker to know stall")

    for name, producer in (("plain", plain), ("flushing", flushing)):
        producer.begin_transaction()
        producer.produce("stall", f"{name}: committed".encode(), partition=0)
        assert producer.flush(30) == 0
    cluster.kill(victim)  # partition 0 has no leader: the commits' markers wait
    plain.commit_transaction(60)
    flushing.commit_transaction(60)

    # librdkafka's abort right after the coordinator refused the partition: fatal.
    plain.begin_transaction()
    plain.produce("stall", b"plain: aborted", partition=1)
    wait_for(lambda: refused(plain, plain_log), what="the coordinator to refuse the partition")
    with pytest.raises(KafkaException) as raised:
        plain.abort_transaction(30)
    error = raised.value.args[0]
    assert error.name() == "INVALID_TXN_STATE" and error.fatal(), error

    # Flushed first, the records wait until the coordinator takes the partition,
    # which it does once the previous markers are written; then the abort ends a
    # transaction the coordinator knows.
    flushing.begin_transaction()
    flushing.produce("stall", b"flushing: aborted", partition=1)
    wait_for(
        lambda: refused(flushing, flushing_log), what="the coordinator to refuse the partition"
    )
    assert flushing.flush(1) > 0, "delivered while the previous markers stall"
    cluster.restart(victim)
    assert flushing.flush(60) == 0
    flushing.abort_transaction(30)

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "stall-check",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe(["stall"])

        def read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            return len(seen) >= 2

        wait_for(read, timeout=60, what="both committed records")
        while (msg := consumer.poll(2.0)) is not None:  # nothing else is visible
            if msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    assert sorted(seen) == [b"flushing: committed", b"plain: committed"]
