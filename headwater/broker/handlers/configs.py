"""DescribeConfigs and IncrementalAlterConfigs for topics and the broker.

Describe answers as Kafka does: each value with its type, its source and,
when asked, its synonyms in precedence order (topic override, dynamic broker
config, static broker config, default). Alter changes topic overrides and
the dynamic broker configs, applied live where Kafka applies them live: the
``log.*`` defaults every topic inherits and the connection limits. Dynamic
broker configs are kept in ``dynamic-broker-configs.json`` in the data
directory (Kafka keeps them in its metadata) and reapplied at start.

In a cluster a topic's overrides live in ZooKeeper (``/config/topics/<t>``,
as Kafka keeps them): an alter writes there through ``topic_config_writer``
and every broker, this one included, applies the change from its watch, so
the topic behaves the same on each replica.

Size: DescribeConfigs, IncrementalAlterConfigs and AlterConfigs share one
resolution of a config's value and source (topic override, dynamic broker,
static, default) and one authorization; split, the three would each carry a
copy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as E

from headwater.broker.config import BrokerConfig
from headwater.broker.config_catalog import (
    DYNAMIC_BROKER_CONFIGS,
    LISTENER_PREFIX,
    LISTENER_SSL_CONFIGS,
    STATIC_BROKER_CONFIGS,
    TOPIC_CONFIG_BY_NAME,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    dynamic_broker_config_type,
    is_sensitive,
    listener_ssl_config,
)
from headwater.broker.connection import RequestContext
from headwater.broker.connection_limits import ConnectionRegistry
from headwater.cluster.fetcher_assignment import check_thread_count_change
from headwater.fetch.replica_selector import RACK_AWARE, RACK_AWARE_SELECTOR_CLASS
from headwater.log.cleaner_manager import CleanerConfig
from headwater.log.config import LogConfig
from headwater.log.errors import KafkaApiError
from headwater.log.log_directory import LogDirectory, TopicInfo
from headwater.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from headwater.security.config import SecurityConfig, TlsConfig
from headwater.security.tls import (
    ListenerTlsContexts,
    check_same_identity,
    keystore_identity,
    server_context,
)

log = logging.getLogger(__name__)

TOPIC = 2
BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYNAMIC_CONFIG_FILE = "dynamic-broker-configs.json"
DEFAULT_ENTITY = "<default>"  # /config/brokers/<default>, the cluster-wide default


class ConfigError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConfigsApi:
    def __init__(
        self, config: BrokerConfig, logs: LogDirectory, connections: ConnectionRegistry
    ) -> None:
        self.static = config
        self.logs = logs
        self.connections = connections
        #: Told the new ``log.cleaner.*`` settings when they change (the broker's cleaner).
        self.on_cleaner_config: Callable[[CleanerConfig], None] | None = None
        #: Cluster mode: writes a topic's whole override map to ZooKeeper (blocking).
        self.topic_config_writer: Callable[[str, dict[str, str]], None] | None = None
        #: Cluster mode: writes a broker entity's dynamic configs (its id or ``<default>``)
        #: to ZooKeeper (blocking); every broker applies them from its watch.
        self.broker_config_writer: Callable[[str, dict[str, str]], None] | None = None
        #: The cluster-wide default (``/config/brokers/<default>``), below this broker's own.
        self.dynamic_default: dict[str, str] = {}
        #: Cluster mode: sets the replication throttles' (leader, follower) rates.
        self.throttle_setter: Callable[[float | None, float | None], None] | None = None
        #: Cluster mode: resizes the replica fetchers (``num.replica.fetchers``).
        self.replica_fetchers_setter: Callable[[int], None] | None = None
        #: The TLS listeners' contexts, replaced on a dynamic keystore change.
        self.listener_tls: ListenerTlsContexts | None = None
        self._path = Path(config.data_dir) / DYNAMIC_CONFIG_FILE
        self.dynamic: dict[str, str] = self._load()
        if self.dynamic:
            self._apply_dynamic(self.dynamic)
            log.info("dynamic broker configs: %s", self.dynamic)

    # -- describe ---------------------------------------------------------------------

    def describe_configs(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        synonyms = bool(getattr(req, "include_synonyms", False))
        results = []
        for res in req.resources:
            keys = set(res.configuration_keys) if res.configuration_keys is not None else None
            entry: dict[str, Any] = {
                "resource_type": res.resource_type,
                "resource_name": res.resource_name,
                "error_code": 0,
                "error_message": None,
                "configs": [],
            }
            denied = _denied(
                ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name
            )
            if denied:
                entry["error_code"] = denied
                results.append(entry)
                continue
            try:
                configs = self._describe(res.resource_type, res.resource_name, synonyms)
            except ConfigError as exc:
                entry["error_code"], entry["error_message"] = exc.code, str(exc)
            else:
                entry["configs"] = [c for c in configs if keys is None or c["name"] in keys]
            results.append(entry)
        return {"throttle_time": 0, "results": results}

    def _describe(self, kind: int, name: str, synonyms: bool) -> list[dict[str, Any]]:
        if kind == TOPIC:
            info = self.logs.topics().get(name)
            if info is None:
                raise ConfigError(int(E.unknown_topic_or_partition), f"unknown topic {name!r}")
            return self._describe_topic(info, synonyms)
        if kind == BROKER:
            self._check_broker(name)
            return self._describe_broker(synonyms)
        raise ConfigError(int(E.invalid_request), f"unsupported resource type {kind}")

    def _broker_layers(
        self, broker_name: str, static_value: str | None, default: str
    ) -> list[tuple[str, str, ConfigSource]]:
        """(name, value, source) of a broker config, most specific first."""
        layers = []
        if broker_name in self.dynamic:
            layers.append(
                (broker_name, self.dynamic[broker_name], ConfigSource.DYNAMIC_BROKER_CONFIG)
            )
        if broker_name in self.dynamic_default:
            layers.append(
                (
                    broker_name,
                    self.dynamic_default[broker_name],
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
            )
        if static_value is not None and static_value != default:
            layers.append((broker_name, static_value, ConfigSource.STATIC_BROKER_CONFIG))
        layers.append((broker_name, default, ConfigSource.DEFAULT_CONFIG))
        return layers

    def _describe_topic(self, info: TopicInfo, synonyms: bool) -> list[dict[str, Any]]:
        out = []
        for d in TOPIC_CONFIGS:
            static = d.from_log_config(self.static.log) if d.from_log_config else None
            layers = self._broker_layers(d.broker_name, static, d.default)
            if d.name in info.configs:
                layers.insert(0, (d.name, info.configs[d.name], ConfigSource.TOPIC_CONFIG))
            out.append(_entry(d.name, d.type, layers, synonyms, read_only=False))
        for name, value in sorted(info.configs.items()):
            if name not in TOPIC_CONFIG_BY_NAME:  # kept from CreateTopics, not acted on
                layers = [(name, value, ConfigSource.TOPIC_CONFIG)]
                out.append(_entry(name, ConfigType.STRING, layers, synonyms, read_only=False))
        return out

    def _describe_broker(self, synonyms: bool) -> list[dict[str, Any]]:
        static = self._static_broker_values()
        out = []
        for name, kind in sorted({**DYNAMIC_BROKER_CONFIGS, **STATIC_BROKER_CONFIGS}.items()):
            default = _DEFAULTS.get(name, static.get(name, ""))
            layers = self._broker_layers(name, static.get(name), default)
            read_only = name not in DYNAMIC_BROKER_CONFIGS
            out.append(_entry(name, kind, layers, synonyms, read_only=read_only))
        out += self._describe_listener_ssl(synonyms)
        for name, value in sorted(self.static.extra.items()):
            layers = [(name, value, ConfigSource.STATIC_BROKER_CONFIG)]
            out.append(_entry(name, ConfigType.UNKNOWN, layers, synonyms, read_only=True))
        return out

    def _describe_listener_ssl(self, synonyms: bool) -> list[dict[str, Any]]:
        """Each TLS listener's dynamic SSL keys that have a value: the dynamic one, the
        static listener-prefixed one, then the static unprefixed one (Kafka's synonyms)."""
        raw = self.static.security.raw
        out = []
        for listener in self._tls_listeners():
            for key, kind in LISTENER_SSL_CONFIGS.items():
                name = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
                layers = []
                if name in self.dynamic:
                    layers.append((name, self.dynamic[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
                if name in raw:
                    layers.append((name, raw[name], ConfigSource.STATIC_BROKER_CONFIG))
                if key in raw:
                    layers.append((key, raw[key], ConfigSource.STATIC_BROKER_CONFIG))
                if layers:
                    out.append(_entry(name, kind, layers, synonyms, read_only=False))
        return out

    def _tls_listeners(self) -> list[str]:
        return [lst.name for lst in self.static.all_listeners if lst.protocol.uses_tls]

    def _static_broker_values(self) -> dict[str, str]:
        c = self.static
        values = {
            d.broker_name: d.from_log_config(c.log) for d in TOPIC_CONFIGS if d.from_log_config
        }
        values.update(c.cleaner.as_properties())
        limits = c.connections
        values.update(
            {
                "max.connections": str(limits.max_connections),
                "max.connections.per.ip": str(limits.max_connections_per_ip),
                "max.connections.per.ip.overrides": ",".join(
                    f"{h}:{n}" for h, n in sorted(limits.per_ip_overrides.items())
                ),
                "max.connection.creation.rate": str(
                    _int_or_max(limits.max_connection_creation_rate)
                ),
                "auto.create.topics.enable": str(c.auto_create_topics).lower(),
                **{
                    f"{side}.replication.throttled.rate": str(int(rate))
                    for side, rate in (
                        ("leader", c.leader_replication_throttled_rate),
                        ("follower", c.follower_replication_throttled_rate),
                    )
                    if rate is not None
                },
                "connections.max.idle.ms": str(limits.idle_ms),
                "fetch.max.bytes": str(c.fetch_max_bytes),
                "log.dirs": str(c.data_dir),
                "log.dir.free.space.min.bytes": str(c.log.free_space_min_bytes),
                "headwater.log.scrub.bytes.per.second": str(c.log_scrub_bytes_per_second),
                "headwater.log.scrub.pass.interval.ms": str(c.log_scrub_pass_interval_ms),
                "headwater.log.corrupt.partitions": ",".join(
                    f"{topic}-{partition}:{first}-{last}"
                    for topic, partition, found in self.logs.loaded_logs()
                    if found.corrupt
                    for first, last in found.corrupt_ranges()
                ),
                "node.id": str(c.node_id),
                "num.partitions": str(c.num_partitions),
                "num.replica.fetchers": str(c.num_replica_fetchers),
                "broker.rack": c.broker_rack or "",
                "headwater.metrics.listen": (
                    f"{c.metrics_host}:{c.metrics_port}" if c.metrics_port is not None else ""
                ),
                "replica.selector.class": (
                    RACK_AWARE_SELECTOR_CLASS if c.replica_selector == RACK_AWARE else ""
                ),
                "queued.max.request.bytes": str(limits.queued_max_request_bytes),
                "socket.request.max.bytes": str(c.socket_request_max_bytes),
                "transaction.state.log.num.partitions": str(c.transaction_state_log_num_partitions),
                "transaction.state.log.replication.factor": str(
                    c.transaction_state_log_replication_factor
                ),
                "transaction.state.log.min.isr": str(c.transaction_state_log_min_isr),
                "transaction.max.timeout.ms": str(c.transaction_max_timeout_ms),
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(
                    c.transaction_abort_timed_out_transaction_cleanup_interval_ms
                ),
                "transactional.id.expiration.ms": str(c.transactional_id_expiration_ms),
                "transaction.remove.expired.transaction.cleanup.interval.ms": str(
                    c.transaction_remove_expired_transaction_cleanup_interval_ms
                ),
            }
        )
        return values

    # -- alter ------------------------------------------------------------------------

    def incremental_alter_configs(
        self, ctx: RequestContext, req: Any
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        topic_writes: dict[int, tuple[str, dict[str, str]]] = {}
        broker_writes: dict[int, _BrokerWrite] = {}
        response = self._alter(ctx, req, topic_writes, broker_writes)
        if broker_writes:
            return self._write_broker_configs(response, topic_writes, broker_writes)
        writer = self.topic_config_writer
        if not topic_writes:
            return response
        if writer is None:
            for name, configs in topic_writes.values():
                self._apply_topic(name, configs)
            return response

        async def write_to_cluster() -> dict[str, Any]:
            loop = asyncio.get_running_loop()
            for index, (name, configs) in topic_writes.items():
                entry = response["responses"][index]
                try:
                    await loop.run_in_executor(None, writer, name, configs)
                except KafkaApiError as exc:
                    entry["error_code"], entry["error_message"] = exc.kafka_error_code, str(exc)
                    continue
                except Exception as exc:  # ZooKeeper unreachable or timed out
                    log.warning("writing configs of topic %s to ZooKeeper failed: %s", name, exc)
                    entry["error_code"] = int(E.request_timed_out)
                    entry["error_message"] = f"could not write topic configs: {exc}"
                    continue
                self._apply_topic(name, configs)  # the watch applies it again, harmlessly
            return response

        return write_to_cluster()

    async def _write_broker_configs(
        self,
        response: dict[str, Any],
        topic_writes: dict[int, tuple[str, dict[str, str]]],
        broker_writes: dict[int, _BrokerWrite],
    ) -> dict[str, Any]:
        """Cluster mode: each broker entity's new map goes to ZooKeeper; this broker
        applies it at once, the others from their watches within a moment."""
        loop = asyncio.get_running_loop()
        writer = self.broker_config_writer
        assert writer is not None
        for index, (entity, configs, reload) in broker_writes.items():
            entry = response["responses"][index]
            try:
                await loop.run_in_executor(None, writer, entity, configs)
            except Exception as exc:  # ZooKeeper unreachable or timed out
                log.warning("writing dynamic configs of %s to ZooKeeper failed: %s", entity, exc)
                entry["error_code"] = int(E.request_timed_out)
                entry["error_message"] = f"could not write broker configs: {exc}"
                continue
            self.on_broker_configs(entity, configs)
            if self.listener_tls is not None and reload:
                # The same keystore path set again: reload a file rewritten in place.
                merged = {**self.dynamic_default, **self.dynamic}
                self._apply_tls(self.listener_tls, merged, reload)
        if topic_writes:
            topic_writer = self.topic_config_writer
            for index, (name, configs) in topic_writes.items():
                entry = response["responses"][index]
                try:
                    if topic_writer is not None:
                        await loop.run_in_executor(None, topic_writer, name, configs)
                except Exception as exc:
                    entry["error_code"] = int(E.request_timed_out)
                    entry["error_message"] = f"could not write topic configs: {exc}"
                    continue
                self._apply_topic(name, configs)
        return response

    def on_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """A broker entity's dynamic configs changed in ZooKeeper (or were written here)."""
        known = {k: v for k, v in configs.items() if dynamic_broker_config_type(k) is not None}
        if entity == DEFAULT_ENTITY:
            per_broker = sorted(k for k in known if listener_ssl_config(k) is not None)
            if per_broker:  # Kafka ignores them there too
                log.warning("ignoring per-broker configs in the cluster default: %s", per_broker)
                known = {k: v for k, v in known.items() if k not in per_broker}
            if known == self.dynamic_default:
                return
            self.dynamic_default = known
        elif entity == str(self.static.node_id):
            if known == self.dynamic:
                return
            self.dynamic = known
        else:
            return
        try:
            self._apply_dynamic({**self.dynamic_default, **self.dynamic})
        except (ValueError, KafkaApiError) as exc:
            log.error("cannot apply the dynamic broker configs of %s: %s", entity, exc)
            return
        log.info("dynamic broker configs of %s are now %s", entity, known)

    def alter_configs(
        self, ctx: RequestContext, req: Any
    ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """AlterConfigs (API 33): each resource's whole config set is replaced.

        Kafka's older API sets every listed key and resets every key not
        listed; it is answered as the equivalent IncrementalAlterConfigs (a SET
        per listed key, a DELETE per current override not listed), so both
        APIs share one validation, one ZooKeeper write and one apply.
        """
        resources = [
            _Resource(
                res.resource_type,
                res.resource_name,
                self._replacing_ops(res.resource_type, res.resource_name, res.configs),
            )
            for res in req.resources
        ]
        return self.incremental_alter_configs(ctx, _AlterRequest(resources, req.validate_only))

    def _replacing_ops(self, kind: int, name: str, configs: Any) -> list[_Op]:
        wanted = {c.name: c.value for c in configs}
        if kind == TOPIC:
            info = self.logs.topics().get(name)
            current = set(info.configs) if info is not None else set()
        elif kind == BROKER:
            current = set(self.dynamic_default if name == "" else self.dynamic)
        else:
            current = set()
        ops = [_Op(key, SET, value) for key, value in wanted.items()]
        ops += [_Op(key, DELETE, None) for key in sorted(current - set(wanted))]
        return ops

    def _alter(
        self,
        ctx: RequestContext,
        req: Any,
        topic_writes: dict[int, tuple[str, dict[str, str]]],
        broker_writes: dict[int, _BrokerWrite] | None = None,
    ) -> dict[str, Any]:
        """Validate every resource and apply broker configs; topic writes are returned."""
        responses: list[dict[str, Any]] = []
        for res in req.resources:
            entry: dict[str, Any] = {
                "resource_type": res.resource_type,
                "resource_name": res.resource_name,
                "error_code": 0,
                "error_message": None,
            }
            denied = _denied(ctx, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
            if denied:
                entry["error_code"] = denied
                responses.append(entry)
                continue
            try:
                if res.resource_type == TOPIC:
                    configs = self._alter_topic(res.resource_name, res.configs)
                    if not req.validate_only:
                        topic_writes[len(responses)] = (res.resource_name, configs)
                elif res.resource_type == BROKER and self.broker_config_writer is not None:
                    write = self._alter_cluster_broker(res.resource_name, res.configs)
                    if not req.validate_only and broker_writes is not None:
                        broker_writes[len(responses)] = write
                elif res.resource_type == BROKER:
                    self._check_broker(res.resource_name)
                    self._alter_broker(res.configs, req.validate_only)
                else:
                    raise ConfigError(
                        int(E.invalid_request), f"unsupported resource type {res.resource_type}"
                    )
            except ConfigError as exc:
                entry["error_code"], entry["error_message"] = exc.code, str(exc)
            except KafkaApiError as exc:
                entry["error_code"], entry["error_message"] = exc.kafka_error_code, str(exc)
            except ValueError as exc:
                entry["error_code"], entry["error_message"] = int(E.invalid_config), str(exc)
            responses.append(entry)
        return {"throttle_time": 0, "responses": responses}

    def _alter_topic(self, name: str, ops: Any) -> dict[str, str]:
        """The topic's new override map, validated; raises on an unknown topic or bad value."""
        info = self.logs.topics().get(name)
        if info is None:
            raise ConfigError(int(E.unknown_topic_or_partition), f"unknown topic {name!r}")
        configs = _apply_ops(
            dict(info.configs), ops, lambda key: _topic_type(key), default=_topic_default
        )
        self.static.log.with_topic_overrides(configs)  # raises InvalidConfigError
        return configs

    def _apply_topic(self, name: str, configs: dict[str, str]) -> None:
        if name in self.logs.topics():
            self.logs.alter_topic_configs(name, configs)
            log.info("topic %s configs are now %s", name, configs)

    def _alter_broker(self, ops: Any, validate_only: bool) -> None:
        dynamic = _apply_ops(dict(self.dynamic), ops, _broker_type, default=None)
        log_config, limits = self._resolve(dynamic)  # raises on a bad value
        del log_config, limits
        self._check_change(self.dynamic, dynamic)
        if not validate_only:
            self._apply_dynamic(dynamic)
            self.dynamic = dynamic
            self._save()
            log.info("dynamic broker configs are now %s", dynamic)

    def cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings: static, then the dynamic ``log.cleaner.*`` values."""
        return CleanerConfig.from_properties(
            {**self.dynamic_default, **self.dynamic}, base=self.static.cleaner
        )

    def _alter_cluster_broker(self, name: str, ops: Any) -> _BrokerWrite:
        """(entity, its new map, the listeners whose SSL keys it sets), validated: ""
        is the cluster default (Kafka's rule)."""
        if name == "":
            entity, current = DEFAULT_ENTITY, self.dynamic_default
            merged_with = self.dynamic
        else:
            self._check_broker(name)
            entity, current = name, self.dynamic
            merged_with = {}
        configs = _apply_ops(dict(current), ops, _broker_type, default=None)
        if entity == DEFAULT_ENTITY:
            per_broker = sorted(k for k in configs if listener_ssl_config(k) is not None)
            if per_broker:
                raise ValueError(
                    "Cannot update these configs at default cluster level, broker id must "
                    f"be specified: {', '.join(per_broker)}"
                )
            new = {**configs, **merged_with}
        else:
            new = {**self.dynamic_default, **configs}
        reload = frozenset(
            parsed[0] for op in ops if (parsed := listener_ssl_config(op.name)) is not None
        )
        self._resolve(new)  # raises on a bad value, or a keystore that does not load
        self._tls_changes(new, reload)  # a keystore rewritten in place must load too
        self._check_change({**self.dynamic_default, **self.dynamic}, new, reload)
        return _BrokerWrite(entity, configs, reload)

    def _check_change(
        self,
        current: Mapping[str, str],
        new: Mapping[str, str],
        reload: frozenset[str] = frozenset(),
    ) -> None:
        """What the broker that receives an alter checks against its running values, as
        Kafka's reconfigurables validate: the fetcher count may at most halve or double
        (``DynamicThreadPool``), a listener keystore keeps its certificate's subject and
        SANs (``SslFactory``). Raises ValueError."""
        old_count, new_count = self._replica_fetchers(current), self._replica_fetchers(new)
        check_thread_count_change("num.replica.fetchers", old_count, new_count)
        for listener in self._tls_listeners():
            old_cfg = self._listener_tls_config(listener, current)
            new_cfg = self._listener_tls_config(listener, new)
            if new_cfg == old_cfg and not self._tls_files_changed(listener, reload):
                continue
            serving = self.listener_tls.identity(listener) if self.listener_tls else None
            allow = self.static.security.for_listener(listener).raw
            try:
                check_same_identity(
                    serving or keystore_identity(old_cfg),
                    new_cfg,
                    allow_dn_changes=_true(allow.get("ssl.allow.dn.changes")),
                    allow_san_changes=_true(allow.get("ssl.allow.san.changes")),
                )
            except ValueError as exc:
                raise ValueError(f"listener {listener}: {exc}") from None

    def _replica_fetchers(self, dynamic: Mapping[str, str]) -> int:
        value = dynamic.get("num.replica.fetchers")
        if value is None:
            return self.static.num_replica_fetchers
        count = int(value)  # ValueError: INVALID_CONFIG
        if count < 1:
            raise ValueError(f"num.replica.fetchers must be at least 1, got {count}")
        return count

    def _listener_tls_config(self, listener: str, dynamic: Mapping[str, str]) -> TlsConfig:
        """A listener's TLS settings: its dynamic ``listener.name.<l>.ssl.*`` keys over
        the static ones."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        own = {k: v for k, v in dynamic.items() if k.startswith(prefix)}
        if own.get(prefix + "ssl.keystore.password"):
            raise ValueError(
                f"{prefix}ssl.keystore.password: a PEM keystore has no store password, "
                "only ssl.key.password (the private key's)"
            )
        security = self.static.security
        if own:
            security = SecurityConfig.from_properties({**security.raw, **own})
        return security.for_listener(listener).tls

    def _tls_files_changed(self, listener: str, reload: frozenset[str]) -> bool:
        """An alter set ``listener``'s SSL keys again and its files were rewritten."""
        return (
            listener.lower() in reload
            and self.listener_tls is not None
            and self.listener_tls.files_changed(listener)
        )

    def _tls_changes(
        self, dynamic: Mapping[str, str], reload: frozenset[str] = frozenset()
    ) -> dict[str, tuple[TlsConfig, Any]]:
        """Listeners whose TLS settings differ from those serving now (or, in
        ``reload``, whose files were rewritten), with the new context of each;
        raises ValueError naming the listener whose keystore or truststore does
        not load (the old context then stays)."""
        unknown = sorted(
            k
            for k in dynamic
            if (parsed := listener_ssl_config(k)) is not None
            and parsed[0] not in {n.lower() for n in self._tls_listeners()}
        )
        if unknown:
            raise ValueError(
                f"broker {self.static.node_id} has no TLS listener for {', '.join(unknown)} "
                "(listener names are in lower case there)"
            )
        changes = {}
        for listener in self._tls_listeners():
            cfg = self._listener_tls_config(listener, dynamic)
            serving = self.listener_tls.config(listener) if self.listener_tls else None
            same = cfg == (serving or self.static.security.for_listener(listener).tls)
            if same and not self._tls_files_changed(listener, reload):
                continue
            try:
                changes[listener] = (cfg, server_context(cfg))
            except ValueError as exc:
                raise ValueError(f"listener {listener}: {exc}") from None
        return changes

    def _throttle_rates(self, dynamic: Mapping[str, str]) -> tuple[float | None, float | None]:
        """(leader, follower) replication throttle rates: dynamic, else static (None: off)."""
        rates = []
        for key, static in (
            ("leader.replication.throttled.rate", self.static.leader_replication_throttled_rate),
            (
                "follower.replication.throttled.rate",
                self.static.follower_replication_throttled_rate,
            ),
        ):
            if key in dynamic:
                value = int(dynamic[key])  # ValueError: INVALID_CONFIG
                if value < 0:
                    raise ValueError(f"{key} must be at least 0, got {value}")
                rates.append(None if value >= _LONG_MAX else float(value))
            else:
                rates.append(static)
        return rates[0], rates[1]

    def _resolve(self, dynamic: Mapping[str, str], *, tls: bool = True) -> tuple[LogConfig, Any]:
        self._throttle_rates(dynamic)
        self._replica_fetchers(dynamic)
        if tls:
            self._tls_changes(dynamic)
        log_keys = {
            k: v
            for k, v in dynamic.items()
            if k not in _CONNECTION_KEYS
            and k not in _THROTTLE_KEYS
            and listener_ssl_config(k) is None
        }
        conn_keys = {k: v for k, v in dynamic.items() if k in _CONNECTION_KEYS}
        log_config = LogConfig.from_properties(log_keys, base=self.static.log)
        limits = self.static.connections.with_properties(
            conn_keys, self.static.socket_request_max_bytes
        )
        CleanerConfig.from_properties(dynamic, base=self.static.cleaner)  # raises on a bad value
        return log_config, limits

    def _apply_dynamic(self, dynamic: Mapping[str, str]) -> None:
        log_config, limits = self._resolve(dynamic, tls=False)
        self.logs.alter_base_config(log_config)
        self.connections.limits = limits
        if self.on_cleaner_config is not None:
            self.on_cleaner_config(CleanerConfig.from_properties(dynamic, base=self.static.cleaner))
        if self.throttle_setter is not None:
            self.throttle_setter(*self._throttle_rates(dynamic))
        if self.replica_fetchers_setter is not None:
            self.replica_fetchers_setter(self._replica_fetchers(dynamic))
        if self.listener_tls is not None:
            self._apply_tls(self.listener_tls, dynamic)

    def _apply_tls(
        self,
        contexts: ListenerTlsContexts,
        dynamic: Mapping[str, str],
        reload: frozenset[str] = frozenset(),
    ) -> None:
        """New keystores for new connections; one that does not load leaves the old
        context serving (it was checked when altered, but a file may go meanwhile)."""
        try:
            changes = self._tls_changes(dynamic, reload)
        except ValueError as exc:
            log.error("keeping the current TLS keystores: %s", exc)
            return
        for listener, (cfg, ctx) in changes.items():
            contexts.replace(listener, cfg, ctx)
            log.info(
                "listener %s: new connections use the keystore %s",
                listener,
                cfg.keystore_location or "given inline",
            )

    def _check_broker(self, name: str) -> None:
        if name not in ("", str(self.static.node_id)):
            raise ConfigError(int(E.invalid_request), f"this is broker {self.static.node_id}")

    def _load(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._path.read_text()))
        except FileNotFoundError:
            return {}

    def _save(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.dynamic, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)


_CONNECTION_KEYS = {k for k in DYNAMIC_BROKER_CONFIGS if "connection" in k}
_THROTTLE_KEYS = {k for k in DYNAMIC_BROKER_CONFIGS if k.endswith(".replication.throttled.rate")}
_LONG_MAX = 2**63 - 1
_DEFAULTS = {
    "max.connections": str(2**31 - 1),
    "max.connections.per.ip": str(2**31 - 1),
    "max.connections.per.ip.overrides": "",
    "max.connection.creation.rate": str(2**31 - 1),
    "leader.replication.throttled.rate": str(2**63 - 1),
    "follower.replication.throttled.rate": str(2**63 - 1),
    "num.replica.fetchers": "1",
    # Kafka's default is null for both; DescribeConfigs values here are strings.
    "broker.rack": "",
    "headwater.metrics.listen": "",
    "replica.selector.class": "",
    **{d.broker_name: d.default for d in TOPIC_CONFIGS},
    **CleanerConfig().as_properties(),
}


def _int_or_max(value: float) -> int:
    return 2**31 - 1 if value == float("inf") else int(value)


def _topic_type(key: str) -> ConfigType:
    d = TOPIC_CONFIG_BY_NAME.get(key)
    if d is None:
        raise ConfigError(int(E.invalid_config), f"unknown topic config {key!r}")
    return d.type


def _topic_default(key: str) -> str:
    return TOPIC_CONFIG_BY_NAME[key].default


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _broker_type(key: str) -> ConfigType:
    kind = dynamic_broker_config_type(key)
    if kind is None:
        raise ConfigError(
            int(E.invalid_config), f"{key!r} cannot be updated dynamically on this broker"
        )
    return kind


class _BrokerWrite(NamedTuple):
    """A validated alter of a broker entity, to write to ZooKeeper."""

    entity: str
    configs: dict[str, str]
    #: Listeners whose SSL keys the alter sets (a rewritten keystore reloads).
    reload: frozenset[str]


class _Op(NamedTuple):
    """One IncrementalAlterConfigs operation (what kio decodes), built for AlterConfigs."""

    name: str
    config_operation: int
    value: str | None


class _Resource(NamedTuple):
    resource_type: int
    resource_name: str
    configs: list[_Op]


class _AlterRequest(NamedTuple):
    resources: list[_Resource]
    validate_only: bool


def _denied(ctx: RequestContext, operation: AclOperation, kind: int, name: str) -> int:
    """0, or Kafka's authorization error for ``operation`` on a config resource.

    Topic configs need the operation on the topic, broker configs on the
    cluster, as Kafka's ``KafkaApis`` checks them.
    """
    if kind == TOPIC and not ctx.authorize(operation, ResourceType.TOPIC, name):
        return int(E.topic_authorization_failed)
    if kind == BROKER and not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return int(E.cluster_authorization_failed)
    return 0


def _apply_ops(
    configs: dict[str, str],
    ops: Any,
    type_of: Callable[[str], ConfigType],
    default: Callable[[str], str] | None,
) -> dict[str, str]:
    """KIP-339 operations: SET, DELETE, and APPEND/SUBTRACT on list configs."""
    for op in ops:
        key, operation, value = op.name, op.config_operation, op.value
        kind = type_of(key)
        if operation == SET:
            if value is None:
                raise ConfigError(int(E.invalid_request), f"SET {key} needs a value")
            configs[key] = value
        elif operation == DELETE:
            configs.pop(key, None)
        elif operation in (APPEND, SUBTRACT):
            if kind is not ConfigType.LIST:
                raise ConfigError(int(E.invalid_config), f"{key} is not a list config")
            base = configs.get(key, default(key) if default else "")
            items = [i for i in base.split(",") if i]
            for item in (value or "").split(","):
                if operation == APPEND and item and item not in items:
                    items.append(item)
                elif operation == SUBTRACT and item in items:
                    items.remove(item)
            configs[key] = ",".join(items)
        else:
            raise ConfigError(int(E.invalid_request), f"unknown config operation {operation}")
    return configs


def _entry(
    name: str,
    kind: ConfigType,
    layers: list[tuple[str, str, ConfigSource]],
    synonyms: bool,
    *,
    read_only: bool,
) -> dict[str, Any]:
    _, value, source = layers[0]
    sensitive = is_sensitive(name)
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "is_default": source is ConfigSource.DEFAULT_CONFIG,
        "config_source": int(source),
        "is_sensitive": sensitive,
        "synonyms": [
            {"name": n, "value": None if sensitive else v, "source": int(s)} for n, v, s in layers
        ]
        if synonyms
        else [],
        "config_type": int(kind),
        "documentation": None,
    }
