"""How the console shows values, pages lists, plans offset resets and reads /metrics."""

from __future__ import annotations

import uuid

import pytest

from headwater.client.types import TopicPartition
from headwater.console.assignments import decode_assignment
from headwater.console.formatting import (
    human_bytes,
    paginate,
    parse_configs,
    parse_headers,
    parse_int,
    parse_timestamp,
    render_bytes,
    retention_text,
    timestamp_text,
)
from headwater.console.metrics import BrokerSeries, derive, parse_sample, quantile
from headwater.console.offsets import plan_reset


def test_text_json_and_hex_renderings() -> None:
    value = b'{"user": "ann", "n": 1}'
    assert render_bytes(value, "text").text == '{"user": "ann", "n": 1}'
    assert render_bytes(value, "json").text == '{\n  "user": "ann",\n  "n": 1\n}'
    assert render_bytes(b"\x00\xff", "hex").text == "00 ff"
    assert render_bytes(None).text == "null"
    assert render_bytes(None).size == -1


def test_bad_json_shows_as_text_and_binary_as_hex() -> None:
    assert render_bytes(b"not json", "json") == render_bytes(b"not json", "json")
    assert render_bytes(b"not json", "json").format == "text"
    binary = render_bytes(b"\xff\xfe\x00", "text")
    assert binary.format == "hex"
    assert binary.text == "ff fe 00"


def test_a_large_value_is_truncated_and_says_so() -> None:
    shown = render_bytes(b"x" * 1000, "text", limit=300)
    assert shown.truncated
    assert len(shown.text) == 300
    assert shown.size == 1000
    whole = render_bytes(b"x" * 1000, "text", limit=None)
    assert not whole.truncated and len(whole.text) == 1000


def test_utf8_text_is_kept_as_text() -> None:
    assert render_bytes("café ☕".encode(), "text").text == "café ☕"


@pytest.mark.parametrize(
    ("n", "text"),
    [(None, "-"), (-1, "-"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 << 30, "5.0 GiB")],
)
def test_human_bytes(n: int | None, text: str) -> None:
    assert human_bytes(n) == text


def test_retention_reads_as_a_duration_or_forever() -> None:
    assert retention_text("604800000") == "7.0 d"
    assert retention_text("-1") == "forever"
    assert retention_text(None) == "-"


def test_timestamps_are_utc_both_ways() -> None:
    assert timestamp_text(0) == "1970-01-01 00:00:00.000Z"
    assert parse_timestamp("1970-01-01T00:00:01") == 1000
    assert parse_timestamp("1970-01-01T01:00:00+01:00") == 0
    assert parse_timestamp("12345") == 12345
    with pytest.raises(ValueError, match="not a time"):
        parse_timestamp("yesterday")


def test_pages_clamp_and_count() -> None:
    items = list(range(10_000))
    page = paginate(items, 3, 100)
    assert list(page.items) == list(range(200, 300))
    assert (page.pages, page.has_prev, page.has_next) == (100, True, True)
    assert (page.first_index, page.last_index) == (201, 300)
    assert paginate(items, 999, 100).number == 100
    assert paginate(items, -5, 100).number == 1
    empty = paginate([], 1, 50)
    assert (empty.pages, empty.first_index, empty.last_index, empty.has_next) == (1, 0, 0, False)


def test_query_numbers_fall_back_and_clamp() -> None:
    assert parse_int("7", 1) == 7
    assert parse_int("x", 1) == 1
    assert parse_int(None, 5) == 5
    assert parse_int("9999", 20, 1, 500) == 500


def test_headers_and_configs_from_form_text() -> None:
    assert parse_headers("trace=abc\n\nsource = web \n") == [("trace", b"abc"), ("source", b"web")]
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_headers("novalue")
    assert parse_configs("retention.ms=1000, cleanup.policy=compact") == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }


T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
STARTS = {T0: 10, T1: 0}
ENDS = {T0: 100, T1: 50}


@pytest.mark.parametrize(
    ("strategy", "value", "found", "expected"),
    [
        ("earliest", 0, None, [10, 0]),
        ("latest", 0, None, [100, 50]),
        ("offset", 42, None, [42, 42]),
        ("offset", 5, None, [10, 5]),  # clamped to the log start
        ("offset", 500, None, [100, 50]),  # clamped to the log end
        ("shift", -20, None, [40, 0]),  # T1 has no commit: shifts from its log start
        ("shift", 1000, None, [100, 50]),
        ("timestamp", 0, {T0: 70, T1: -1}, [70, 50]),  # no record that late: the log end
    ],
)
def test_an_offset_reset_plan_follows_kafkas_rules(
    strategy: str, value: int, found: dict[TopicPartition, int] | None, expected: list[int]
) -> None:
    rows = plan_reset(
        strategy,  # type: ignore[arg-type]
        [T0, T1],
        {T0: 60},
        STARTS,
        ENDS,
        value=value,
        found=found,
    )
    assert [r.new for r in rows] == expected
    assert rows[0].current == 60 and rows[1].current is None
    assert rows[0].change == expected[0] - 60 and rows[1].change is None


METRICS_1 = """\
# TYPE kafka_network_requestmetrics_requestspersec counter
kafka_network_requestmetrics_requestspersec_total{request="Produce",version="9"} 100.0
kafka_network_requestmetrics_requestspersec_total{request="FetchConsumer",version="12"} 40.0
kafka_network_requestmetrics_requestspersec_total{request="FetchFollower",version="12"} 9.0
# TYPE kafka_network_requestmetrics_totaltimems histogram
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="1.0"} 50.0
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="10.0"} 100.0
kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="+Inf"} 100.0
kafka_network_requestmetrics_totaltimems_count{request="Produce"} 100.0
kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 300.0
# TYPE kafka_server_brokertopicmetrics_bytesinpersec counter
kafka_server_brokertopicmetrics_bytesinpersec_total{topic="a"} 1000.0
kafka_server_brokertopicmetrics_bytesinpersec_total{topic="b"} 1000.0
# TYPE kafka_server_brokertopicmetrics_bytesoutpersec counter
kafka_server_brokertopicmetrics_bytesoutpersec_total{topic="a"} 500.0
"""


def _later(text: str) -> str:
    return (
        text.replace(
            "} 100.0\nkafka_network_requestmetrics_requestspersec_total",
            "} 300.0\nkafka_network_requestmetrics_requestspersec_total",
        )
        .replace('le="10.0"} 100.0', 'le="10.0"} 300.0')
        .replace('le="+Inf"} 100.0', 'le="+Inf"} 300.0')
        .replace('{topic="a"} 1000.0', '{topic="a"} 11000.0')
    )


def test_two_scrapes_make_rates_and_an_interval_p99() -> None:
    before = parse_sample(METRICS_1, 0.0)
    assert before.requests == {"Produce": 100.0, "FetchConsumer": 40.0, "FetchFollower": 9.0}
    assert before.bytes_in == 2000.0 and before.bytes_out == 500.0
    now = parse_sample(_later(METRICS_1), 10.0)
    point = derive(before, now)
    assert point is not None
    assert point.produce_rate == pytest.approx(20.0)
    assert point.fetch_rate == 0.0
    assert point.bytes_in_rate == pytest.approx(1000.0)
    # The interval's 200 requests all fell in (1, 10] ms: p99 interpolates near 10.
    assert point.produce_p99_ms == pytest.approx(1 + 9 * 0.99)
    assert point.fetch_p99_ms is None
    assert derive(now, before) is None


def test_a_restarted_broker_counts_from_zero_not_negative() -> None:
    before = parse_sample(_later(METRICS_1), 0.0)
    now = parse_sample(METRICS_1, 5.0)
    point = derive(before, now)
    assert point is not None and point.produce_rate == pytest.approx(20.0)


def test_quantile_of_a_histogram() -> None:
    assert quantile(0.5, [(1.0, 50), (10.0, 100), (float("inf"), 100)]) == pytest.approx(1.0)
    assert quantile(0.99, [(1.0, 0), (float("inf"), 10)]) == 1.0
    assert quantile(0.99, []) is None
    assert quantile(0.99, [(1.0, 0), (float("inf"), 0)]) is None


def test_broker_series_keeps_points_from_the_second_scrape_on() -> None:
    series = BrokerSeries("http://x/metrics")
    series.add(parse_sample(METRICS_1, 0.0))
    assert series.latest is None
    series.add(parse_sample(_later(METRICS_1), 10.0))
    assert series.latest is not None and series.latest.at == 10.0


def test_a_consumer_assignment_decodes_and_junk_reads_as_none() -> None:
    # version 0: [topics: (string topic, [int32 partitions])], bytes user_data (null)
    data = (
        b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03" + b"\xff\xff\xff\xff"
    )  # fmt: skip
    assert decode_assignment(data) == (("t", (0, 3)),)
    assert decode_assignment(b"") == ()
    assert decode_assignment(b"\x00\x00\xff") == ()


def test_a_snapshot_counts_health_and_leaders() -> None:
    from headwater.client.types import BrokerMetadata, PartitionMetadata, TopicMetadata
    from headwater.console.gateway import Snapshot

    parts = {
        0: PartitionMetadata(0, 1, 0, (1, 2), (1, 2)),
        1: PartitionMetadata(1, 2, 0, (2, 3), (2,)),  # broker 3 out of the ISR
        2: PartitionMetadata(2, -1, 0, (3,), ()),  # no leader
    }
    live = {1: BrokerMetadata(1, "h", 1), 2: BrokerMetadata(2, "h", 2)}
    snap = Snapshot(0.0, "c", 1, live, {**live, 3: BrokerMetadata(3, "", 0)},
                    {"t": TopicMetadata("t", uuid.uuid4(), parts)})  # fmt: skip
    under, offline = snap.health()
    assert under == [TopicPartition("t", 1)] and offline == [TopicPartition("t", 2)]
    assert snap.leaders() == {1: 1, 2: 1, 3: 0}
    assert snap.partition_count() == 3
