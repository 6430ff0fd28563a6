"""What transactions cost: transactional vs idempotent produce, read_committed vs read_uncommitted.

Why this shape: the machine is small and shared, so every variant runs
against one broker process in alternating rounds with the same
confluent-kafka settings, and the report compares ratios from the same run.

Produce: the same records are sent by an idempotent producer and by a
transactional producer committing every 1, 10 or 100 records. A transaction
adds round trips that do not depend on its size (AddPartitionsToTxn, EndTxn
and the markers the coordinator writes), so the cost per record falls as
transactions grow; the figures show by how much.

Consume: one partition holds transactions of ``--txn-records`` records, every
tenth aborted (10% aborted), written once. It is read from offset 0 by
librdkafka in both isolation levels (read_committed filters the aborted
records on the client, from the aborted-transaction list the broker sends
with each response, as Kafka does) and by Headwater's own consumer. Throughput
is counted as log records scanned per second, the same work in both levels,
and the records delivered are checked against what was committed.

Run: ``.venv/bin/python bench/bench_transactions.py`` (about 2 minutes; see --help).
Prints a table and writes bench/results/transactions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench_broker import settle
from brokers import Headwater, ScratchDir, machine_info
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).parent / "results" / "transactions.json"
MB = 1e6


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10).values():
        future.result(timeout=30)


def _producer(bootstrap: str, transactional_id: str | None) -> Producer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "none",
        "log_level": 4,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    return Producer(config)


def produce_round(
    bootstrap: str, topic: str, value: bytes, count: int, per_txn: int | None
) -> dict[str, float]:
    """Send ``count`` records; ``per_txn`` None: idempotent, else commit every ``per_txn``."""
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    txn_id = None if per_txn is None else f"bench-{uuid.uuid4().hex[:8]}"
    producer = _producer(bootstrap, txn_id)
    if per_txn is not None:
        producer.init_transactions(30)
    start = time.perf_counter()
    sent = 0
    transactions = 0
    while sent < count:
        n = min(per_txn or count, count - sent)
        if per_txn is not None:
            producer.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.005)
            producer.poll(0)
        sent += n
        if per_txn is not None:
            producer.commit_transaction(30)
            transactions += 1
    producer.flush(30)
    seconds = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"produce failed: {failures[:3]}")
    return {
        "seconds": seconds,
        "records_per_s": count / seconds,
        "mb_per_s": count * len(value) / seconds / MB,
        "transactions_per_s": transactions / seconds if transactions else 0.0,
    }


def write_aborted_log(
    bootstrap: str, topic: str, value: bytes, transactions: int, per_txn: int
) -> int:
    """Write ``transactions`` transactions, every tenth aborted; returns records committed."""
    producer = _producer(bootstrap, f"bench-abort-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(30)
    committed = 0
    for i in range(transactions):
        producer.begin_transaction()
        for _ in range(per_txn):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.005)
        if i % 10 == 9:
            # Flush first: librdkafka drops still-queued records on abort, and the
            # aborted records must reach the log for the 10% to be real.
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += per_txn
    producer.flush(30)
    return committed


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-end", "log_level": 4})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def consume_confluent(
    bootstrap: str, topic: str, isolation: str, log_end: int, timeout_s: float = 120.0
) -> tuple[float, int]:
    """Read to the log end; returns (seconds, records delivered)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.max.bytes": 8 << 20,
            "max.partition.fetch.bytes": 8 << 20,
            "log_level": 4,
        }
    )
    delivered = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        start = time.perf_counter()
        deadline = start + timeout_s
        while time.perf_counter() < deadline:
            done = False
            for msg in consumer.consume(1000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # EOF at the log end: every record (and marker) was scanned.
                        if msg.offset() >= log_end:
                            done = True
                        continue
                    raise RuntimeError(str(err))
                delivered += 1
            if done:
                return time.perf_counter() - start, delivered
        raise TimeoutError(f"{isolation}: {delivered} records after {timeout_s} s")
    finally:
        consumer.close()


def consume_headwater(
    bootstrap: str, topic: str, isolation: str, log_end: int, timeout_s: float = 120.0
) -> tuple[float, int]:
    """The same read with Headwater's own consumer."""
    from headwater.client import Consumer as HwConsumer
    from headwater.client import TopicPartition as HwTopicPartition

    consumer = HwConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    tp = HwTopicPartition(topic, 0)
    delivered = 0
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        start = time.perf_counter()
        deadline = start + timeout_s
        while time.perf_counter() < deadline:
            delivered += len(consumer.poll(0.5))
            if consumer.position(tp) >= log_end:
                return time.perf_counter() - start, delivered
        raise TimeoutError(f"headwater {isolation}: {delivered} records after {timeout_s} s")
    finally:
        consumer.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    value = os.urandom(args.record_size)
    produce: dict[str, list[dict[str, float]]] = {}
    consume: dict[str, list[float]] = {}
    with ScratchDir("hw-bench-txn-") as scratch, Headwater(scratch / "data") as broker:
        boot = broker.bootstrap
        variants: list[tuple[str, int | None, int]] = [("idempotent", None, args.records)]
        for per_txn in (1, 10, 100):
            count = args.records if per_txn > 1 else args.records_single
            variants.append((f"transactional/{per_txn}", per_txn, count))
        for round_no in range(args.rounds):
            for label, per_txn, count in variants:
                topic = f"txn-produce-{round_no}-{label.replace('/', '-')}"
                create_topic(boot, topic)
                settle()
                figures = produce_round(boot, topic, value, count, per_txn)
                produce.setdefault(label, []).append(figures)
                print(f"  produce {label:18} {figures['records_per_s']:10.0f} rec/s", flush=True)
        topic = "txn-consume-10pct-aborted"
        create_topic(boot, topic)
        committed = write_aborted_log(boot, topic, value, args.transactions, args.txn_records)
        log_end = end_offset(boot, topic)
        data_records = args.transactions * args.txn_records
        readers = [
            ("confluent/read_uncommitted", consume_confluent, "read_uncommitted"),
            ("confluent/read_committed", consume_confluent, "read_committed"),
            ("headwater/read_uncommitted", consume_headwater, "read_uncommitted"),
            ("headwater/read_committed", consume_headwater, "read_committed"),
        ]
        for _ in range(args.rounds):
            for label, reader, isolation in readers:
                settle()
                seconds, delivered = reader(boot, topic, isolation, log_end)
                expected = committed if isolation == "read_committed" else data_records
                if delivered != expected:
                    raise RuntimeError(f"{label}: delivered {delivered}, expected {expected}")
                consume.setdefault(label, []).append(data_records / seconds)
                print(f"  consume {label:28} {data_records / seconds:10.0f} rec/s", flush=True)
    best_produce = {k: max(v, key=lambda f: f["records_per_s"]) for k, v in produce.items()}
    idem = best_produce["idempotent"]["records_per_s"]
    best_consume = {k: max(v) for k, v in consume.items()}
    return {
        "machine": machine_info(),
        "args": vars(args),
        "produce": best_produce,
        "produce_vs_idempotent": {
            k: v["records_per_s"] / idem for k, v in best_produce.items() if k != "idempotent"
        },
        "consume_records_scanned_per_s": best_consume,
        "read_committed_vs_uncommitted": {
            client: best_consume[f"{client}/read_committed"]
            / best_consume[f"{client}/read_uncommitted"]
            for client in ("confluent", "headwater")
        },
    }


def print_report(result: dict[str, Any]) -> None:
    print("\nproduce (best of rounds)")
    print(f"{'variant':20} {'records/s':>11} {'MB/s':>8} {'txn/s':>8} {'vs idempotent':>14}")
    for label, f in result["produce"].items():
        ratio = result["produce_vs_idempotent"].get(label, 1.0)
        print(
            f"{label:20} {f['records_per_s']:11.0f} {f['mb_per_s']:8.2f} "
            f"{f['transactions_per_s']:8.0f} {ratio:14.2f}"
        )
    print("\nconsume, 10% aborted transactions (log records scanned per second, best of rounds)")
    for label, rate in result["consume_records_scanned_per_s"].items():
        print(f"{label:30} {rate:11.0f}")
    for client, ratio in result["read_committed_vs_uncommitted"].items():
        print(f"{client}: read_committed / read_uncommitted = {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000, help="records per produce round")
    parser.add_argument(
        "--records-single", type=int, default=2_000, help="records at 1 record per transaction"
    )
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--transactions", type=int, default=500, help="consume log: transactions")
    parser.add_argument("--txn-records", type=int, default=100, help="consume log: records each")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    result = run(args)
    print_report(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
