"""Request and response headers, including the ApiVersions exceptions.

The header version follows the *request* version: flexible versions use
request header v2 (tagged fields after the client id) and response header
v1 (tagged fields after the correlation id). ApiVersions breaks the rule on
the way back: its response header is always v0, because a client that sent
a version the broker does not know must still be able to read the answer.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from headwater.protocol.apis import SUPPORTED, ApiKey, is_flexible
from headwater.protocol.error_codes import ErrorCode
from headwater.protocol.errors import InvalidRequestError, InvalidResponseError
from headwater.protocol.frame import encode_frame
from headwater.protocol.wire import EMPTY_TAGS, INT16, INT32, skip_tagged_fields

_FIXED = INT16.size * 2 + INT32.size  # api_key, api_version, correlation_id
_FIXED_FIELDS = struct.Struct(">hhih")  # the three, then client_id's length: one unpack


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def flexible(self) -> bool:
        return is_flexible(self.api_key, self.api_version)


def parse_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Read the header of a request frame; return it and where the body starts.

    Unknown API keys and unsupported versions still yield a header (the
    server must answer or close by correlation id); only bytes that cannot be
    a header raise ``InvalidRequestError``. Unknown keys are read as v1.
    """
    try:
        # client_id stays a non-compact nullable string even in header v2.
        api_key, api_version, correlation_id, length = _FIXED_FIELDS.unpack_from(frame, 0)
        pos = _FIXED + 2
        client_id: str | None = None
        if length >= 0:
            if pos + length > len(frame):
                raise ValueError("client id runs past the end of the frame")
            client_id = str(frame[pos : pos + length], "utf-8", "replace")
            pos += length
        if is_flexible(api_key, api_version):
            pos = skip_tagged_fields(frame, pos)
    except (struct.error, ValueError, IndexError) as exc:
        raise InvalidRequestError(f"unparseable request header: {exc}") from exc
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def encode_request_header(header: RequestHeader) -> bytes:
    """Client side: v2 for flexible request versions, else v1."""
    out = INT16.pack(header.api_key) + INT16.pack(header.api_version)
    out += INT32.pack(header.correlation_id)
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        client_id = header.client_id.encode()
        out += INT16.pack(len(client_id)) + client_id
    if header.flexible:
        out += EMPTY_TAGS
    return out


def response_header_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the response header is v1 (has tagged fields); never for ApiVersions."""
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version)


def encode_response_header(correlation_id: int, api_key: int, api_version: int) -> bytes:
    """Response header v1 for flexible versions, v0 otherwise and always for ApiVersions."""
    head = INT32.pack(correlation_id)
    if response_header_is_flexible(api_key, api_version):
        return head + EMPTY_TAGS
    return head


def parse_response_header(
    frame: bytes | memoryview, api_key: int, api_version: int
) -> tuple[int, int]:
    """Client side: the correlation id of a response frame and where its body starts."""
    try:
        correlation_id = INT32.unpack_from(frame, 0)[0]
        pos = 4
        if response_header_is_flexible(api_key, api_version):
            pos = skip_tagged_fields(frame, pos)
    except (struct.error, ValueError, IndexError) as exc:
        raise InvalidResponseError(f"unparseable response header: {exc}") from exc
    return correlation_id, pos


def api_versions_error_body(supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED) -> bytes:
    """ApiVersions v0 body: UNSUPPORTED_VERSION and the one entry clients need (key 18).

    A client that sent a too-new ApiVersions reads this as v0, finds the range
    Headwater supports for key 18 and retries within it.
    """
    low, high = supported[ApiKey.API_VERSIONS]
    return (
        INT16.pack(ErrorCode.unsupported_version)
        + INT32.pack(1)
        + INT16.pack(ApiKey.API_VERSIONS)
        + INT16.pack(low)
        + INT16.pack(high)
    )


def encode_api_versions_error(
    correlation_id: int, supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED
) -> bytes:
    """The whole response frame (length, v0 header, v0 body) for an unsupported ApiVersions.

    A server that frames bodies itself can use ``api_versions_error_body``
    with ``encode_response_header`` instead: the result is the same bytes.
    """
    return encode_frame(INT32.pack(correlation_id) + api_versions_error_body(supported))
