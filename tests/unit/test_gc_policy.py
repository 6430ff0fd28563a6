"""The broker's collector policy: freeze long-lived objects, postpone full collections
while a sliced request runs (headwater.gc_policy)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.broker.cooperative import Steps, sliced
from headwater.gc_policy import COLLECTOR, POSTPONED_FULL_THRESHOLD, CollectorPolicy
from headwater.log.config import LogConfig
from headwater.log.log_directory import LogDirectory


@pytest.fixture
def policy() -> Iterator[CollectorPolicy]:
    thresholds = gc.get_threshold()
    p = CollectorPolicy()
    try:
        yield p
    finally:
        p.disable()
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_a_disabled_policy_leaves_the_collector_alone(policy: CollectorPolicy) -> None:
    frozen = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    policy.long_lived_created(10_000)
    policy.heavy_started()
    assert gc.get_freeze_count() == frozen
    assert gc.get_threshold() == thresholds
    assert policy.heavy_requests == 0


def test_long_lived_objects_are_frozen_once_enough_were_created(policy: CollectorPolicy) -> None:
    policy.enable(freeze_every=3)
    kept = [[object()] for _ in range(100)]
    policy.long_lived_created(2)
    assert policy.freezes == 0
    policy.long_lived_created()
    assert policy.freezes == 1
    assert gc.get_freeze_count() >= len(kept)
    # The count starts over after a freeze.
    policy.long_lived_created(2)
    assert policy.freezes == 1


def test_full_collections_wait_until_the_last_heavy_request_is_done(
    policy: CollectorPolicy,
) -> None:
    policy.enable()
    young, middle, full = gc.get_threshold()
    policy.heavy_started()
    with policy.heavy():
        assert gc.get_threshold() == (young, middle, POSTPONED_FULL_THRESHOLD)
        assert policy.heavy_requests == 2
    assert gc.get_threshold() == (young, middle, POSTPONED_FULL_THRESHOLD)
    policy.heavy_done()
    assert gc.get_threshold() == (young, middle, full)
    policy.heavy_done()  # one too many is harmless
    assert gc.get_threshold() == (young, middle, full)


def test_disabling_restores_the_threshold_of_a_request_still_running(
    policy: CollectorPolicy,
) -> None:
    policy.enable()
    full = gc.get_threshold()[2]
    policy.heavy_started()
    policy.disable()
    assert gc.get_threshold()[2] == full
    assert policy.heavy_requests == 0


def _slow_steps(slices: int, seen: list[int]) -> Steps[str]:
    for _ in range(slices):
        time.sleep(0.003)
        seen.append(gc.get_threshold()[2])
        yield None
    return "done"


def test_a_multi_slice_request_postpones_full_collections_only_while_it_runs() -> None:
    thresholds = gc.get_threshold()
    COLLECTOR.enable()
    try:
        seen: list[int] = []
        assert asyncio.run(sliced(_slow_steps(20, seen), slice_seconds=0.005)) == "done"
        assert seen[0] == thresholds[2]  # the first slice runs synchronously, as before
        assert seen[-1] == POSTPONED_FULL_THRESHOLD
        assert gc.get_threshold() == thresholds

        async def cancelled() -> None:
            task = asyncio.ensure_future(sliced(_slow_steps(1000, []), slice_seconds=0.005))
            await asyncio.sleep(0.05)
            assert COLLECTOR.heavy_requests == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancelled())
        assert COLLECTOR.heavy_requests == 0
        assert gc.get_threshold() == thresholds
    finally:
        COLLECTOR.disable()
        gc.set_threshold(*thresholds)


def test_opening_and_loading_logs_counts_toward_a_freeze(tmp_path: Path) -> None:
    logs = LogDirectory(tmp_path, LogConfig())
    logs.open()
    logs.create_topic("wide", 10)
    COLLECTOR.enable(freeze_every=4)
    try:
        before = COLLECTOR.freezes
        for partition in range(10):
            log = logs.log("wide", partition)  # opened...
            assert log.log_end_offset == 0  # ...and loaded: 20 notes in all
        assert COLLECTOR.freezes - before == 5
    finally:
        COLLECTOR.disable()
        gc.unfreeze()
        logs.close()
