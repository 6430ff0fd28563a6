"""Per-log settings with Kafka's defaults and Kafka's property names.

Operators and clients configure logs with Kafka's keys: broker-wide
(``log.segment.bytes``) in the server properties and per topic
(``segment.bytes``) in CreateTopics. Both spellings land on the same field,
so one ``LogConfig`` is the base config with the topic's overrides on top.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from headwater.log.errors import InvalidConfigError

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1  # segment.bytes is an int in Kafka; index positions are u32


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes
    segment_ms: int = 7 * _DAY_MS  # log.roll.ms
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    retention_ms: int = 7 * _DAY_MS  # log.retention.ms; -1 keeps data forever
    retention_bytes: int = -1  # log.retention.bytes; -1 means no size limit
    flush_interval_messages: int = LONG_MAX  # log.flush.interval.messages
    flush_interval_ms: int | None = None  # log.flush.interval.ms; None: leave it to the OS
    max_message_bytes: int = 1_048_588  # message.max.bytes: the largest batch accepted
    # headwater.log.message.max.decompressed.bytes: the most one compressed batch
    # may inflate to; decompression stops there (a bomb costs no more memory).
    max_decompressed_bytes: int = 64 << 20
    file_handle_cache_size: int = 1024  # headwater.log.open.files.max
    producer_id_expiration_ms: int = _DAY_MS  # producer.id.expiration.ms
    message_timestamp_type: int = 0  # message.timestamp.type: 0 CreateTime, 1 LogAppendTime
    message_timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = LONG_MAX  # message.timestamp.after.max.ms
    # -- log compaction (see headwater.log.cleaner) --
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy / log.cleanup.policy
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    delete_retention_ms: int = _DAY_MS  # delete.retention.ms: how long tombstones stay
    # -- broker-wide only (no topic key) --
    # log.dir.free.space.min.bytes: below this much free space a log directory
    # refuses client Produce (KAFKA_STORAGE_ERROR) so its metadata keeps room.
    free_space_min_bytes: int = 64 << 20

    @property
    def compact(self) -> bool:
        """The log cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention deletes old segments by time and size."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """``segment.ms``, and for a compacted log at most ``max.compaction.lag.ms`` (Kafka):
        records cannot be cleaned while they sit in the active segment."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Apply Kafka-named properties over ``base`` (default: Kafka's defaults).

        Keys Headwater does not act on (``segment.index.bytes``, ...) are
        accepted and ignored, as a client may send any topic config.
        Where Kafka has several units for one setting, the finest wins.
        """
        changes: dict[str, object] = {}
        # Coarse units first so that a finer key given alongside overrides them.
        for key in sorted(props, key=lambda k: _PRECEDENCE.get(k, 0)):
            spec = _KEYS.get(key)
            fields: tuple[str, ...]
            if spec is not None:
                fields, parse = (spec[0],), spec[1]
            elif key in _BOTH_SIDES:
                fields, parse = _BOTH_SIDES[key], _integer(0)
            else:
                continue
            try:
                value = parse(props[key])
            except ValueError as exc:
                raise InvalidConfigError(f"invalid value {props[key]!r} for {key}: {exc}") from exc
            for field_name in fields:
                changes[field_name] = value
        return dataclasses.replace(base or cls(), **changes)  # type: ignore[arg-type]

    def with_topic_overrides(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties(topic_configs, base=self)


def _integer(minimum: int, scale: int = 1, maximum: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        if value > maximum:
            raise ValueError(f"must be at most {maximum}")
        return min(value * scale, LONG_MAX) if value > 0 else value

    return parse


def _timestamp_type(text: str) -> int:
    value = text.strip()
    if value == "CreateTime":
        return 0
    if value == "LogAppendTime":
        return 1
    raise ValueError("must be CreateTime or LogAppendTime")


def _cleanup_policy(text: str) -> tuple[str, ...]:
    """Kafka's list of ``compact`` and ``delete`` (comma separated, any order)."""
    policies = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not policies:
        raise ValueError("must be delete, compact or compact,delete")
    for policy in policies:
        if policy not in ("compact", "delete"):
            raise ValueError(f"{policy!r} is not a cleanup policy (compact, delete)")
    return policies


def _ratio(text: str) -> float:
    value = float(text.strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _optional_ms(text: str) -> int | None:
    value = int(text.strip())
    if value < 0:
        raise ValueError("must be at least 0")
    return None if value >= LONG_MAX else value


_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    # broker keys
    "log.segment.bytes": ("segment_bytes", _integer(14, maximum=INT_MAX)),
    "log.roll.hours": ("segment_ms", _integer(1, _HOUR_MS)),
    "log.roll.ms": ("segment_ms", _integer(1)),
    "log.index.interval.bytes": ("index_interval_bytes", _integer(0)),
    "log.retention.hours": ("retention_ms", _integer(-1, _HOUR_MS)),
    "log.retention.minutes": ("retention_ms", _integer(-1, 60_000)),
    "log.retention.ms": ("retention_ms", _integer(-1)),
    "log.retention.bytes": ("retention_bytes", _integer(-1)),
    "log.flush.interval.messages": ("flush_interval_messages", _integer(1)),
    "log.flush.interval.ms": ("flush_interval_ms", _optional_ms),
    "message.max.bytes": ("max_message_bytes", _integer(0)),
    "headwater.log.message.max.decompressed.bytes": ("max_decompressed_bytes", _integer(0)),
    "headwater.log.open.files.max": ("file_handle_cache_size", _integer(1)),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", _integer(1)),
    "log.message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "log.message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _integer(0)),
    "log.message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _integer(0)),
    "log.dir.free.space.min.bytes": ("free_space_min_bytes", _integer(0)),
    # topic keys
    "segment.bytes": ("segment_bytes", _integer(14, maximum=INT_MAX)),
    "segment.ms": ("segment_ms", _integer(1)),
    "index.interval.bytes": ("index_interval_bytes", _integer(0)),
    "retention.ms": ("retention_ms", _integer(-1)),
    "retention.bytes": ("retention_bytes", _integer(-1)),
    "flush.messages": ("flush_interval_messages", _integer(1)),
    "flush.ms": ("flush_interval_ms", _optional_ms),
    "max.message.bytes": ("max_message_bytes", _integer(0)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _integer(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _integer(0)),
    # log compaction: broker keys, then topic keys
    "log.cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "log.cleaner.min.cleanable.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "log.cleaner.min.compaction.lag.ms": ("min_compaction_lag_ms", _integer(0)),
    "log.cleaner.max.compaction.lag.ms": ("max_compaction_lag_ms", _integer(1)),
    "log.cleaner.delete.retention.ms": ("delete_retention_ms", _integer(0)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _integer(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _integer(1)),
    "delete.retention.ms": ("delete_retention_ms", _integer(0)),
}
# Deprecated since Kafka 3.6 (KIP-937): one bound for both sides of the window,
# overridden by the before/after keys when those are given too (see _PRECEDENCE).
_WINDOW_FIELDS = ("message_timestamp_before_max_ms", "message_timestamp_after_max_ms")
_BOTH_SIDES = {
    "log.message.timestamp.difference.max.ms": _WINDOW_FIELDS,
    "message.timestamp.difference.max.ms": _WINDOW_FIELDS,
}

# Higher applies later: the finer unit of the same setting wins.
_PRECEDENCE = {
    "log.message.timestamp.difference.max.ms": -1,
    "message.timestamp.difference.max.ms": -1,
    "log.roll.hours": -2,
    "log.retention.hours": -2,
    "log.retention.minutes": -1,
}
