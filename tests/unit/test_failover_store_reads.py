"""Bulk ZooKeeper reads and writes wait once, not once per answer.

Why: a controller taking over, or one handling a broker's failure, reads every
partition's state (10,000 pipelined reads) and writes the elections in batches.
Waiting for each answer in turn woke the waiting thread once per answer, a GIL
hand-off with kazoo's connection thread each time while it was still reading
the others (issue 33 item 2: 175 to 409 blocking waits per 4,000 reads on a
real ZooKeeper; the wall time moved less than this machine's noise). The store
now waits for the last answer first: ZooKeeper answers a session's requests in
order, so every other one is then in.

The stub below models that order: a blocking wait on an answer receives every
answer up to that one. The count of blocking waits must not grow with the
number of partitions.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import NoNodeError

from headwater.cluster import zk_layout as zk
from headwater.cluster.store import (
    ControllerFence,
    PartitionState,
    PartitionStateWrite,
    ZkClusterStore,
)


class InOrderAnswers:
    """One session's answers, arriving in request order when someone waits."""

    def __init__(self) -> None:
        self.results: list[StubResult] = []
        self.blocking_waits = 0

    def receive_through(self, result: StubResult) -> None:
        self.blocking_waits += 1
        for r in self.results[: self.results.index(result) + 1]:
            r.done = True


class StubResult:
    def __init__(self, answers: InOrderAnswers, value: Any) -> None:
        self.answers = answers
        self.value = value
        self.done = False
        answers.results.append(self)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not self.done:
            self.answers.receive_through(self)
        return self.value


class StubTransaction:
    def __init__(self, client: StubClient) -> None:
        self.client = client
        self.ops = 0

    def check(self, path: str, version: int) -> None:
        self.ops += 1

    def set_data(self, path: str, data: bytes, version: int) -> None:
        self.ops += 1

    def commit_async(self) -> StubResult:
        stats = [SimpleNamespace(version=1) for _ in range(self.ops)]
        return StubResult(self.client.answers, stats)


class StubClient:
    """The part of kazoo's client a bulk read and a batched write use."""

    connected = True

    def __init__(self) -> None:
        self.answers = InOrderAnswers()
        self.state = zk.encode_partition_state(1, 0, (1, 2), 1)

    def get_async(self, path: str) -> StubResult:
        return StubResult(self.answers, (self.state, SimpleNamespace(version=0)))

    def transaction(self) -> StubTransaction:
        return StubTransaction(self)


def store_on_stub() -> tuple[ZkClusterStore, StubClient]:
    store = ZkClusterStore("127.0.0.1:2181")
    client = StubClient()
    store._client = client
    store._writer = client  # the controller's write session answers in order too
    return store, client


def test_reading_every_state_waits_once_whatever_the_partition_count() -> None:
    waits = []
    for partitions in (1000, 10_000):
        store, client = store_on_stub()
        states = store.partition_states([("t", p) for p in range(partitions)])
        assert len(states) == partitions
        assert states[("t", 0)] == PartitionState(1, 0, (1, 2), 1, zk_version=0)
        waits.append(client.answers.blocking_waits)
    assert waits == [1, 1]  # was one per partition: 1,000 and 10,000


def test_writing_every_election_waits_once_whatever_the_batch_count() -> None:
    fence = ControllerFence(broker_id=1, epoch=2, epoch_zk_version=1)
    waits = []
    for partitions in (1000, 10_000):
        store, client = store_on_stub()
        writes = [
            PartitionStateWrite("t", p, PartitionState(2, 1, (2,), 2), 0) for p in range(partitions)
        ]
        versions = store.write_partition_states(fence, writes)
        assert versions == {("t", p): 1 for p in range(partitions)}
        waits.append(client.answers.blocking_waits)
    assert waits == [1, 1]  # was one per batch of WRITE_BATCH: 5 and 50


def test_a_missing_state_is_still_left_out() -> None:
    """Waiting for the last answer first changes nothing about what each answer says."""
    store, client = store_on_stub()
    real = client.get_async

    def get_async(path: str) -> StubResult:
        if path == zk.partition_state_path("t", 1):
            missing = StubResult(client.answers, None)
            missing.get = _raiser(NoNodeError())  # type: ignore[method-assign]
            return missing
        return real(path)

    client.get_async = get_async  # type: ignore[method-assign]
    states = store.partition_states([("t", p) for p in range(3)])
    assert set(states) == {("t", 0), ("t", 2)}


def _raiser(exc: BaseException) -> Any:
    def get(block: bool = True, timeout: float | None = None) -> Any:
        raise exc

    return get
