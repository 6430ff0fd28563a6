"""Credentials, ACLs and quotas in ZooKeeper: two brokers' stores on one (in-memory) ensemble.

The in-memory store runs watches synchronously, so "the other broker sees
it" is checked right after the write, with no sleeping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from headwater.cluster import zk_security_layout as layout
from headwater.cluster.zk_security import ZkSecurityStores
from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.authorizer import AclAuthorizer
from headwater.security.principal import KafkaPrincipal
from headwater.security.quotas import ClientQuotaManager, QuotaKey, entity
from headwater.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from headwater.testing import FakeZooKeeper, InMemoryClusterStore

ALICE = KafkaPrincipal.parse("User:alice")


class Broker:
    def __init__(self, zk: FakeZooKeeper) -> None:
        self.store = InMemoryClusterStore(zk)
        self.store.start()
        self.security = ZkSecurityStores(self.store)
        self.security.start()
        self.authorizer = AclAuthorizer(self.security.acls)
        self.quotas = ClientQuotaManager(self.security.quotas)
        self.changes = 0

        def changed() -> None:
            self.changes += 1
            self.authorizer.reload()
            self.quotas.reload()

        self.security.on_change(changed)

    def close(self) -> None:
        self.security.stop()
        self.store.close()


@pytest.fixture
def zk() -> FakeZooKeeper:
    return FakeZooKeeper()


@pytest.fixture
def brokers(zk: FakeZooKeeper) -> Iterator[tuple[Broker, Broker]]:
    a, b = Broker(zk), Broker(zk)
    yield a, b
    a.close()
    b.close()


def read(store: InMemoryClusterStore, path: str) -> object:
    got = store.read_znode(path)
    assert got is not None, path
    return json.loads(got[0])


def topic_acl(name: str, op: AclOperation, who: str = "User:alice", prefixed: bool = False):  # type: ignore[no-untyped-def]
    return AclBinding(
        ResourcePattern(
            ResourceType.TOPIC, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL
        ),
        AccessControlEntry(who, "*", op, AclPermissionType.ALLOW),
    )


def test_a_credential_set_on_one_broker_authenticates_on_the_other(
    brokers: tuple[Broker, Broker],
) -> None:
    a, b = brokers
    cred = ScramCredential.from_password(SCRAM_SHA_512, "secret", 4096)
    a.security.credentials.upsert("alice", SCRAM_SHA_512, cred)
    assert b.security.credentials.get("alice", SCRAM_SHA_512) == cred
    assert b.security.credentials.get("alice", SCRAM_SHA_256) is None
    assert b.security.credentials.describe() == {"alice": {"SCRAM-SHA-512": 4096}}
    # Kafka's znode and notification formats.
    doc = read(a.store, "/config/users/alice")
    assert doc == {"version": 1, "config": {"SCRAM-SHA-512": layout.encode_scram(cred)}}
    assert layout.encode_scram(cred).startswith("salt=")
    changes = a.store.read_children("/config/changes")
    assert changes and changes[-1].startswith("config_change_")
    assert read(a.store, f"/config/changes/{changes[-1]}") == {
        "version": 2,
        "entity_path": "users/alice",
    }
    assert b.security.credentials.delete("alice", SCRAM_SHA_512)
    assert a.security.credentials.get("alice", SCRAM_SHA_512) is None
    assert not a.security.credentials.delete("alice", SCRAM_SHA_512)


def test_a_broker_started_later_loads_everything(zk: FakeZooKeeper) -> None:
    a = Broker(zk)
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)
    a.security.credentials.upsert("bob smith*", SCRAM_SHA_256, cred)
    a.authorizer.create_acls([topic_acl("orders", AclOperation.READ)])
    a.authorizer.create_acls([topic_acl("logs-", AclOperation.WRITE, prefixed=True)])
    a.quotas.alter([(entity(client_id="c1"), [(QuotaKey.PRODUCER_BYTE_RATE.value, 1024.0)])])
    late = Broker(zk)
    try:
        assert late.security.credentials.get("bob smith*", SCRAM_SHA_256) == cred
        assert late.authorizer.authorize(
            ALICE, "h", AclOperation.READ, ResourceType.TOPIC, "orders"
        )
        assert late.authorizer.authorize(
            ALICE, "h", AclOperation.WRITE, ResourceType.TOPIC, "logs-app"
        )
        assert late.quotas.quota_for(QuotaKey.PRODUCER_BYTE_RATE, "x", "c1") is not None
        # Names are sanitized as path segments (Kafka's URL encoding).
        assert a.store.read_znode("/config/users/bob%20smith%2A") is not None
        assert a.store.read_znode("/kafka-acl-extended/prefixed/Topic/logs-") is not None
    finally:
        late.close()
        a.close()


def test_acls_created_on_one_broker_are_enforced_on_the_other(
    brokers: tuple[Broker, Broker],
) -> None:
    a, b = brokers
    assert not b.authorizer.authorize(ALICE, "h", AclOperation.READ, ResourceType.TOPIC, "t")
    a.authorizer.create_acls([topic_acl("t", AclOperation.READ)])
    assert b.authorizer.authorize(ALICE, "h", AclOperation.READ, ResourceType.TOPIC, "t")
    assert read(a.store, "/kafka-acl/Topic/t") == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    changes = a.store.read_children("/kafka-acl-changes")
    assert changes and changes[-1].startswith("acl_changes_")
    got = a.store.read_znode(f"/kafka-acl-changes/{changes[-1]}")
    assert got is not None and got[0] == b"Topic:t"
    removed = b.authorizer.delete_acls(
        [AclBindingFilter(ResourceType.TOPIC, "t", PatternType.LITERAL, principal="User:alice")]
    )
    assert len(removed[0]) == 1
    assert not a.authorizer.authorize(ALICE, "h", AclOperation.READ, ResourceType.TOPIC, "t")
    # A resource without ACLs has no znode, as in Kafka.
    assert a.store.read_znode("/kafka-acl/Topic/t") is None


def test_acls_added_on_two_brokers_to_one_resource_are_both_kept(
    brokers: tuple[Broker, Broker],
) -> None:
    a, b = brokers
    # b has not reloaded when a's write lands: its own write must not drop a's entry.
    b.security.acls.listeners.clear()
    b.security.entity_configs.listeners.clear()
    a.authorizer.create_acls([topic_acl("t", AclOperation.READ)])
    b.authorizer.create_acls([topic_acl("t", AclOperation.WRITE, who="User:bob")])
    entries = {e["principal"] for e in read(a.store, "/kafka-acl/Topic/t")["acls"]}  # type: ignore[index]
    assert entries == {"User:alice", "User:bob"}
    assert a.authorizer.authorize(
        KafkaPrincipal.parse("User:bob"), "h", AclOperation.WRITE, ResourceType.TOPIC, "t"
    )


def test_quotas_and_credentials_share_the_user_znode(brokers: tuple[Broker, Broker]) -> None:
    a, b = brokers
    cred = ScramCredential.from_password(SCRAM_SHA_512, "pw", 4096)
    a.security.credentials.upsert("alice", SCRAM_SHA_512, cred)
    a.quotas.alter([(entity(user="alice"), [(QuotaKey.CONSUMER_BYTE_RATE.value, 2048.0)])])
    a.quotas.alter(
        [(entity(user=None, client_id="c"), [(QuotaKey.REQUEST_PERCENTAGE.value, 50.5)])]
    )
    config = read(a.store, "/config/users/alice")["config"]  # type: ignore[index]
    assert config["consumer_byte_rate"] == "2048" and "SCRAM-SHA-512" in config
    assert read(a.store, "/config/users/<default>/clients/c")["config"] == {  # type: ignore[index]
        "request_percentage": "50.5"
    }
    found = b.quotas.quota_for(QuotaKey.CONSUMER_BYTE_RATE, "alice", "any")
    assert found is not None and found[0] == 2048.0
    assert b.quotas.quota_for(QuotaKey.REQUEST_PERCENTAGE, "zed", "c") is not None
    # Removing the quota keeps the credential.
    b.quotas.alter([(entity(user="alice"), [(QuotaKey.CONSUMER_BYTE_RATE.value, None)])])
    assert a.quotas.quota_for(QuotaKey.CONSUMER_BYTE_RATE, "alice", "any") is None
    assert a.security.credentials.get("alice", SCRAM_SHA_512) == cred


def test_malformed_znodes_are_skipped_not_fatal(zk: FakeZooKeeper) -> None:
    writer = InMemoryClusterStore(zk)
    writer.start()
    writer.write_znode("/config/users/mallory", b"{not json", None)
    writer.write_znode("/kafka-acl/Topic/x", b'{"version":1,"acls":[{"principal":1}]}', None)
    broker = Broker(zk)
    try:
        assert broker.security.credentials.describe() == {}
        assert broker.security.acls.load() == []
        writer.create_sequential("/config/changes/config_change_", b"garbage")
        broker.security.credentials.upsert(
            "ok", SCRAM_SHA_256, ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)
        )
        assert "ok" in broker.security.credentials.describe()
    finally:
        broker.close()
        writer.close()


def test_expired_notifications_are_deleted(
    brokers: tuple[Broker, Broker], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = brokers
    for i in range(3):
        a.quotas.alter([(entity(client_id=f"c{i}"), [(QuotaKey.PRODUCER_BYTE_RATE.value, 1.0)])])
    assert a.security.purger.wait_idle(5.0) and b.security.purger.wait_idle(5.0)
    assert len(a.store.read_children("/config/changes")) == 3  # none has expired
    later = time.time() + 16 * 60
    monkeypatch.setattr(time, "time", lambda: later)  # ZooKeeper's clock: the next ctime
    b.store.wall_clock = lambda: later  # a reader, 16 minutes on
    a.quotas.alter([(entity(client_id="c9"), [(QuotaKey.PRODUCER_BYTE_RATE.value, 1.0)])])
    # The reader purged the three old ones; the newest stays.
    assert b.security.purger.wait_idle(5.0) and a.security.purger.wait_idle(5.0)
    assert a.store.read_children("/config/changes") == ["config_change_0000000003"]
    assert b.quotas.quota_for(QuotaKey.PRODUCER_BYTE_RATE, "u", "c9") is not None


def test_layout_round_trips() -> None:
    for user, client in (("alice", False), (False, "c/1"), (None, None), ("a b", None)):
        path = layout.entity_path(user=user, client_id=client)
        assert layout.parse_entity_path(path) == (user, client)
    entries = [
        AccessControlEntry("User:x", "*", op, perm)
        for op in (AclOperation.CLUSTER_ACTION, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALL)
        for perm in (AclPermissionType.ALLOW, AclPermissionType.DENY)
    ]
    assert sorted(layout.decode_acls(layout.encode_acls(entries)), key=str) == sorted(
        entries, key=str
    )
    for pattern in (
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx:1", PatternType.LITERAL),
        ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED),
    ):
        extended, data = layout.encode_acl_change(pattern)
        assert layout.decode_acl_change(extended, data) == pattern
    with pytest.raises(layout.ZkSecurityLayoutError):
        layout.decode_scram("salt=AA==")
