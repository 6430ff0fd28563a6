"""Change notifications (``/config/changes``, ``/kafka-acl-changes``,
``/kafka-acl-extended-changes``) are purged once older than the expiry, as Kafka's
``ZkNodeChangeNotificationListener`` does: by their readers, by creation time, with
several brokers purging the same path at once. The in-memory ZooKeeper stamps
ctime with ``time.time()``, so moving that clock moves znode ages."""

from __future__ import annotations

import time
from typing import Any

import pytest

from headwater.cluster import zk_layout as zk
from headwater.cluster.store import (
    NOTIFICATION_EXPIRY_MS,
    ClusterStoreUnavailableError,
    expired_notifications,
)
from headwater.cluster.zk_security import ZkSecurityStores
from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.quotas import ClientQuotaManager, QuotaKey, entity
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

MINUTE_MS = 60_000


def test_kafkas_rule_older_than_the_expiry_by_creation_time() -> None:
    assert expired_notifications({"c": 1_000}, now_ms=1_010, expiry_ms=10) == []  # not older
    assert expired_notifications({"c": 1_000}, now_ms=1_011, expiry_ms=10) == ["c"]
    created = {"c_2": 1_000, "c_0": 0, "c_1": 500}
    assert expired_notifications(created, now_ms=600, expiry_ms=10) == ["c_0", "c_1"]
    assert NOTIFICATION_EXPIRY_MS == 15 * MINUTE_MS


def _store(tree: FakeZooKeeper, **kwargs: Any) -> InMemoryClusterStore:
    store = InMemoryClusterStore(tree, **kwargs)
    store.start()
    return store


def _notify_at(
    store: InMemoryClusterStore, monkeypatch: pytest.MonkeyPatch, at_s: float, n: int = 1
) -> None:
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: at_s)  # the server's clock, stamped as ctime
        for _ in range(n):
            store.create_sequential(zk.CONFIG_CHANGES + "/config_change_", b"{}")


def test_purge_deletes_only_expired_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    store = _store(FakeZooKeeper(), notification_expiry_ms=10 * MINUTE_MS,
                   wall_clock=lambda: now)  # fmt: skip
    _notify_at(store, monkeypatch, now - 20 * 60, n=2)
    _notify_at(store, monkeypatch, now - 5 * 60)
    assert store.purge_expired_notifications(zk.CONFIG_CHANGES) == [
        "config_change_0000000000", "config_change_0000000001"
    ]  # fmt: skip
    assert store.read_children(zk.CONFIG_CHANGES) == ["config_change_0000000002"]
    assert store.purge_expired_notifications(zk.CONFIG_CHANGES) == []
    assert store.purge_expired_notifications("/no/such/path") == []
    store.close()


def test_brokers_purging_the_same_notifications_at_once_both_succeed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = FakeZooKeeper()
    now = time.time()
    a = _store(tree, wall_clock=lambda: now)
    b = _store(tree, wall_clock=lambda: now)
    _notify_at(a, monkeypatch, now - 20 * 60, n=3)
    # b deletes each notification just before a does (a NoNode for a, every time).
    client = a.client
    original = client.delete_async

    def b_first(path: str, version: int = -1) -> Any:
        b.delete_znode(path)
        return original(path, version)

    monkeypatch.setattr(client, "delete_async", b_first)
    assert a.purge_expired_notifications(zk.CONFIG_CHANGES) == []
    assert a.read_children(zk.CONFIG_CHANGES) == []
    a.close()
    b.close()


def test_a_broker_config_write_purges_where_no_broker_reads_the_notifications(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster of one follows its configs by a watch: nobody reads /config/changes."""
    now = time.time()
    store = _store(FakeZooKeeper(), wall_clock=lambda: now)
    _notify_at(store, monkeypatch, now - 16 * 60, n=5)
    store.set_broker_configs("<default>", {"log.retention.ms": "1000"})
    assert store.read_children(zk.CONFIG_CHANGES) == ["config_change_0000000005"]
    store.close()


class _Broker:
    def __init__(self, tree: FakeZooKeeper, **kwargs: Any) -> None:
        self.store = _store(tree, **kwargs)
        self.security = ZkSecurityStores(self.store)
        self.security.start()
        self.quotas = ClientQuotaManager(self.security.quotas)
        self.security.on_change(self.quotas.reload)

    def idle(self) -> bool:
        return self.security.purger.wait_idle(5.0)

    def close(self) -> None:
        self.security.stop()
        self.store.close()


def _acl(name: str, prefixed: bool) -> AclBinding:
    pattern_type = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, pattern_type),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )


def test_readers_purge_every_notification_path_and_changes_still_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = FakeZooKeeper()
    writer, reader = _Broker(tree), _Broker(tree)
    writer.quotas.alter([(entity(client_id="old"), [(QuotaKey.PRODUCER_BYTE_RATE.value, 1.0)])])
    writer.security.acls.save([_acl("old", False), _acl("old", True)])
    assert writer.idle() and reader.idle()
    paths = (zk.CONFIG_CHANGES, "/kafka-acl-changes", "/kafka-acl-extended-changes")
    assert [len(reader.store.read_children(p)) for p in paths] == [1, 1, 1]
    # Sixteen minutes on, new changes: each reader's pass over them deletes the old ones.
    later = time.time() + 16 * 60
    monkeypatch.setattr(time, "time", lambda: later)
    for broker in (writer, reader):
        broker.store.wall_clock = lambda: later
    writer.quotas.alter([(entity(client_id="new"), [(QuotaKey.PRODUCER_BYTE_RATE.value, 2.0)])])
    writer.security.acls.save([_acl("old", False), _acl("old", True), _acl("new", False),
                               _acl("new", True)])  # fmt: skip
    assert writer.idle() and reader.idle()
    assert [reader.store.read_children(p) for p in paths] == [
        ["config_change_0000000001"], ["acl_changes_0000000001"], ["acl_changes_0000000001"]
    ]  # fmt: skip
    assert reader.quotas.quota_for(QuotaKey.PRODUCER_BYTE_RATE, "u", "new") == (2.0, ("", "new"))
    assert {b.pattern.name for b in reader.security.acls.load()} == {"old", "new"}
    writer.close()
    reader.close()


def test_a_broker_starting_purges_what_expired_while_it_was_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = FakeZooKeeper()
    writer = _store(tree)
    _notify_at(writer, monkeypatch, time.time() - 20 * 60, n=4)
    starting = _Broker(tree)
    assert starting.idle()
    assert writer.read_children(zk.CONFIG_CHANGES) == []
    starting.close()
    writer.close()


def test_the_expiry_is_a_constructor_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = FakeZooKeeper()
    writer = _store(tree)
    _notify_at(writer, monkeypatch, time.time() - 2)
    patient = _Broker(tree)  # fifteen minutes: a two-second-old notification stays
    assert patient.idle() and len(writer.read_children(zk.CONFIG_CHANGES)) == 1
    eager = _Broker(tree, notification_expiry_ms=1_000)
    assert eager.idle() and writer.read_children(zk.CONFIG_CHANGES) == []
    patient.close()
    eager.close()
    writer.close()


def test_a_failed_purge_does_not_fail_the_broker_config_write_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _store(FakeZooKeeper())

    def unreachable(path: str) -> list[str]:
        raise ClusterStoreUnavailableError("ZooKeeper went away")

    monkeypatch.setattr(store, "purge_expired_notifications", unreachable)
    store.set_broker_configs("1", {"log.retention.ms": "5"})
    got = store.read_znode(zk.broker_config_path("1"))
    assert got is not None and b"log.retention.ms" in got[0]
    store.close()
