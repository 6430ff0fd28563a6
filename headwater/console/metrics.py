"""Rates and latency percentiles from the brokers' own Prometheus ``/metrics``.

No Prometheus server is needed: the console scrapes each broker's endpoint
(found through DescribeConfigs' ``headwater.metrics.listen``) every few
seconds and turns two consecutive scrapes into rates. Counters are
per-second differences; p99 comes from the difference of two cumulative
histograms, so it is the p99 *of that interval*, as Prometheus'
``histogram_quantile(0.99, rate(...))`` computes it. Parsing is
prometheus_client's own parser; the arithmetic here is pure.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

REQUESTS: Final = "kafka_network_requestmetrics_requestspersec_total"
TOTAL_TIME_BUCKET: Final = "kafka_network_requestmetrics_totaltimems_bucket"
BYTES_IN: Final = "kafka_server_brokertopicmetrics_bytesinpersec_total"
BYTES_OUT: Final = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
#: Kafka names a client's Fetch FetchConsumer in RequestMetrics (a follower's is
#: FetchFollower, replication rather than traffic); plain Fetch for brokers that do not split.
PRODUCE_NAMES: Final = ("Produce",)
FETCH_NAMES: Final = ("Fetch", "FetchConsumer")
#: How many points a chart keeps (at a 5 s scrape, 15 minutes).
HISTORY_POINTS: Final = 180


@dataclass(frozen=True, slots=True)
class Sample:
    """What one scrape says, reduced to the numbers the charts need."""

    at: float  # seconds (monotonic or epoch; only differences matter)
    requests: Mapping[str, float]  # request name -> answered so far
    buckets: Mapping[str, tuple[tuple[float, float], ...]]  # request -> cumulative (le, count)
    bytes_in: float
    bytes_out: float


def parse_sample(text: str, at: float) -> Sample:
    """A Prometheus text exposition as a ``Sample`` (unknown families are ignored)."""
    requests: dict[str, float] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    bytes_in = bytes_out = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == REQUESTS:
                name = s.labels.get("request", "")
                requests[name] = requests.get(name, 0.0) + s.value
            elif s.name == TOTAL_TIME_BUCKET:
                le = float(s.labels.get("le", "+Inf"))
                buckets.setdefault(s.labels.get("request", ""), []).append((le, s.value))
            elif s.name == BYTES_IN:
                bytes_in += s.value
            elif s.name == BYTES_OUT:
                bytes_out += s.value
    return Sample(
        at,
        requests,
        {k: tuple(sorted(v)) for k, v in buckets.items()},
        bytes_in,
        bytes_out,
    )


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram, interpolated inside its bucket
    (Prometheus' histogram_quantile); None when it holds no observations."""
    rows = sorted(buckets)
    if not rows or rows[-1][1] <= 0:
        return None
    total = rows[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in rows:
        if count >= rank:
            if math.isinf(le):
                return prev_le  # beyond the last finite bound: its lower edge, as Prometheus
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


@dataclass(frozen=True, slots=True)
class Point:
    """One broker's rates over one scrape interval."""

    at: float
    produce_rate: float  # Produce requests per second
    fetch_rate: float  # Fetch requests per second (clients and followers)
    produce_p99_ms: float | None
    fetch_p99_ms: float | None
    bytes_in_rate: float
    bytes_out_rate: float


def _rate(now: float, before: float, seconds: float) -> float:
    # A counter that went down means the broker restarted: count from zero.
    return max(now - before if now >= before else now, 0.0) / seconds


def _delta_buckets(
    now: tuple[tuple[float, float], ...], before: tuple[tuple[float, float], ...]
) -> list[tuple[float, float]]:
    old = dict(before)
    out = [(le, count - old.get(le, 0.0)) for le, count in now]
    if any(c < 0 for _, c in out):  # restarted: the new histogram is the interval
        return list(now)
    return out


def _merged(now: Sample, names: tuple[str, ...], before: Sample) -> list[tuple[float, float]]:
    """The interval's histogram of several request names, summed bucket by bucket."""
    total: dict[float, float] = {}
    for name in names:
        for le, count in _delta_buckets(now.buckets.get(name, ()), before.buckets.get(name, ())):
            total[le] = total.get(le, 0.0) + count
    return sorted(total.items())


def derive(before: Sample, now: Sample) -> Point | None:
    """The rates between two scrapes (None if they are not in time order)."""
    seconds = now.at - before.at
    if seconds <= 0:
        return None

    def p99(names: tuple[str, ...]) -> float | None:
        return quantile(0.99, _merged(now, names, before))

    def rate(names: tuple[str, ...]) -> float:
        return _rate(
            sum(now.requests.get(n, 0.0) for n in names),
            sum(before.requests.get(n, 0.0) for n in names),
            seconds,
        )

    return Point(
        at=now.at,
        produce_rate=rate(PRODUCE_NAMES),
        fetch_rate=rate(FETCH_NAMES),
        produce_p99_ms=p99(PRODUCE_NAMES),
        fetch_p99_ms=p99(FETCH_NAMES),
        bytes_in_rate=_rate(now.bytes_in, before.bytes_in, seconds),
        bytes_out_rate=_rate(now.bytes_out, before.bytes_out, seconds),
    )


@dataclass
class BrokerSeries:
    """One broker's scrape history: the last sample and the derived points."""

    endpoint: str | None
    last: Sample | None = None
    points: deque[Point] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    error: str | None = None

    def add(self, sample: Sample) -> None:
        if self.last is not None:
            point = derive(self.last, sample)
            if point is not None:
                self.points.append(point)
        self.last = sample
        self.error = None

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None
