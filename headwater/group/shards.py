"""The ``__consumer_offsets`` partitions this broker coordinates, one coordinator each.

A group lives in one offsets partition (`group/placement.py`) and only that
partition's leader coordinates it. As in Kafka's CoordinatorRuntime, each
partition this broker leads gets its own `GroupCoordinator` (a shard) rebuilt
from that partition alone, so gaining or losing one partition never touches
the groups of another. A partition is *loading* while its log is replayed
(its groups get COORDINATOR_LOAD_IN_PROGRESS) and *loaded* afterwards; any
other partition's groups get NOT_COORDINATOR.

Sans-I/O: the asyncio service (`group/service.py`) drives loading.
"""

from __future__ import annotations

from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from headwater.coordinator.placement import partition_for
from headwater.group.coordinator import GroupCoordinator
from headwater.group.results import GroupListing


class LoadToken:
    """Identifies one load of a partition, so a load overtaken by an unload is dropped."""

    __slots__ = ("partition",)

    def __init__(self, partition: int) -> None:
        self.partition = partition


class CoordinatorShards:
    """Which offsets partitions are loaded or loading here, and their coordinators."""

    def __init__(self, num_partitions: int) -> None:
        if num_partitions < 1:
            raise ValueError(f"the offsets topic needs at least 1 partition, not {num_partitions}")
        self.num_partitions = num_partitions
        self._loaded: dict[int, GroupCoordinator] = {}
        self._loading: dict[int, LoadToken] = {}

    @classmethod
    def single(cls, coordinator: GroupCoordinator) -> CoordinatorShards:
        """One partition holding every group, already loaded (a broker's old layout, tests)."""
        shards = cls(1)
        shards._loaded[0] = coordinator
        return shards

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _check(self, partition: int) -> None:
        if not 0 <= partition < self.num_partitions:
            raise ValueError(
                f"offsets partition {partition} out of range 0..{self.num_partitions - 1}"
            )

    # ------------------------------------------------------------ load, unload

    def begin_load(self, partition: int) -> LoadToken | None:
        """Mark the partition loading; None if it is loaded or loading already."""
        self._check(partition)
        if partition in self._loaded or partition in self._loading:
            return None
        token = self._loading[partition] = LoadToken(partition)
        return token

    def still_loading(self, token: LoadToken) -> bool:
        return self._loading.get(token.partition) is token

    def finish_load(self, token: LoadToken, coordinator: GroupCoordinator) -> bool:
        """Serve the partition's groups from `coordinator`; False if it was unloaded meanwhile."""
        if not self.still_loading(token):
            return False
        del self._loading[token.partition]
        self._loaded[token.partition] = coordinator
        return True

    def unload(self, partition: int) -> None:
        """Stop coordinating the partition (a load in progress is abandoned)."""
        self._check(partition)
        self._loading.pop(partition, None)
        coordinator = self._loaded.pop(partition, None)
        if coordinator is not None:
            coordinator.unload()

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    @property
    def any_loading(self) -> bool:
        return bool(self._loading)

    # ----------------------------------------------------------------- routing

    def route(self, group_id: str) -> GroupCoordinator | ErrorCode:
        """The group's coordinator, or why this broker cannot answer for it (Kafka's order)."""
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        coordinator = self._loaded.get(partition)
        if coordinator is None:
            return ErrorCode.not_coordinator
        return coordinator

    def coordinator_for(self, group_id: str) -> GroupCoordinator | None:
        found = self.route(group_id)
        return found if isinstance(found, GroupCoordinator) else None

    def coordinator_for_partition(self, partition: int) -> GroupCoordinator | None:
        """The loaded coordinator of an offsets partition, if this broker has it."""
        return self._loaded.get(partition)

    def coordinators(self) -> Iterator[GroupCoordinator]:
        return iter(list(self._loaded.values()))

    def list_groups(
        self, states: list[str] | None, types: list[str] | None = None
    ) -> tuple[ErrorCode, list[GroupListing]]:
        """Every loaded group; COORDINATOR_LOAD_IN_PROGRESS (with what is known) while loading."""
        listed = [g for c in self.coordinators() for g in c.list_groups(states, types)]
        error = ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none
        return error, listed

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> None:
        for coordinator in self.coordinators():
            coordinator.tick(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [c.next_deadline_ms() for c in self.coordinators()]
        return min((d for d in deadlines if d is not None), default=None)
