"""LeadersAwaited: CreateTopics waits for first leaders at the cost of what changed."""

from __future__ import annotations

from headwater.cluster.leaders_awaited import LeadersAwaited

TopicPartition = tuple[str, int]


def _wait_out(size: int) -> tuple[int, int]:
    """Leaders arrive in 10 batches for ``size`` partitions; 20 idle wake-ups name
    nothing new. Returns (checks made, batches until done)."""
    leaders: set[TopicPartition] = set()
    keys = [(f"t{i // 1000}", i % 1000) for i in range(size)]
    awaited = LeadersAwaited(keys, leaders.__contains__)
    batches = 0
    step = size // 10
    for start in range(0, size, step):
        for _ in range(2):
            assert not awaited.changed([])  # a change elsewhere in the cluster
        batch = keys[start : start + step]
        leaders.update(batch)
        batches += 1
        if awaited.changed(batch):
            break
    return awaited.checks, batches


def test_the_wait_checks_each_partition_once_on_creation_and_once_per_change() -> None:
    small_checks, small_batches = _wait_out(1_000)
    large_checks, large_batches = _wait_out(10_000)
    assert small_batches == large_batches == 10
    # creation check + one per change: linear, nothing per idle wake-up
    assert small_checks == 2 * 1_000
    assert large_checks == 2 * 10_000


def test_pending_topics_are_named_until_every_partition_has_a_leader() -> None:
    leaders = {("a", 0), ("b", 0)}
    awaited = LeadersAwaited([("a", 0), ("a", 1), ("b", 0)], leaders.__contains__)
    assert awaited.topics_pending() == {"a"}
    assert not awaited.done
    assert not awaited.changed([("b", 0), ("c", 3)])  # unrelated partitions cost nothing
    leaders.add(("a", 1))
    assert awaited.changed([("a", 1)])
    assert awaited.done and awaited.topics_pending() == set()


def test_a_partition_already_led_when_the_wait_starts_is_not_awaited() -> None:
    awaited = LeadersAwaited([("a", 0)], lambda _key: True)
    assert awaited.done
    assert awaited.checks == 1
