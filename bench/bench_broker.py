"""Produce and consume throughput: Headwater (zero-copy on and off) against tansu and Kafka.

Why this shape: the machine is small and noisy, so every figure is a ratio
of measurements taken side by side in one run. All three brokers run at
once and each round visits them in turn with the same confluent-kafka
settings, so drift (other work on the box, CPU frequency) hits all of them
alike. The raw loopback limit is measured by the same script, with the two
ways a broker can send a cached file: ``sendfile`` and ``read`` + ``sendall``.

Broker CPU-seconds per GB come from the broker process's utime + stime
(``/proc/PID/stat``) before and after each phase; for the consume phase
they say what zero-copy saves, whatever the wall-clock rate.

``--peer kafka`` adds Apache Kafka 4.x (``kafka_peer.py``: jars fetched by mvn
on first use, one KRaft combined-mode node) to the brokers of every round;
``--warmup`` first gives every broker an untimed round a tenth the size (the
JVM compiles its hot paths in the first seconds).

Run: ``.venv/bin/python bench/bench_broker.py`` (defaults take ~1 minute;
see ``--help`` for sizes). Prints a table and writes bench/results/broker.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from brokers import BrokerUnderTest, Headwater, ScratchDir, Tansu, machine_info
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_peer import Kafka, peer_info

RESULTS = Path(__file__).parent / "results" / "broker.json"
GB = 1e9
MB = 1e6

#: The Kafka peer's one departure from its defaults, see ``run``.
KAFKA_OVERRIDES = {"file.delete.delay.ms": "1000"}

#: Phases give up after this long: a broker that stalls costs a bounded wait.
PHASE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Workload:
    label: str
    record_size: int
    count: int

    @property
    def total_bytes(self) -> int:
        return self.record_size * self.count


@dataclass
class Phase:
    """One produce or consume pass: wall time, records, and who spent the CPU."""

    seconds: float
    records: int
    bytes: int
    broker_cpu_s: float
    client_cpu_s: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / MB

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def broker_cpu_s_per_gb(self) -> float:
        return self.broker_cpu_s / (self.bytes / GB)


def producer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same settings for every broker; librdkafka defaults otherwise."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes,
        "compression.type": "none",
        "enable.idempotence": False,
    }


def consumer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    # max.partition.fetch.bytes = fetch.max.bytes: tansu honours only the
    # request's max_bytes, Headwater both; equal limits give both the same
    # bytes per round trip.
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "fetch.max.bytes": args.fetch_bytes,
        "max.partition.fetch.bytes": args.fetch_bytes,
        "fetch.wait.max.ms": 500,
    }


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10).values():
        future.result(timeout=30)


def delete_topic(bootstrap: str, name: str) -> None:
    """Free the round's data: see ``run`` for why the footprint must stay small."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    for future in admin.delete_topics([name], operation_timeout=10).values():
        future.result(timeout=30)


def produce(broker: BrokerUnderTest, topic: str, work: Workload, args: argparse.Namespace) -> Phase:
    producer = Producer(producer_config(broker.bootstrap, args))
    value = os.urandom(work.record_size)  # incompressible, not that compression is on
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    cpu0, client0, start = broker.cpu_seconds(), time.process_time(), time.perf_counter()
    deadline = start + PHASE_TIMEOUT_S
    for _ in range(work.count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.005)
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{broker.name}: produce stalled") from None
        producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.perf_counter()))
    seconds = time.perf_counter() - start
    phase = Phase(
        seconds,
        work.count,
        work.total_bytes,
        broker.cpu_seconds() - cpu0,
        time.process_time() - client0,
    )
    if left or failures:
        raise RuntimeError(f"{broker.name}: {left} undelivered, errors {failures[:3]}")
    return phase


def consume(broker: BrokerUnderTest, topic: str, work: Workload, args: argparse.Namespace) -> Phase:
    """Read the topic from offset 0 with an explicit assignment (no group protocol)."""
    consumer = Consumer(consumer_config(broker.bootstrap, args))
    records = size = 0
    cpu0, client0, start = broker.cpu_seconds(), time.process_time(), time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = start + PHASE_TIMEOUT_S
        while records < work.count:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{broker.name}: consumed {records}/{work.count}")
            # consume() blocks until it has the whole count (or times out): never ask
            # for more than is left, nor more than librdkafka's 64 MB queue holds.
            want = min(work.count - records, max(1, (8 << 20) // work.record_size), 1000)
            for msg in consumer.consume(want, 1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"{broker.name}: {msg.error()}")
                records += 1
                size += len(msg.value() or b"")
        seconds = time.perf_counter() - start
        phase = Phase(
            seconds, records, size, broker.cpu_seconds() - cpu0, time.process_time() - client0
        )
    finally:
        consumer.close()
    if size != work.total_bytes:
        raise RuntimeError(f"{broker.name}: consumed {size} bytes, expected {work.total_bytes}")
    return phase


# --- the loopback limit -------------------------------------------------------


def _drain(sock: socket.socket, total: int, done: threading.Event) -> None:
    buf = bytearray(1 << 20)
    got = 0
    while got < total:
        n = sock.recv_into(buf)
        if n == 0:
            break
        got += n
    done.set()


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a TCP connection on 127.0.0.1: the path broker traffic takes."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    return client, peer


def _send_with_sendfile(sock: socket.socket, path: Path, size: int) -> None:
    with path.open("rb") as f:
        offset = 0
        while offset < size:
            n = os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
            if n == 0:
                raise OSError("file shorter than expected")
            offset += n


def _send_with_read(sock: socket.socket, path: Path, size: int) -> None:
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        sent = 0
        while sent < size:
            n = f.readinto(buf)
            if not n:
                raise OSError("file shorter than expected")
            sock.sendall(view[:n])
            sent += n


def loopback_limit(size: int, repeat: int, scratch: Path) -> dict[str, Any]:
    """GB/s and sender CPU-s/GB for sendfile vs read+sendall of a page-cached file."""
    path = scratch / "loopback.bin"
    chunk = os.urandom(1 << 20)
    with path.open("wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
    size = path.stat().st_size
    os.sync()  # its writeback must not land in the broker phases
    with path.open("rb") as f:  # into the page cache
        while f.read(1 << 24):
            pass
    senders: dict[str, Callable[[socket.socket, Path, int], None]] = {
        "sendfile": _send_with_sendfile,
        "read_sendall": _send_with_read,
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in senders}
    for _ in range(repeat):
        for name, send in senders.items():  # alternate, so drift hits both
            client, peer = _tcp_pair()
            done = threading.Event()
            reader = threading.Thread(target=_drain, args=(peer, size, done), daemon=True)
            reader.start()
            cpu0, start = time.thread_time(), time.perf_counter()
            send(client, path, size)
            cpu = time.thread_time() - cpu0
            done.wait(60)
            seconds = time.perf_counter() - start
            client.close()
            peer.close()
            samples[name].append((size / seconds / GB, cpu / (size / GB)))
    path.unlink()
    out: dict[str, Any] = {"file_bytes": size, "repeat": repeat}
    for name, rows in samples.items():
        out[name] = {
            "gb_per_s": round(statistics.median(r[0] for r in rows), 3),
            "sender_cpu_s_per_gb": round(statistics.median(r[1] for r in rows), 3),
            "samples_gb_per_s": [round(r[0], 3) for r in rows],
        }
    return out


# --- the run ------------------------------------------------------------------


def settle() -> None:
    """Write back dirty pages before a timed phase.

    Headwater leaves flushing to the OS, as Kafka does; without this, the
    kernel's writeback of one phase's data (and its throttling of writers once
    dirty pages pass ``vm.dirty_background_ratio``) lands in a later phase,
    on whichever broker happens to run then.
    """
    os.sync()


def summarise(phases: list[Phase]) -> dict[str, Any]:
    """Medians over rounds, plus every round for whoever wants the spread."""
    return {
        "mb_per_s": round(statistics.median(p.mb_per_s for p in phases), 1),
        "records_per_s": round(statistics.median(p.records_per_s for p in phases)),
        "broker_cpu_s_per_gb": round(statistics.median(p.broker_cpu_s_per_gb for p in phases), 3),
        "client_cpu_s": round(statistics.median(p.client_cpu_s for p in phases), 3),
        "rounds": [
            {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(p).items()}
            for p in phases
        ],
    }


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("inf")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Loopback limit, then rounds of produce + consume on every broker in turn.

    Each round's topic is deleted once consumed. On this VM, memory beyond
    the first ~2.8 GB in use (page cache included) is ~4x slower to touch
    (host-side backing of fresh guest pages), so a run that kept every
    round's data would time later rounds on slower memory than earlier ones.
    """
    workloads = [
        Workload("1KB", args.small_size, args.small_count),
        Workload("100KB", args.large_size, args.large_count),
    ]
    result: dict[str, Any] = {"machine": machine_info()}
    with ScratchDir("hw-bench-") as scratch:
        print(f"loopback: {args.loopback_mib} MiB file, {args.loopback_repeat} rounds ...")
        result["loopback"] = loopback_limit(args.loopback_mib << 20, args.loopback_repeat, scratch)
        data = Path(tempfile.mkdtemp(prefix="hw-bench-", dir=args.data_dir))
        brokers: dict[str, BrokerUnderTest] = {
            "headwater": Headwater(data / "zc-on"),
            "headwater_zero_copy_off": Headwater(
                data / "zc-off", ["headwater.zero.copy.enable=false"]
            ),
        }
        for n, override in enumerate(args.compare_override):
            brokers[f"headwater_{override}"] = Headwater(data / f"variant-{n}", [override])
        for n, tree in enumerate(args.compare_tree):
            brokers[f"headwater_tree_{tree.name}"] = Headwater(data / f"tree-{n}", source_tree=tree)
        if not args.skip_tansu:
            brokers["tansu"] = Tansu()
        if "kafka" in args.peer:
            # file.delete.delay.ms: Kafka keeps a deleted topic's files 60 s by
            # default; this bench deletes each round's topic to hand its page
            # cache back before the next phase (see above), on every broker.
            brokers["kafka"] = Kafka(data / "kafka", overrides=KAFKA_OVERRIDES)
        phases: dict[tuple[str, str, str], list[Phase]] = {}
        try:
            for broker in brokers.values():
                broker.start()
            if args.warmup:
                warm = [Workload(w.label, w.record_size, max(1, w.count // 10)) for w in workloads]
                for work in warm:
                    for name, broker in brokers.items():
                        topic = f"warmup-{work.label}"
                        create_topic(broker.bootstrap, topic)
                        produce(broker, topic, work, args)
                        consume(broker, topic, work, args)
                        delete_topic(broker.bootstrap, topic)
                        print(f"warm-up {work.label:>5} {name}", flush=True)
            for rnd in range(args.rounds):
                for work in workloads:
                    for name, broker in brokers.items():
                        topic = f"bench-{work.label}-{rnd}"
                        create_topic(broker.bootstrap, topic)
                        settle()
                        p = produce(broker, topic, work, args)
                        settle()
                        c = consume(broker, topic, work, args)
                        delete_topic(broker.bootstrap, topic)
                        phases.setdefault((name, work.label, "produce"), []).append(p)
                        phases.setdefault((name, work.label, "consume"), []).append(c)
                        print(
                            f"round {rnd} {work.label:>5} {name:<24} "
                            f"produce {p.mb_per_s:7.1f} MB/s  consume {c.mb_per_s:7.1f} MB/s"
                        )
        finally:
            for broker in brokers.values():
                broker.stop()
            shutil.rmtree(data, ignore_errors=True)
    result["config"] = {
        "workloads": [asdict(w) for w in workloads],
        "rounds": args.rounds,
        "producer": {
            k: v for k, v in producer_config("", args).items() if k != "bootstrap.servers"
        },
        "consumer": {
            k: v
            for k, v in consumer_config("", args).items()
            if k not in ("bootstrap.servers", "group.id")
        },
        "headwater": "asyncio event loop, default config; zero-copy off: "
        "--override headwater.zero.copy.enable=false",
        "headwater_data_dir": str(args.data_dir or tempfile.gettempdir()),
        "tansu": "0.6.0, --storage-engine memory://tansu/",
        "warmup": args.warmup,
    }
    if "kafka" in brokers:
        result["config"]["kafka"] = {**peer_info(), "overrides": KAFKA_OVERRIDES}
    table: dict[str, Any] = {}
    for (name, label, kind), rows in phases.items():
        table.setdefault(name, {}).setdefault(label, {})[kind] = summarise(rows)
    result["results"] = table
    result["ratios"] = ratios(table, result["loopback"])
    return result


def ratios(table: dict[str, Any], loopback: dict[str, Any]) -> dict[str, Any]:
    hw = table["headwater"]
    off = table["headwater_zero_copy_off"]
    out: dict[str, Any] = {}
    for label in hw:
        row: dict[str, Any] = {
            "consume_zero_copy_on_vs_off_mb_per_s": ratio(
                hw[label]["consume"]["mb_per_s"], off[label]["consume"]["mb_per_s"]
            ),
            "consume_cpu_per_gb_zero_copy_off_vs_on": ratio(
                off[label]["consume"]["broker_cpu_s_per_gb"],
                hw[label]["consume"]["broker_cpu_s_per_gb"],
            ),
            "consume_share_of_loopback_sendfile": ratio(
                hw[label]["consume"]["mb_per_s"], loopback["sendfile"]["gb_per_s"] * 1000
            ),
        }
        if "kafka" in table:
            ka = table["kafka"][label]
            for kind in ("produce", "consume"):
                row[f"{kind}_headwater_vs_kafka"] = ratio(
                    hw[label][kind]["mb_per_s"], ka[kind]["mb_per_s"]
                )
                row[f"{kind}_cpu_per_gb_headwater_vs_kafka"] = ratio(
                    hw[label][kind]["broker_cpu_s_per_gb"], ka[kind]["broker_cpu_s_per_gb"]
                )
        if "tansu" in table:
            ta = table["tansu"][label]
            row["produce_headwater_vs_tansu"] = ratio(
                hw[label]["produce"]["mb_per_s"], ta["produce"]["mb_per_s"]
            )
            row["consume_headwater_vs_tansu"] = ratio(
                hw[label]["consume"]["mb_per_s"], ta["consume"]["mb_per_s"]
            )
        out[label] = row
    if "tansu" in table and "100KB" in out:
        out["targets_100KB"] = {
            "consume_ge_2x_tansu": out["100KB"]["consume_headwater_vs_tansu"] >= 2.0,
            "produce_ge_1.5x_tansu": out["100KB"]["produce_headwater_vs_tansu"] >= 1.5,
        }
    return out


def print_report(result: dict[str, Any]) -> None:
    lb = result["loopback"]
    print(
        f"\nloopback limit ({lb['file_bytes'] / 2**30:.2f} GiB cached file, TCP 127.0.0.1): "
        f"sendfile {lb['sendfile']['gb_per_s']:.2f} GB/s "
        f"({lb['sendfile']['sender_cpu_s_per_gb']:.2f} CPU-s/GB), "
        f"read+sendall {lb['read_sendall']['gb_per_s']:.2f} GB/s "
        f"({lb['read_sendall']['sender_cpu_s_per_gb']:.2f} CPU-s/GB)"
    )
    head = f"{'broker':<24} {'size':>5} {'phase':<8} {'MB/s':>8} {'records/s':>10} {'CPU-s/GB':>9}"
    print("\n" + head + "\n" + "-" * len(head))
    for name, sizes in result["results"].items():
        for label, kinds in sizes.items():
            for kind, s in kinds.items():
                print(
                    f"{name:<24} {label:>5} {kind:<8} {s['mb_per_s']:8.1f} "
                    f"{s['records_per_s']:10d} {s['broker_cpu_s_per_gb']:9.3f}"
                )
    print("\nratios:")
    for label, row in result["ratios"].items():
        print(f"  {label}: " + ", ".join(f"{k}={v}" for k, v in row.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-size", type=int, default=1024, help="bytes per small record")
    parser.add_argument("--small-count", type=int, default=200_000)
    parser.add_argument("--large-size", type=int, default=100 * 1024, help="bytes per large record")
    parser.add_argument("--large-count", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per broker (median kept)")
    parser.add_argument("--loopback-mib", type=int, default=1024, help="loopback file size")
    parser.add_argument("--loopback-repeat", type=int, default=3)
    parser.add_argument("--fetch-bytes", type=int, default=16 << 20, help="consumer fetch limit")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="producer batch.size")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where Headwater's logs go (default: the system temp dir; /dev/shm for RAM)",
    )
    parser.add_argument("--skip-tansu", action="store_true")
    parser.add_argument(
        "--peer",
        action="append",
        choices=["kafka"],
        default=[],
        help="also run this peer (kafka: Apache Kafka 4.x, fetched by mvn on first use)",
    )
    parser.add_argument(
        "--warmup", action="store_true", help="an untimed tenth-size round per broker first"
    )
    parser.add_argument(
        "--compare-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also run a Headwater broker with this --override, side by side (repeatable)",
    )
    parser.add_argument(
        "--compare-tree",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="also run a Headwater broker from this checkout (e.g. `git archive` of a base "
        "commit), side by side (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args)
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
