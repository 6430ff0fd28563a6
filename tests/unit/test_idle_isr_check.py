"""An idle ISR check visits no partition, and still shrinks a lagging follower out.

Issue 33 item 2: every ``replica.lag.time.max.ms / 2`` the replica manager
walked every led partition. ``IsrWatch`` visits only partitions touched since
(appends, follower fetches, new states) or not settled yet. Work is counted
(partitions visited, shrinks and nudges), never timed.
"""

from __future__ import annotations

from typing import cast

import pytest

from headwater.cluster.isr_watch import IsrWatch, settled
from headwater.cluster.partition import PartitionReplica, ReplicaAssignment
from headwater.log.log import Log

LEADER, F1, F2 = 0, 1, 2
LAG_MS = 30_000


class EndLog:
    """A led log's end, and the two calls becoming its leader makes."""

    def __init__(self, end: int = 10) -> None:
        self.log_end_offset = end
        self.partition_leader_epoch = 0

    def assign_leader_epoch(self, epoch: int) -> None:
        pass


class Calls:
    def __init__(self) -> None:
        self.shrunk: list[tuple[tuple[str, int], tuple[int, ...]]] = []
        self.nudged = 0

    def shrink(self, replica: PartitionReplica, isr: tuple[int, ...]) -> None:
        self.shrunk.append((replica.key, isr))
        replica.pending_isr = isr  # as the replica manager's ISR write does

    def nudge(self, _replica: PartitionReplica) -> None:
        self.nudged += 1


def led(i: int, isr: tuple[int, ...] = (LEADER, F1, F2)) -> PartitionReplica:
    replica = PartitionReplica("t", i, cast(Log, EndLog()), local_id=LEADER)
    replica.apply_state(ReplicaAssignment((LEADER, F1, F2), LEADER, 1, isr, 0), now_ms=0)
    for follower in (F1, F2):
        replica.update_follower(follower, 10, now_ms=0)  # caught up
    return replica


def leading(n: int) -> tuple[IsrWatch, dict[tuple[str, int], PartitionReplica], Calls]:
    watch, calls = IsrWatch(), Calls()
    replicas = {(r.topic, r.partition): r for r in (led(i) for i in range(n))}
    for key in replicas:
        watch.touch(key)  # each new state from ZooKeeper touches its partition
    watch.check(replicas, 0, LAG_MS, calls.shrink, calls.nudge)
    assert len(watch) == 0  # all settled
    return watch, replicas, calls


def idle_checks_cost(n: int, rounds: int = 5) -> tuple[int, int, int]:
    """(partitions visited, shrinks, nudges) over ``rounds`` idle ISR checks."""
    watch, replicas, calls = leading(n)
    visited, nudged = watch.visited, calls.nudged
    for r in range(1, rounds + 1):
        watch.check(replicas, r * LAG_MS, LAG_MS, calls.shrink, calls.nudge)
    return watch.visited - visited, len(calls.shrunk), calls.nudged - nudged


def test_idle_isr_checks_do_not_grow_with_the_partitions_led() -> None:
    assert idle_checks_cost(100) == idle_checks_cost(1_000) == (0, 0, 0)


@pytest.mark.parametrize("n", [100, 1_000])
def test_an_append_a_follower_never_fetches_still_shrinks_the_isr(n: int) -> None:
    watch, replicas, calls = leading(n)
    replica = replicas[("t", 7)]
    cast(EndLog, replica.log).log_end_offset = 11
    replica.on_log_change(now_ms=1_000)  # the append: F1 and F2 were caught up until now
    watch.touch(replica.key)
    replica.update_follower(F1, 11, now_ms=2_000)  # F1 fetches it, F2 never does
    visited = watch.visited
    watch.check(replicas, 20_000, LAG_MS, calls.shrink, calls.nudge)
    assert calls.shrunk == [] and watch.visited - visited == 1
    watch.check(replicas, 1_000 + LAG_MS + 1, LAG_MS, calls.shrink, calls.nudge)
    assert calls.shrunk == [(("t", 7), (LEADER, F1))]
    assert watch.visited - visited == 2
    assert len(watch) == 1  # the ISR write is in flight: looked at again next round


def test_a_partition_outside_a_full_isr_is_nudged_every_round_until_it_is_full() -> None:
    watch, calls = IsrWatch(), Calls()
    replica = led(0, isr=(LEADER, F1))
    replicas = {replica.key: replica}
    watch.touch(replica.key)
    for r in range(3):
        watch.check(replicas, r, LAG_MS, calls.shrink, calls.nudge)
    assert calls.nudged == 3 and not settled(replica)
    replica.isr = (LEADER, F1, F2)  # the expansion took effect
    watch.check(replicas, 4, LAG_MS, calls.shrink, calls.nudge)
    assert len(watch) == 0


def test_a_follower_whose_log_end_went_back_unsettles_the_partition() -> None:
    watch, replicas, calls = leading(3)
    replica = replicas[("t", 1)]
    replica.update_follower(F2, 4, now_ms=5)  # F2 truncated and fetches from 4
    watch.touch(replica.key)  # every follower fetch touches its partitions
    watch.check(replicas, 10, LAG_MS, calls.shrink, calls.nudge)
    assert len(watch) == 1 and not settled(replica)


def test_a_partition_no_longer_led_is_forgotten() -> None:
    watch, replicas, calls = leading(3)
    replica = replicas[("t", 2)]
    watch.touch(replica.key)
    replica.leader = -1  # stepped down
    watch.check(replicas, 0, LAG_MS, calls.shrink, calls.nudge)
    assert len(watch) == 0 and calls.nudged == 3  # the three from leading() only
