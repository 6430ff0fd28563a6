"""The one vocabulary of Kafka error codes: kio's ``ErrorCode`` (an ``IntEnum``).

Every layer names a wire error as ``ErrorCode.not_leader_or_follower``
rather than a bare ``6`` or a module-local constant, so a code has one
definition and a reader finds every use by name. The members are ints, so
they encode and compare as the wire's int16 does. Exceptions that carry a
code (``records.errors.KafkaApiError``) and the client's public
``KafkaError`` keep their own types but take their numbers from here.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
