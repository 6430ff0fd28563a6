"""Where a new partition's replicas go (KIP-36; Kafka's ``AdminUtils.assignReplicasToBrokers``).

Pure functions of a broker -> rack map, used at topic creation (CreateTopics,
auto-created and internal topics), when partitions are added, and by the CLI
for client-side plans (``topics create --disable-rack-aware``,
``partitions reassign --generate``). Kafka's three goals:

1. replicas spread evenly over brokers;
2. the other replicas of a broker's partitions spread over the other brokers;
3. when every broker has a rack, a partition's replicas on as many racks as
   there are (a zone outage keeps a copy).

Without racks, leaders go round robin over the brokers sorted by id from a
random start, and followers follow at a shift that grows each time the
partitions wrap around the brokers, so consecutive partitions do not all pair
the same brokers. With racks the same round robin runs over the
*rack-alternated* list (one broker of each rack in turn), and a follower
candidate is skipped while it would repeat a rack (or a broker) that another
unused rack (or broker) could take.

A mix of brokers with and without a rack is an operator's mistake Kafka
refuses (``AdminOperationException``) unless placement is told to ignore
racks: :class:`RackAwareMode`. The error carries ``UNKNOWN_SERVER_ERROR``
because that is what a Kafka broker answers for it (the exception is no
``ApiException``); Kafka's ``ApiError.fromThrowable`` then drops the message,
Headwater sends Kafka's message with it.

The randomness (start and shift) is Kafka's too; ``start_index`` fixes both
(Kafka's ``fixedStartIndex``) and ``rng`` seeds them, for tests and plans.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

from headwater.log.errors import InvalidPartitionsError, KafkaApiError

__all__ = [
    "ENFORCED_MIXED_RACKS_MESSAGE",
    "MIXED_RACKS_MESSAGE",
    "AdminOperationError",
    "InvalidReplicationFactorError",
    "RackAwareMode",
    "assign_replicas",
    "assign_replicas_rack_aware",
    "assign_replicas_rack_unaware",
    "new_partitions_start_index",
    "placement_racks",
    "rack_alternated_brokers",
]

#: ``AdminUtils``' message when some brokers have a rack and others not.
MIXED_RACKS_MESSAGE = "Not all brokers have rack information for replica rack aware assignment."
#: ``AdminZkClient.getBrokerMetadatas(Enforced)``'s (and kafka-reassign-partitions') message.
ENFORCED_MIXED_RACKS_MESSAGE = (
    "Not all brokers have rack information. Add --disable-rack-aware in command line "
    "to make replica assignment without rack information."
)

#: broker id -> rack (None: the broker registered none).
Racks = Mapping[int, "str | None"]


class InvalidReplicationFactorError(KafkaApiError):
    """Replication factor below 1 or above the number of available brokers."""

    kafka_error_code: ClassVar[int] = 38


class AdminOperationError(KafkaApiError):
    """Kafka's ``AdminOperationException``: not an API error, so the broker answers
    UNKNOWN_SERVER_ERROR, as Kafka does, and (unlike ZooKeeper-mode Kafka, which only
    logged it) sends the message along so the client can say why."""

    kafka_error_code: ClassVar[int] = -1


class RackAwareMode(enum.Enum):
    """Kafka's ``RackAwareMode``: what mixed racks mean for a placement."""

    #: Use racks; some brokers without one is an error (topic creation, the tools).
    ENFORCED = "enforced"
    #: Use racks when every broker has one, else place as if none had (auto-creation).
    SAFE = "safe"
    #: Ignore racks (``--disable-rack-aware``).
    DISABLED = "disabled"


def placement_racks(racks: Racks, mode: RackAwareMode) -> dict[int, str | None]:
    """The broker -> rack map a placement should see (``AdminZkClient.getBrokerMetadatas``).

    ENFORCED with some brokers lacking a rack raises :class:`AdminOperationError`;
    SAFE then drops every rack; DISABLED always does.
    """
    with_rack = sum(1 for rack in racks.values() if rack is not None)
    mixed = 0 < with_rack < len(racks)
    if mode is RackAwareMode.ENFORCED and mixed:
        raise AdminOperationError(ENFORCED_MIXED_RACKS_MESSAGE)
    if mode is RackAwareMode.DISABLED or (mode is RackAwareMode.SAFE and mixed):
        return dict.fromkeys(sorted(racks))
    return {b: racks[b] for b in sorted(racks)}


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers taking one from each rack in turn (racks by name, brokers by id).

    ``{0: r1, 1: r3, 2: r3, 3: r2, 4: r2, 5: r1}`` gives ``[0, 3, 1, 5, 4, 2]``: a plain
    round robin over this list puts consecutive replicas on different racks.
    """
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[int] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        out.extend(q[depth] for q in queues if depth < len(q))
    return out


def _check(num_partitions: int, replication_factor: int, brokers: int) -> None:
    if num_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {brokers}."
        )


def _follower_index(first: int, shift: int, nth: int, n: int) -> int:
    """The ``nth`` follower candidate after the leader at ``first`` (never ``first``)."""
    return (first + 1 + (shift + nth) % (n - 1)) % n


def _start(start_index: int | None, n: int, rng: random.Random | None) -> tuple[int, int]:
    """(first leader's index, first shift): both ``start_index``, or two random draws."""
    if start_index is not None and start_index >= 0:
        return start_index, start_index
    rand = rng or random.Random()
    return rand.randrange(n), rand.randrange(n)


def assign_replicas_rack_unaware(
    num_partitions: int,
    replication_factor: int,
    broker_ids: Sequence[int],
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Round robin over ``broker_ids`` in the order given (callers sort them by id).

    Partition p's leader is broker ``(p + start) % n``; its followers sit at a shift
    from it that grows by one each time the partitions wrap around the brokers.
    """
    brokers = list(broker_ids)
    n = len(brokers)
    _check(num_partitions, replication_factor, n)
    first_start, shift = _start(start_index, n, rng)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + first_start) % n
        replicas = [brokers[first]]
        replicas += [
            brokers[_follower_index(first, shift, j, n)] for j in range(replication_factor - 1)
        ]
        out[partition] = replicas
        partition += 1
    return out


def assign_replicas_rack_aware(
    num_partitions: int,
    replication_factor: int,
    racks: Mapping[int, str],
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Round robin over the rack-alternated brokers, each follower on a new rack while
    one is left (then on a new broker while one is left).

    With as many replicas as racks and as many brokers in each rack, leaders and
    replicas come out even over brokers and racks; with fewer replicas than racks
    each rack holds at most one replica of a partition, with more, each at least one.
    """
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    _check(num_partitions, replication_factor, n)
    num_racks = len(set(racks.values()))
    first_start, shift = _start(start_index, n, rng)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + first_start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used_brokers = {leader}
        candidate = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_follower_index(first, shift * num_racks, candidate, n)]
                candidate += 1
                rack = racks[broker]
                new_rack = rack not in used_racks or len(used_racks) == num_racks
                new_broker = broker not in used_brokers or len(used_brokers) == n
                if new_rack and new_broker:
                    replicas.append(broker)
                    used_racks.add(rack)
                    used_brokers.add(broker)
                    break
        out[partition] = replicas
        partition += 1
    return out


def assign_replicas(
    racks: Racks | Iterable[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Kafka's ``assignReplicasToBrokers``: partition -> replicas, the first the leader.

    ``racks`` maps broker id -> rack, or is just broker ids (no racks). Rack-unaware
    when no broker has a rack, rack-aware when all have; a mix raises
    :class:`AdminOperationError` (pass the map through :func:`placement_racks` first
    to apply a :class:`RackAwareMode`). Also raises InvalidPartitionsError and
    :class:`InvalidReplicationFactorError`.
    """
    rack_map: dict[int, str | None] = (
        {int(b): r for b, r in racks.items()}
        if isinstance(racks, Mapping)
        else dict.fromkeys(int(b) for b in racks)
    )
    if all(rack is None for rack in rack_map.values()):
        return assign_replicas_rack_unaware(
            num_partitions, replication_factor, sorted(rack_map),
            start_index=start_index, start_partition=start_partition, rng=rng,
        )  # fmt: skip
    _check(num_partitions, replication_factor, len(rack_map))
    known = {b: r for b, r in rack_map.items() if r is not None}
    if len(known) < len(rack_map):
        raise AdminOperationError(MIXED_RACKS_MESSAGE)
    return assign_replicas_rack_aware(
        num_partitions, replication_factor, known,
        start_index=start_index, start_partition=start_partition, rng=rng,
    )  # fmt: skip


def new_partitions_start_index(broker_ids: Iterable[int], first_replica: int) -> int:
    """Where added partitions continue the round robin (``AdminZkClient``): the index,
    among the brokers sorted by id, of the first id at or above partition 0's leader
    (0 if none)."""
    ordered = sorted(broker_ids)
    return next((i for i, b in enumerate(ordered) if b >= first_replica), 0)
