"""Exceptions the codec raises, so the server can tell a bad peer from a bug.

Every one of them means "this connection sent something we cannot parse";
the server logs it and closes the connection. Kafka error *codes* that go
back on the wire are kio's ``kio.schema.errors.ErrorCode``.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class: the bytes on a connection do not follow the Kafka protocol."""


class InvalidFrameError(ProtocolError):
    """A frame's declared length is impossible (negative or shorter than any header)."""


class FrameTooLargeError(InvalidFrameError):
    """A frame's declared length exceeds the configured maximum (socket.request.max.bytes)."""


class InvalidRequestError(ProtocolError):
    """A request header or body is truncated or malformed."""


class InvalidResponseError(ProtocolError):
    """A response body is truncated or malformed (client side)."""


class UnsupportedVersionError(ProtocolError):
    """The codec has no schema for this API key and version."""
