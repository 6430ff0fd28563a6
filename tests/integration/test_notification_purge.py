"""Change notifications on a real ZooKeeper: three brokers' security stores follow many
config and ACL changes while the old notifications are purged by creation time (the
expiry shortened to one second through the store's constructor)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from headwater.cluster import zk_layout as zk
from headwater.cluster.store import ZkClusterStore
from headwater.cluster.zk_security import ZkSecurityStores
from headwater.cluster.zookeeper_server import ZooKeeperServer
from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.integration.zookeeper import fresh_chroot_connect

EXPIRY_MS = 1_000
ACL_PATHS = ("/kafka-acl-changes", "/kafka-acl-extended-changes")


class _Broker:
    def __init__(self, connect: str) -> None:
        self.store = ZkClusterStore(connect, notification_expiry_ms=EXPIRY_MS)
        self.store.start(timeout=10)
        self.security = ZkSecurityStores(self.store)
        self.security.start()

    def close(self) -> None:
        self.security.stop()
        self.store.close()


@pytest.fixture
def brokers(zookeeper: ZooKeeperServer) -> Iterator[list[_Broker]]:
    connect = fresh_chroot_connect(zookeeper)
    made = [_Broker(connect) for _ in range(3)]
    yield made
    for b in made:
        b.close()


def _wait(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _acl(name: str, pattern_type: PatternType) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, pattern_type),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )


def test_old_notifications_go_while_configs_still_propagate(brokers: list[_Broker]) -> None:
    writer, *readers = brokers
    configs = writer.security.entity_configs
    acls: list[AclBinding] = []
    written = 0
    deadline = time.monotonic() + 3 * EXPIRY_MS / 1000  # writes over three expiries
    while time.monotonic() < deadline or written < 40:
        configs.alter(f"clients/c{written}", {"producer_byte_rate": str(1000 + written)})
        if written % 4 == 0:
            writer.store.set_broker_configs("<default>", {"log.retention.ms": str(written)})
            pattern_type = PatternType.PREFIXED if written % 8 else PatternType.LITERAL
            acls.append(_acl(f"t{written}", pattern_type))
            writer.security.acls.save(acls)
        written += 1
        time.sleep(0.05)
    # Every change reached every reader...
    for reader in readers:
        _wait(lambda r=reader: r.security.entity_configs.get(f"clients/c{written - 1}")
              == {"producer_byte_rate": str(1000 + written - 1)}, "the last quota")  # fmt: skip
        _wait(lambda r=reader: len(r.security.acls.load()) == len(acls), "every ACL")
        for i in range(written):
            assert reader.security.entity_configs.get(f"clients/c{i}") == {
                "producer_byte_rate": str(1000 + i)
            }
    # ...while the notifications older than the expiry were purged as they went.
    for b in brokers:
        assert b.security.purger.wait_idle(10.0)
    changes = writer.store.read_children(zk.CONFIG_CHANGES)
    total = written + len(range(0, written, 4))
    assert max(int(c.rsplit("_", 1)[1]) for c in changes) == total - 1
    assert len(changes) < total / 2, f"{len(changes)} of {total} notifications left"
    # Once every notification has expired, the next change leaves only itself
    # (and whatever is newer than the expiry) behind, on every path.
    time.sleep(EXPIRY_MS / 1000 + 0.5)
    configs.alter("clients/last", {"producer_byte_rate": "1"})
    acls.append(_acl("last", PatternType.LITERAL))
    acls.append(_acl("last", PatternType.PREFIXED))
    writer.security.acls.save(acls)
    for b in brokers:
        assert b.security.purger.wait_idle(10.0)
    _wait(lambda: len(writer.store.read_children(zk.CONFIG_CHANGES)) == 1, "config changes purged")
    for path in ACL_PATHS:
        _wait(lambda p=path: len(writer.store.read_children(p)) == 1, f"{path} purged")
    for reader in readers:
        _wait(lambda r=reader: r.security.entity_configs.get("clients/last")
              == {"producer_byte_rate": "1"}, "the change after the purge")  # fmt: skip
