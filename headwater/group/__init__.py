"""Consumer groups and committed offsets: Headwater's group coordinator.

pending.py           Pending[T]: an answer the coordinator owes (JoinGroup, SyncGroup, commits)
membership.py        Group, Member, GroupState and the legal state transitions (GroupMetadata)
coordinator.py       GroupCoordinator: the classic rebalance protocol for one offsets partition
group_store.py       GroupStore: a partition's groups and offsets, as records (GroupMetadataManager)
offset_commits.py    OffsetCommits: who may commit or delete offsets (OffsetMetadataManager)
offsets.py           OffsetStore: committed offsets per group
storage.py           the offsets-log record format, StateLog, InMemoryStateLog
replication.py       Replicated: waiting for a write's replication, and Kafka's error mapping
placement.py         which __consumer_offsets partition holds a group (Java String.hashCode)
shards.py            CoordinatorShards: the offsets partitions loaded here, routing by group
results.py           the coordinator's answers (JoinResult, SyncResult, ...)
apis.py              GroupApis: kio requests in, response dicts out
service.py           GroupService: the asyncio adapter (awaits, timers, loading, replication)
describe.py          reports for `headwater groups list|describe`

KIP-848 consumer groups (group.protocol=consumer), beside the classic ones:
consumer_group.py                ConsumerGroup, ConsumerGroupMember: epochs, target, who holds what
consumer_group_reconciliation.py a member's next step to its target, revocation first
consumer_group_coordinator.py    ConsumerGroupHeartbeat's rules, timers, target computation
consumer_group_records.py        the group's records in __consumer_offsets (Kafka's formats)
consumer_group_replay.py         rebuilding consumer groups when a partition loads
consumer_group_apis.py           ConsumerGroupHeartbeat and ConsumerGroupDescribe on the wire
topics_image.py                  the topics the assignors see (a dict, or the cluster view)
assignors/                       the server-side assignors, uniform and range
"""
