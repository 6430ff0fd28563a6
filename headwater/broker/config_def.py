"""Every broker config key with its type, valid values and meaning, as Kafka's ``ConfigDef``.

Why: a typo (``log.segmnet.bytes``) or a bad value (``num.partitions=-3``)
must not start a broker silently. ``BROKER_CONFIG_DEF.validate(props)``
checks a server.properties mapping before anything starts: a bad value is a
``ConfigValueError`` (one line naming the key, the value and what is valid);
an unknown key is a warning naming the nearest known key. ``headwater serve
--help-config`` prints the table.

Adding a key is one entry in ``_KEYS`` (``_int``, ``_long``, ``_bool``,
``_str``, ``_list``, ``_password``); keys under ``_PREFIXES`` (per-listener
overrides) are accepted as a family.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A config that must not start a broker."""


class ConfigValueError(ConfigError):
    """A known key with a value of the wrong type or out of range."""


class Type(enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"
    SHORT = "short"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    CLASS = "class"
    PASSWORD = "password"


_BOUNDS = {Type.INT: INT_MAX, Type.SHORT: 2**15 - 1, Type.LONG: LONG_MAX}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: Type
    default: str | None
    doc: str
    group: str
    at_least: float | None = None
    at_most: float | None = None
    choices: tuple[str, ...] = ()

    def valid_values(self) -> str:
        if self.choices:
            return (
                ", ".join(self.choices)
                if self.type is not Type.LIST
                else ("any of " + ", ".join(self.choices))
            )
        if self.at_least is not None and self.at_most is not None:
            return f"[{_num(self.at_least)},...,{_num(self.at_most)}]"
        if self.at_least is not None:
            return f"[{_num(self.at_least)},...]"
        if self.type is Type.BOOLEAN:
            return "true, false"
        return ""

    def check(self, value: str) -> None:
        """Raise ``ConfigValueError`` unless ``value`` is valid for this key."""
        text = value.strip()
        if self.type is Type.BOOLEAN:
            if text.lower() not in _TRUE + _FALSE:
                self._fail(value, "must be true or false")
            return
        if self.type in _BOUNDS or self.type is Type.DOUBLE:
            try:
                number: float = float(text) if self.type is Type.DOUBLE else int(text)
            except ValueError:
                kind = "a number" if self.type is Type.DOUBLE else "an integer"
                self._fail(value, f"not {kind}")
            if self.at_least is not None and number < self.at_least:
                self._fail(value, f"must be at least {_num(self.at_least)}")
            if self.at_most is not None and number > self.at_most:
                self._fail(value, f"must be at most {_num(self.at_most)}")
            top = _BOUNDS.get(self.type)
            if top is not None and not -top - 1 <= number <= top:
                self._fail(value, f"out of range for the type (at most {top})")
            return
        if self.choices:
            items = [v.strip() for v in text.split(",")] if self.type is Type.LIST else [text]
            wanted = {c.lower() for c in self.choices}
            for item in items:
                if item.lower() not in wanted:
                    self._fail(value, f"must be {self.valid_values()}")

    def _fail(self, value: str, why: str) -> None:
        raise ConfigValueError(
            f"invalid value {value!r} for {self.name} ({self.type.value}): {why}"
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class ConfigDef:
    """A table of ``ConfigKey`` plus key families accepted by prefix."""

    def __init__(self, keys: Iterable[ConfigKey], prefixes: Mapping[str, str] = {}) -> None:
        self.keys = {k.name: k for k in keys}
        self.prefixes = dict(prefixes)

    def __contains__(self, name: str) -> bool:
        return name in self.keys or name.startswith(tuple(self.prefixes))

    def nearest(self, name: str) -> str | None:
        """The known key ``name`` most likely meant (a typo), if any is close."""
        found = difflib.get_close_matches(name, list(self.keys), n=1, cutoff=0.75)
        return found[0] if found else None

    def validate(self, props: Mapping[str, str], origin: Mapping[str, str] = {}) -> list[str]:
        """Check every value; return one warning per unknown key.

        Raises ``ConfigValueError`` for the first bad value (``origin`` says where
        a key came from, e.g. ``-o`` or a file name, for the message).
        """
        warnings = []
        for name in sorted(props):
            key = self.keys.get(name)
            where = f" ({origin[name]})" if name in origin else ""
            if key is not None:
                try:
                    key.check(props[name])
                except ConfigValueError as exc:
                    raise ConfigValueError(f"{exc}{where}") from None
            elif name not in self:
                guess = self.nearest(name)
                hint = f"; did you mean {guess}?" if guess else "; ignored"
                warnings.append(f"unknown config key {name}{where}{hint}")
        return warnings

    def table(self) -> str:
        """The ``--help-config`` text: one block per group, one line per key."""
        lines: list[str] = []
        groups: dict[str, list[ConfigKey]] = {}
        for key in self.keys.values():
            groups.setdefault(key.group, []).append(key)
        for group, keys in groups.items():
            lines.append(f"{group}:")
            for k in sorted(keys, key=lambda k: k.name):
                default = "(none)" if k.default is None else (k.default or '""')
                valid = k.valid_values()
                lines.append(
                    f"  {k.name}  [{k.type.value}, default {default}"
                    + (f", valid {valid}" if valid else "")
                    + "]"
                )
                lines.append(f"      {k.doc}")
            lines.append("")
        if self.prefixes:
            lines.append("Key families:")
            lines += [f"  {prefix}*  {doc}" for prefix, doc in self.prefixes.items()]
        return "\n".join(lines).rstrip() + "\n"


# -- the table ---------------------------------------------------------------------------

_group = "Server"


def _key(
    name: str, type_: Type, default: str | None, doc: str, **kw: float | tuple[str, ...]
) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, _group, **kw)  # type: ignore[arg-type]


def _int(name: str, default: int | None, doc: str, **kw: float) -> ConfigKey:
    return _key(name, Type.INT, None if default is None else str(default), doc, **kw)


def _long(name: str, default: int | None, doc: str, **kw: float) -> ConfigKey:
    return _key(name, Type.LONG, None if default is None else str(default), doc, **kw)


def _bool(name: str, default: bool, doc: str) -> ConfigKey:
    return _key(name, Type.BOOLEAN, str(default).lower(), doc)


def _str(name: str, default: str | None, doc: str, choices: tuple[str, ...] = ()) -> ConfigKey:
    return _key(name, Type.STRING, default, doc, choices=choices)


def _list(name: str, default: str | None, doc: str, choices: tuple[str, ...] = ()) -> ConfigKey:
    return _key(name, Type.LIST, default, doc, choices=choices)


def _password(name: str, doc: str) -> ConfigKey:
    return _key(name, Type.PASSWORD, None, doc)


_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_KEYS: list[ConfigKey] = [
    _str("listeners", "PLAINTEXT://127.0.0.1:9092", "listeners, NAME://HOST:PORT,... (--listen)"),
    _str("advertised.listeners", None, "addresses clients are told to use, per listener"),
    _str("listener.security.protocol.map", None, "NAME:PROTOCOL,... for custom listener names"),
    _str("log.dirs", "headwater-data", "the data directory (--data-dir); the first if several"),
    _str("log.dir", "headwater-data", "the data directory when log.dirs is not set"),
    _int("broker.id", 0, "this broker's id, unique in a cluster", at_least=0),
    _int("node.id", 0, "synonym of broker.id", at_least=0),
    _str("cluster.id", "headwater-cluster", "cluster id of a single broker"),
    _str("broker.rack", None, "this broker's rack or zone (KIP-36 placement, KIP-392 reads)"),
    _str(
        "replica.selector.class", None,
        "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector (or 'rack-aware') "
        "lets consumers fetch from a replica in their rack; unset: from the leader",
    ),
    _int("num.partitions", 1, "partitions of auto-created topics", at_least=1),
    _bool("auto.create.topics.enable", True, "create unknown topics on Metadata and Produce"),
    _int("socket.request.max.bytes", 104_857_600, "largest request frame", at_least=1),
    _int("fetch.max.bytes", 57_671_680, "cap on one fetch response", at_least=1024),
    _int("max.incremental.fetch.session.cache.slots", 1000, "KIP-227 sessions kept", at_least=0),
    _int(
        "min.incremental.fetch.session.eviction.ms", 120_000,
        "age before a session may be evicted", at_least=0,
    ),
    _int("min.incremental.fetch.session.size", 0, "partitions a session needs", at_least=0),
    _int(
        "incremental.fetch.session.consumer.cache.slots", None,
        "slots reserved for consumers (default: all)", at_least=0,
    ),
    _int(
        "max.incremental.fetch.session.cache.slots.per.principal", None,
        "one principal's share of the session cache", at_least=0,
    ),
    _int("group.initial.rebalance.delay.ms", 3000, "wait for more members", at_least=0),
    _int("group.min.session.timeout.ms", 6000, "smallest session timeout", at_least=0),
    _int("group.max.session.timeout.ms", 1_800_000, "largest session timeout", at_least=0),
    _int("group.max.size", INT_MAX, "members a group may have", at_least=1),
    # KIP-848 consumer groups (group.protocol=consumer), Kafka 4's names and defaults.
    _list("group.coordinator.rebalance.protocols", "classic,consumer",
          "group protocols served", ("classic", "consumer")),
    _int("group.consumer.heartbeat.interval.ms", 5000, "consumer group heartbeat interval",
         at_least=1),
    _int("group.consumer.session.timeout.ms", 45000, "consumer group member session",
         at_least=1),
    _int("group.consumer.min.session.timeout.ms", 45000, "smallest consumer session timeout",
         at_least=1),
    _int("group.consumer.max.session.timeout.ms", 60000, "largest consumer session timeout",
         at_least=1),
    _int("group.consumer.max.size", INT_MAX, "members a consumer group may have", at_least=1),
    _list("group.consumer.assignors", "uniform,range",
          "server-side assignors, the first the default"),
    _str("group.consumer.migration.policy", "bidirectional", "classic <-> consumer conversion",
         ("bidirectional", "upgrade", "downgrade", "disabled")),
    _int("offset.metadata.max.bytes", 4096, "metadata of a committed offset", at_least=0),
    _int("offsets.topic.num.partitions", 50, "partitions of __consumer_offsets", at_least=1),
    _key("offsets.topic.replication.factor", Type.SHORT, "3", "replicas of __consumer_offsets",
         at_least=1),
    _long("log.retention.check.interval.ms", 300_000, "how often retention runs", at_least=1),
    _int("request.timeout.ms", 30_000, "requests to other brokers", at_least=0),
    _int("offsets.commit.timeout.ms", 5000, "wait for a replicated commit", at_least=1),
    _str("compression.type", "producer", "topics' default compression",
         ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
]  # fmt: skip

_group = "Headwater"
_KEYS += [
    _bool("headwater.zero.copy.enable", True, "sendfile record data (false: read into memory)"),
    _str("headwater.event.loop", "asyncio", "the event loop", ("asyncio", "uvloop")),
    _str("headwater.metrics.listen", None, "HOST:PORT of Prometheus /metrics (--metrics-listen)"),
    _str("headwater.console.listen", None, "HOST:PORT of the web console (--console-listen)"),
    _bool("headwater.fetch.session.retransmit.enable", True, "resend a lost session response"),
    _int("headwater.fetch.session.slots.per.client", None, "sessions per client id", at_least=0),
    _long("headwater.malloc.trim.interval.ms", 30_000, "return free C heap; 0 never", at_least=0),
    _long("headwater.housekeeping.interval.ms", 1000, "session and quota upkeep", at_least=1),
    _long("headwater.log.scrub.bytes.per.second", 4 << 20,
          "the scrubber's CRC-32C checks of closed segments, bytes/s; 0 off", at_least=0),
    _long("headwater.log.scrub.pass.interval.ms", 60_000, "rest between two scrubber passes",
          at_least=0),
    _int("headwater.log.open.files.max", 1024, "LRU bound on open segment files", at_least=1),
    _int(
        "headwater.log.message.max.decompressed.bytes", 64 << 20,
        "most one compressed batch may inflate to", at_least=0,
    ),
    _long("headwater.request.receive.timeout.ms", None, "a request must arrive in", at_least=0),
    _long("headwater.request.completion.timeout.ms", None, "a request must finish in", at_least=0),
    _int("headwater.max.queued.requests.per.connection", None, "pipelined requests", at_least=1),
    _bool("headwater.replica.fetch.sessions.enable", True, "follower fetch sessions"),
]  # fmt: skip

_group = "Log"
_KEYS += [
    _int("log.segment.bytes", 1 << 30, "segment size before a roll", at_least=14, at_most=INT_MAX),
    _long("log.roll.ms", None, "segment age before a roll (default log.roll.hours)", at_least=1),
    _int("log.roll.hours", 168, "segment age before a roll, hours", at_least=1),
    _int("log.index.interval.bytes", 4096, "bytes between offset index entries", at_least=0),
    _long("log.retention.ms", None, "keep data this long; -1 forever", at_least=-1),
    _int("log.retention.minutes", None, "retention in minutes", at_least=-1),
    _int("log.retention.hours", 168, "retention in hours", at_least=-1),
    _long("log.retention.bytes", -1, "size limit of a partition; -1 none", at_least=-1),
    _long("log.flush.interval.messages", LONG_MAX, "fsync after this many", at_least=1),
    _long("log.flush.interval.ms", None, "fsync after this long (default: the OS)", at_least=0),
    _int("message.max.bytes", 1_048_588, "largest record batch", at_least=0),
    _int("producer.id.expiration.ms", 86_400_000, "idle producer ids expire", at_least=1),
    _str("log.message.timestamp.type", "CreateTime", "timestamp of appended records",
         ("CreateTime", "LogAppendTime")),
    _long("log.message.timestamp.before.max.ms", LONG_MAX, "oldest timestamp accepted",
          at_least=0),
    _long("log.message.timestamp.after.max.ms", LONG_MAX, "newest timestamp accepted",
          at_least=0),
    _long("log.message.timestamp.difference.max.ms", LONG_MAX, "both of the above (deprecated)",
          at_least=0),
    _long("log.dir.free.space.min.bytes", 64 << 20,
          "below this free space a log directory refuses Produce (KAFKA_STORAGE_ERROR)",
          at_least=0),
    _list("log.cleanup.policy", "delete", "what happens to old segments", ("delete", "compact")),
    _bool("log.cleaner.enable", True, "run the log cleaner for compacted topics"),
    _int("log.cleaner.threads", 1, "cleaner threads", at_least=0),
    _long("log.cleaner.dedupe.buffer.size", 134_217_728, "cleaner offset map memory",
          at_least=0),
    _key("log.cleaner.min.cleanable.ratio", Type.DOUBLE, "0.5", "dirty ratio that triggers a clean",
         at_least=0, at_most=1),
    _long("log.cleaner.delete.retention.ms", 86_400_000, "tombstones kept", at_least=0),
    _long("log.cleaner.min.compaction.lag.ms", 0, "records younger are not compacted",
          at_least=0),
    _long("log.cleaner.max.compaction.lag.ms", LONG_MAX, "records older are compacted",
          at_least=1),
    _long("log.cleaner.backoff.ms", 15_000, "sleep when nothing to clean", at_least=0),
    _int("offsets.retention.minutes", 10_080, "committed offsets of empty groups kept",
         at_least=1),
    _long("offsets.retention.check.interval.ms", 600_000, "how often expired offsets go",
          at_least=1),
]  # fmt: skip

_group = "Connections"
_KEYS += [
    _int("max.connections", INT_MAX, "connections the broker accepts", at_least=0),
    _int("max.connections.per.ip", INT_MAX, "connections from one address", at_least=0),
    _str("max.connections.per.ip.overrides", "", "HOST:COUNT,... exceptions"),
    _int("max.connection.creation.rate", INT_MAX, "new connections a second", at_least=0),
    _long("connections.max.idle.ms", 600_000, "idle connections close"),
    _long("queued.max.request.bytes", -1, "request bytes queued; -1 unbounded", at_least=-1),
]  # fmt: skip

_group = "Cluster (ZooKeeper mode)"
_KEYS += [
    _str("zookeeper.connect", None, "HOST:PORT[,...][/chroot]; unset: a single broker"),
    _int("zookeeper.session.timeout.ms", 18_000, "a dead broker's registration lasts", at_least=1),
    _int("zookeeper.connection.timeout.ms", None, "wait for ZooKeeper at start", at_least=1),
    _int("default.replication.factor", 1, "replicas of defaulted topics", at_least=1),
    _int("min.insync.replicas", 1, "replicas acks=all needs", at_least=1),
    _bool("unclean.leader.election.enable", False, "elect outside the ISR"),
    _bool("auto.leader.rebalance.enable", True, "move leaders back to preferred replicas"),
    _long("leader.imbalance.check.interval.seconds", 300, "rebalance check", at_least=1),
    _long("replica.lag.time.max.ms", 30_000, "a follower this late leaves the ISR", at_least=1),
    _int("replica.fetch.max.bytes", 1_048_576, "per partition in a follower fetch", at_least=0),
    _int("replica.fetch.response.max.bytes", 10_485_760, "a follower fetch response",
         at_least=0),
    _int("replica.fetch.wait.max.ms", 500, "follower long poll", at_least=0),
    _int("replica.fetch.min.bytes", 1, "follower fetch minimum", at_least=0),
    _int("replica.fetch.backoff.ms", 1000, "follower retry after an error", at_least=0),
    _int("num.replica.fetchers", 1, "fetchers per source broker", at_least=1),
    _long("replica.high.watermark.checkpoint.interval.ms", 5000, "HW checkpoint", at_least=1),
    _long("leader.replication.throttled.rate", None, "KIP-73 leader bytes/s", at_least=0),
    _long("follower.replication.throttled.rate", None, "KIP-73 follower bytes/s", at_least=0),
    _int("replication.quota.window.num", 11, "throttle windows", at_least=1),
    _int("replication.quota.window.size.seconds", 1, "throttle window", at_least=1),
]  # fmt: skip

_group = "Transactions"
_KEYS += [
    _int("transaction.state.log.num.partitions", 50, "partitions of __transaction_state",
         at_least=1),
    _key("transaction.state.log.replication.factor", Type.SHORT, "3",
         "replicas of __transaction_state", at_least=1),
    _int("transaction.state.log.min.isr", 2, "min ISR of __transaction_state", at_least=1),
    _int("transaction.max.timeout.ms", 900_000, "longest transaction timeout", at_least=1),
    _int("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000,
         "how often timed-out transactions abort", at_least=1),
    _int("transactional.id.expiration.ms", 604_800_000, "idle transactional ids expire",
         at_least=1),
    _int("transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000,
         "how often expired ids go", at_least=1),
]  # fmt: skip

_group = "Security"
_KEYS += [
    _str("inter.broker.listener.name", None, "listener brokers use to reach each other"),
    _str("security.inter.broker.protocol", None, "protocol of that listener", _PROTOCOLS),
    _str("sasl.mechanism.inter.broker.protocol", None, "SASL mechanism between brokers",
         ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    _list("sasl.enabled.mechanisms", "", "SASL mechanisms offered",
          ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    _int("sasl.server.max.receive.size", 524_288, "largest SASL token", at_least=1),
    _password("sasl.jaas.config", "the broker's own JAAS line (username, password)"),
    _long("connections.max.reauth.ms", 0, "re-authenticate after (KIP-368); 0 never",
          at_least=0),
    _int("connection.failed.authentication.delay.ms", 100, "delay after a failed login",
         at_least=0),
    _key("authorizer.class.name", Type.CLASS, "", "an ACL authorizer (Kafka's class names)"),
    _str("super.users", "", "User:NAME;User:NAME... allowed everything"),
    _bool("allow.everyone.if.no.acl.found", False, "no ACL on a resource allows everyone"),
    _int("quota.window.size.seconds", 1, "client quota window", at_least=1),
    _int("quota.window.num", 11, "client quota windows", at_least=1),
    _str("ssl.client.auth", "none", "client certificates", ("none", "requested", "required")),
    _str("ssl.keystore.type", "PEM", "keystore format", ("PEM",)),
    _str("ssl.keystore.location", None, "PEM file with the key and certificate chain"),
    _password("ssl.keystore.key", "the private key, PEM, inline"),
    _str("ssl.keystore.certificate.chain", None, "the certificate chain, PEM, inline"),
    _password("ssl.keystore.password", "password of the keystore"),
    _password("ssl.key.password", "password of the private key"),
    _str("ssl.truststore.type", "PEM", "truststore format", ("PEM",)),
    _str("ssl.truststore.location", None, "PEM CA certificates for client certificates"),
    _password("ssl.truststore.password", "password of the truststore (unused with PEM)"),
    _list("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "TLS versions",
          ("TLSv1.2", "TLSv1.3")),
    _list("ssl.cipher.suites", "", "cipher suites (default: Python's)"),
    _str("ssl.endpoint.identification.algorithm", "https",
         "peer host name check between brokers; empty: off"),
]  # fmt: skip

_group = "Kafka keys without effect in Headwater (accepted for server.properties compatibility)"
_KEYS += [
    _int(name, None, "no effect: Headwater runs one event loop")
    for name in (
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
    )
]

_PREFIXES = {
    "listener.name.": "per-listener overrides: listener.name.<listener>.<key> (ssl.*, sasl.*)",
}

BROKER_CONFIG_DEF = ConfigDef(_KEYS, _PREFIXES)
"""Every key ``headwater serve`` knows."""
