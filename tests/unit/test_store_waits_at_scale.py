"""Waiting on kazoo at scale: new watches are armed on the store's own thread, never
the caller's, and a slow answer on a live connection is waited for.

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

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from headwater.cluster.store import ClusterStoreUnavailableError, ZkClusterStore


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


class SlowAnswer:
    """An answer that comes after ``late`` timed-out waits."""

    def __init__(self, late: int) -> None:
        self.late = late
        self.waits = 0

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.waits += 1
        if self.waits <= self.late:
            raise KazooTimeoutError()
        return "answer"


class Connection:
    def __init__(self, connected: bool) -> None:
        self.connected = connected


def test_a_slow_answer_on_a_live_connection_is_waited_for_and_a_dead_one_is_not() -> None:
    """Issue 33: at 50,000 partitions a controller request queued behind the view's
    watch reads waited past 10 s; giving up made the controller re-read every state
    (50,000 reads more in the same queue), again and again."""
    store = ZkClusterStore("127.0.0.1:1/t", request_timeout_s=10.0, slow_request_limit_s=60.0)
    try:
        store._client = Connection(connected=True)
        slow = SlowAnswer(late=3)
        assert store._wait(slow, "partitions path") == "answer"
        assert slow.waits == 4
        # Still no answer at the limit: unavailable, with how long it waited.
        with pytest.raises(ClusterStoreUnavailableError, match="no answer in 60 s"):
            store._wait(SlowAnswer(late=100), "partitions path")
        # The connection is gone: no second wait.
        store._client = Connection(connected=False)
        gone = SlowAnswer(late=1)
        with pytest.raises(ClusterStoreUnavailableError, match="no answer in 10 s"):
            store._wait(gone, "partitions path")
        assert gone.waits == 1
    finally:
        store._client = None
        store.close()
