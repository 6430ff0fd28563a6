"""Credentials, ACLs and client quotas in ZooKeeper, shared by every broker of a cluster.

The same interfaces as the single broker's file stores (``CredentialStore``,
``AclStore``, ``QuotaStore``), over Kafka's layout (``zk_security_layout``).
Each store keeps a cache that request handling reads without I/O (a SASL
exchange or an ACL check never waits for ZooKeeper); writes go to ZooKeeper
first, with compare-and-set on the znode, then announce themselves with a
sequential change notification, as Kafka does. Every broker watches the
notification paths and re-reads only what a notification names, so a change
made through any broker applies on all of them within a watch round trip.

Writes block (ZooKeeper round trips): the broker runs the admin APIs that
write on a worker thread. Watches and the re-reads they trigger run on the
store's threads; ``listeners`` are called there after the cache changed
(the broker hands them to its event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from headwater.cluster import zk_security_layout as layout
from headwater.cluster.store import ClusterStoreUnavailableError, WatchHandle, ZkClusterStore
from headwater.security.acl import AccessControlEntry, AclBinding, PatternType, ResourcePattern
from headwater.security.quotas import CLIENT_ID, USER, Entity, QuotaKey
from headwater.security.scram import ScramCredential, ScramMechanism, ScramMechanisms

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 50
_QUOTA_KEYS = frozenset(k.value for k in QuotaKey)

Listener = Callable[[], None]


def _notify(listeners: list[Listener]) -> None:
    for listener in list(listeners):
        try:
            listener()
        except Exception:
            log.exception("security store listener failed")


class NotificationPurger:
    """Deletes expired change notifications on a thread of its own, as Kafka's
    ``ZkNodeChangeNotificationListener`` does after processing them.

    Not in the watch callback: a delete fires that very watch, which in the
    in-process tree runs synchronously, inside the callback, under its locks.
    Requests for a path already waiting are merged into one purge.
    """

    def __init__(self, store: ZkClusterStore) -> None:
        self.store = store
        self._lock = threading.Condition()
        self._wanted: list[str] = []
        self._busy = False
        self._thread: threading.Thread | None = None
        self._stopped = False

    def request(self, path: str) -> None:
        with self._lock:
            if self._stopped or path in self._wanted:
                return
            self._wanted.append(path)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="hw-notification-purge", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._wanted and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                path = self._wanted.pop(0)
                self._busy = True
            try:
                self.store.purge_expired_notifications(path)
            except Exception as exc:  # ZooKeeper away: the next notification retries
                log.debug("purging expired notifications under %s failed: %s", path, exc)
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no purge is waiting or running (tests); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._wanted or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wanted.clear()
            self._lock.notify_all()


class _Notifications:
    """Follows one sequential change-notification path; hands new entries to ``handle``.

    Children at or below the last processed sequence number are old news.
    After each batch (and once at start, so a restarted broker cleans up too),
    the purger deletes those older than the store's ``notification_expiry_ms``,
    by creation time: whichever broker gets there first.
    """

    def __init__(
        self,
        store: ZkClusterStore,
        path: str,
        handle: Callable[[bytes], None],
        purger: NotificationPurger,
    ) -> None:
        self.store = store
        self.path = path
        self.handle = handle
        self.purger = purger
        self.last_seen = -1
        self._lock = threading.Lock()
        self._watch: WatchHandle | None = None

    def start(self) -> None:
        """Everything already there is covered by the caller's full load."""
        children = self.store.read_children(self.path)
        if children:
            self.last_seen = max(layout.sequence_number(c) for c in children)
            self.purger.request(self.path)
        self._watch = self.store.watch_children(self.path, self._on_children)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    def _on_children(self, children: tuple[str, ...] | None) -> None:
        with self._lock:
            fresh = sorted(
                (c for c in children or () if layout.sequence_number(c) > self.last_seen),
                key=layout.sequence_number,
            )
            try:
                got = self.store.read_znodes([f"{self.path}/{c}" for c in fresh]) if fresh else []
            except ClusterStoreUnavailableError:
                # Not processed: re-read when the watch is re-armed on reconnection.
                if self._watch is not None:
                    setattr(self._watch, "pending", True)  # noqa: B010
                return
            for child, value in zip(fresh, got, strict=True):
                self.last_seen = max(self.last_seen, layout.sequence_number(child))
                if value is None:
                    continue
                try:
                    self.handle(value[0])
                except layout.ZkSecurityLayoutError as exc:
                    log.error("malformed change notification %s/%s: %s", self.path, child, exc)
        if fresh:
            self.purger.request(self.path)

    def announce(self, data: bytes, prefix: str) -> None:
        """Create a notification (every broker's watch, this one's included, reads it)."""
        self.store.create_sequential(f"{self.path}/{prefix}", data)


class ZkEntityConfigs:
    """``/config/users`` and ``/config/clients``: cached, and kept current by notifications.

    Credentials and quotas share these znodes (a user's znode has both), so both
    stores write through ``alter``, which changes only the keys it is given.
    """

    def __init__(self, store: ZkClusterStore, purger: NotificationPurger) -> None:
        self.store = store
        self._configs: dict[str, dict[str, str]] = {}
        self.listeners: list[Listener] = []
        self._notifications = _Notifications(store, layout.CONFIG_CHANGES, self._on_change, purger)

    def start(self) -> None:
        """Load every entity and follow the change notifications (blocking)."""
        configs: dict[str, dict[str, str]] = {}
        users = self.store.read_children(layout.CONFIG_USERS)
        clients = self.store.read_children(layout.CONFIG_CLIENTS)
        paths = [f"users/{u}" for u in users] + [f"clients/{c}" for c in clients]
        for user in users:
            paths += [
                f"users/{user}/clients/{c}"
                for c in self.store.read_children(f"{layout.CONFIG_USERS}/{user}/clients")
            ]
        for path, value in zip(
            paths, self.store.read_znodes([layout.entity_znode(p) for p in paths]), strict=True
        ):
            if value is not None:
                try:
                    config = layout.decode_entity_config(value[0])
                except layout.ZkSecurityLayoutError as exc:
                    log.error("malformed entity config %s: %s", path, exc)
                    continue
                if config:
                    configs[path] = config
        self._configs = configs
        self._notifications.start()

    def stop(self) -> None:
        self._notifications.stop()

    def get(self, path: str) -> dict[str, str]:
        return self._configs.get(path, {})

    def all(self) -> dict[str, dict[str, str]]:
        return dict(self._configs)

    def alter(self, path: str, updates: dict[str, str | None]) -> None:
        """Set (or, for None, remove) keys of one entity's config, then announce it."""
        znode = layout.entity_znode(path)
        for _ in range(_CAS_ATTEMPTS):
            got = self.store.read_znode(znode)
            config = layout.decode_entity_config(got[0]) if got else {}
            for key, value in updates.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            data = layout.encode_entity_config(config)
            if self.store.write_znode(znode, data, None if got is None else got[1]):
                break
        else:
            raise ClusterStoreUnavailableError(f"{znode} kept changing; gave up")
        self._set(path, config)
        self._notifications.announce(layout.encode_config_change(path), layout.CONFIG_CHANGE_PREFIX)

    def _on_change(self, data: bytes) -> None:
        path = layout.decode_config_change(data)
        got = self.store.read_znode(layout.entity_znode(path))
        self._set(path, layout.decode_entity_config(got[0]) if got else {})

    def _set(self, path: str, config: dict[str, str]) -> None:
        configs = dict(self._configs)
        if config:
            configs[path] = dict(config)
        else:
            configs.pop(path, None)
        self._configs = configs  # one assignment: readers on other threads see old or new
        _notify(self.listeners)


class ZkCredentialStore:
    """``CredentialStore`` on ``/config/users/<user>`` (key: the mechanism name)."""

    def __init__(self, configs: ZkEntityConfigs) -> None:
        self.configs = configs

    def get(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        text = self.configs.get(layout.entity_path(user=username)).get(mechanism.mechanism_name)
        if text is None:
            return None
        try:
            return layout.decode_scram(text)
        except layout.ZkSecurityLayoutError as exc:
            log.error("malformed %s credential of %s: %s", mechanism.mechanism_name, username, exc)
            return None

    def upsert(self, username: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        if not username:
            raise ValueError("user name must not be empty")
        self.configs.alter(
            layout.entity_path(user=username),
            {mechanism.mechanism_name: layout.encode_scram(credential)},
        )

    def delete(self, username: str, mechanism: ScramMechanism) -> bool:
        if self.get(username, mechanism) is None:
            return False
        self.configs.alter(layout.entity_path(user=username), {mechanism.mechanism_name: None})
        return True

    def describe(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for path, config in sorted(self.configs.all().items()):
            try:
                user, client = layout.parse_entity_path(path)
            except layout.ZkSecurityLayoutError:
                continue
            if client is not False or not isinstance(user, str):
                continue
            for key, text in sorted(config.items()):
                if ScramMechanisms.by_name(key) is None:
                    continue
                try:
                    out.setdefault(user, {})[key] = layout.decode_scram(text).iterations
                except layout.ZkSecurityLayoutError:
                    continue
        return out


def _entity_of_path(path: str) -> Entity | None:
    try:
        user, client = layout.parse_entity_path(path)
    except layout.ZkSecurityLayoutError:
        return None
    parts: list[tuple[str, str | None]] = []
    if user is not False:
        parts.append((USER, user if isinstance(user, str) else None))
    if client is not False:
        parts.append((CLIENT_ID, client if isinstance(client, str) else None))
    return tuple(sorted(parts))


def _path_of_entity(entity: Entity) -> str:
    parts = dict(entity)
    return layout.entity_path(
        user=parts.get(USER, False),
        client_id=parts.get(CLIENT_ID, False),
    )


def _quota_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


class ZkQuotaStore:
    """``QuotaStore`` on the entity configs (the quota keys of each entity's znode)."""

    def __init__(self, configs: ZkEntityConfigs) -> None:
        self.configs = configs

    def load(self) -> dict[Entity, dict[str, float]]:
        out: dict[Entity, dict[str, float]] = {}
        for path, config in self.configs.all().items():
            values = {}
            for key, text in config.items():
                if key in _QUOTA_KEYS:
                    try:
                        values[key] = float(text)
                    except ValueError:
                        log.error("malformed quota %s=%r of %s", key, text, path)
            entity = _entity_of_path(path)
            if values and entity is not None:
                out[entity] = values
        return out

    def save(self, quotas: dict[Entity, dict[str, float]]) -> None:
        """Write only the entities whose quotas differ from what the cache holds."""
        current = self.load()
        for entity in set(current) | set(quotas):
            old, new = current.get(entity, {}), quotas.get(entity, {})
            if old == new:
                continue
            updates: dict[str, str | None] = {k: None for k in old if k not in new}
            updates.update({k: _quota_text(v) for k, v in new.items()})
            self.configs.alter(_path_of_entity(entity), updates)


class ZkAclStore:
    """``AclStore`` on ``/kafka-acl`` and ``/kafka-acl-extended``, kept current by
    ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes``."""

    def __init__(self, store: ZkClusterStore, purger: NotificationPurger) -> None:
        self.store = store
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self.listeners: list[Listener] = []
        self._notifications = [
            _Notifications(
                store, layout.ACL_LITERAL_CHANGES, lambda d: self._on_change(False, d), purger
            ),
            _Notifications(
                store, layout.ACL_EXTENDED_CHANGES, lambda d: self._on_change(True, d), purger
            ),
        ]

    def start(self) -> None:
        """Load every ACL and follow the change notifications (blocking)."""
        patterns: list[ResourcePattern] = []
        for root, pattern_type in (
            (layout.ACL_LITERAL, PatternType.LITERAL),
            (layout.ACL_PREFIXED, PatternType.PREFIXED),
        ):
            for type_name in self.store.read_children(root):
                if type_name not in layout.ACL_RESOURCE_TYPES:
                    continue  # "/kafka-acl-extended" has "prefixed" next to nothing else
                resource_type = layout.resource_type_of(type_name)
                patterns += [
                    ResourcePattern(resource_type, name, pattern_type)
                    for name in self.store.read_children(f"{root}/{type_name}")
                ]
        got = self.store.read_znodes([layout.acl_znode(p) for p in patterns])
        acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for pattern, value in zip(patterns, got, strict=True):
            if value is None:
                continue
            try:
                entries = frozenset(layout.decode_acls(value[0]))
            except layout.ZkSecurityLayoutError as exc:
                log.error("malformed ACLs of %s: %s", pattern, exc)
                continue
            if entries:
                acls[pattern] = entries
        self._acls = acls
        for n in self._notifications:
            n.start()

    def stop(self) -> None:
        for n in self._notifications:
            n.stop()

    def load(self) -> list[AclBinding]:
        return [
            AclBinding(pattern, entry)
            for pattern, entries in self._acls.items()
            for entry in sorted(entries, key=lambda e: (e.principal, e.host, e.operation))
        ]

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Apply the difference to the cache's view, one resource znode at a time.

        Each resource is a read-modify-write with compare-and-set that adds and
        removes only this change's entries, so ACLs another broker added to
        the same resource meanwhile are kept.
        """
        wanted: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            wanted.setdefault(b.pattern, set()).add(b.entry)
        current = self._acls
        for pattern in set(current) | set(wanted):
            old, new = set(current.get(pattern, ())), wanted.get(pattern, set())
            if old != new:
                self._alter(pattern, new - old, old - new)

    def _alter(
        self,
        pattern: ResourcePattern,
        added: set[AccessControlEntry],
        removed: set[AccessControlEntry],
    ) -> None:
        znode = layout.acl_znode(pattern)
        for _ in range(_CAS_ATTEMPTS):
            got = self.store.read_znode(znode)
            entries = set(layout.decode_acls(got[0])) if got else set()
            entries = (entries | added) - removed
            if got is None and not entries:
                break
            if got is not None and not entries:
                # Kafka deletes the znode of a resource without ACLs.
                if self.store.delete_znode(znode, got[1]):
                    break
                continue
            if self.store.write_znode(
                znode, layout.encode_acls(list(entries)), None if got is None else got[1]
            ):
                break
        else:
            raise ClusterStoreUnavailableError(f"{znode} kept changing; gave up")
        self._set(pattern, frozenset(entries))
        extended, data = layout.encode_acl_change(pattern)
        self._notifications[int(extended)].announce(data, layout.ACL_CHANGE_PREFIX)

    def _on_change(self, extended: bool, data: bytes) -> None:
        pattern = layout.decode_acl_change(extended, data)
        got = self.store.read_znode(layout.acl_znode(pattern))
        self._set(pattern, frozenset(layout.decode_acls(got[0])) if got else frozenset())

    def _set(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        acls = dict(self._acls)
        if entries:
            acls[pattern] = entries
        else:
            acls.pop(pattern, None)
        self._acls = acls
        _notify(self.listeners)


class ZkSecurityStores:
    """The three stores of one broker on its cluster store; ``start`` before serving."""

    def __init__(self, store: ZkClusterStore) -> None:
        #: Purges the expired notifications of all three paths (the store's
        #: ``notification_expiry_ms`` says when one has expired).
        self.purger = NotificationPurger(store)
        self.entity_configs = ZkEntityConfigs(store, self.purger)
        self.credentials = ZkCredentialStore(self.entity_configs)
        self.quotas = ZkQuotaStore(self.entity_configs)
        self.acls = ZkAclStore(store, self.purger)
        self._store = store

    def start(self) -> None:
        for path in layout.PERSISTENT_PATHS:
            self._store.ensure_path(path)
        self.entity_configs.start()
        self.acls.start()

    def stop(self) -> None:
        self.entity_configs.stop()
        self.acls.stop()
        self.purger.stop()

    def on_change(self, listener: Listener) -> None:
        self.entity_configs.listeners.append(listener)
        self.acls.listeners.append(listener)
