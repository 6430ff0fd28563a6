"""What the group and transaction coordinators share about their state topic:
Kafka's ``coordinator-common`` runtime, once for both.

A coordinator's state lives in the partitions of an internal topic
(``__consumer_offsets``, ``__transaction_state``). Whichever broker leads a
partition coordinates its keys: it loads the partition's state when it gains
the leadership, writes through the replicated log (an answer waits for the
ISR), and unloads the state when it loses the leadership. The topic is
created on first need, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.replica_manager import ReplicaManager
from headwater.coordinator.partition_state_log import PartitionStateLog
from headwater.log.log_directory import LogDirectory

#: Loads partition P's state from its log; the int is P's leader epoch.
Load = Callable[[int, PartitionStateLog, int], Awaitable[None]]
Unload = Callable[[int], None]


class StateTopicRuntime:
    """One state topic seen from this broker: where each partition's coordinator is,
    the wait for a write's replication, and loading on leadership."""

    def __init__(
        self,
        topic: str,
        default_partitions: int,
        view: ClusterView,
        replicas: ReplicaManager,
        logs: LogDirectory,
        *,
        create: Callable[[int], None],
        write_timeout_s: float,
        spawn: Callable[[Awaitable[None], str], None],
    ) -> None:
        """``create(num_partitions)`` starts creating the topic (the caller picks the
        replication factor and configs); ``spawn`` runs a load on the event loop."""
        self.topic = topic
        self._view = view
        self._replicas = replicas
        self._logs = logs
        self._create = create
        self._write_timeout_s = write_timeout_s
        self._spawn = spawn
        existing = view.topics.get(topic)
        #: A topic that exists keeps its partition count: moving keys between
        #: partitions would lose them.
        self.num_partitions = len(existing.replicas) if existing else default_partitions

    def coordinator_of(self, partition: int) -> tuple[int, str, int] | None:
        """(broker id, host, port) of the partition's leader; None while the topic is
        being created, the leader is unknown, or this broker's view may be stale."""
        view = self._view
        if self.topic not in view.topics:
            self._create(self.num_partitions)
            return None
        state = view.partition_states.get((self.topic, partition))
        if state is not None and self._replicas.leads_per_stale_view(state.leader):
            return None
        broker = view.brokers.get(state.leader) if state is not None else None
        return None if broker is None else (broker.broker_id, broker.host, broker.port)

    def wait_replicated(self, partition: int, offset: int) -> Awaitable[int]:
        """Until the partition's ISR has everything before ``offset``: an error code."""
        return self._replicas.wait_replicated(self.topic, partition, offset, self._write_timeout_s)

    def follow_leadership(self, load: Load, unload: Unload, task_name: str) -> None:
        """Load a partition's state when this broker gains its leadership, unload it
        when the leadership goes."""

        def on_leadership(topic: str, partition: int, is_leader: bool) -> None:
            if topic != self.topic:
                return
            if not is_leader:
                unload(partition)
                return
            state = self._view.partition_states.get((topic, partition))
            epoch = state.leader_epoch if state is not None else 0
            state_log = PartitionStateLog(self._logs.log(topic, partition))
            self._spawn(load(partition, state_log, epoch), f"{task_name}-{partition}")

        self._replicas.leadership_listeners.append(on_leadership)
