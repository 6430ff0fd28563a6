"""``ZkClusterStore`` on the in-memory ZooKeeper: the cluster store unit tests drive."""

from __future__ import annotations

from typing import Any

from headwater.cluster.local_zookeeper import LocalClusterStore
from headwater.testing.fake_zookeeper import FakeZooKeeper


class InMemoryClusterStore(LocalClusterStore):
    """``ZkClusterStore`` on an in-memory ZooKeeper: same code, same semantics.

    Several stores on one ``FakeZooKeeper`` are several brokers' sessions.
    ``expire_session()`` does what a session timeout does (ephemerals vanish,
    LOST, then a new session and RESTORED); ``suspend()``/``resume()`` model a
    dropped connection, ``zookeeper.available = False`` an unreachable server.
    Watches and session listeners run synchronously in the calling thread.
    """

    def __init__(
        self, zookeeper: FakeZooKeeper | None = None, chroot: str = "", **kwargs: Any
    ) -> None:
        super().__init__(zookeeper or FakeZooKeeper(), chroot, **kwargs)
        # Deterministic for unit tests: session events handled, and watches armed, in
        # the caller's thread.
        self._inline_callbacks = True

    def expire_session(self) -> None:
        self._client.expire_session()

    def suspend(self) -> None:
        self._client.suspend()

    def resume(self) -> None:
        self._client.resume()
