"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546), sans-I/O.

Quotas are set per *entity*: a user, a client id, or both, each either named
or the ``<default>``. A request is measured against the most specific entity
that has the quota, in KIP-55's order:

    user+client, user+<default client>, user, <default user>+client,
    <default user>+<default client>, <default user>, client, <default client>

and, like Kafka, everyone matched by the same entity shares one rate (a quota
on ``/users/alice`` is shared by all of alice's clients; a ``<default>`` user
quota gives each user their own). Rates are Kafka's: samples of
``quota.window.size.seconds``, ``quota.window.num`` of them, the elapsed time
counted as at least ``num - 1`` windows. A client over its quota is told
``throttle_time_ms = (rate - quota) / quota * window`` and its connection is
muted that long (KIP-219). ``QuotaStore`` persists the settings; in a cluster
it must live in ZooKeeper (``/config/users``, ``/config/clients``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from headwater.security.durable_json import read_json, write_json

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
FILE_NAME = "client-quotas.json"


class QuotaKey(enum.Enum):
    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"


#: An entity: ((entity type, name or None for <default>), ...) sorted by type.
Entity = tuple[tuple[str, str | None], ...]


def entity(user: str | bool | None = False, client_id: str | bool | None = False) -> Entity:
    """``entity(user="alice")``; ``None`` is <default>; False leaves the part out."""
    parts: list[tuple[str, str | None]] = []
    if user is not False:
        parts.append((USER, None if user is None or user is True else str(user)))
    if client_id is not False:
        parts.append(
            (CLIENT_ID, None if client_id is None or client_id is True else str(client_id))
        )
    return tuple(sorted(parts, key=lambda p: p[0]))


def validate_entity(parts: Iterable[tuple[str, str | None]]) -> Entity:
    out = sorted(parts, key=lambda p: p[0])
    types = [t for t, _ in out]
    if not out or len(set(types)) != len(types):
        raise ValueError("an entity names user and/or client-id, each once")
    for t, name in out:
        if t not in ENTITY_TYPES:
            raise ValueError(f"unsupported quota entity type {t!r} (user, client-id)")
        if name == "":
            raise ValueError(f"empty {t} name (use null for the default)")
    return tuple(out)


def validate_ops(ops: Iterable[tuple[str, float | None]]) -> None:
    keys = {k.value for k in QuotaKey}
    for key, value in ops:
        if key not in keys:
            raise ValueError(f"unknown quota key {key!r}")
        if value is not None and (value <= 0 or math.isnan(value) or math.isinf(value)):
            raise ValueError(f"quota {key} must be a positive number, got {value}")


class QuotaStore(Protocol):
    def load(self) -> dict[Entity, dict[str, float]]: ...

    def save(self, quotas: dict[Entity, dict[str, float]]) -> None: ...


class InMemoryQuotaStore:
    def __init__(self) -> None:
        self.quotas: dict[Entity, dict[str, float]] = {}

    def load(self) -> dict[Entity, dict[str, float]]:
        return {e: dict(v) for e, v in self.quotas.items()}

    def save(self, quotas: dict[Entity, dict[str, float]]) -> None:
        self.quotas = {e: dict(v) for e, v in quotas.items()}


class FileQuotaStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_dir(cls, data_dir: Path) -> FileQuotaStore:
        return cls(data_dir / FILE_NAME)

    def load(self) -> dict[Entity, dict[str, float]]:
        doc = read_json(self.path, {"version": 1, "quotas": []})
        return {
            validate_entity((p[0], p[1]) for p in q["entity"]): {
                k: float(v) for k, v in q["values"].items()
            }
            for q in doc["quotas"]
        }

    def save(self, quotas: dict[Entity, dict[str, float]]) -> None:
        doc = {
            "version": 1,
            "quotas": [
                {"entity": [list(p) for p in e], "values": v} for e, v in quotas.items() if v
            ],
        }
        write_json(self.path, doc)


@dataclass
class Rate:
    """Kafka's ``Rate`` over ``SampledStat`` windows: value per second."""

    window_ms: int
    samples: int
    _starts: list[float] = field(default_factory=list)
    _values: list[float] = field(default_factory=list)

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._starts or now_ms - self._starts[-1] >= self.window_ms:
            self._starts.append(now_ms)
            self._values.append(0.0)
        self._values[-1] += value

    def window_size_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        elapsed = now_ms - self._starts[0] if self._starts else 0.0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def rate(self, now_ms: float) -> float:
        """Per second."""
        size = self.window_size_ms(now_ms)
        return sum(self._values) / (size / 1000)

    def _purge(self, now_ms: float) -> None:
        horizon = now_ms - self.samples * self.window_ms
        while self._starts and self._starts[0] <= horizon:
            self._starts.pop(0)
            self._values.pop(0)


def _precedence(user: str, client_id: str) -> list[tuple[Entity, tuple[str, str]]]:
    """Candidate entities most specific first, each with the sensor key it shares."""
    return [
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]


class ClientQuotaManager:
    """Quota settings, the per-sensor rates, and the throttle decisions."""

    def __init__(self, store: QuotaStore, *, window_ms: int = 1000, samples: int = 11) -> None:
        self.store = store
        self.window_ms = window_ms
        self.samples = samples
        self.quotas = store.load()
        self._rates: dict[tuple[str, str, str], Rate] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.quotas)

    def reload(self) -> None:
        """Take the store's settings (changed through another broker); rates restart
        only when the settings really changed."""
        quotas = self.store.load()
        if quotas != self.quotas:
            self.quotas = quotas
            self._rates.clear()

    def quota_for(
        self, key: QuotaKey, user: str, client_id: str
    ) -> tuple[float, tuple[str, str]] | None:
        """(quota, sensor key) of the most specific entity with this quota, if any."""
        for candidate, sensor in _precedence(user, client_id):
            values = self.quotas.get(candidate)
            if values is not None and key.value in values:
                return values[key.value], sensor
        return None

    def _rate(self, key: QuotaKey, sensor: tuple[str, str]) -> Rate:
        rate = self._rates.get((key.value, *sensor))
        if rate is None:
            rate = self._rates[(key.value, *sensor)] = Rate(self.window_ms, self.samples)
        return rate

    def record(self, key: QuotaKey, user: str, client_id: str, amount: float, now_ms: float) -> int:
        """Record ``amount`` (bytes, or ms of handler time); returns the throttle in ms."""
        found = self.quota_for(key, user, client_id)
        if found is None:
            return 0
        quota, sensor = found
        rate = self._rate(key, sensor)
        rate.record(amount, now_ms)
        return self._throttle(key, quota, rate, now_ms)

    def throttle_ms(self, key: QuotaKey, user: str, client_id: str, now_ms: float) -> int:
        """How long the client must wait now, without recording anything."""
        found = self.quota_for(key, user, client_id)
        if found is None:
            return 0
        quota, sensor = found
        return self._throttle(key, quota, self._rate(key, sensor), now_ms)

    def max_value_in_window(self, key: QuotaKey, user: str, client_id: str) -> float | None:
        """The most one response may carry (Kafka's ``getMaxValueInQuotaWindow``).

        Without it one large fetch would overshoot a small quota by far more
        than a throttle can win back (throttles are capped at the whole window).
        """
        found = self.quota_for(key, user, client_id)
        if found is None:
            return None
        return found[0] * (self.samples - 1) * self.window_ms / 1000

    def _throttle(self, key: QuotaKey, quota: float, rate: Rate, now_ms: float) -> int:
        # request_percentage is percent of one thread: 100 = 1000 ms per second.
        bound = quota * 10 if key is QuotaKey.REQUEST_PERCENTAGE else quota
        observed = rate.rate(now_ms)
        if bound <= 0:
            return self.window_ms * self.samples if observed > 0 else 0
        if observed <= bound:
            return 0
        throttle = (observed - bound) / bound * rate.window_size_ms(now_ms)
        return int(min(math.ceil(throttle), self.window_ms * self.samples))

    # -- administration (AlterClientQuotas / DescribeClientQuotas) ---------------------

    def alter(self, changes: list[tuple[Entity, list[tuple[str, float | None]]]]) -> None:
        """Apply ``(entity, [(key, value or None to remove)])``; validated first, all or none."""
        for ent, ops in changes:
            validate_entity(ent)
            validate_ops(ops)
        updated = {e: dict(v) for e, v in self.quotas.items()}
        for ent, ops in changes:
            values = updated.setdefault(ent, {})
            for key, value in ops:
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if not values:
                del updated[ent]
        self.store.save(updated)
        self.quotas = updated
        self._rates.clear()

    def describe(
        self, components: list[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """KIP-546 filters: (type, match type 0=exact 1=default 2=any, name)."""
        out = []
        for ent, values in self.quotas.items():
            parts = dict(ent)
            ok = True
            for etype, match_type, name in components:
                if etype not in parts:
                    ok = False
                elif match_type == 0:
                    ok = ok and parts[etype] == name
                elif match_type == 1:
                    ok = ok and parts[etype] is None
            if strict and set(parts) != {c[0] for c in components}:
                ok = False
            if ok:
                out.append((ent, dict(values)))
        return out
