"""What transactions cost, seen from Headwater's own client.

Two figures from issue 10, on one broker process, same client settings:

* **produce**: records/s of a transactional producer committing every 1, 10
  and 100 records, against the idempotent producer (no transactions) on the
  same records. A commit is a flush plus an EndTxn round trip plus the
  coordinator's markers, so small transactions pay that per record;
* **consume**: records/s of ``read_committed`` against ``read_uncommitted``
  over the same log, in which 10% of the transactions were aborted.
  read_committed skips aborted batches whole (from their headers) and reads
  one control record per transaction; read_uncommitted decodes everything,
  so it hands out more records.

Rounds alternate between the variants, so load on the shared machine hits
both alike; medians are reported. Run:
``.venv/bin/python bench/bench_client_transactions.py`` (about a minute; --help for
sizes). Prints a table and writes bench/results/client_transactions.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from brokers import Headwater, ScratchDir, machine_info

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.producer import Producer
from headwater.client.types import TopicPartition

RESULTS = Path(__file__).parent / "results" / "client_transactions.json"
VALUE = b"x" * 100


def produce_idempotent(bootstrap: str, topic: str, records: int) -> float:
    with Producer(bootstrap_servers=bootstrap, linger_ms=1) as p:
        start = time.perf_counter()
        for i in range(records):
            p.send(topic, VALUE, partition=i % 2)
        p.flush()
        return records / (time.perf_counter() - start)


def produce_transactional(
    bootstrap: str, topic: str, records: int, per_txn: int, tid: str
) -> float:
    with Producer(bootstrap_servers=bootstrap, linger_ms=1, transactional_id=tid) as p:
        p.init_transactions()
        start = time.perf_counter()
        sent = 0
        while sent < records:
            p.begin_transaction()
            for i in range(min(per_txn, records - sent)):
                p.send(topic, VALUE, partition=(sent + i) % 2)
            sent += per_txn
            p.commit_transaction()
        return records / (time.perf_counter() - start)


def build_aborted_log(bootstrap: str, topic: str, txns: int, per_txn: int) -> int:
    """``txns`` transactions of ``per_txn`` records, every tenth aborted; committed count."""
    committed = 0
    with Producer(bootstrap_servers=bootstrap, linger_ms=5, transactional_id="bench-log") as p:
        p.init_transactions()
        for t in range(txns):
            p.begin_transaction()
            for i in range(per_txn):
                p.send(topic, VALUE, partition=i % 2)
            if t % 10 == 9:
                # Flush first: abort drops what is not sent yet, and the point is
                # a log that holds the aborted records.
                p.flush()
                p.abort_transaction()
            else:
                p.commit_transaction()
                committed += per_txn
    return committed


def consume(bootstrap: str, topic: str, isolation: str) -> tuple[float, int]:
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with Consumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest"
    ) as c:
        c.assign(tps)
        ends = c.end_offsets(tps)
        c.poll_arrow(0)  # connect, first fetch on the wire
        c.seek_to_beginning(tps)
        start = time.perf_counter()
        rows = 0
        while any(c.position(tp) < end for tp, end in ends.items()):
            rows += c.poll_arrow(1.0).num_rows
        return rows / (time.perf_counter() - start), rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="records per produce round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-transactions", type=int, default=2000)
    parser.add_argument("--log-per-transaction", type=int, default=50)
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": machine_info(), "args": vars(args)}
    with ScratchDir("bench-txn-") as tmp, Headwater(tmp / "data") as broker:
        b = broker.bootstrap
        with AdminClient(b) as admin:
            admin.create_topics([("produce", 2, {}), ("aborted-log", 2, {})])
        produce: dict[str, list[float]] = {
            "idempotent": [],
            "txn-1": [],
            "txn-10": [],
            "txn-100": [],
        }
        for r in range(args.rounds):
            produce["idempotent"].append(produce_idempotent(b, "produce", args.records))
            for n in (1, 10, 100):
                # One record per transaction is slow: fewer records keep the round short.
                records = args.records if n > 1 else max(100, args.records // 10)
                produce[f"txn-{n}"].append(
                    produce_transactional(b, "produce", records, n, f"bench-{n}-{r}")
                )
        committed = build_aborted_log(
            b, "aborted-log", args.log_transactions, args.log_per_transaction
        )
        consume_rates: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
        rows: dict[str, int] = {}
        for _ in range(args.rounds):
            for isolation in ("read_uncommitted", "read_committed"):
                rate, n = consume(b, "aborted-log", isolation)
                consume_rates[isolation].append(rate)
                rows[isolation] = n
    assert rows["read_committed"] == committed, (rows, committed)
    total = args.log_transactions * args.log_per_transaction
    assert rows["read_uncommitted"] == total, (rows, total)
    result["produce_records_per_s"] = {k: statistics.median(v) for k, v in produce.items()}
    result["consume_records_per_s"] = {k: statistics.median(v) for k, v in consume_rates.items()}
    result["consume_rows"] = rows
    print("produce (100 B records, Headwater client, median records/s)")
    for k, v in result["produce_records_per_s"].items():
        print(f"  {k:<12} {v:>10,.0f}")
    # Both read the same log: the time to read all of it compares the two directly.
    result["consume_log_seconds"] = {
        k: rows[k] / v for k, v in result["consume_records_per_s"].items()
    }
    print(f"consume ({args.log_transactions} txns x {args.log_per_transaction}, 10% aborted)")
    for k, v in result["consume_records_per_s"].items():
        secs = result["consume_log_seconds"][k]
        print(f"  {k:<17} {v:>10,.0f} records/s  ({rows[k]:,} records, whole log {secs:.3f} s)")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
