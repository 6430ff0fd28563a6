"""``headwater configs describe|alter``: topic and broker configs (Kafka: ``kafka-configs.sh``).

``--broker ID`` names one broker's dynamic configs, ``--broker-defaults`` the
cluster-wide defaults every broker takes (Kafka's ``--entity-default``),
``--topic T`` a topic. ``describe`` shows what is set there (add ``--all`` for
every config with its source); ``alter`` sets and deletes keys through
IncrementalAlterConfigs, leaving the others untouched.
"""

from __future__ import annotations

import argparse
from typing import Any

from headwater.cli.common import (
    add_client_args,
    admin_client,
    guarded,
    parse_key_values,
    print_json,
)
from headwater.cli.topics import alter_configs
from headwater.client.admin import TOPIC_RESOURCE

BROKER_RESOURCE = 4
SOURCES = {
    0: "unknown",
    1: "topic",
    2: "dynamic broker",
    3: "dynamic default broker",
    4: "static",
    5: "default",
}
#: Sources shown without --all: what was set on this entity.
_SET_HERE = {TOPIC_RESOURCE: {1}, BROKER_RESOURCE: {2, 3}}


def _entity(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, words for messages)."""
    if args.topic:
        return TOPIC_RESOURCE, args.topic, f"topic {args.topic}"
    if args.broker_defaults:
        return BROKER_RESOURCE, "", "the broker defaults"
    if args.broker is not None:
        return BROKER_RESOURCE, str(args.broker), f"broker {args.broker}"
    raise ValueError("name one of --topic, --broker or --broker-defaults")


def cmd_configs_describe(args: argparse.Namespace) -> int:
    resource_type, name, words = _entity(args)
    with admin_client(args) as admin:
        entries = admin.describe_config_entries(name, resource_type)
    shown = {
        k: (v, src)
        for k, (v, src) in sorted(entries.items())
        if args.all or src in _SET_HERE[resource_type]
    }
    if args.json:
        print_json(
            {k: {"value": v, "source": SOURCES.get(src, str(src))} for k, (v, src) in shown.items()}
        )
        return 0
    print(f"Configs of {words}:" if shown else f"No configs set on {words} (--all shows every one)")
    for key, (value, source) in shown.items():
        shown_value = "(sensitive)" if value is None else value
        print(f"  {key}={shown_value}\t({SOURCES.get(source, source)})")
    return 0


def cmd_configs_alter(args: argparse.Namespace) -> int:
    resource_type, name, words = _entity(args)
    sets = parse_key_values(args.add_config, "--add-config")
    if not sets and not args.delete_config:
        raise ValueError("alter needs --add-config or --delete-config")
    alter_configs(args, resource_type, name, sets, args.delete_config)
    print(f"altered configs of {words}")
    return 0


def add_config_commands(subparsers: Any) -> None:
    configs = subparsers.add_parser("configs", help="describe or alter topic and broker configs")
    csub = configs.add_subparsers(dest="configs_command", required=True)
    describe = csub.add_parser(
        "describe", help="configs set on a topic or broker (--all: every one)"
    )
    alter = csub.add_parser("alter", help="set or delete configs of a topic or broker")
    for p in (describe, alter):
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--topic", metavar="NAME", help="a topic")
        which.add_argument("--broker", type=int, metavar="ID", help="one broker")
        which.add_argument(
            "--broker-defaults", action="store_true", help="the defaults of every broker"
        )
        add_client_args(p)
    describe.add_argument("--all", action="store_true", help="every config, with its source")
    describe.add_argument("--json", action="store_true", help="print JSON instead of text")
    alter.add_argument(
        "--add-config", action="append", default=[], metavar="KEY=VALUE",
        help="set a config (repeatable)",
    )  # fmt: skip
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="KEY",
        help="remove a config, back to its default (repeatable)",
    )  # fmt: skip
    describe.set_defaults(func=guarded(cmd_configs_describe))
    alter.set_defaults(func=guarded(cmd_configs_alter))
