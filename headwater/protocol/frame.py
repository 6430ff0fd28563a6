"""Splitting a TCP byte stream into Kafka frames (int32 length + payload).

Sans-I/O: the connection feeds whatever ``recv`` returned and gets back the
frames completed so far. Frames that arrive whole inside one chunk are
returned as views of that chunk (no copy); a frame that spans chunks is
assembled into one buffer that grows as its bytes arrive (amortised, so a
100 MB produce arriving in 64 KB pieces is not copied once per piece). The
buffer is never sized from the declared length: a peer that declares
100 MiB and sends 14 bytes costs 14 bytes, not 100 MiB.
"""

from __future__ import annotations

from headwater.protocol.errors import FrameTooLargeError, InvalidFrameError
from headwater.protocol.wire import INT32

# The smallest request: api_key, api_version, correlation_id (a v1 header
# without client id bytes). A client reading responses passes 4.
MIN_REQUEST_FRAME_BYTES = 8


class FrameDecoder:
    """Accumulates stream bytes and yields complete frames, length prefix stripped.

    Returned views are read-only. They stay valid for as long as the caller
    keeps them; the decoder never writes into a buffer it has handed out.
    After an exception the stream cannot be resynchronised: close it.
    """

    __slots__ = (
        "_body",
        "_expected",
        "_filled",
        "_length_bytes",
        "max_frame_bytes",
        "min_frame_bytes",
        "preallocate",
    )

    def __init__(
        self,
        max_frame_bytes: int,
        min_frame_bytes: int = MIN_REQUEST_FRAME_BYTES,
        *,
        preallocate: bool = False,
    ) -> None:
        """``preallocate``: allocate a frame at its declared size when it starts
        (a client reading a broker's responses); a broker lets a frame's buffer
        grow with what actually arrives, so a peer's claim costs it nothing."""
        self.max_frame_bytes = max_frame_bytes
        self.min_frame_bytes = min_frame_bytes
        self.preallocate = preallocate
        self._length_bytes = bytearray()  # a length prefix split across chunks
        self._body: bytearray | None = None  # the frame being assembled (full size if preallocated)
        self._expected = 0  # its declared length
        self._filled = 0  # how much of it has arrived

    @property
    def buffered(self) -> int:
        """Bytes received that belong to a frame not yet complete."""
        return len(self._length_bytes) + (self._filled if self._body is not None else 0)

    @property
    def pending_length(self) -> int | None:
        """The declared length of the frame being assembled; None between frames."""
        return self._expected if self._body is not None else None

    def receive_buffer(self) -> memoryview | None:
        """Where the next bytes may be received directly, or None (``feed`` a chunk).

        The unfilled rest of a preallocated frame: what the peer sends next
        belongs to it, up to its end. Follow a receive into it with
        :meth:`received`.
        """
        body = self._body
        if body is None or not self.preallocate:
            return None
        return memoryview(body)[self._filled : self._expected]

    def received(self, n: int) -> list[memoryview]:
        """``n`` bytes were written at the start of :meth:`receive_buffer`'s view."""
        body = self._body
        assert body is not None and 0 < n <= self._expected - self._filled
        self._filled += n
        if self._filled < self._expected:
            return []
        self._body = None
        return [memoryview(body).toreadonly()]

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Take the next chunk of the stream; return the frames it completes."""
        if not isinstance(data, bytes):
            # Views into ``data`` outlive this call; a caller's reusable
            # receive buffer would be overwritten under them.
            data = bytes(data)
        view = memoryview(data)
        end = len(view)
        pos = 0
        frames: list[memoryview] = []
        while pos < end:
            body = self._body
            if body is not None:
                filled = self._filled
                take = min(self._expected - filled, end - pos)
                if len(body) == filled:
                    body += view[pos : pos + take]
                else:
                    body[filled : filled + take] = view[pos : pos + take]
                pos += take
                self._filled = filled = filled + take
                if filled == self._expected:
                    frames.append(memoryview(body).toreadonly())
                    self._body = None
                continue
            if self._length_bytes or end - pos < 4:
                take = min(4 - len(self._length_bytes), end - pos)
                self._length_bytes += view[pos : pos + take]
                pos += take
                if len(self._length_bytes) < 4:
                    break
                length = INT32.unpack(self._length_bytes)[0]
                self._length_bytes.clear()
            else:
                length = INT32.unpack_from(view, pos)[0]
                pos += 4
            self._check(length)
            if end - pos >= length:
                frames.append(view[pos : pos + length])
                pos += length
            else:
                # Preallocated: filled in place, a 1 MB fetch response arriving
                # in 64 KB chunks is not copied again at each reallocation.
                self._body = bytearray(length) if self.preallocate else bytearray()
                self._expected = length
                self._filled = 0
        return frames

    def _check(self, length: int) -> None:
        if length > self.max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {length} bytes exceeds the limit of {self.max_frame_bytes}"
            )
        if length < self.min_frame_bytes:
            raise InvalidFrameError(f"frame of {length} bytes is shorter than any message")


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` (header + body) with its int32 length."""
    return INT32.pack(len(payload)) + payload
