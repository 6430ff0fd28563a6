"""The demo's event generator and its live-results display (no Spark, no broker)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import NamedTuple

from headwater.demo import PAGES, LiveCounts, PageViewGenerator, progress_line

NOW_MS = 1_800_000_000_000


def test_generator_is_deterministic_for_a_seed() -> None:
    a, b = PageViewGenerator(seed=7), PageViewGenerator(seed=7)
    assert [a.event(NOW_MS) for _ in range(50)] == [b.event(NOW_MS) for _ in range(50)]


def test_page_views_are_json_keyed_by_user_with_event_time() -> None:
    gen = PageViewGenerator(seed=1)
    for _ in range(2000):
        key, value, ts = gen.event(NOW_MS)
        view = json.loads(value)
        assert set(view) == {"user", "page", "referrer", "device", "country", "ts"}
        assert key == view["user"].encode()
        assert view["ts"] == ts
        assert view["page"] in PAGES
        assert NOW_MS - 60_000 <= ts <= NOW_MS


def test_traffic_is_skewed_but_spread_over_users_and_some_events_are_late() -> None:
    gen = PageViewGenerator(seed=2)
    events = [gen.event(NOW_MS) for _ in range(20_000)]
    pages = Counter(json.loads(v)["page"] for _, v, _ in events)
    users = Counter(k for k, _, _ in events)
    assert pages.most_common(1)[0][0] == "/"
    assert len(users) > 1000
    assert users.most_common(1)[0][1] < 0.1 * len(events)
    late = sum(1 for _, _, ts in events if ts < NOW_MS)
    assert 0.005 * len(events) < late < 0.05 * len(events)


class Row(NamedTuple):
    window_start: datetime
    page: str
    views: int
    users: int


def test_live_counts_show_the_newest_window_busiest_pages_first() -> None:
    live = LiveCounts()
    old, new = datetime(2026, 1, 1, 12, 0, 0), datetime(2026, 1, 1, 12, 0, 10)
    live.update([Row(old, "/", 100, 50), Row(new, "/a", 3, 2), Row(new, "/b", 9, 4)])
    live.update([Row(new, "/a", 12, 6)])  # a later batch updates a running count
    assert live.summary(top=2) == "window 12:00:10 UTC: /a 12 (6 users), /b 9 (4 users)"


def test_live_counts_are_empty_before_the_first_batch() -> None:
    assert LiveCounts().summary() is None


def test_progress_line_reads_spark_progress() -> None:
    line = progress_line("q", {"batchId": 4, "numInputRows": 1200, "processedRowsPerSecond": 950.4})
    assert line == "q: batch 4, 1,200 rows, 950 rows/s"
    assert progress_line("q", None) == "q: starting"
