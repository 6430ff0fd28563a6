"""The source and sink options, named and checked as Spark's Kafka connector does.

Parsing happens once, on the driver, when Spark builds the reader or writer,
so a typo fails the query at ``load()`` / ``start()`` rather than inside a
task on some executor. Spark hands the options over with lower-cased keys;
lookups here lower-case too so the objects also work when built by hand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.spark.offsets import (
    EARLIEST,
    LATEST,
    EarliestOffsets,
    LatestOffsets,
    OffsetSpec,
    SpecificOffsets,
    parse_offset_spec,
)
from headwater.spark.subscription import Subscription, parse_subscription

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

DEFAULT_POLL_TIMEOUT_MS = 120_000
"""How long a task waits for records it knows exist (Spark: ``spark.network.timeout``)."""

_BOOTSTRAP_KEYS = ("kafka.bootstrap.servers", "headwater.bootstrap.servers")

# Settings the connector owns: a user value would break offset tracking
# (Spark's Kafka source refuses the same ones).
_REFUSED_CONSUMER_KEYS = {
    "kafka.auto.offset.reset": "use 'startingOffsets' instead",
    "kafka.enable.auto.commit": "offsets live in the query's checkpoint",
    "kafka.key.deserializer": "keys are always returned as binary",
    "kafka.value.deserializer": "values are always returned as binary",
}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bootstrap(options: Mapping[str, str]) -> str:
    for key in _BOOTSTRAP_KEYS:
        value = options.get(key, "").strip()
        if value:
            return value
    raise ValueError(
        "option 'kafka.bootstrap.servers' (or 'headwater.bootstrap.servers') is required"
    )


def bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"option '{key}' must be 'true' or 'false', got {raw!r}")


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"option '{key}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"option '{key}' must be a positive integer, got {raw!r}")
    return value


def _count(options: Mapping[str, str], key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"option '{key}' must be an integer >= 0, got {raw!r}")
    return value


def _client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """Every other ``kafka.*`` option, prefix dropped, for the client to use or ignore."""
    return {
        key.removeprefix("kafka."): value
        for key, value in sorted(options.items())
        if key.startswith("kafka.") and key not in _BOOTSTRAP_KEYS
    }


@dataclass(frozen=True)
class SourceOptions:
    """Everything the reader needs, already validated."""

    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation_level: str = READ_UNCOMMITTED
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    client_settings: Mapping[str, str] = field(default_factory=dict)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate a read's options; the defaults follow Spark's Kafka source."""
    opts = _lower(options)
    for key, why in _REFUSED_CONSUMER_KEYS.items():
        if key in opts:
            raise ValueError(f"option '{key}' is not supported: {why}")
    starting = parse_offset_spec(
        opts.get("startingoffsets", "latest" if streaming else "earliest"), "startingOffsets"
    )
    if streaming:
        if "endingoffsets" in opts:
            raise ValueError("option 'endingOffsets' is for batch queries only")
        ending: OffsetSpec = LatestOffsets()
    else:
        ending = parse_offset_spec(opts.get("endingoffsets", "latest"), "endingOffsets")
        _check_batch_bounds(starting, ending)
    isolation = opts.get("kafka.isolation.level", READ_UNCOMMITTED).strip().lower()
    if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ValueError(
            f"option 'kafka.isolation.level' must be {READ_UNCOMMITTED!r} or "
            f"{READ_COMMITTED!r}, got {isolation!r}"
        )
    return SourceOptions(
        bootstrap=_bootstrap(opts),
        subscription=parse_subscription(opts),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger"),
        min_partitions=_positive_int(opts, "minpartitions"),
        fail_on_data_loss=bool_option(opts, "failondataloss", True),
        include_headers=bool_option(opts, "includeheaders", False),
        isolation_level=isolation,
        poll_timeout_ms=_positive_int(opts, "kafkaconsumer.polltimeoutms")
        or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_retries=_count(opts, "fetchoffset.numretries", 3),
        fetch_offset_retry_interval_ms=_count(opts, "fetchoffset.retryintervalms", 1000),
        client_settings=_client_settings(opts),
    )


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """A batch read cannot start at "latest" nor end at "earliest" (Spark's rule)."""
    if isinstance(starting, LatestOffsets):
        raise ValueError("startingOffsets='latest' is not valid for a batch query")
    if isinstance(ending, EarliestOffsets):
        raise ValueError("endingOffsets='earliest' is not valid for a batch query")
    if isinstance(starting, SpecificOffsets) and LATEST in starting.offsets.values():
        raise ValueError("startingOffsets: -1 (latest) is not valid for a batch query")
    if isinstance(ending, SpecificOffsets) and EARLIEST in ending.offsets.values():
        raise ValueError("endingOffsets: -2 (earliest) is not valid for a batch query")


DEFAULT_TRANSACTIONAL_ID_PREFIX = "headwater-sink"
_TRANSACTIONAL_ID_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class SinkOptions:
    """Where and how the writer produces.

    ``exactly_once`` (option ``exactlyOnce``) makes every task write inside a
    transaction that the driver commits (see ``headwater.spark.sink``);
    ``transactional_id_prefix`` (option ``transactionalIdPrefix``) starts the
    transactional ids and progress groups of those tasks.
    """

    bootstrap: str
    topic: str | None = None
    client_settings: Mapping[str, str] = field(default_factory=dict)
    exactly_once: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    topic = opts.get("topic", "").strip() or None
    exactly_once = bool_option(opts, "exactlyonce", False)
    prefix = opts.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not _TRANSACTIONAL_ID_CHARS.match(prefix):
        raise ValueError(
            "option 'transactionalIdPrefix' must be letters, digits, '.', '_' or '-', "
            f"got {prefix!r}"
        )
    settings = _client_settings(opts)
    if exactly_once:
        for key, why in _EXACTLY_ONCE_REFUSED.items():
            if key in settings:
                raise ValueError(f"option 'kafka.{key}' cannot be used with exactlyOnce: {why}")
    return SinkOptions(
        bootstrap=_bootstrap(opts),
        topic=topic,
        client_settings=settings,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
    )


# The sink owns these when it writes transactionally.
_EXACTLY_ONCE_REFUSED = {
    "transactional.id": "each task's id is derived from 'transactionalIdPrefix'",
    "acks": "transactions need acks=all",
    "enable.idempotence": "transactions need idempotence",
}
