"""An in-process ZooKeeper: the metadata store of a single broker, a cluster of one.

Why: a single broker runs the very code a cluster member runs (controller,
cluster view, replica manager, the one admin implementation), so there is one
road to a partition, not two. What differs is only where the metadata lives:
``ZkClusterStore`` talks to this tree through the subset of kazoo's client API
it uses, instead of to a ZooKeeper ensemble. The tree keeps its persistent
znodes in one JSON snapshot in the data directory (``SNAPSHOT_FILE``),
rewritten shortly after each change; ephemerals (the broker's registration,
``/controller``) live only as long as the process, as a session's would.

What it models of ZooKeeper: znode versions, ephemeral znodes owned by a
session, sessions (tests expire them on purpose), one-shot data/exists/children
watches, and all-or-nothing ``multi``. Everything completes at once. Watch
events and ``rawlink`` completions run either on one event thread, in order, as
kazoo's do (``event_thread=True``: production, where a callback may take locks
its writer holds), or synchronously in the writing thread (the unit tests'
fake, ``headwater.testing.fake_zookeeper``, for determinism).

kazoo ships no in-process server (its ``KazooTestHarness`` starts a real Java
ZooKeeper), hence this module.

Size: the znode tree, its kazoo-shaped client and transactions, and its
persistence are one model of ZooKeeper's semantics (versions, ephemerals, one-
shot watches, all-or-nothing multi); they change together.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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

from headwater.cluster.store import ZkClusterStore

log = logging.getLogger(__name__)

Watcher = Callable[[WatchedEvent], Any]
Dispatch = Callable[[Callable[[], Any]], None]

#: The single broker's metadata, in its data directory.
SNAPSHOT_FILE = "local-metadata.json"
#: Changes within this window are written in one snapshot.
FLUSH_DELAY_S = 0.02


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


class CompletedResult:
    """Already-completed stand-in for kazoo's ``IAsyncResult``."""

    def __init__(
        self,
        value: Any = None,
        exception: BaseException | None = None,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.value = value
        self.exception = exception
        self._dispatch = dispatch

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.exception is not None:
            raise self.exception
        return self.value

    def successful(self) -> bool:
        return self.exception is None

    def rawlink(self, callback: Callable[[CompletedResult], Any]) -> None:
        if self._dispatch is None:
            callback(self)
        else:
            self._dispatch(lambda: callback(self))


class LocalZooKeeper:
    """The shared znode tree (one "ensemble"); each ``LocalKazooClient`` is a session.

    ``snapshot``: the file that keeps the persistent znodes across restarts
    (None: memory only). ``event_thread``: deliver watch events and completions
    on one thread, in order, as kazoo does (else in the writing thread).
    """

    def __init__(self, snapshot: Path | None = None, *, event_thread: bool = False) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._sessions = itertools.count(0x1000)
        self._data_watches: dict[str, set[Watcher]] = {}
        self._child_watches: dict[str, set[Watcher]] = {}
        self.available = True
        """False simulates an unreachable server: every call fails with connection loss."""
        self._snapshot = snapshot
        last_zxid = self._load(snapshot) if snapshot is not None else 0
        self._zxid = itertools.count(last_zxid + 1)
        self._last_zxid = last_zxid
        self._dirty = threading.Event()
        #: During a multi: the touched znodes as they were (None: absent).
        self._undo: dict[str, _Node | None] | None = None
        self._flush_lock = threading.Lock()
        self._last_flush_s = 0.0
        self._closed = False
        self._flusher: threading.Thread | None = None
        if snapshot is not None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="hw-metadata-flush", daemon=True
            )
            self._flusher.start()
        self._events: queue.SimpleQueue[Callable[[], Any] | None] | None = None
        self._event_worker: threading.Thread | None = None
        if event_thread:
            self._events = queue.SimpleQueue()
            self._event_worker = threading.Thread(
                target=self._deliver_loop, name="hw-metadata-events", daemon=True
            )
            self._event_worker.start()

    # -- persistence -------------------------------------------------------------

    def _load(self, path: Path) -> int:
        """Read the persistent znodes of ``path``; the last zxid they carry."""
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"cannot read the broker metadata in {path}: {exc}") from exc
        last = 0
        for p, entry in sorted(raw["nodes"].items()):
            data, version, cversion, czxid, mzxid, ctime = entry
            node = _Node(base64.b64decode(data), version, cversion, 0, czxid, mzxid, ctime=ctime)
            self._nodes[p] = node
            last = max(last, czxid, mzxid)
            if p != "/":
                self._nodes[_parent(p)].children.add(_name(p))
        return max(last, int(raw.get("last_zxid", 0)))

    def _persistent_image(self) -> dict[str, Any]:
        nodes = {
            p: [base64.b64encode(n.data).decode(), n.version, n.cversion, n.czxid, n.mzxid, n.ctime]
            for p, n in self._nodes.items()
            if not n.owner
        }
        return {"version": 1, "last_zxid": self._last_zxid, "nodes": nodes}

    def _changed(self) -> None:
        if self._snapshot is not None:
            self._dirty.set()

    def _flush_loop(self) -> None:
        while not self._closed:
            self._dirty.wait()
            if self._closed:
                return
            # One write for a burst of changes; a large tree waits longer between
            # writes, so that writing it takes at most a fifth of the time.
            time.sleep(max(FLUSH_DELAY_S, 4 * self._last_flush_s))
            started = time.monotonic()
            self.flush()
            self._last_flush_s = time.monotonic() - started

    def flush(self, sync: bool = False) -> None:
        """Write the snapshot now if anything changed (``sync``: and fsync it)."""
        if self._snapshot is None:
            return
        with self._flush_lock:  # one writer of the snapshot file at a time
            self._flush(sync)

    def _flush(self, sync: bool) -> None:
        assert self._snapshot is not None
        with self._lock:
            if not self._dirty.is_set() and not sync:
                return
            self._dirty.clear()
            image = self._persistent_image()
        tmp = self._snapshot.with_suffix(".tmp")
        try:
            with open(tmp, "w") as fh:
                json.dump(image, fh, separators=(",", ":"))
                if sync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, self._snapshot)
        except OSError as exc:  # a full disk: kept dirty, written again on the next change
            log.warning("cannot write the broker metadata to %s: %s", self._snapshot, exc)
            self._dirty.set()

    def close(self) -> None:
        """Write what is left and stop the threads."""
        if self._closed:
            return
        self.flush(sync=True)
        self._closed = True
        self._dirty.set()
        if self._events is not None:
            self._events.put(None)

    # -- event delivery ----------------------------------------------------------

    def dispatch(self, call: Callable[[], Any]) -> None:
        """Run ``call`` as kazoo runs callbacks: on the event thread, or at once."""
        if self._events is None:
            call()
        else:
            self._events.put(call)

    def _deliver_loop(self) -> None:
        assert self._events is not None
        while True:
            call = self._events.get()
            if call is None:
                return
            try:
                call()
            except Exception:
                log.exception("a metadata watch callback failed")

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
            node.czxid,
            node.mzxid,
            node.ctime,
            0,
            node.version,
            node.cversion,
            0,
            node.owner,
            len(node.data),
            len(node.children),
            node.mzxid,
        )

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
            # What the operations touch, as it was: a failed multi puts it back
            # (a copy of the whole tree per multi made bulk writes quadratic).
            self._undo = {}
            results: list[Any] = []
            failed = -1
            for i, op in enumerate(ops):
                try:
                    results.append(self._apply_locked(op, session_id, fired))
                except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                    failed = i
                    results.append(exc)
                    break
            undo, self._undo = self._undo, None
            if failed >= 0:
                for path, node in undo.items():
                    if node is None:
                        self._nodes.pop(path, None)
                    else:
                        self._nodes[path] = node
                return [results[i] if i == failed else RolledBackError() for i in range(len(ops))]
            self._changed()
        self._fire(fired)
        return results

    def _save(self, path: str) -> None:
        """Inside a multi: keep ``path`` as it is now, for a rollback."""
        undo = self._undo
        if undo is None or path in undo:
            return
        node = self._nodes.get(path)
        undo[path] = (
            None if node is None else dataclasses.replace(node, children=set(node.children))
        )

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
        self._save(path)
        self._save(_parent(path))
        parent = self._nodes[_parent(path)]
        zxid = self._last_zxid = next(self._zxid)
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
        self._save(path)
        node = self._nodes[path]
        node.data = bytes(data)
        node.version += 1
        node.mzxid = self._last_zxid = next(self._zxid)
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
        self._save(path)
        self._save(_parent(path))
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
            self.dispatch(lambda watcher=watcher, event=event: watcher(event))  # type: ignore[misc]


class _LocalTransaction:
    def __init__(self, client: LocalKazooClient) -> None:
        self._client = client
        self._ops: list[tuple[Any, ...]] = []

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> None:
        self._ops.append(("create", self._client._full(path), value, ephemeral, sequence))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(("set", self._client._full(path), value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(("delete", self._client._full(path), version))

    def check(self, path: str, version: int) -> None:
        self._ops.append(("check", self._client._full(path), version))

    def commit_async(self) -> CompletedResult:
        try:
            self._client._ensure_usable()
        except Exception as exc:
            return CompletedResult(exception=exc, dispatch=self._client.zk.dispatch)
        results = self._client.zk.multi(self._ops, self._client.session_id)
        return CompletedResult(
            [self._client._relative(r) for r in results], dispatch=self._client.zk.dispatch
        )

    def commit(self) -> list[Any]:
        return list(self.commit_async().get())


class LocalKazooClient:
    """One session on a ``LocalZooKeeper``, shaped like ``kazoo.client.KazooClient``."""

    def __init__(self, zk: LocalZooKeeper, chroot: str = "") -> None:
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

    def _run(self, fn: Callable[[], Any]) -> CompletedResult:
        try:
            self._ensure_usable()
            return CompletedResult(self._relative(fn()), dispatch=self.zk.dispatch)
        except Exception as exc:
            return CompletedResult(exception=exc, dispatch=self.zk.dispatch)

    # -- the kazoo API subset --------------------------------------------------

    def get_async(self, path: str, watch: Watcher | None = None) -> CompletedResult:
        return self._run(lambda: self.zk.get(self._full(path), self._watcher(watch)))

    def exists_async(self, path: str, watch: Watcher | None = None) -> CompletedResult:
        return self._run(lambda: self.zk.exists(self._full(path), self._watcher(watch)))

    def get_children_async(self, path: str, watch: Watcher | None = None) -> CompletedResult:
        return self._run(lambda: self.zk.get_children(self._full(path), self._watcher(watch)))

    def create_async(
        self,
        path: str,
        value: bytes = b"",
        ephemeral: bool = False,
        makepath: bool = False,
        sequence: bool = False,
    ) -> CompletedResult:
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

    def set_async(self, path: str, value: bytes, version: int = -1) -> CompletedResult:
        def set_data() -> Any:
            result = self.zk.multi([("set", self._full(path), value, version)], self.session_id)[0]
            if isinstance(result, BaseException):
                raise result
            return result

        return self._run(set_data)

    def delete_async(self, path: str, version: int = -1) -> CompletedResult:
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

    def ensure_path_async(self, path: str) -> CompletedResult:
        def ensure() -> bool:
            self._ensure(path)
            return True

        return self._run(ensure)

    def transaction(self) -> _LocalTransaction:
        return _LocalTransaction(self)


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


class LocalClusterStore(ZkClusterStore):
    """``ZkClusterStore`` on this broker's own tree: the metadata of a cluster of one.

    Several stores on one ``LocalZooKeeper`` are several sessions, which is how
    the unit tests' in-memory store models a cluster.
    """

    #: In-process: the controller's writes share no socket with the view's reads.
    WRITES_ON_OWN_SESSION = False

    def __init__(
        self,
        zookeeper: LocalZooKeeper,
        chroot: str = "",
        *,
        owns_tree: bool = False,
        **kwargs: Any,
    ) -> None:
        self.zookeeper = zookeeper
        self._owns_tree = owns_tree
        super().__init__(
            f"in-process:1{chroot}",
            client_factory=lambda _hosts, root: LocalKazooClient(self.zookeeper, root),
            **kwargs,
        )

    @classmethod
    def in_dir(cls, data_dir: Path) -> LocalClusterStore:
        """The single broker's store, kept in ``data_dir``."""
        return cls(LocalZooKeeper(data_dir / SNAPSHOT_FILE, event_thread=True), owns_tree=True)

    def close(self) -> None:
        super().close()
        if self._owns_tree:
            self.zookeeper.close()
