"""``headwater topics|produce|consume``: the client-side commands of the CLI.

``add_commands(subparsers)`` adds them to ``headwater.cli``'s parser; this
module also runs on its own (``python -m headwater.commands ...``). Each
command exits 0 on success and 1 on a Kafka error, printed as one line on
stderr (``error: TOPIC_ALREADY_EXISTS (36): ...``). Long work (producing a
file or a synthetic load, consuming ``--max-messages``) shows a tqdm
progress bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, Final

from tqdm import tqdm

from headwater.client.admin import AdminClient
from headwater.client.consumer import Consumer
from headwater.client.errors import KafkaError
from headwater.client.producer import Producer
from headwater.client.types import ConsumerRecord, TopicPartition

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
DEFAULT_FORMAT: Final = "{value}"
_POOL_BYTES: Final = 1 << 20  # random bytes that synthetic values are cut from

Command = Callable[[argparse.Namespace], int]


def _bootstrap_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"a broker to bootstrap from (default {DEFAULT_BOOTSTRAP})",
    )


def _kafka_errors(fn: Command) -> Command:
    """Map a KafkaError (or a bad config value) to one line on stderr and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except KafkaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    return run


def _parse_configs(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config needs KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# -- topics ----------------------------------------------------------------------


@_kafka_errors
def cmd_topics_create(args: argparse.Namespace) -> int:
    configs = _parse_configs(args.config)
    with AdminClient(args.bootstrap) as admin:
        admin.create_topics([(args.name, args.partitions, configs, args.replication_factor)])
    print(f"created topic {args.name}")
    return 0


@_kafka_errors
def cmd_topics_list(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


@_kafka_errors
def cmd_topics_describe(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap) as admin:
        meta = admin.describe_topic(args.name)
        offsets = admin.log_offsets(args.name)
        configs = admin.describe_configs(args.name)
    print(f"Topic: {meta.name}\tTopicId: {meta.topic_id}\tPartitions: {len(meta.partitions)}")
    print("Configs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items())))
    for index in sorted(meta.partitions):
        p = meta.partitions[index]
        start, end = offsets[index]
        print(
            f"\tPartition: {index}\tLeader: {p.leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
            f"LogStartOffset: {start}\tLogEndOffset: {end}"
        )
    return 0


@_kafka_errors
def cmd_topics_delete(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap) as admin:
        admin.delete_topics([args.name])
    print(f"deleted topic {args.name}")
    return 0


# -- produce -----------------------------------------------------------------------


class _Deliveries:
    """Counts acknowledgements from the producer's thread; keeps the first error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def __call__(self, future: Any) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked += 1
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = error


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def _synthetic_values(count: int, size: int) -> Iterator[bytes]:
    """``count`` values of ``size`` random printable bytes, cut from one pool.

    Base64 of random bytes: barely compressible (6 bits of entropy a byte),
    and still one line each when consumed to a terminal.
    """
    pool = base64.b64encode(os.urandom(max(_POOL_BYTES, size * 2)))
    span = len(pool) - size
    for i in range(count):
        start = (i * 7919) % (span + 1)
        yield pool[start : start + size]


@_kafka_errors
def cmd_produce(args: argparse.Namespace) -> int:
    if (args.count is None) != (args.size is None):
        raise ValueError("--count and --size go together")
    config = {
        "bootstrap.servers": args.bootstrap,
        "compression.type": args.compression,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
    }
    separator = args.key_separator.encode() if args.key_separator is not None else None
    deliveries = _Deliveries()
    started = time.monotonic()
    sent = 0
    stream: IO[bytes] | None = None
    progress: tqdm[Any]
    if args.count is not None:
        values: Iterator[bytes] = _synthetic_values(args.count, args.size)
        progress = tqdm(total=args.count, unit="msg", unit_scale=True, disable=None)
        per_record_progress = True
    else:
        if args.file and args.file != "-":
            stream = open(args.file, "rb")  # noqa: SIM115 - closed in finally
            total: int | None = os.fstat(stream.fileno()).st_size
        else:
            stream = sys.stdin.buffer
            total = None
        values = _lines(stream)
        progress = tqdm(total=total, unit="B", unit_scale=True, disable=None if total else True)
        per_record_progress = False
    try:
        with Producer(config) as producer:
            for line in values:
                key: bytes | None = None
                value = line
                if separator is not None and args.count is None:
                    key, sep, rest = line.partition(separator)
                    if sep:
                        value = rest
                    else:
                        key, value = None, line
                producer.send(args.topic, value, key=key).add_done_callback(deliveries)
                sent += 1
                progress.update(1 if per_record_progress else len(line) + 1)
            producer.flush()
    finally:
        progress.close()
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
    elapsed = max(time.monotonic() - started, 1e-9)
    print(
        f"produced {deliveries.acked} of {sent} records to {args.topic} in {elapsed:.2f} s "
        f"({deliveries.acked / elapsed:,.0f} records/s)",
        file=sys.stderr,
    )
    if deliveries.first_error is not None:
        error = deliveries.first_error
        raise error if isinstance(error, KafkaError) else KafkaError(-1, str(error))
    return 0


# -- consume -----------------------------------------------------------------------


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _format_record(fmt: str, record: ConsumerRecord) -> str:
    headers = ",".join(f"{k}={_text(v)}" for k, v in record.headers)
    return fmt.format(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp=record.timestamp,
        key=_text(record.key),
        value=_text(record.value),
        headers=headers,
    )


@_kafka_errors
def cmd_consume(args: argparse.Namespace) -> int:
    config = {
        "bootstrap.servers": args.bootstrap,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
    }
    fmt = args.format.encode().decode("unicode_escape")  # allow \t in --format
    limit = args.max_messages
    idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000
    out = sys.stdout
    count = 0
    with Consumer(config) as consumer:
        partitions = consumer.partitions_for(args.topic)
        if partitions is None:
            raise KafkaError(3, f"topic {args.topic!r} does not exist")
        if args.partition is not None:
            if args.partition not in partitions:
                raise KafkaError(3, f"topic {args.topic!r} has no partition {args.partition}")
            partitions = {args.partition}
        consumer.assign([TopicPartition(args.topic, p) for p in sorted(partitions)])
        progress = tqdm(total=limit, unit="msg", unit_scale=True, disable=None if limit else True)
        last_data = time.monotonic()
        try:
            while limit is None or count < limit:
                records = consumer.poll(0.5)
                if not records:
                    if idle_limit is not None and time.monotonic() - last_data >= idle_limit:
                        break
                    continue
                last_data = time.monotonic()
                if limit is not None:
                    records = records[: limit - count]
                out.write("".join(_format_record(fmt, r) + "\n" for r in records))
                count += len(records)
                progress.update(len(records))
            out.flush()
        except BrokenPipeError:  # `| head`: the reader is gone, which is fine
            sys.stderr.close()
        except KeyboardInterrupt:
            pass
        finally:
            progress.close()
    print(f"consumed {count} records", file=sys.stderr)
    return 0


# -- wiring ------------------------------------------------------------------------


def add_commands(subparsers: Any) -> None:
    """Add ``topics``, ``produce`` and ``consume`` to an argparse subparsers object."""
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True)

    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument(
        "--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="copies of each partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. --config retention.ms=60000 (repeatable)",
    )
    _bootstrap_arg(create)
    create.set_defaults(func=cmd_topics_create)

    listing = topic_commands.add_parser("list", help="list topic names")
    _bootstrap_arg(listing)
    listing.set_defaults(func=cmd_topics_list)

    describe = topic_commands.add_parser(
        "describe", help="partitions with log start/end offsets, topic id and configs"
    )
    describe.add_argument("name")
    _bootstrap_arg(describe)
    describe.set_defaults(func=cmd_topics_describe)

    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    _bootstrap_arg(delete)
    delete.set_defaults(func=cmd_topics_delete)

    produce = subparsers.add_parser(
        "produce", help="produce lines of a file or stdin, or a synthetic load"
    )
    produce.add_argument("topic")
    produce.add_argument("--file", metavar="F", help="read records from F, one per line")
    produce.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value",
    )
    produce.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
    )
    produce.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--batch-size", type=int, default=16_384)
    produce.add_argument("--count", type=int, metavar="N", help="synthetic load: N records")
    produce.add_argument("--size", type=int, metavar="BYTES", help="synthetic load: value size")
    _bootstrap_arg(produce)
    produce.set_defaults(func=cmd_produce)

    consume = subparsers.add_parser("consume", help="print records of a topic")
    consume.add_argument("topic")
    consume.add_argument(
        "--from-beginning", action="store_true", help="start at the log start offset"
    )
    consume.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    consume.add_argument("--partition", type=int, metavar="P", help="only partition P")
    consume.add_argument(
        "--format",
        default=DEFAULT_FORMAT,
        help="per-record format with {topic} {partition} {offset} {timestamp} {key} "
        f"{{value}} {{headers}} (default {DEFAULT_FORMAT!r})",
    )
    consume.add_argument(
        "--timeout-ms", type=int, metavar="MS", help="stop after MS without a record"
    )
    consume.add_argument(
        "--isolation-level",
        default="read_uncommitted",
        choices=["read_uncommitted", "read_committed"],
    )
    _bootstrap_arg(consume)
    consume.set_defaults(func=cmd_consume)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headwater", description="Headwater client tools")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
