"""An in-memory ZooKeeper with the subset of kazoo's client API that the store uses.

Why: ``InMemoryClusterStore`` is ``ZkClusterStore`` running on this fake, so the
unit tests exercise the same store code (paths, JSON, compare-and-set,
transactions, ephemerals, watches) as production, without a server, and the
two stores cannot drift apart. What it models of ZooKeeper: znode versions,
ephemeral znodes owned by a session, sessions that tests expire on purpose,
one-shot data/exists/children watches, and all-or-nothing ``multi``.

Unlike kazoo, everything completes at once and watches fire synchronously in
the thread that made the change (after the tree's lock is released), which keeps
unit tests deterministic.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat

Watcher = Callable[[WatchedEvent], Any]


@dataclass
class _Node:
    data: bytes
    version: int = 0
    cversion: int = 0
    owner: int = 0  # session id of an ephemeral's owner, 0 for persistent
    czxid: int = 0
    mzxid: int = 0
    children: set[str] = field(default_factory=set)
    ctime: int = 0  # creation time, ms since the epoch


def _parent(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


class FakeAsyncResult:
    """Already-completed stand-in for kazoo's ``IAsyncResult``."""

    def __init__(self, value: Any = None, exception: BaseException | None = None) -> None:
        self.value = value
        self.exception = exception

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.exception is not None:
            raise self.exception
        return self.value

    def successful(self) -> bool:
        return self.exception is None

    def rawlink(self, callback: Callable[[FakeAsyncResult], Any]) -> None:
        callback(self)


class FakeZooKeeper:
    """The shared znode tree (one "ensemble"); each ``FakeKazooClient`` is a session."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._zxid = itertools.count(1)
        self._sessions = itertools.count(0x1000)
        self._data_watches: dict[str, set[Watcher]] = {}
        self._child_watches: dict[str, set[Watcher]] = {}
        self.available = True
        """False simulates an unreachable server: every call fails with connection loss."""

    # -- sessions --------------------------------------------------------------

    def new_session(self) -> int:
        return next(self._sessions)

    def end_session(self, session_id: int) -> None:
        """Delete the session's ephemerals (what the server does on expiry or close)."""
        fired: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            for path in [p for p, n in self._nodes.items() if n.owner == session_id]:
                self._delete_locked(path, -1, fired)
        self._fire(fired)

    # -- operations (paths are absolute, already chrooted) ---------------------

    def _stat(self, node: _Node) -> ZnodeStat:
        return ZnodeStat(
            node.czxid, node.mzxid, node.ctime, 0, node.version, node.cversion, 0,
            node.owner, len(node.data), len(node.children), node.mzxid,
        )  # fmt: skip

    def get(self, path: str, watch: Watcher | None) -> tuple[bytes, ZnodeStat]:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            if watch is not None:
                self._data_watches.setdefault(path, set()).add(watch)
            return node.data, self._stat(node)

    def exists(self, path: str, watch: Watcher | None) -> ZnodeStat | None:
        with self._lock:
            if watch is not None:
                self._data_watches.setdefault(path, set()).add(watch)
            node = self._nodes.get(path)
            return None if node is None else self._stat(node)

    def get_children(self, path: str, watch: Watcher | None) -> list[str]:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            if watch is not None:
                self._child_watches.setdefault(path, set()).add(watch)
            return sorted(node.children)

    def multi(self, ops: list[tuple[Any, ...]], session_id: int) -> list[Any]:
        """Apply all operations or none; results as kazoo's ``commit`` reports them."""
        fired: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            saved = {
                p: dataclasses.replace(n, children=set(n.children)) for p, n in self._nodes.items()
            }
            results: list[Any] = []
            failed = -1
            for i, op in enumerate(ops):
                try:
                    results.append(self._apply_locked(op, session_id, fired))
                except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                    failed = i
                    results.append(exc)
                    break
            if failed >= 0:
                self._nodes = saved
                return [results[i] if i == failed else RolledBackError() for i in range(len(ops))]
        self._fire(fired)
        return results

    def _apply_locked(
        self, op: tuple[Any, ...], session_id: int, fired: list[tuple[Watcher, WatchedEvent]]
    ) -> Any:
        kind = op[0]
        if kind == "create":
            _, path, data, ephemeral, sequence = op
            if sequence:  # ZooKeeper's suffix: the parent's child version, 10 digits
                parent = self._nodes.get(_parent(path))
                path += f"{parent.cversion if parent else 0:010d}"
            return self._create_locked(path, data, session_id if ephemeral else 0, fired)
        if kind == "set":
            _, path, data, version = op
            return self._set_locked(path, data, version, fired)
        if kind == "delete":
            _, path, version = op
            self._delete_locked(path, version, fired)
            return True
        if kind == "check":
            _, path, version = op
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            if version != -1 and node.version != version:
                raise BadVersionError(path)
            return True
        raise ValueError(f"unknown operation {kind!r}")

    def _create_locked(
        self, path: str, data: bytes, owner: int, fired: list[tuple[Watcher, WatchedEvent]]
    ) -> str:
        if path in self._nodes:
            raise NodeExistsError(path)
        parent = self._nodes.get(_parent(path))
        if parent is None:
            raise NoNodeError(_parent(path))
        if parent.owner:
            raise NoNodeError(f"{_parent(path)} is ephemeral and cannot have children")
        zxid = next(self._zxid)
        self._nodes[path] = _Node(
            bytes(data), owner=owner, czxid=zxid, mzxid=zxid, ctime=int(time.time() * 1000)
        )
        parent.children.add(_name(path))
        parent.cversion += 1
        self._take(self._data_watches, path, EventType.CREATED, fired)
        self._take(self._child_watches, _parent(path), EventType.CHILD, fired)
        return path

    def _set_locked(
        self, path: str, data: bytes, version: int, fired: list[tuple[Watcher, WatchedEvent]]
    ) -> ZnodeStat:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path)
        node.data = bytes(data)
        node.version += 1
        node.mzxid = next(self._zxid)
        self._take(self._data_watches, path, EventType.CHANGED, fired)
        return self._stat(node)

    def _delete_locked(
        self, path: str, version: int, fired: list[tuple[Watcher, WatchedEvent]]
    ) -> None:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path)
        if node.children:
            raise NotEmptyError(path)
        del self._nodes[path]
        parent = self._nodes[_parent(path)]
        parent.children.discard(_name(path))
        parent.cversion += 1
        self._take(self._data_watches, path, EventType.DELETED, fired)
        self._take(self._child_watches, path, EventType.DELETED, fired)
        self._take(self._child_watches, _parent(path), EventType.CHILD, fired)

    def _take(
        self,
        table: dict[str, set[Watcher]],
        path: str,
        kind: str,
        fired: list[tuple[Watcher, WatchedEvent]],
    ) -> None:
        for watcher in table.pop(path, ()):
            fired.append((watcher, WatchedEvent(kind, KeeperState.CONNECTED, path)))

    def _fire(self, fired: list[tuple[Watcher, WatchedEvent]]) -> None:
        for watcher, event in fired:
            watcher(event)


class _FakeTransaction:
    def __init__(self, client: FakeKazooClient) -> None:
        self._client = client
        self._ops: list[tuple[Any, ...]] = []

    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
        sequence: bool = False,
    ) -> None:  # fmt: skip
        self._ops.append(("create", self._client._full(path), value, ephemeral, sequence))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(("set", self._client._full(path), value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(("delete", self._client._full(path), version))

    def check(self, path: str, version: int) -> None:
        self._ops.append(("check", self._client._full(path), version))

    def commit_async(self) -> FakeAsyncResult:
        try:
            self._client._ensure_usable()
        except Exception as exc:
            return FakeAsyncResult(exception=exc)
        results = self._client.zk.multi(self._ops, self._client.session_id)
        return FakeAsyncResult([self._client._relative(r) for r in results])

    def commit(self) -> list[Any]:
        return list(self.commit_async().get())


class FakeKazooClient:
    """One session on a ``FakeZooKeeper``, shaped like ``kazoo.client.KazooClient``."""

    def __init__(self, zk: FakeZooKeeper, chroot: str = "") -> None:
        self.zk = zk
        self.chroot = chroot
        self.session_id = 0
        self.state = KazooState.LOST
        self._closed = False
        self._listeners: list[Callable[[str], Any]] = []

    # -- session ---------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED and self.zk.available

    @property
    def client_id(self) -> tuple[int, bytes]:
        return self.session_id, b"\x00" * 16

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _set_state(self, state: str) -> None:
        self.state = state
        for listener in list(self._listeners):
            if listener(state) is True:
                self.remove_listener(listener)

    def start(self, timeout: float = 15.0) -> None:
        if not self.zk.available:
            from kazoo.handlers.threading import KazooTimeoutError

            raise KazooTimeoutError("Connection time-out")
        self._closed = False
        self.session_id = self.zk.new_session()
        self._set_state(KazooState.CONNECTED)

    def stop(self) -> None:
        if self.session_id:
            self.zk.end_session(self.session_id)
            self.session_id = 0
        self._closed = True
        self._set_state(KazooState.LOST)

    def close(self) -> None:
        pass

    def expire_session(self) -> None:
        """What the server does when the session times out, then kazoo's reconnect."""
        self.zk.end_session(self.session_id)
        self._set_state(KazooState.LOST)
        self.session_id = self.zk.new_session()
        self._set_state(KazooState.CONNECTED)

    def suspend(self) -> None:
        """The connection drops (the session lives on in the server)."""
        self._set_state(KazooState.SUSPENDED)

    def resume(self) -> None:
        self._set_state(KazooState.CONNECTED)

    # -- paths -----------------------------------------------------------------

    def _full(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def _relative(self, value: Any) -> Any:
        if isinstance(value, str) and self.chroot and value.startswith(self.chroot):
            return value[len(self.chroot) :] or "/"
        return value

    def _ensure_usable(self) -> None:
        from kazoo.exceptions import ConnectionLoss

        if self._closed:
            raise ConnectionClosedError("Connection has been closed")
        if self.state == KazooState.LOST:
            raise SessionExpiredError()
        if not self.connected:
            raise ConnectionLoss()

    def _watcher(self, watch: Watcher | None) -> Watcher | None:
        if watch is None:
            return None
        client = self

        def relative(event: WatchedEvent) -> Any:
            return watch(WatchedEvent(event.type, event.state, client._relative(event.path)))

        # Same watcher twice on one path is one watch, as in ZooKeeper.
        return _WatchKey(watch, relative)

    def _run(self, fn: Callable[[], Any]) -> FakeAsyncResult:
        try:
            self._ensure_usable()
            return FakeAsyncResult(self._relative(fn()))
        except Exception as exc:
            return FakeAsyncResult(exception=exc)

    # -- the kazoo API subset --------------------------------------------------

    def get_async(self, path: str, watch: Watcher | None = None) -> FakeAsyncResult:
        return self._run(lambda: self.zk.get(self._full(path), self._watcher(watch)))

    def exists_async(self, path: str, watch: Watcher | None = None) -> FakeAsyncResult:
        return self._run(lambda: self.zk.exists(self._full(path), self._watcher(watch)))

    def get_children_async(self, path: str, watch: Watcher | None = None) -> FakeAsyncResult:
        return self._run(lambda: self.zk.get_children(self._full(path), self._watcher(watch)))

    def create_async(
        self,
        path: str,
        value: bytes = b"",
        ephemeral: bool = False,
        makepath: bool = False,
        sequence: bool = False,
    ) -> FakeAsyncResult:
        def create() -> Any:
            if makepath:
                self._ensure(_parent(path))
            result = self.zk.multi(
                [("create", self._full(path), value, ephemeral, sequence)], self.session_id
            )[0]
            if isinstance(result, BaseException):
                raise result
            return result

        return self._run(create)

    def set_async(self, path: str, value: bytes, version: int = -1) -> FakeAsyncResult:
        def set_data() -> Any:
            result = self.zk.multi([("set", self._full(path), value, version)], self.session_id)[0]
            if isinstance(result, BaseException):
                raise result
            return result

        return self._run(set_data)

    def delete_async(self, path: str, version: int = -1) -> FakeAsyncResult:
        def delete() -> Any:
            result = self.zk.multi([("delete", self._full(path), version)], self.session_id)[0]
            if isinstance(result, BaseException):
                raise result
            return result

        return self._run(delete)

    def _ensure(self, path: str) -> None:
        if path == "/" or self.zk.exists(self._full(path), None) is not None:
            return
        self._ensure(_parent(path))
        # A NodeExistsError result is a concurrent creator winning: fine.
        self.zk.multi([("create", self._full(path), b"", False, False)], self.session_id)

    def ensure_path_async(self, path: str) -> FakeAsyncResult:
        def ensure() -> bool:
            self._ensure(path)
            return True

        return self._run(ensure)

    def transaction(self) -> _FakeTransaction:
        return _FakeTransaction(self)


class _WatchKey:
    """A watcher wrapper that compares equal to another wrapper of the same watcher."""

    def __init__(self, key: Watcher, call: Watcher) -> None:
        self._key = key
        self._call = call

    def __call__(self, event: WatchedEvent) -> Any:
        return self._call(event)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _WatchKey) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)
