"""``HOST:PORT`` parsing shared by the broker's listeners and the client's bootstrap list."""

from __future__ import annotations


def split_host_port(item: str, default_port: int) -> tuple[str, int]:
    """Accept ``HOST:PORT``, ``SCHEME://HOST:PORT``, ``[::1]:PORT`` or a bare host.

    Raises ValueError for a port that is not a number in 0..65535.
    """
    value = item.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            host, port = value, ""
    try:
        number = int(port) if port else default_port
    except ValueError:
        raise ValueError(f"bad port in {item!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port out of range in {item!r}")
    return host, number
