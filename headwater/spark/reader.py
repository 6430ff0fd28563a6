"""The batch and streaming readers: plan offset ranges on the driver, read them in tasks.

Where each method runs matters (pyspark 4.3):

* ``DataSourceReader.partitions`` runs in a planning worker, and the reader
  object is pickled to the executors *before* it is called; so the reader
  keeps nothing but options, and ``read`` works from its ``RangeTask`` only.
* ``DataSourceStreamReader`` methods other than ``read`` run in one
  long-lived Python process per query run on the driver, which may keep
  state between calls (the ``availableNow`` target) and pooled clients.
  ``commit`` arrives late and ``stop`` is not called when a query stops, so
  neither is relied on.

Offsets leave ``initialOffset`` / ``latestOffset`` in the sorted JSON form
of ``headwater.spark.offsets``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from headwater.spark.clients import ClientConfig
from headwater.spark.log_bounds import LogBounds, fetch_log_bounds
from headwater.spark.offsets import (
    OffsetJson,
    OffsetMap,
    offsets_from_json,
    offsets_to_json,
    resolve_offset_spec,
)
from headwater.spark.options import SourceOptions
from headwater.spark.planning import (
    OffsetRange,
    available_now_offsets,
    offset_ranges,
    rate_limit,
    split_ranges,
)
from headwater.spark.task import RangeTask, read_range

log = logging.getLogger(__name__)


def client_config(options: SourceOptions) -> ClientConfig:
    settings = dict(options.client_settings)
    settings["isolation.level"] = options.isolation_level
    return ClientConfig.of(options.bootstrap, settings)


def log_bounds(options: SourceOptions) -> LogBounds:
    return fetch_log_bounds(
        client_config(options),
        options.subscription,
        retries=options.fetch_offset_retries,
        retry_interval_s=options.fetch_offset_retry_interval_ms / 1000,
    )


def range_tasks(options: SourceOptions, ranges: Sequence[OffsetRange]) -> list[RangeTask]:
    """One picklable task per range, split further for ``minPartitions``."""
    config = client_config(options)
    return [
        RangeTask(
            client=config,
            range=r,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_ms=options.poll_timeout_ms,
        )
        for r in split_ranges(ranges, options.min_partitions)
    ]


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangeTask):
        # Spark runs one placeholder ``InputPartition(None)`` when a batch
        # read plans no task at all (nothing between the bounds).
        return iter(())
    return read_range(partition)


class HeadwaterBatchReader(DataSourceReader):  # type: ignore[misc]
    """``spark.read.format("headwater")``: the offsets between two bounds, read once."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        bounds = log_bounds(self.options)
        parts = bounds.partitions
        start = resolve_offset_spec(
            self.options.starting, parts, bounds.earliest, bounds.latest, "startingOffsets"
        )
        end = resolve_offset_spec(
            self.options.ending, parts, bounds.earliest, bounds.latest, "endingOffsets"
        )
        for tp in parts:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is before startingOffsets "
                    f"{start[tp]}"
                )
            if end[tp] > bounds.latest[tp]:
                raise ValueError(
                    f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is past the log end "
                    f"{bounds.latest[tp]}"
                )
        ranges = offset_ranges(start, end, bounds.earliest, self.options.fail_on_data_loss)
        return range_tasks(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class HeadwaterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("headwater")``: micro-batches of offset ranges.

    Admission control: ``getDefaultReadLimit`` turns ``maxOffsetsPerTrigger``
    into ``ReadMaxRows``, which Spark passes back to ``latestOffset`` on every
    trigger, ``availableNow`` included (Spark passes ``ReadAllAvailable``
    only where a trigger must ignore the limit).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now_target: OffsetMap | None = None
        self._last_latest: OffsetMap | None = None
        self._planning_bounds: LogBounds | None = None

    # -- offsets ---------------------------------------------------------------

    def _bounds(self) -> LogBounds:
        return log_bounds(self.options)

    def initialOffset(self) -> OffsetJson:
        bounds = self._bounds()
        start = resolve_offset_spec(
            self.options.starting,
            bounds.partitions,
            bounds.earliest,
            bounds.latest,
            "startingOffsets",
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end of an ``availableNow`` run: nothing produced later is read."""
        self._available_now_target = dict(self._bounds().latest)

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        bounds = self._bounds()
        self._last_latest = dict(bounds.latest)
        self._planning_bounds = bounds
        begin = offsets_from_json(start)
        latest: OffsetMap = dict(bounds.latest)
        if self._available_now_target is not None:
            latest = available_now_offsets(latest, self._available_now_target, begin)
        # New partitions count from their first offset (planning reads them
        # from there too); deleted ones drop out here and are reported by
        # ``partitions``.
        from_offsets = {tp: begin.get(tp, bounds.earliest.get(tp, 0)) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(from_offsets, latest, limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            raise TypeError(f"read limit {limit!r} is not supported by the headwater source")
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetJson | None:
        """The log ends seen by the last ``latestOffset`` (no extra round trip)."""
        return None if self._last_latest is None else offsets_to_json(self._last_latest)

    # -- planning and reading ----------------------------------------------------

    def partitions(self, start: OffsetJson, end: OffsetJson) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        earliest = self._earliest(set(until))
        ranges = offset_ranges(begin, until, earliest, self.options.fail_on_data_loss)
        return range_tasks(self.options, ranges)

    def _earliest(self, wanted: set[tuple[str, int]]) -> Mapping[tuple[str, int], int]:
        """Log starts for planning: those ``latestOffset`` just saw, else fresh ones.

        Spark plans a micro-batch right after asking for its end offset, so
        the snapshot taken there is reused once (one Metadata and two
        ListOffsets round trips fewer per micro-batch). Offsets retention
        deletes after it are still caught, by the task that finds them gone
        (``task._skip_lost_offsets``, same ``failOnDataLoss`` policy).
        """
        if not wanted:
            return {}
        bounds, self._planning_bounds = self._planning_bounds, None
        if bounds is None or not wanted <= bounds.earliest.keys():
            bounds = self._bounds()
        return {tp: off for tp, off in bounds.earliest.items() if tp in wanted}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: OffsetJson) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in the broker."""
