"""Dynamic broker configs: the cluster default below the broker's own, throttles applied live."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.config_catalog import ConfigSource
from headwater.broker.connection_limits import ConnectionRegistry
from headwater.broker.handlers.configs import BROKER, ConfigsApi
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory


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
