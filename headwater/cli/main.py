"""The ``headwater`` parser: one subcommand group per module of this package."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from headwater import __version__
from headwater.cli.acls import add_acl_commands
from headwater.cli.cluster import add_cluster_command
from headwater.cli.cluster_info import add_cluster_info_commands
from headwater.cli.configs import add_config_commands
from headwater.cli.console import add_console_command
from headwater.cli.consume import add_consume_command
from headwater.cli.demo import add_demo_command
from headwater.cli.groups import add_group_commands
from headwater.cli.partitions import add_partition_commands
from headwater.cli.produce import add_produce_command
from headwater.cli.serve import LOG_LEVELS, add_serve_command
from headwater.cli.topics import add_topic_commands
from headwater.cli.transactions import add_transaction_commands
from headwater.cli.users import add_user_commands

log = logging.getLogger("headwater")


class _Formatter(logging.Formatter):
    """Bare messages at INFO (so the ready line reads exactly ``listening on H:P``);
    level and logger name on everything louder, where they help."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno == logging.INFO:
            return record.getMessage()
        return f"{record.levelname} {record.name}: {super().format(record)}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headwater", description="A Kafka-compatible log broker with incremental fetch"
    )
    parser.add_argument("--version", action="version", version=f"headwater {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_command(sub)
    add_topic_commands(sub)
    add_partition_commands(sub)
    add_config_commands(sub)
    add_produce_command(sub)
    add_consume_command(sub)
    add_group_commands(sub)
    add_transaction_commands(sub)
    add_user_commands(sub)
    add_acl_commands(sub)
    add_demo_command(sub)
    add_cluster_command(sub)
    add_cluster_info_commands(sub)
    add_console_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    # Client commands print their own results: only the clients' warnings belong on stderr.
    level = getattr(args, "log_level", None) or "WARNING"
    if level.lower() not in LOG_LEVELS:
        print(
            f"error: --log-level {level}: must be one of {', '.join(LOG_LEVELS)}", file=sys.stderr
        )
        return 1
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # Spark's Python bridge logs every callback at INFO; only its problems matter here.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
