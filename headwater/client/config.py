"""Client configuration under Kafka's key names, with Kafka's defaults.

Users, the CLI and Spark options all pass plain dicts of strings or
values (``{"fetch.max.bytes": "1048576"}``); this module turns them into
typed, validated settings once. Unknown keys are logged, not rejected,
as Kafka's Java clients do, so a config shared with other clients works.
The security keys (``security.protocol``, ``sasl.*``, ``ssl.*``) become one
``ClientSecurity``; a ready ``security=ClientSecurity(...)`` is taken as is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from headwater.security.client_security import CLIENT_SECURITY_KEYS, ClientSecurity

log = logging.getLogger(__name__)

C = TypeVar("C", bound="_KafkaConfig")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


class _KafkaConfig:
    """Base: dataclass fields named like Kafka keys with dots as underscores."""

    _choices: dict[str, tuple[str, ...]] = {}

    @classmethod
    def from_mapping(cls: type[C], config: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
        merged: dict[str, Any] = dict(config or {})
        merged.update({k.replace("_", "."): v for k, v in kwargs.items()})
        known = {f.name.replace("_", "."): f for f in fields(cls)}  # type: ignore[arg-type]
        known.pop("security", None)
        values: dict[str, Any] = {}
        security = merged.pop("security", None)
        security_keys = {k: str(merged.pop(k)) for k in CLIENT_SECURITY_KEYS if k in merged}
        if security is not None:
            if not isinstance(security, ClientSecurity):
                raise ValueError(f"security must be a ClientSecurity, got {type(security)}")
            values["security"] = security
        elif security_keys:
            values["security"] = ClientSecurity.from_properties(security_keys)
        for key, value in merged.items():
            field = known.get(key)
            if field is None:
                log.warning("ignoring unknown client config %r", key)
                continue
            values[field.name] = cls._convert(key, field.type, value)
        return cls(**values)

    @classmethod
    def _convert(cls, key: str, type_name: Any, value: Any) -> Any:
        name = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", "")
        try:
            if name == "bool":
                return _to_bool(value)
            if name == "int":
                return int(value)
            if name == "float":
                return float(value)
            text = str(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        choices = cls._choices.get(key)
        if choices is not None:
            text = text.lower()
            if text not in choices:
                raise ValueError(f"{key} must be one of {', '.join(choices)}; got {value!r}")
        return text


@dataclass(frozen=True)
class ConsumerConfig(_KafkaConfig):
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "headwater-consumer"
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    isolation_level: str = "read_uncommitted"
    auto_offset_reset: str = "latest"
    max_poll_records: int = 0  # 0: everything buffered (Kafka's default is 500)
    check_crcs: bool = True
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    # KIP-392: sent as rack_id in every Fetch (v11+); a rack-aware leader may
    # then name a replica in this rack to fetch from. Empty: always the leader.
    client_rack: str = ""
    # How long a preferred read replica is kept before the leader is asked again;
    # also how often a classic group's leader checks the group's topics.
    metadata_max_age_ms: int = 300_000
    headwater_fetch_session_enable: bool = True
    # Consumer groups (subscribe): group.protocol=classic (the default, as in
    # Kafka's clients) or consumer (KIP-848).
    group_id: str = ""
    group_protocol: str = "classic"
    group_remote_assignor: str = ""  # empty: the broker's default assignor
    group_instance_id: str = ""  # static membership
    # Classic-protocol settings; the consumer protocol leaves them to the broker.
    # Assignors in preference order (classic_group_membership: range, roundrobin).
    partition_assignment_strategy: str = "range,roundrobin"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000  # sent as the rebalance timeout
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    security: ClientSecurity | None = None

    _choices = {
        "isolation.level": ("read_uncommitted", "read_committed"),
        "auto.offset.reset": ("earliest", "latest", "none"),
        "group.protocol": ("classic", "consumer"),
    }

    @property
    def isolation(self) -> int:
        return 1 if self.isolation_level == "read_committed" else 0


@dataclass(frozen=True)
class ProducerConfig(_KafkaConfig):
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "headwater-producer"
    acks: str = "all"
    linger_ms: int = 5
    batch_size: int = 16_384
    compression_type: str = "none"
    enable_idempotence: str = "default"  # "default": on unless acks says otherwise
    max_request_size: int = 1_048_576
    max_in_flight_requests_per_connection: int = 5
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    retry_backoff_ms: int = 100
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    transactional_id: str = ""  # empty: not transactional (Kafka: null)
    transaction_timeout_ms: int = 60_000
    security: ClientSecurity | None = None

    _choices = {
        "acks": ("0", "1", "all", "-1"),
        "compression.type": ("none", "gzip", "snappy", "lz4", "zstd"),
        "enable.idempotence": ("default", "true", "false", "1", "0", "yes", "no"),
    }

    @property
    def required_acks(self) -> int:
        return -1 if self.acks in ("all", "-1") else int(self.acks)

    @property
    def transactional(self) -> bool:
        return bool(self.transactional_id)

    @property
    def idempotent(self) -> bool:
        """Kafka 3's rule: on by default, off when acks is not all, an error if both forced.

        A transactional producer is always idempotent (its batches carry
        the producer id and sequences the coordinator fences by).
        """
        if self.transactional:
            if self.required_acks != -1:
                raise ValueError("transactional.id needs acks=all")
            if self.enable_idempotence != "default" and not _to_bool(self.enable_idempotence):
                raise ValueError("transactional.id needs enable.idempotence=true")
            return True
        if self.enable_idempotence == "default":
            return self.required_acks == -1
        wanted = _to_bool(self.enable_idempotence)
        if wanted and self.required_acks != -1:
            raise ValueError("enable.idempotence=true needs acks=all")
        return wanted
