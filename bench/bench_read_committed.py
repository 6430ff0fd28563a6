"""read_committed against read_uncommitted consume throughput, 10% aborted transactions (issue 10).

A partition is filled offline through the log API with transactions of
``--txn-records`` records from a few producers, one in ten ending with an
ABORT marker and the rest with COMMIT (written by ``append_control_marker``,
as WriteTxnMarkers does), so the log has its ``.txnindex`` files and
producer snapshots exactly as a broker would leave them. Then ``headwater
serve`` opens that data directory and confluent-kafka consumes the whole
partition twice, once per isolation level, from a fresh group each time.
read_committed responses carry the aborted-transaction list and librdkafka
drops the aborted records; the records stay zero-copy on the broker.

Run: ``.venv/bin/python bench/bench_read_committed.py [--records N] [--txn-records K]``.
Prints a table and writes bench/results/read_committed.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from brokers import Headwater, machine_info
from confluent_kafka import Consumer

from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.records.record import RecordBatchBuilder

RESULTS = Path(__file__).parent / "results" / "read_committed.json"
TOPIC = "rc-bench"
PRODUCERS = 4


def fill(data_dir: Path, records: int, txn_records: int, value_bytes: int) -> tuple[int, int]:
    """Write ``records`` transactional records; returns (committed records, log end offset)."""
    logs = LogDirectory(data_dir, LogConfig(segment_bytes=64 << 20))
    logs.open()
    logs.create_topic(TOPIC, 1)
    log = logs.log(TOPIC, 0)
    now = int(time.time() * 1000)
    value = b"v" * value_bytes
    sequences = [0] * PRODUCERS
    committed = written = txn = 0
    while written < records:
        pid = txn % PRODUCERS
        builder = RecordBatchBuilder(
            producer_id=1000 + pid,
            producer_epoch=0,
            base_sequence=sequences[pid],
            is_transactional=True,
        )
        for i in range(txn_records):
            builder.append(now, b"k%d" % i, value)
        log.append(builder.build(), now)
        sequences[pid] += txn_records
        aborted = txn % 10 == 9
        log.append_control_marker(1000 + pid, 0, not aborted, 0, now)
        if not aborted:
            committed += txn_records
        written += txn_records
        txn += 1
    end = log.log_end_offset
    logs.close()
    return committed, end


def consume(
    bootstrap: str, isolation: str, expected: int, timeout_s: float = 300
) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 52428800,
        }
    )
    consumer.subscribe([TOPIC])
    count = 0
    started = None
    deadline = time.monotonic() + timeout_s
    try:
        while count < expected and time.monotonic() < deadline:
            batch = consumer.consume(10000, 0.5)
            for msg in batch:
                if msg.error():
                    continue
                if started is None:
                    started = time.perf_counter()
                count += 1
        elapsed = time.perf_counter() - (started or time.perf_counter())
    finally:
        consumer.close()
    return {
        "records": count,
        "seconds": elapsed,
        "records_per_s": count / elapsed if elapsed > 0 else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--txn-records", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        committed, end = fill(data, args.records, args.txn_records, args.value_bytes)
        rows: dict[str, Any] = {}
        with Headwater(data) as broker:
            # Two rounds each, alternating: the first round pays for the broker's
            # first touches of the log; the second is the one reported.
            for isolation, expected in (
                ("read_uncommitted", args.records),
                ("read_committed", committed),
            ) * 2:
                cpu_before = broker.cpu_seconds()
                row = consume(broker.bootstrap, isolation, expected)
                row["broker_cpu_s"] = broker.cpu_seconds() - cpu_before
                row["expected"] = expected
                rows[isolation] = row
    print(
        f"{args.records} records in transactions of {args.txn_records}, 10% aborted; log end {end}"
    )
    print(f"{'isolation':18} {'records':>9} {'rec/s':>10} {'broker cpu s':>12}")
    for isolation, row in rows.items():
        print(
            f"{isolation:18} {row['records']:>9} {row['records_per_s']:>10.0f} "
            f"{row['broker_cpu_s']:>12.2f}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "records": args.records,
                "txn_records": args.txn_records,
                "value_bytes": args.value_bytes,
                "aborted_fraction": 0.1,
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
