"""The metrics' bookkeeping and collectors, without a broker."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest

from headwater.broker.connection import RequestContext, _Queued, _request_times
from headwater.broker.metrics import (
    BrokerMetrics,
    ConsumerLagCollector,
    EventLoopLag,
    RequestTimes,
    kafka_request_name,
)
from headwater.protocol.header import RequestHeader


def _text(collector: object) -> str:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_request_names_are_kafkas() -> None:
    assert kafka_request_name("LIST_OFFSETS") == "ListOffsets"
    assert kafka_request_name("OFFSET_FOR_LEADER_EPOCH") == "OffsetForLeaderEpoch"
    assert kafka_request_name("API_VERSIONS") == "ApiVersions"


def test_request_times_are_cumulative_histograms() -> None:
    times = RequestTimes()
    times.observe("Produce", 9, (0.1, 2.0, 0.0, 0.0, 0.3, 2.4))
    times.observe("Produce", 9, (0.1, 2.0, 600.0, 0.0, 0.3, 603.0))
    times.observe("Produce", 7, (0.1, 2.0, 0.0, 0.0, 0.3, 40000.0))
    text = _text(times)
    assert 'requestspersec_total{request="Produce",version="9"} 2.0' in text
    assert 'requestspersec_total{request="Produce",version="7"} 1.0' in text
    assert 'totaltimems_bucket{le="2.5",request="Produce"} 1.0' in text
    assert 'totaltimems_bucket{le="1000.0",request="Produce"} 2.0' in text
    assert 'totaltimems_bucket{le="30000.0",request="Produce"} 2.0' in text
    assert 'totaltimems_bucket{le="+Inf",request="Produce"} 3.0' in text
    assert 'remotetimems_sum{request="Produce"} 600.0' in text
    assert 'remotetimems_count{request="Produce"} 3.0' in text


def _item(arrived: float, started: float, ready: float, remote: float) -> _Queued:
    header = RequestHeader(api_key=3, api_version=12, correlation_id=1, client_id="c")
    ctx = RequestContext(header, "127.0.0.1:1", 1)
    ctx.remote_seconds = remote
    return _Queued(header, b"", False, ctx, arrived, started, ready)


def test_request_times_split() -> None:
    queue, local, remote, response_queue, send, total = _request_times(
        _item(arrived=10.0, started=10.001, ready=10.503, remote=0.5), 10.504, 10.505, 0.0
    )
    assert round(queue, 3) == 1.0
    assert round(local, 3) == 2.0
    assert round(remote, 3) == 500.0
    assert round(response_queue, 3) == 1.0
    assert round(send, 3) == 1.0
    assert round(total, 3) == 505.0


def test_the_clock_starts_after_the_previous_response_as_in_kafka() -> None:
    """A Metadata read at once but answered after a Fetch's 500 ms long poll."""
    times = _request_times(
        _item(arrived=10.0, started=10.0, ready=10.001, remote=0.0), 10.5, 10.501, 10.5
    )
    queue, _local, _remote, response_queue, _send, total = times
    assert queue == 0 and response_queue == 0
    assert round(total, 3) == 1.0


def test_event_loop_lag_max_resets_at_each_scrape() -> None:
    lag = EventLoopLag()
    lag.record(0.2)
    lag.record(0.001)
    first = _text(lag)
    assert "headwater_event_loop_lag_max_seconds 0.2" in first
    assert 'headwater_event_loop_lag_seconds_bucket{le="0.25"} 2.0' in first
    assert "headwater_event_loop_lag_max_seconds 0.0" in _text(lag)


def test_consumer_lag_walks_on_the_loop_in_slices_and_is_bounded() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    on_loop: list[bool] = []

    def committed() -> Iterator[tuple[str, str, int, int]]:
        for p in range(1200):
            on_loop.append(threading.current_thread() is thread)
            yield "g", "t", p, 10
        yield "g", "gone", 0, 5

    def end_offset(topic: str, partition: int) -> int | None:
        return None if topic == "gone" else 25

    try:
        text = _text(ConsumerLagCollector(loop, committed, end_offset))
        assert all(on_loop) and len(on_loop) == 1200
        assert 'kafka_consumergroup_lag{consumergroup="g",partition="7",topic="t"} 15.0' in text
        assert (
            'kafka_consumergroup_current_offset{consumergroup="g",partition="7",topic="t"}' in text
        )
        assert 'topic="gone"' not in text
        bounded = ConsumerLagCollector(loop, committed, end_offset, max_series=100)
        text = _text(bounded)
        assert text.count("kafka_consumergroup_lag{") == 100
        assert "headwater_consumergroup_lag_truncated_scrapes_total 1.0" in text
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_broker_info_says_the_rack() -> None:
    racked, rackless = BrokerMetrics(), BrokerMetrics()
    racked.bind_broker_info(2, "eu-west-1b")
    rackless.bind_broker_info(3, None)
    assert 'headwater_broker_info{broker_id="2",rack="eu-west-1b"} 1.0' in (
        generate_latest(racked.registry).decode()
    )
    assert 'headwater_broker_info{broker_id="3",rack=""} 1.0' in (
        generate_latest(rackless.registry).decode()
    )
