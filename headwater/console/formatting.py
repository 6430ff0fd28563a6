"""How values read on a page: record bytes as text, JSON or hex, sizes, times, pages.

Pure functions, so every rule here is a unit test without a socket.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

T = TypeVar("T")

Format = Literal["text", "json", "hex"]
FORMATS: Final[tuple[Format, ...]] = ("text", "json", "hex")
#: Characters of a value shown in a list before "show all" (the full value is one click away).
TRUNCATE_AT: Final = 300
#: A value larger than this is never rendered whole on a page; "show all" offers a download.
MAX_RENDERED_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Rendered:
    """A value as shown: its text, whether it was cut, and the format actually used."""

    text: str
    truncated: bool
    format: Format
    size: int  # bytes of the raw value; -1 for null


def render_bytes(
    value: bytes | None, fmt: Format = "text", limit: int | None = TRUNCATE_AT
) -> Rendered:
    """``value`` as UTF-8 text, pretty JSON, or hex; cut to ``limit`` characters.

    JSON that does not parse (or text that is not UTF-8) falls back to the
    next readable form rather than failing: text for bad JSON, hex for binary.
    """
    if value is None:
        return Rendered("null", False, fmt, -1)
    text: str
    used: Format = fmt
    if fmt == "hex":
        text = value.hex(" ")
    else:
        try:
            decoded = value.decode("utf-8")
        except UnicodeDecodeError:
            text, used = value.hex(" "), "hex"
        else:
            text = decoded
            if fmt == "json":
                try:
                    text = json.dumps(json.loads(decoded), indent=2, ensure_ascii=False)
                except ValueError:
                    used = "text"
    if limit is not None and len(text) > limit:
        return Rendered(text[:limit], True, used, len(value))
    return Rendered(text, False, used, len(value))


def parse_format(value: str | None) -> Format:
    return value if value in FORMATS else "text"  # type: ignore[return-value]


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'; None or negative -> '-' (unknown)."""
    if n is None or n < 0:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def human_rate(n: float | None, unit: str = "B/s") -> str:
    if n is None or math.isnan(n):
        return "-"
    if unit == "B/s":
        return human_bytes(n) + "/s"
    return f"{n:,.1f} {unit}"


def human_ms(ms: int | float | None) -> str:
    """A duration: '850 ms', '12.0 s', '3.5 min', '7.0 d'; negative/None -> '-'."""
    if ms is None or ms < 0:
        return "-"
    if ms < 1000:
        return f"{int(ms)} ms"
    s = ms / 1000
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


def retention_text(value: str | None) -> str:
    """retention.ms as a person reads it; -1 is forever."""
    if value is None:
        return "-"
    try:
        ms = int(value)
    except ValueError:
        return value
    return "forever" if ms < 0 else human_ms(ms)


def timestamp_text(ms: int) -> str:
    """Epoch ms as an ISO time in UTC (what the wire carries; no local-zone guessing)."""
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_timestamp(text: str) -> int:
    """An ISO 8601 time (UTC unless it names a zone) or epoch ms, as epoch ms."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use 2026-01-01T12:00:00 (UTC) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a long list, and what the pager needs to link the others."""

    items: Sequence[T]
    number: int  # 1-based, clamped to the pages that exist
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def has_prev(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_index(self) -> int:
        """1-based index of the first item shown (0 when empty)."""
        return 0 if self.total == 0 else (self.number - 1) * self.size + 1

    @property
    def last_index(self) -> int:
        return min(self.number * self.size, self.total)


def paginate(items: Sequence[T], number: int, size: int) -> Page[T]:
    """Page ``number`` (1-based; out-of-range numbers clamp) of ``items``."""
    size = max(1, size)
    pages = max(1, math.ceil(len(items) / size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    return Page(items[start : start + size], number, size, len(items))


def parse_int(
    value: str | None, default: int, low: int | None = None, high: int | None = None
) -> int:
    """A query parameter as an int within bounds; junk reads as the default."""
    try:
        out = int(value) if value not in (None, "") else default  # type: ignore[arg-type]
    except ValueError:
        out = default
    if low is not None:
        out = max(low, out)
    if high is not None:
        out = min(high, out)
    return out


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    """``key=value`` lines (the produce form's headers) as record headers."""
    out: list[tuple[str, bytes]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header line {number}: expected KEY=VALUE, got {line!r}")
        out.append((key.strip(), value.strip().encode()))
    return out


def parse_configs(text: str) -> dict[str, str]:
    """``key=value`` lines or comma-separated pairs (topic configs in a form)."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
