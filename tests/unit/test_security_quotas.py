"""Client quotas: KIP-55 precedence, Kafka's rate windows and throttle times."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.security.quotas import (
    ClientQuotaManager,
    FileQuotaStore,
    InMemoryQuotaStore,
    QuotaKey,
    Rate,
    entity,
)

P = QuotaKey.PRODUCER_BYTE_RATE


def manager(*settings_: tuple[object, dict[str, float]], samples: int = 11) -> ClientQuotaManager:
    m = ClientQuotaManager(InMemoryQuotaStore(), window_ms=1000, samples=samples)
    m.alter([(e, list(v.items())) for e, v in settings_])  # type: ignore[misc]
    return m


def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    r = Rate(1000, 11)
    r.record(10_000, 0)
    assert r.window_size_ms(0) == 10_000 and r.rate(0) == 1000
    r.record(10_000, 15_000)  # the first sample has left the 11 windows
    assert r.rate(15_000) == pytest.approx(1000)


def test_kip55_precedence_most_specific_wins() -> None:
    m = manager(
        (entity(client_id=None), {"producer_byte_rate": 1}),
        (entity(client_id="app"), {"producer_byte_rate": 2}),
        (entity(user=None), {"producer_byte_rate": 3}),
        (entity(user=None, client_id="app"), {"producer_byte_rate": 4}),
        (entity(user="alice"), {"producer_byte_rate": 5}),
        (entity(user="alice", client_id="app"), {"producer_byte_rate": 6}),
    )
    assert m.quota_for(P, "alice", "app") == (6, ("alice", "app"))
    assert m.quota_for(P, "alice", "other") == (5, ("alice", ""))
    assert m.quota_for(P, "bob", "app") == (4, ("bob", "app"))
    assert m.quota_for(P, "bob", "other") == (3, ("bob", ""))
    assert m.quota_for(QuotaKey.CONSUMER_BYTE_RATE, "bob", "x") is None


def test_a_user_quota_is_shared_by_all_the_users_clients() -> None:
    m = manager((entity(user="alice"), {"producer_byte_rate": 1000}))
    assert m.record(P, "alice", "a", 10_000, 0) == 0  # exactly the quota over 10 s
    # A second client of alice is over the same shared rate.
    assert m.record(P, "alice", "b", 5_000, 100) > 0
    assert m.record(P, "bob", "b", 10**9, 100) == 0  # bob has no quota


def test_throttle_time_is_kafkas_formula() -> None:
    m = manager((entity(user=None), {"producer_byte_rate": 1000}))
    # 20,000 bytes in the first window: rate 2,000/s over a 10 s window.
    throttle = m.record(P, "u", "c", 20_000, 0)
    assert throttle == (2000 - 1000) / 1000 * 10_000
    assert m.throttle_ms(P, "u", "c", 0) == throttle


def test_throttle_is_capped_at_the_whole_window() -> None:
    m = manager((entity(user=None), {"producer_byte_rate": 1}))
    assert m.record(P, "u", "c", 10**9, 0) == 11_000


def test_request_percentage_is_percent_of_one_thread() -> None:
    m = manager((entity(user="u"), {"request_percentage": 10}))  # 100 ms per second
    assert m.record(QuotaKey.REQUEST_PERCENTAGE, "u", "c", 1000, 0) == 0  # 1 s over 10 s
    assert m.record(QuotaKey.REQUEST_PERCENTAGE, "u", "c", 1000, 0) > 0


@settings(max_examples=50, deadline=None)
@given(quota=st.integers(1000, 1_000_000), fraction=st.floats(0.01, 1.0))
def test_a_client_that_honours_throttles_stays_near_its_quota(quota: int, fraction: float) -> None:
    """Simulated producer of requests up to one second's quota: send, wait the throttle.

    It sends at most once per millisecond, so requests of at least 1% of the
    quota let it go 10x over the quota when nothing throttles it.
    """
    chunk = max(1, int(quota * fraction))
    m = manager((entity(user="u"), {"producer_byte_rate": quota}))
    now, sent = 0.0, 0
    while now < 60_000:
        throttle = m.record(P, "u", "c", chunk, now)
        sent += chunk
        now += max(throttle, 1)
    # 60 s at the quota plus the first window's allowance (10 windows' worth);
    # sample expiry lets Kafka's rate run a few percent over, hence the 10%.
    assert sent <= quota * 70 * 1.1 + chunk * 2
    assert sent >= quota * 60 * 0.8


def test_alter_validates_and_removes(tmp_path: Path) -> None:
    m = ClientQuotaManager(FileQuotaStore.in_dir(tmp_path))
    with pytest.raises(ValueError, match="unknown quota key"):
        m.alter([(entity(user="a"), [("bogus", 1.0)])])
    with pytest.raises(ValueError, match="positive"):
        m.alter([(entity(user="a"), [("producer_byte_rate", -5.0)])])
    m.alter([(entity(user="a", client_id="c"), [("producer_byte_rate", 5.0)])])
    again = ClientQuotaManager(FileQuotaStore.in_dir(tmp_path))
    assert again.quotas == {entity(user="a", client_id="c"): {"producer_byte_rate": 5.0}}
    again.alter([(entity(user="a", client_id="c"), [("producer_byte_rate", None)])])
    assert ClientQuotaManager(FileQuotaStore.in_dir(tmp_path)).quotas == {}


def test_describe_filters_like_kip_546() -> None:
    m = manager(
        (entity(user="alice"), {"producer_byte_rate": 1}),
        (entity(user=None), {"producer_byte_rate": 2}),
        (entity(user="alice", client_id="x"), {"consumer_byte_rate": 3}),
    )
    exact = m.describe([("user", 0, "alice")], strict=False)
    assert {e for e, _ in exact} == {entity(user="alice"), entity(user="alice", client_id="x")}
    assert [e for e, _ in m.describe([("user", 0, "alice")], strict=True)] == [entity(user="alice")]
    assert [e for e, _ in m.describe([("user", 1, None)], strict=False)] == [entity(user=None)]
    assert len(m.describe([("user", 2, None)], strict=False)) == 3


def test_one_response_carries_at_most_one_quota_window() -> None:
    m = manager((entity(user=None), {"consumer_byte_rate": 1000}))
    assert m.max_value_in_window(QuotaKey.CONSUMER_BYTE_RATE, "u", "c") == 10_000
    assert m.max_value_in_window(P, "u", "c") is None
