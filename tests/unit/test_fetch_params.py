"""FetchParams: a Fetch's parameters decided once (consumer or follower, isolation, limits)."""

from __future__ import annotations

from headwater.fetch.params import FetchParams
from headwater.log.isolation import Isolation
from headwater.protocol.fetch_types import FetchRequestData


def test_a_follower_reads_to_the_log_end_whatever_isolation_it_names() -> None:
    params = FetchParams.of(FetchRequestData(version=12, replica_id=2, isolation_level=1), 1000)
    assert params.is_follower
    assert params.isolation is Isolation.LOG_END
    assert not params.wants_aborted_transactions


def test_consumers_read_to_the_high_watermark_or_the_last_stable_offset() -> None:
    uncommitted = FetchParams.of(FetchRequestData(version=12, isolation_level=0), 1000)
    committed = FetchParams.of(FetchRequestData(version=12, isolation_level=1), 1000)
    assert not uncommitted.is_follower
    assert uncommitted.isolation is Isolation.HIGH_WATERMARK
    assert committed.isolation is Isolation.TXN_COMMITTED
    assert committed.wants_aborted_transactions


def test_max_bytes_is_capped_by_the_broker_and_defaults_to_it() -> None:
    assert FetchParams.of(FetchRequestData(version=12, max_bytes=5000), 1000).max_bytes == 1000
    assert FetchParams.of(FetchRequestData(version=12, max_bytes=500), 1000).max_bytes == 500
    assert FetchParams.of(FetchRequestData(version=12, max_bytes=0), 1000).max_bytes == 1000
