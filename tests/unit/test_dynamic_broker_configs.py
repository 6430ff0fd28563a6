"""Dynamic broker configs: the cluster default below the broker's own, throttles,
replica fetchers and listener keystores applied live."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.config_catalog import ConfigSource
from headwater.broker.connection_limits import ConnectionRegistry
from headwater.broker.handlers.configs import BROKER, ConfigsApi
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory
from headwater.security.tls import ListenerTlsContexts
from tests.integration.tls_certs import Certs, make_certs


@pytest.fixture
def api(tmp_path: Path) -> ConfigsApi:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "broker.id": "1"})
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    return ConfigsApi(config, logs, ConnectionRegistry(config.connections))


def _describe(api: ConfigsApi, key: str) -> tuple[str, int]:
    (entry,) = [c for c in api._describe(BROKER, "1", synonyms=False) if c["name"] == key]
    return entry["value"], entry["config_source"]


def test_default_then_own_value_with_their_sources(api: ConfigsApi) -> None:
    api.on_broker_configs("<default>", {"log.retention.ms": "1000"})
    assert _describe(api, "log.retention.ms") == (
        "1000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert api.logs.config.retention_ms == 1000
    api.on_broker_configs("1", {"log.retention.ms": "2000"})
    assert _describe(api, "log.retention.ms") == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    api.on_broker_configs("2", {"log.retention.ms": "3000"})  # another broker's: ignored
    assert api.logs.config.retention_ms == 2000
    api.on_broker_configs("1", {})
    assert api.logs.config.retention_ms == 1000


def test_replication_throttles_are_dynamic(api: ConfigsApi) -> None:
    rates: list[tuple[float | None, float | None]] = []
    api.throttle_setter = lambda leader, follower: rates.append((leader, follower))
    api.on_broker_configs("<default>", {"follower.replication.throttled.rate": "5000"})
    assert rates[-1] == (None, 5000.0)
    api.broker_config_writer = lambda entity, configs: None
    bad = SimpleNamespace(name="leader.replication.throttled.rate", config_operation=0, value="x")
    req = SimpleNamespace(
        resources=[SimpleNamespace(resource_type=BROKER, resource_name="", configs=[bad])],
        validate_only=False,
    )
    allow_all = SimpleNamespace(authorize=lambda *args: True)
    (entry,) = api._alter(allow_all, req, {}, {})["responses"]  # type: ignore[arg-type]
    assert entry["error_code"] == 40  # INVALID_CONFIG


ALLOW_ALL = SimpleNamespace(authorize=lambda *args: True)


def _alter_broker(api: ConfigsApi, entity: str, **values: str | None) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of one broker entity (SET, or DELETE for None)."""
    api.broker_config_writer = lambda entity, configs: None
    ops = [
        SimpleNamespace(
            name=k.replace("_", "."), config_operation=0 if v is not None else 1, value=v
        )
        for k, v in values.items()
    ]
    req = SimpleNamespace(
        resources=[SimpleNamespace(resource_type=BROKER, resource_name=entity, configs=ops)],
        validate_only=False,
    )
    (entry,) = api._alter(ALLOW_ALL, req, {}, {})["responses"]  # type: ignore[arg-type]
    return entry["error_code"], entry["error_message"]


def test_num_replica_fetchers_is_dynamic_within_kafkas_bounds(api: ConfigsApi) -> None:
    sizes: list[int] = []
    api.replica_fetchers_setter = sizes.append
    assert _describe(api, "num.replica.fetchers") == ("1", ConfigSource.DEFAULT_CONFIG)
    assert _alter_broker(api, "", num_replica_fetchers="2") == (0, None)
    code, message = _alter_broker(api, "", num_replica_fetchers="0")
    assert code == 40 and "at least 1" in (message or "")
    code, message = _alter_broker(api, "", num_replica_fetchers="3")  # more than double 1
    assert code == 40 and "double the current value 1" in (message or "")
    code, _ = _alter_broker(api, "", num_replica_fetchers="many")
    assert code == 40
    api.on_broker_configs("<default>", {"num.replica.fetchers": "2"})  # as from ZooKeeper
    assert sizes[-1] == 2
    assert _describe(api, "num.replica.fetchers") == (
        "2",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert _alter_broker(api, "1", num_replica_fetchers="4") == (0, None)  # double of 2
    api.on_broker_configs("1", {"num.replica.fetchers": "4"})
    assert sizes[-1] == 4
    assert _describe(api, "num.replica.fetchers") == ("4", ConfigSource.DYNAMIC_BROKER_CONFIG)
    # A restart applies what ZooKeeper holds, whatever the static value was.
    api.on_broker_configs("1", {"num.replica.fetchers": "9"})
    assert sizes[-1] == 9


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certs, Certs]:
    """Two CAs, each with a server certificate for CN=localhost (same SANs)."""
    root = tmp_path_factory.mktemp("certs")
    return make_certs(root / "one"), make_certs(root / "two")


def _tls_api(tmp_path: Path, certs: Certs, **extra: str) -> ConfigsApi:
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "broker.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.server_keystore),
            **extra,
        }
    )
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    api = ConfigsApi(config, logs, ConnectionRegistry(config.connections))
    api.listener_tls = ListenerTlsContexts({"SSL": config.security.for_listener("SSL").tls})
    return api


KEYSTORE = "listener.name.ssl.ssl.keystore.location"


def test_a_listener_keystore_is_replaced_for_new_connections(
    tmp_path: Path, certs: tuple[Certs, Certs]
) -> None:
    one, two = certs
    api = _tls_api(tmp_path, one)
    assert api.listener_tls is not None
    before = api.listener_tls.context("SSL")
    assert _alter_broker(api, "1", **{KEYSTORE: str(two.server_keystore)}) == (0, None)
    api.on_broker_configs("1", {KEYSTORE: str(two.server_keystore)})
    assert api.listener_tls.context("SSL") is not before
    config = api.listener_tls.config("SSL")
    assert config is not None and config.keystore_location == str(two.server_keystore)
    assert _describe(api, KEYSTORE) == (
        str(two.server_keystore),
        ConfigSource.DYNAMIC_BROKER_CONFIG,
    )
    (entry,) = [c for c in api._describe(BROKER, "1", synonyms=True) if c["name"] == KEYSTORE]
    assert [s["source"] for s in entry["synonyms"]] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,  # the unprefixed ssl.keystore.location
    ]


def test_a_static_fetcher_count_is_described_and_bounds_the_change(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties(
        {"log.dirs": str(tmp_path), "broker.id": "1", "num.replica.fetchers": "4"}
    )
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    api = ConfigsApi(config, logs, ConnectionRegistry(config.connections))
    assert _describe(api, "num.replica.fetchers") == ("4", ConfigSource.STATIC_BROKER_CONFIG)
    code, message = _alter_broker(api, "1", num_replica_fetchers="1")
    assert code == 40 and "at least half the current value 4" in (message or "")
    assert _alter_broker(api, "1", num_replica_fetchers="2") == (0, None)


def test_passwords_are_sensitive(tmp_path: Path, certs: tuple[Certs, Certs]) -> None:
    api = _tls_api(tmp_path, certs[0])
    api.on_broker_configs("1", {"listener.name.ssl.ssl.key.password": "secret"})
    (entry,) = [
        c
        for c in api._describe(BROKER, "1", synonyms=False)
        if c["name"] == "listener.name.ssl.ssl.key.password"
    ]
    assert entry["value"] is None and entry["is_sensitive"]


@pytest.mark.parametrize(
    ("entity", "key", "value", "message"),
    [
        ("1", KEYSTORE, "/nonexistent/keystore.pem", "listener SSL: cannot load the TLS keystore"),
        ("", KEYSTORE, "KEYSTORE_TWO", "Cannot update these configs at default cluster level"),
        (
            "1",
            "listener.name.ssl.ssl.truststore.location",
            "/nonexistent/ca.pem",
            "listener SSL: cannot load ssl.truststore.location",
        ),
        (
            "1",
            "listener.name.ssl.ssl.keystore.password",
            "secret",
            "a PEM keystore has no store password",
        ),
    ],
)
def test_a_bad_or_cluster_wide_keystore_is_refused_and_the_old_one_kept(
    tmp_path: Path, certs: tuple[Certs, Certs], entity: str, key: str, value: str, message: str
) -> None:
    one, two = certs
    api = _tls_api(tmp_path, one)
    assert api.listener_tls is not None
    before = api.listener_tls.context("SSL")
    value = str(two.server_keystore) if value == "KEYSTORE_TWO" else value
    code, error = _alter_broker(api, entity, **{key: value})
    assert code == 40 and message in (error or ""), error
    api.on_broker_configs("1", {KEYSTORE: "/nonexistent/keystore.pem"})  # a file gone
    assert api.listener_tls.context("SSL") is before


def test_an_unknown_listener_is_refused(tmp_path: Path, certs: tuple[Certs, Certs]) -> None:
    api = _tls_api(tmp_path, certs[0])
    code, error = _alter_broker(
        api, "1", **{"listener.name.plaintext.ssl.keystore.location": str(certs[1].server_keystore)}
    )
    assert code == 40 and "no TLS listener" in (error or "")


@pytest.mark.parametrize("allowed", [False, True])
def test_a_keystore_of_another_subject_needs_ssl_allow_dn_changes(
    tmp_path: Path, certs: tuple[Certs, Certs], allowed: bool
) -> None:
    one, _ = certs
    cert, key = one.client("/CN=someone-else", "someone-else")
    keystore = tmp_path / "someone-else-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    extra = {"ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"} if allowed else {}
    api = _tls_api(tmp_path, one, **extra)
    code, error = _alter_broker(api, "1", **{KEYSTORE: str(keystore)})
    if allowed:
        assert code == 0
    else:
        assert code == 40 and "subject 'CN=someone-else' differs" in (error or ""), error


def _set_through_the_cluster_path(api: ConfigsApi, key: str, value: str) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of broker 1 as a cluster member serves it (write, then apply)."""
    api.broker_config_writer = lambda entity, configs: None
    op = SimpleNamespace(name=key, config_operation=0, value=value)
    req = SimpleNamespace(
        resources=[SimpleNamespace(resource_type=BROKER, resource_name="1", configs=[op])],
        validate_only=False,
    )

    async def alter() -> dict[str, Any]:
        result = api.incremental_alter_configs(ALLOW_ALL, req)  # type: ignore[arg-type]
        return result if isinstance(result, dict) else await result  # refused: no write

    (entry,) = asyncio.run(alter())["responses"]
    return entry["error_code"], entry["error_message"]


def test_a_keystore_rewritten_in_place_reloads_when_its_path_is_set_again(
    tmp_path: Path, certs: tuple[Certs, Certs]
) -> None:
    one, two = certs
    keystore = tmp_path / "rotating.pem"
    keystore.write_text(one.server_keystore.read_text())
    api = _tls_api(tmp_path, one)
    assert _set_through_the_cluster_path(api, KEYSTORE, str(keystore)) == (0, None)
    assert api.listener_tls is not None
    before = api.listener_tls.context("SSL")
    # Another certificate of the same subject and SANs, written over the file.
    keystore.write_text(two.server_keystore.read_text())
    os.utime(keystore, ns=(time.time_ns(), time.time_ns() + 10**9))
    api.on_broker_configs("<default>", {"log.retention.ms": "5000"})  # no reload on the side
    assert api.listener_tls.context("SSL") is before
    assert _set_through_the_cluster_path(api, KEYSTORE, str(keystore)) == (0, None)
    reloaded = api.listener_tls.context("SSL")
    assert reloaded is not before
    # A rewrite with another subject is refused, and the serving keystore stays.
    cert, key = one.client("/CN=impostor", "impostor")
    keystore.write_text(key.read_text() + cert.read_text())
    os.utime(keystore, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    code, error = _set_through_the_cluster_path(api, KEYSTORE, str(keystore))
    assert code == 40 and "CN=impostor" in (error or ""), error
    assert api.listener_tls.context("SSL") is reloaded


def test_a_listener_keystore_in_the_cluster_default_is_ignored(
    tmp_path: Path, certs: tuple[Certs, Certs]
) -> None:
    """Written to /config/brokers/<default> by another tool: Kafka ignores it there."""
    api = _tls_api(tmp_path, certs[0])
    assert api.listener_tls is not None
    before = api.listener_tls.context("SSL")
    api.on_broker_configs(
        "<default>", {KEYSTORE: str(certs[1].server_keystore), "log.retention.ms": "5000"}
    )
    assert api.listener_tls.context("SSL") is before
    assert api.dynamic_default == {"log.retention.ms": "5000"}
