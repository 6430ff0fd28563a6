"""The configs of the internal topics ``__consumer_offsets`` and ``__transaction_state``.

Kafka creates both compacted: a group's committed offsets and a
transactional id's producer epoch must last as long as the group or the id
does, not as long as time retention (7 days by default). A data directory
from before Headwater compacted them gets the policy on the next start.
"""

from __future__ import annotations

import logging

from headwater.log.log_directory import LogDirectory

log = logging.getLogger(__name__)

#: Kafka's: offsets.topic.segment.bytes / transaction.state.log.segment.bytes default 100 MiB
INTERNAL_TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}


def ensure_compacted(logs: LogDirectory, topic: str) -> None:
    """Switch an existing internal topic to ``cleanup.policy=compact`` (an upgrade)."""
    info = logs.topics().get(topic)
    if info is None or info.configs.get("cleanup.policy") == "compact":
        return
    configs = dict(info.configs)
    configs["cleanup.policy"] = "compact"
    logs.alter_topic_configs(topic, configs)
    log.info(
        "%s switched to cleanup.policy=compact (was %s)",
        topic,
        info.configs.get("cleanup.policy", "the broker default"),
    )
