"""The configs of the internal topics ``__consumer_offsets`` and ``__transaction_state``.

Kafka creates both compacted: a group's committed offsets and a
transactional id's producer epoch must last as long as the group or the id
does, not as long as time retention (7 days by default). A data directory
from before Headwater compacted them gets the policy on the next start.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Kafka's: offsets.topic.segment.bytes / transaction.state.log.segment.bytes default 100 MiB
INTERNAL_TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}


def compacted_configs(configs: Mapping[str, str]) -> dict[str, str] | None:
    """An existing internal topic's overrides with ``cleanup.policy=compact`` (an
    upgrade from before Headwater compacted them); None when already compacted."""
    if configs.get("cleanup.policy") == "compact":
        return None
    return {**configs, "cleanup.policy": "compact"}
