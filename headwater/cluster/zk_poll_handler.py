"""kazoo's threading handler, waiting on its sockets with one ``poll(2)`` call.

Why not kazoo's own: its connection thread waits once per request it sends and
about three times per answer it reads (the main loop, then the header and the
body), and ``SequentialThreadingHandler.select`` builds a fresh
``selectors.DefaultSelector`` every time: an epoll instance created, the sockets
registered one system call each, waited on, and closed. py-spy on the two
surviving brokers of a 10,000-partition failover put 13-15 % of their busy
samples there (``_PollLikeSelector.__init__``, ``register``, ``close``), in the
one thread every ZooKeeper request and watch event of the broker passes through
(issue 33). ``poll`` waits in one system call and, unlike ``select.select``,
takes file descriptors above ``FD_SETSIZE`` (a broker with thousands of open
segment files has them), which is why kazoo left ``select.select``.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

__all__ = ["PollThreadingHandler", "poll_select"]

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
_ERROR = select.POLLERR | select.POLLHUP | select.POLLNVAL


def _fd(obj: Any) -> int:
    return obj if isinstance(obj, int) else int(obj.fileno())


def poll_select(
    rlist: Sequence[Any],
    wlist: Sequence[Any],
    xlist: Sequence[Any],
    timeout: float | None = None,
) -> tuple[list[Any], list[Any], list[Any]]:
    """``select.select``'s contract (the objects ready to read, to write; no
    exceptional conditions), answered with one ``poll``. An error or hang-up on a
    socket counts as readable and writable, as ``select`` reports it: the caller's
    next ``recv`` or ``send`` then raises, which is how kazoo finds a dead connection.
    """
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be non-negative")
    masks: dict[int, int] = {}
    for obj in rlist:
        fd = _fd(obj)
        masks[fd] = masks.get(fd, 0) | _READ
    for obj in wlist:
        fd = _fd(obj)
        masks[fd] = masks.get(fd, 0) | _WRITE
    poller = select.poll()
    for fd, mask in masks.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else timeout * 1000))
    if not ready:
        return [], [], []
    readable = [obj for obj in rlist if ready.get(_fd(obj), 0) & (_READ | _ERROR)]
    writable = [obj for obj in wlist if ready.get(_fd(obj), 0) & (_WRITE | _ERROR)]
    return readable, writable, []


class PollThreadingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's ``SequentialThreadingHandler`` with ``poll_select`` (see the module)."""

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        return poll_select(*args, **kwargs)
