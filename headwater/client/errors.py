"""Errors the client raises: one Kafka error type named after the wire code.

Callers (the CLI, Spark tasks, scripts) want the code to branch on and
Kafka's own name for it in the message, so that ``TOPIC_ALREADY_EXISTS``
reads the same here as in any Kafka tool. The names come from kio's
``ErrorCode`` table rather than a copy of Kafka's ``Errors.java``.
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode

_NAMES: Final[dict[int, str]] = {int(code): code.name.upper() for code in ErrorCode}

# Kafka's RetriableException subclasses (Errors.java): the client may retry
# these after refreshing metadata or reconnecting. kio does not carry this
# flag, so the short list is kept here.
RETRIABLE_CODES: Final[frozenset[int]] = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        7,  # REQUEST_TIMED_OUT
        13,  # NETWORK_EXCEPTION
        14,  # COORDINATOR_LOAD_IN_PROGRESS
        15,  # COORDINATOR_NOT_AVAILABLE
        16,  # NOT_COORDINATOR
        19,  # NOT_ENOUGH_REPLICAS
        20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        78,  # OFFSET_NOT_AVAILABLE
        89,  # THROTTLING_QUOTA_EXCEEDED
    }
)

NETWORK_EXCEPTION: Final = 13
REQUEST_TIMED_OUT: Final = 7
UNSUPPORTED_VERSION: Final = 35


def error_name(code: int) -> str:
    """Kafka's name for a wire error code, e.g. 70 -> FETCH_SESSION_ID_NOT_FOUND."""
    return _NAMES.get(code, f"UNKNOWN_ERROR_CODE_{code}")


class KafkaError(Exception):
    """A Kafka error code from the broker (or the client's own stand-in for one).

    ``str(err)`` is one line, ``NAME (code): message``, which the CLI prints
    as is.
    """

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.message = message or ""
        text = f"{self.name} ({code})"
        super().__init__(f"{text}: {self.message}" if self.message else text)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE_CODES

    def __reduce__(self) -> tuple[type[KafkaError], tuple[int, str]]:
        # Spark pickles exceptions across processes; keep (code, message).
        return (type(self), (self.code, self.message))


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or closed; retriable (NETWORK_EXCEPTION)."""

    def __init__(self, message: str) -> None:
        super().__init__(NETWORK_EXCEPTION, message)

    def __reduce__(self) -> tuple[type[KafkaError], tuple[int, str]]:
        return (KafkaError, (self.code, self.message))


class KafkaTimeoutError(KafkaError):
    """A request or an operation did not finish in time (REQUEST_TIMED_OUT)."""

    def __init__(self, message: str) -> None:
        super().__init__(REQUEST_TIMED_OUT, message)

    def __reduce__(self) -> tuple[type[KafkaError], tuple[int, str]]:
        return (KafkaError, (self.code, self.message))


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise ``KafkaError`` unless ``code`` is 0 (NONE)."""
    if code:
        raise KafkaError(code, message)
