"""Errors the security state machines raise; the broker maps them to Kafka codes."""

from __future__ import annotations


class SaslAuthenticationError(Exception):
    """Wrong credentials or a malformed exchange: SASL_AUTHENTICATION_FAILED (58).

    The message goes back to the client in ``error_message``; it must not tell
    an attacker whether the user exists.
    """


class IllegalSaslStateError(Exception):
    """A SASL request out of order: ILLEGAL_SASL_STATE (34)."""


class UnsupportedSaslMechanismError(Exception):
    """A mechanism that is not enabled: UNSUPPORTED_SASL_MECHANISM (33)."""
