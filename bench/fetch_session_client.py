"""A blocking Kafka wire client with the client half of KIP-227, for benchmarks.

The benchmark needs what no stock Python client gives: exact request and
response sizes on the wire, and control over when a fetch is sessionless,
full or incremental. Headwater's codecs do the encoding, so this file holds
only the session bookkeeping a consumer keeps (KIP-227's client side):
which partitions the session already knows at which offsets, and the
session id and epoch to send next.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from headwater.protocol.apis import ApiKey, is_flexible
from headwater.protocol.fetch_codec import decode_fetch_response, encode_fetch_request
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionFetch,
)
from headwater.protocol.messages import build_request, decode_response, encode_request
from headwater.protocol.produce_codec import (
    ProducePartitionData,
    ProduceRequestData,
    ProduceTopicData,
    decode_produce_response,
    encode_produce_request,
)
from headwater.records.batch import iter_batch_headers

FETCH_VERSION = 12  # the last version with topic names; kafka-python's ceiling
PRODUCE_VERSION = 9
CREATE_TOPICS_VERSION = 7
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Exchange:
    """One request and its response, with their sizes on the wire (length prefix included)."""

    body: bytes
    request_bytes: int
    response_bytes: int


class WireClient:
    """One blocking connection; one request in flight at a time."""

    def __init__(self, bootstrap: str, client_id: str = "bench") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=120)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client_id = client_id.encode()
        self._correlation = 0

    def close(self) -> None:
        self._sock.close()

    def call(self, api_key: int, version: int, body: bytes) -> Exchange:
        self._correlation += 1
        head = struct.pack(">hhih", api_key, version, self._correlation, len(self._client_id))
        head += self._client_id
        flexible = is_flexible(api_key, version)
        if flexible:
            head += b"\x00"  # request header v2: no tagged fields
        frame = head + body
        self._sock.sendall(_SIZE.pack(len(frame)) + frame)
        size = _SIZE.unpack(self._read_exact(4))[0]
        response = self._read_exact(size)
        if _SIZE.unpack_from(response, 0)[0] != self._correlation:
            raise ConnectionError("response out of order")
        skip = 5 if flexible and api_key != ApiKey.API_VERSIONS else 4
        return Exchange(response[skip:], 4 + len(frame), 4 + size)

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("closed by broker")
            got += k
        return bytes(buf)

    # -- the few APIs a benchmark needs ------------------------------------------------

    def create_topic(self, name: str, partitions: int, timeout_ms: int = 120_000) -> None:
        request = build_request(
            ApiKey.CREATE_TOPICS,
            CREATE_TOPICS_VERSION,
            {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                "timeout": timeout_ms,
            },
        )
        reply = self.call(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, encode_request(request))
        response: Any = decode_response(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, reply.body)
        for topic in response.topics:
            if int(topic.error_code) != 0:
                raise RuntimeError(f"CreateTopics {name}: {topic.error_code} {topic.error_message}")

    def produce(self, topic: str, partitions: Iterable[int], batch: bytes) -> None:
        """The same record batch to each partition, in one request (acks=1)."""
        view = memoryview(batch)
        data = ProduceRequestData(
            acks=1,
            timeout_ms=30_000,
            topics=[ProduceTopicData(topic, [ProducePartitionData(p, view) for p in partitions])],
        )
        body = encode_produce_request(data, PRODUCE_VERSION)
        reply = self.call(ApiKey.PRODUCE, PRODUCE_VERSION, body)
        response = decode_produce_response(reply.body, 0, PRODUCE_VERSION)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code:
                    raise RuntimeError(f"produce to {t.name}-{p.index}: error {p.error_code}")

    def api_versions(self) -> None:
        """The cheapest round trip: used to make the broker drop its previous response."""
        self.call(ApiKey.API_VERSIONS, 0, b"")

    def fetch(self, request: FetchRequestData) -> tuple[FetchResponseData, Exchange]:
        reply = self.call(
            ApiKey.FETCH, request.version, encode_fetch_request(request, request.version)
        )
        return decode_fetch_response(reply.body, 0, request.version), reply


@dataclass
class TopicFetcher:
    """A consumer's fetch state for every partition of one topic, with or without a session.

    ``use_session=False`` sends sessionless fetches (session 0, epoch -1):
    every request lists every partition, every response answers for each.
    With a session, the first request is full (epoch 0) and creates it; later
    ones are incremental and list only partitions whose fetch offset moved
    since the session last heard of it, as KIP-227's FetchSessionHandler does.
    """

    topic: str
    partitions: int
    use_session: bool
    max_wait_ms: int = 0
    partition_max_bytes: int = 1 << 20
    max_bytes: int = 50 << 20
    offsets: list[int] = field(init=False)
    session_id: int = field(init=False, default=0)
    epoch: int = field(init=False, default=0)
    _moved: set[int] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.offsets = [0] * self.partitions

    def _partition(self, p: int) -> PartitionFetch:
        return PartitionFetch(
            ZERO_UUID, self.topic, p, self.offsets[p], -1, self.partition_max_bytes
        )

    def next_request(self) -> FetchRequestData:
        incremental = self.use_session and self.session_id != 0
        if incremental:
            partitions = [self._partition(p) for p in sorted(self._moved)]
            session_id, epoch = self.session_id, self.epoch
        else:
            partitions = [self._partition(p) for p in range(self.partitions)]
            session_id, epoch = 0, (0 if self.use_session else -1)
        return FetchRequestData(
            version=FETCH_VERSION,
            max_wait_ms=self.max_wait_ms,
            min_bytes=0,
            max_bytes=self.max_bytes,
            session_id=session_id,
            session_epoch=epoch,
            partitions=partitions,
        )

    def handle_response(self, request: FetchRequestData, response: FetchResponseData) -> int:
        """Advance offsets past the records received; return how many partitions had records."""
        if response.error_code:
            raise RuntimeError(f"fetch error {response.error_code} (session {self.session_id})")
        if self.use_session:
            if request.session_epoch == 0:
                if response.session_id == 0:
                    raise RuntimeError("the broker declined to create a fetch session")
                self.session_id = response.session_id
            self.epoch = self.epoch % 0x7FFFFFFF + 1  # epochs wrap to 1, never 0
            self._moved.clear()
        with_data = 0
        for part in response.partitions:
            if part.error_code:
                raise RuntimeError(f"{self.topic}-{part.partition}: error {part.error_code}")
            records = part.records
            if not isinstance(records, bytes) or not records:  # decoded responses hold bytes
                continue
            end = None
            for header in iter_batch_headers(records):
                end = header.next_offset
            if end is not None and end != self.offsets[part.partition]:
                self.offsets[part.partition] = end
                self._moved.add(part.partition)
                with_data += 1
        return with_data
