"""``poll_select``: ``select.select``'s contract for kazoo's connection thread, with
one ``poll`` (see ``headwater.cluster.zk_poll_handler`` for why)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from headwater.cluster.zk_poll_handler import PollThreadingHandler, poll_select


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_nothing_to_read_waits_out_the_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _b = pair
    assert poll_select([a], [], [], 0.01) == ([], [], [])


def test_readable_and_writable_objects_come_back_as_given(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    b.sendall(b"x")
    readable, writable, errors = poll_select([a, b], [a], [], 1.0)
    assert readable == [a]  # b has nothing to read
    assert writable == [a]
    assert errors == []


def test_a_closed_peer_counts_as_readable_so_recv_finds_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    b.close()
    assert poll_select([a], [], [], 1.0)[0] == [a]
    assert a.recv(1) == b""


def test_file_descriptors_above_fd_setsize_are_fine(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """``select.select`` refuses descriptors >= 1024; a broker may have them."""
    a, b = pair
    high = os.dup2(a.fileno(), 2000)
    try:
        b.sendall(b"x")
        assert poll_select([high], [], [], 1.0)[0] == [high]
    finally:
        os.close(high)


def test_a_negative_timeout_is_refused_as_select_does() -> None:
    with pytest.raises(ValueError):
        poll_select([], [], [], -1)


def test_the_handler_selects_with_poll(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.sendall(b"x")
    assert PollThreadingHandler().select([a], [], [], 1.0)[0] == [a]
