"""A consumer group's offset reset, planned before anything is committed.

The same rules as ``kafka-consumer-groups --reset-offsets`` (and
``headwater groups reset-offsets``): earliest, latest, an offset, a
timestamp or a shift, each clamped into the log. The plan is a pure
function of the offsets the console fetched, so the preview a person
confirms is exactly what the execute step commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from headwater.client.types import TopicPartition

Strategy = Literal["earliest", "latest", "offset", "timestamp", "shift"]
STRATEGIES: Final[tuple[Strategy, ...]] = ("earliest", "latest", "offset", "timestamp", "shift")


@dataclass(frozen=True, slots=True)
class ResetRow:
    """One partition's move: where the group is, where it goes, and the log around it."""

    tp: TopicPartition
    current: int | None  # None: nothing committed yet
    new: int
    log_start: int
    log_end: int

    @property
    def change(self) -> int | None:
        return None if self.current is None else self.new - self.current


def parse_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown reset {name!r}: one of {', '.join(STRATEGIES)}")
    return name  # type: ignore[return-value]


def plan_reset(
    strategy: Strategy,
    partitions: Sequence[TopicPartition],
    committed: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    *,
    value: int = 0,
    found: Mapping[TopicPartition, int] | None = None,
) -> list[ResetRow]:
    """The new offset of each partition.

    ``value`` is the offset (``offset``) or the shift (``shift``); ``found`` the
    ListOffsets answer for the timestamp (``timestamp``; -1 where no record is
    that late, which lands on the log end). A partition nothing has committed
    shifts from its log start. Every result is clamped to [log start, log end].
    """
    rows: list[ResetRow] = []
    for tp in partitions:
        start, end = starts[tp], ends[tp]
        current = committed.get(tp)
        if strategy == "earliest":
            target = start
        elif strategy == "latest":
            target = end
        elif strategy == "offset":
            target = value
        elif strategy == "timestamp":
            at = (found or {}).get(tp, -1)
            target = at if at >= 0 else end
        else:
            target = (current if current is not None else start) + value
        rows.append(ResetRow(tp, current, min(max(target, start), end), start, end))
    return rows
