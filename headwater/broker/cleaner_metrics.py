"""The log cleaner's metrics, with the names Kafka's JMX exporter gives them.

Kafka's ``kafka.log:type=LogCleaner`` gauges become
``kafka_log_logcleaner_*``; read from the cleaner's stats at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from headwater.log.cleaner_manager import LogCleanerManager

PREFIX = "kafka_log_logcleaner_"


class _CleanerCollector(Collector):
    def __init__(self, cleaner: LogCleanerManager) -> None:
        self._cleaner = cleaner

    def collect(self) -> Iterator[Metric]:
        stats = self._cleaner.stats
        yield GaugeMetricFamily(
            PREFIX + "max_clean_time_secs",
            "Seconds the last clean took",
            value=stats.max_clean_time_secs,
        )
        yield GaugeMetricFamily(
            PREFIX + "cleaner_recopy_percent",
            "Bytes written as a percentage of bytes read by the last clean",
            value=stats.recopy_percent,
        )
        yield GaugeMetricFamily(
            PREFIX + "max_dirty_percent",
            "Dirty percentage of the dirtiest compacted log",
            value=stats.max_dirty_percent,
        )
        yield CounterMetricFamily(
            PREFIX + "bytes_read", "Bytes the cleaner read", value=stats.bytes_read
        )
        yield CounterMetricFamily(
            PREFIX + "bytes_written", "Bytes the cleaner wrote", value=stats.bytes_written
        )
        yield CounterMetricFamily(
            PREFIX + "cleaned_logs", "Cleans swapped into their logs", value=stats.cleaned_logs
        )


def register_cleaner_metrics(registry: CollectorRegistry, cleaner: LogCleanerManager) -> None:
    registry.register(_CleanerCollector(cleaner))
