"""``--listen`` together with ``listeners``: both work, or a one-line conflict."""

from __future__ import annotations

import pytest

from headwater.security.listeners import parse_listeners, with_listen_address


def test_listen_alone_is_the_plaintext_listener() -> None:
    assert with_listen_address(None, "127.0.0.1", 9092) == "PLAINTEXT://127.0.0.1:9092"


def test_other_listeners_are_kept_beside_listen() -> None:
    merged = with_listen_address("SASL_SSL://127.0.0.1:9093", "127.0.0.1", 9092)
    names = [(x.name, x.port) for x in parse_listeners(merged)]
    assert names == [("PLAINTEXT", 9092), ("SASL_SSL", 9093)]


def test_the_same_plaintext_listener_twice_is_fine() -> None:
    configured = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093"
    assert with_listen_address(configured, "127.0.0.1", 9092) == configured


def test_a_different_plaintext_listener_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="conflicts with") as caught:
        with_listen_address("PLAINTEXT://127.0.0.1:9000", "127.0.0.1", 9092)
    assert "\n" not in str(caught.value)
