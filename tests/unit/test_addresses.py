from __future__ import annotations

import pytest

from headwater.addresses import split_host_port
from headwater.broker.config import parse_host_port


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9093", ("127.0.0.1", 9093)),
        ("PLAINTEXT://broker:9094", ("broker", 9094)),
        ("[::1]:9095", ("::1", 9095)),
        ("broker", ("broker", 9092)),
        (":9096", ("", 9096)),
    ],
)
def test_host_port_forms(text: str, expected: tuple[str, int]) -> None:
    assert split_host_port(text, 9092) == expected


@pytest.mark.parametrize("text", ["h:port", "h:70000", "h:-1"])
def test_bad_ports_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="port"):
        split_host_port(text, 9092)


def test_listener_with_empty_host_binds_every_interface() -> None:
    assert parse_host_port("PLAINTEXT://:9092,SSL://:9093") == ("0.0.0.0", 9092)
