"""The APIs Headwater speaks, and from which version each one is flexible.

``API_FLEXIBLE_FROM`` comes from the "flexibleVersions" of Kafka's message
schemas; it decides the request header version (v2 with tagged fields for
flexible versions) and the compact encodings. ``SUPPORTED`` is what the
codec can decode and encode, which is the ceiling for what the broker may
advertise in ApiVersions (the broker may advertise less).
"""

from __future__ import annotations

import enum
from typing import Final


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51


#: OffsetDelete's schema says "flexibleVersions": "none"; versions are int16.
NEVER_FLEXIBLE: Final = 1 << 15

# First flexible version per API key ("flexibleVersions": "N+" in Kafka's schemas).
API_FLEXIBLE_FROM: Final[dict[int, int]] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.OFFSET_DELETE: NEVER_FLEXIBLE,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.SASL_HANDSHAKE: NEVER_FLEXIBLE,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
}

# Inclusive (min, max) versions the codec handles. kio 0.6.5 has no schema for
# OffsetCommit v0-1 or OffsetFetch v0 (Kafka 4 removed them), hence 2 and 1.
SUPPORTED: Final[dict[ApiKey, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 10),
    ApiKey.FETCH: (4, 16),
    ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    # Transactions (KIP-98/447). The highest versions (AddPartitionsToTxn v4+,
    # EndTxn v5, TxnOffsetCommit v4+, InitProducerId v5+) belong to KIP-890's
    # server-side verification and transaction version 2, not implemented.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    # kio has no schema for v0 (Kafka 4 removed it); only brokers send this API.
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # KIP-848 (Kafka 4.x serves v0-v1 of both).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    # Kafka serves 0-2 (v0 deprecated); kio has no v0 schema.
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    # SaslHandshake v0 is followed by raw SASL tokens, which Headwater does not
    # frame (it answers v0 with ILLEGAL_SASL_STATE); v0 is still listed because
    # librdkafka only enables SASL when a broker lists it.
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version uses compact encodings and tagged fields.

    Unknown keys count as non-flexible: their header is read as v1, which is
    enough to get the correlation id before the server closes the connection.
    """
    first = API_FLEXIBLE_FROM.get(api_key)
    return first is not None and api_version >= first


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether the codec can handle this API key at this version."""
    try:
        low, high = SUPPORTED[ApiKey(api_key)]
    except ValueError:
        return False
    return low <= api_version <= high
