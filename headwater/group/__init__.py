"""Consumer groups and committed offsets: Headwater's group coordinator.

pending.py           Pending[T]: an answer the coordinator owes (JoinGroup, SyncGroup)
membership.py        Group, Member, GroupState and the legal state transitions
coordinator.py       GroupCoordinator: the classic rebalance protocol, sans-I/O
offsets.py           OffsetStore: committed offsets per group
storage.py           the offsets-log record format, OffsetsLog, InMemoryOffsetsLog
consumer_protocol.py decoding "consumer" subscriptions and assignments
results.py           the coordinator's answers (JoinResult, SyncResult, ...)
apis.py              GroupApis: kio requests in, response dicts out
service.py           GroupService: the asyncio adapter (awaits, timer task)
describe.py          reports for `headwater groups list|describe`
"""
