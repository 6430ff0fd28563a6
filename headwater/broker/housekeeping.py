"""Periodic log housekeeping: retention and time-based roll every
``log.retention.check.interval.ms``, time-based flush, and the native heap trim."""

from __future__ import annotations

import asyncio
import logging
import time

from headwater.broker.config import BrokerConfig
from headwater.log.log_directory import LogDirectory
from headwater.malloc_policy import trim_native_heap

log = logging.getLogger(__name__)


async def housekeeping(config: BrokerConfig, logs: LogDirectory) -> None:
    """Retention and time-based roll every ``log.retention.check.interval.ms``
    (as Kafka; they touch every partition, so not every tick), time-based
    flush every tick when ``flush.ms`` is in use anywhere."""
    interval = config.housekeeping_interval_ms / 1000
    next_retention = time.monotonic() + config.retention_check_interval_ms / 1000
    trim_every = config.malloc_trim_interval_ms / 1000
    next_trim = time.monotonic() + trim_every
    while True:
        await asyncio.sleep(interval)
        now_ms = int(time.time() * 1000)
        try:
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + config.retention_check_interval_ms / 1000
                logs.roll_due(now_ms)
                logs.run_retention(now_ms)
            if _time_based_flush(config, logs):
                logs.flush_due(now_ms)
            if trim_every > 0 and time.monotonic() >= next_trim:
                next_trim = time.monotonic() + trim_every
                trim_native_heap()  # see headwater.malloc_policy
        except Exception:
            log.exception("housekeeping failed; will retry")


def _time_based_flush(config: BrokerConfig, logs: LogDirectory) -> bool:
    if config.log.flush_interval_ms is not None:
        return True
    return any("flush.ms" in t.configs for t in logs.topics().values())
