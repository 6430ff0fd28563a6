"""New ZooKeeper watches are armed on the store's own thread, never the caller's.

Why (issue 33): kazoo wakes its connection thread with one byte per request on a
blocking socket pair (278 bytes fit here) and sends one request per wake-up. The
cluster view arms one watch per partition from the event loop, so 20,000 to
50,000 new partitions filled the pair and held the loop 10 to 45 s: no request
answered, follower fetches timed out, the stall guard fired.

The stub client's read blocks until the test lets it go, as a full pair does;
``watch_topics`` must return first, and the read must come from the arming thread.
"""

from __future__ import annotations

import threading
from typing import Any

from headwater.cluster.store import ZkClusterStore


class BlockingClient:
    """A kazoo client whose request submission blocks until ``release`` is set."""

    connected = True

    def __init__(self) -> None:
        self.release = threading.Event()
        self.submitted = threading.Event()
        self.threads: list[str] = []

    def get_children_async(self, path: str, watch: Any = None) -> Any:
        self.threads.append(threading.current_thread().name)
        self.release.wait(30)
        self.submitted.set()
        return self

    def rawlink(self, callback: Any) -> None:
        """The answer is never delivered: only the submission matters here."""


def test_arming_a_watch_never_waits_for_kazoo_on_the_callers_thread() -> None:
    store = ZkClusterStore("127.0.0.1:1/t")
    client = BlockingClient()
    store._client = client
    try:
        handle = store.watch_topics(lambda _topics: None)  # would hang 30 s if inline
        assert not client.submitted.is_set()
        client.release.set()
        assert client.submitted.wait(30)
        assert client.threads and all(t.startswith("hw-zk-arm") for t in client.threads)
        handle.cancel()
    finally:
        client.release.set()
        store._client = None
        store.close()
