"""Partitions of new topics still waiting for their first leader.

CreateTopics answers once the controller has elected a leader for every
partition it created (Kafka's ``DelayedCreatePartitions``). Re-checking every
partition on a timer costs O(partitions) per check: 50,000 partitions polled
every 20 ms kept the event loop busy while the brokers were trying to bring
those very partitions up. This set is fed the cluster view's changes instead,
so the wait costs O(partitions changed) in all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

TopicPartition = tuple[str, int]


class LeadersAwaited:
    """The partitions without a leader yet, among those created by one request."""

    def __init__(
        self,
        partitions: Iterable[TopicPartition],
        has_leader: Callable[[TopicPartition], bool],
    ) -> None:
        self._has_leader = has_leader
        #: Partition checks made so far (the cost a test can count).
        self.checks = 0
        self.pending: set[TopicPartition] = set()
        for key in partitions:
            self.checks += 1
            if not has_leader(key):
                self.pending.add(key)

    def changed(self, keys: Iterable[TopicPartition]) -> bool:
        """Re-check the partitions that changed; True once none is pending."""
        pending = self.pending
        for key in keys:
            if key in pending:
                self.checks += 1
                if self._has_leader(key):
                    pending.discard(key)
        return not pending

    @property
    def done(self) -> bool:
        return not self.pending

    def topics_pending(self) -> set[str]:
        return {topic for topic, _ in self.pending}
