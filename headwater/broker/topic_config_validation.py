"""Why CreateTopics refuses a topic's configs or its partition and replica counts.

Kafka checks every config value of a CreateTopics request against the
config's type and range before it creates anything, and answers a bad one
with INVALID_CONFIG (40) and a message (``Invalid value abc for
configuration retention.ms: Not a number of type LONG``); a non-positive
partition count or replication factor, other than -1 for the broker's
default, gets INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR. The single
broker's and the cluster's CreateTopics both ask here, so they refuse alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.broker.config_catalog import TOPIC_CONFIG_BY_NAME, ConfigType
from headwater.log.config import LogConfig
from headwater.log.errors import InvalidConfigError

#: Integer types' ranges, as Kafka's ConfigDef parses them.
_RANGES = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
#: Topic configs whose value is one of a few names (Kafka's ValidString/ValidList).
_CHOICES: dict[str, tuple[str, ...]] = {
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime"),
}
_LIST_CHOICES: dict[str, tuple[str, ...]] = {"cleanup.policy": ("compact", "delete")}
_BOOLEANS = frozenset({"unclean.leader.election.enable"})
_MINIMUMS = {"min.insync.replicas": 1}


def partitions_error(num_partitions: int) -> str | None:
    """INVALID_PARTITIONS' message for a count after -1 was resolved to the default."""
    if num_partitions < 1:
        return "Number of partitions was set to an invalid non-positive value."
    return None


def replication_factor_error(replication_factor: int) -> str | None:
    """INVALID_REPLICATION_FACTOR's message for a factor after -1 was resolved."""
    if replication_factor < 1:
        return "Replication factor must be larger than 0, or -1 to use the default value."
    return None


def _value_error(key: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``key`` (type, choices, minimum), or None."""
    spec = TOPIC_CONFIG_BY_NAME.get(key)
    kind = spec.type if spec is not None else None
    if key in _BOOLEANS or kind is ConfigType.BOOLEAN:
        if value.strip().lower() not in ("true", "false"):
            return "Expected value to be either true or false"
        return None
    if kind in _RANGES:
        lo, hi = _RANGES[kind]
        try:
            number = int(value.strip())
        except ValueError:
            return f"Not a number of type {kind.name}"
        if not lo <= number <= hi:
            return f"Not a number of type {kind.name}"
        minimum = _MINIMUMS.get(key)
        if minimum is not None and number < minimum:
            return f"Value must be at least {minimum}"
        return None
    if kind is ConfigType.DOUBLE:
        try:
            float(value)
        except ValueError:
            return "Not a number of type DOUBLE"
        return None
    if key in _CHOICES and value.strip() not in _CHOICES[key]:
        return f"String must be one of: {', '.join(_CHOICES[key])}"
    if key in _LIST_CHOICES:
        allowed = _LIST_CHOICES[key]
        items = [i.strip() for i in value.split(",") if i.strip()]
        if not items or any(i not in allowed for i in items):
            return f"Invalid value(s); must be a list of: {', '.join(allowed)}"
    return None


def topic_configs_error(configs: Mapping[str, str], base: LogConfig) -> str | None:
    """INVALID_CONFIG's message for the first bad value in ``configs``, or None.

    Unknown keys are the caller's check (their message names them all);
    here each value is parsed as its type, then the whole set is applied
    over ``base`` as the log will apply it (ranges such as segment.bytes >= 14).
    """
    for key, value in configs.items():
        reason = _value_error(key, value)
        if reason is not None:
            return f"Invalid value {value} for configuration {key}: {reason}"
    try:
        base.with_topic_overrides(configs)
    except InvalidConfigError as exc:
        return str(exc)
    return None
