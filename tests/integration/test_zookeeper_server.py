"""ZooKeeperServer against the real Debian ZooKeeper: start, serve, stop, kill."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from headwater.cluster.zookeeper_server import (
    ZooKeeperServer,
    ZooKeeperStartError,
    four_letter_word,
)


def test_start_serves_sessions_and_stop_frees_the_port(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        assert "Mode: standalone" in four_letter_word(server.host, server.port, "srvr")
        client = KazooClient(hosts=server.connect_string)
        client.start(10)
        client.create("/hello", b"world")
        assert client.get("/hello")[0] == b"world"
        client.stop()
        client.close()
    finally:
        server.stop()
    assert not server.running
    with pytest.raises(OSError):
        four_letter_word(server.host, server.port, "ruok")


def test_data_survives_a_restart_on_the_same_port(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    port = server.port
    client = KazooClient(hosts=server.connect_string)
    client.start(10)
    client.create("/kept", b"1")
    client.stop()
    client.close()
    server.kill()
    again = ZooKeeperServer(tmp_path / "zk", port=port).start()
    try:
        client = KazooClient(hosts=again.connect_string)
        client.start(10)
        assert client.get("/kept")[0] == b"1"
        client.stop()
        client.close()
    finally:
        again.stop()


def test_a_taken_fixed_port_is_a_clear_start_error(tmp_path: Path) -> None:
    first = ZooKeeperServer(tmp_path / "a").start()
    try:
        with pytest.raises(ZooKeeperStartError, match=r"cannot start ZooKeeper on .*in use"):
            ZooKeeperServer(tmp_path / "b", port=first.port).start(timeout=20)
    finally:
        first.stop()
