"""ZooKeeperServer's checks before it starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.cluster.zookeeper_server import ZooKeeperNotInstalledError, ZooKeeperServer


def test_missing_jar_is_a_clear_error_naming_the_package(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, jar=tmp_path / "no-such.jar")
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install zookeeper"):
        server.start()
    assert not server.running


def test_config_has_the_tick_and_session_bounds(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, port=12345, tick_time_ms=250, max_session_timeout_ms=9000)
    config = server._write_config().read_text()
    assert "tickTime=250\n" in config
    assert "clientPort=12345\n" in config
    assert "maxSessionTimeout=9000\n" in config
    assert "admin.enableServer=false\n" in config
