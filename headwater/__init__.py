"""Headwater: a Kafka-compatible log broker whose fetch path scales with what changed."""

__version__ = "0.1.0"
