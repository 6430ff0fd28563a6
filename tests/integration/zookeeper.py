"""A real ZooKeeper server for integration tests, shared by the whole session.

The fixtures are registered in ``tests/integration/conftest.py``. ``tickTime=500``
lets tests use short sessions (1-10 s), so session expiry and failover are fast.
Each test gets its own chroot (``zk_connect``, ``fresh_chroot_connect``), so tests
never see each other's znodes on the shared server.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient, KazooState

from headwater.cluster.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper server on a free port, its data in a temp dir, stopped at the end."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=500).start()
    try:
        yield server
    finally:
        server.stop()


def fresh_chroot_connect(server: ZooKeeperServer) -> str:
    """A ``zookeeper.connect`` string with a chroot no other caller has used."""
    return f"{server.connect_string}/headwater-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """``host:port/chroot`` with a fresh chroot for this test (created on first use)."""
    return fresh_chroot_connect(zookeeper)


def expire_session(client: KazooClient, timeout: float = 15.0) -> None:
    """Make the server expire ``client``'s session, as a long partition or a kill -9 would.

    A second connection with the same session id and password is opened and then
    closed: ZooKeeper ends the session for both (the classic way to expire a
    session on purpose). Returns once ``client`` has seen LOST.
    """
    lost = threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(listener)
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout)
    twin.stop()
    twin.close()
    if not lost.wait(timeout):
        raise TimeoutError("the session did not expire")
