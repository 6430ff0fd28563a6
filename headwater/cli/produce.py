"""``headwater produce TOPIC``: lines of a file or stdin, or a synthetic load, into a topic.

Kafka: ``kafka-console-producer.sh`` and ``kafka-producer-perf-test.sh`` in one.
Long work (a file or ``--count``) shows a tqdm progress bar on stderr when
stderr is a terminal.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, Final

from tqdm import tqdm

from headwater.cli.common import add_client_args, client_config, guarded
from headwater.client.errors import KafkaError
from headwater.client.producer import Producer

_POOL_BYTES: Final = 1 << 20  # random bytes that synthetic values are cut from


class _Deliveries:
    """Counts acknowledgements from the producer's thread; keeps the first error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.last_offsets: dict[int, int] = {}  # partition -> last acknowledged offset

    def __call__(self, future: Any) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked += 1
                meta = future.result()
                if meta.offset > self.last_offsets.get(meta.partition, -1):
                    self.last_offsets[meta.partition] = meta.offset
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


def _send_all(
    producer: Producer,
    args: argparse.Namespace,
    values: Iterator[bytes],
    separator: bytes | None,
    deliveries: _Deliveries,
    progress: Any,
    per_record_progress: bool,
) -> None:
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
        deliveries.sent += 1
        progress.update(1 if per_record_progress else len(line) + 1)


def cmd_produce(args: argparse.Namespace) -> int:
    if (args.count is None) != (args.size is None):
        raise ValueError("--count and --size go together")
    config = client_config(
        args,
        **{
            "compression.type": args.compression,
            "acks": args.acks,
            "linger.ms": args.linger_ms,
            "batch.size": args.batch_size,
        },
    )
    separator = args.key_separator.encode() if args.key_separator is not None else None
    deliveries = _Deliveries()
    started = time.monotonic()
    sent = 0
    interrupted = False
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
            try:
                _send_all(
                    producer, args, values, separator, deliveries, progress, per_record_progress
                )
                producer.flush()
            except KeyboardInterrupt:
                interrupted = True
                # What was sent may still be acknowledged: wait a little for it.
                with contextlib.suppress(Exception, KeyboardInterrupt):
                    producer.flush(10.0)
            sent = deliveries.sent
    finally:
        progress.close()
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
    if interrupted:
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(deliveries.last_offsets.items()))
        print(
            f"interrupted: {deliveries.acked} of {sent} records acknowledged by {args.topic}; "
            f"last offset per partition: {offsets or 'none'}",
            file=sys.stderr,
        )
        return 130
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


def add_produce_command(subparsers: Any) -> None:
    """Add ``produce`` to an argparse subparsers object."""
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
        help="batch compression (default none)",
    )
    produce.add_argument(
        "--acks",
        default="all",
        choices=["0", "1", "all", "-1"],
        help="replicas that must have a record before it counts as sent: 0 none, 1 the "
        "leader, all (-1) the ISR (default all)",
    )
    produce.add_argument(
        "--linger-ms", type=int, default=5, metavar="MS",
        help="wait this long to fill a batch (default 5)",
    )  # fmt: skip
    produce.add_argument(
        "--batch-size", type=int, default=16_384, metavar="BYTES",
        help="largest batch per partition (default 16384)",
    )  # fmt: skip
    produce.add_argument("--count", type=int, metavar="N", help="synthetic load: N records")
    produce.add_argument("--size", type=int, metavar="BYTES", help="synthetic load: value size")
    add_client_args(produce)
    produce.set_defaults(func=guarded(cmd_produce))
