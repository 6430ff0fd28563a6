"""``headwater consume TOPIC``: print a topic's records (Kafka: ``kafka-console-consumer.sh``).

``--max-messages`` shows a tqdm progress bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any, Final

from tqdm import tqdm

from headwater.cli.common import add_client_args, admin_client, client_config, guarded
from headwater.cli.groups import commit_group_offsets, group_offsets
from headwater.client.consumer import Consumer
from headwater.client.errors import KafkaError
from headwater.client.types import ConsumerRecord, TopicPartition

DEFAULT_FORMAT: Final = "{value}"
_CHUNK: Final = 256  # records formatted and written at a time


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


def cmd_consume(args: argparse.Namespace) -> int:
    if args.offset not in (None, "earliest", "latest") and args.partition is None:
        raise ValueError("--offset N needs --partition (an offset belongs to one partition)")
    config = client_config(
        args,
        **{
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "isolation.level": args.isolation_level,
        },
    )
    fmt = args.format.encode().decode("unicode_escape")  # allow \t in --format
    limit = args.max_messages
    idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000
    out = sys.stdout
    count = 0
    printed: dict[TopicPartition, int] = {}
    with Consumer(config) as consumer:
        partitions = consumer.partitions_for(args.topic)
        if partitions is None:
            # Why it is missing: not authorized reads differently from not there.
            with admin_client(args) as admin:
                partitions = set(admin.describe_topic(args.topic).partitions)
        if args.partition is not None:
            if args.partition not in partitions:
                raise KafkaError(3, f"topic {args.topic!r} has no partition {args.partition}")
            partitions = {args.partition}
        assigned = [TopicPartition(args.topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        _position(args, consumer, assigned)
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
                # In chunks, counted as written: Ctrl-C in the middle of a large poll
                # still reports (and commits, with --group) what reached stdout.
                for start in range(0, len(records), _CHUNK):
                    chunk = records[start : start + _CHUNK]
                    out.write("".join(_format_record(fmt, r) + "\n" for r in chunk))
                    count += len(chunk)
                    for r in chunk:  # the group's next offsets: after what was printed
                        printed[TopicPartition(r.topic, r.partition)] = r.offset + 1
                    progress.update(len(chunk))
            out.flush()
        except BrokenPipeError:  # `| head`: the reader is gone, which is fine
            sys.stderr.close()
        except KeyboardInterrupt:
            with contextlib.suppress(OSError, ValueError):
                out.flush()  # what was counted reaches the reader
        finally:
            progress.close()
        if args.group and printed:
            commit_group_offsets(args, args.group, printed)
    print(f"consumed {count} records", file=sys.stderr)
    return 0


def _position(args: argparse.Namespace, consumer: Consumer, assigned: list[TopicPartition]) -> None:
    """--offset, else the group's committed offsets, else --from-beginning or the end."""
    if args.offset is not None:
        if args.offset == "earliest":
            consumer.seek_to_beginning(assigned)
        elif args.offset == "latest":
            consumer.seek_to_end(assigned)
        else:
            for tp in assigned:
                consumer.seek(tp, int(args.offset))
        return
    if args.group:
        committed = group_offsets(args, args.group)
        for tp in assigned:
            if tp in committed:
                consumer.seek(tp, committed[tp])


def _offset(text: str) -> str:
    if text in ("earliest", "latest") or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: earliest, latest or an offset")


def add_consume_command(subparsers: Any) -> None:
    """Add ``consume`` to an argparse subparsers object."""
    consume = subparsers.add_parser("consume", help="print records of a topic")
    consume.add_argument("topic")
    consume.add_argument(
        "--from-beginning", action="store_true", help="start at the log start offset"
    )
    consume.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    consume.add_argument("--partition", type=int, metavar="P", help="only partition P")
    consume.add_argument(
        "--offset",
        type=_offset,
        metavar="earliest|latest|N",
        help="start here (N needs --partition); wins over --group and --from-beginning",
    )
    consume.add_argument(
        "--group",
        metavar="GROUP",
        help="start at GROUP's committed offsets and commit where this command stops "
        "(a standalone member: the group must have no running consumers)",
    )
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
        help="read_committed skips aborted transactions and stops at open ones "
        "(default read_uncommitted)",
    )
    add_client_args(consume)
    consume.set_defaults(func=guarded(cmd_consume))
