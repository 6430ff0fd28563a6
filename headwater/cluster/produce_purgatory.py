"""Where ``acks=all`` produce requests wait for the ISR (Kafka's DelayedProduce).

A leader appends a batch at once, but acknowledges it under ``acks=all``
only when the high watermark has passed it, that is when every ISR member
has it. Each waiting partition of a request is a future here keyed by the
partition; the replica manager calls :meth:`ProducePurgatory.check` when a
high watermark moves and :meth:`fail` when leadership is lost, so a request
never waits longer than its timeout and never waits on a leader it no
longer has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from headwater.protocol.error_codes import ErrorCode

PartitionKey = tuple[str, int]


@dataclass(slots=True)
class _Waiter:
    required_offset: int  # the high watermark that acknowledges the append
    future: asyncio.Future[int]


class ProducePurgatory:
    """Futures of appended batches waiting for the high watermark to pass them."""

    def __init__(self) -> None:
        self._waiting: dict[PartitionKey, list[_Waiter]] = {}

    def __len__(self) -> int:
        return sum(len(w) for w in self._waiting.values())

    def wait(self, key: PartitionKey, required_offset: int) -> asyncio.Future[int]:
        """A future of the error code (0 = acknowledged) once the HW reaches ``required_offset``."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(_Waiter(required_offset, future))
        return future

    def has_waiters(self, key: PartitionKey) -> bool:
        return key in self._waiting

    def check(self, key: PartitionKey, high_watermark: int, enough_isr: Callable[[], bool]) -> None:
        """Complete the waiters that ``high_watermark`` acknowledges.

        As Kafka does, an append that reached the HW while the ISR had
        shrunk below ``min.insync.replicas`` is answered
        ErrorCode.not_enough_replicas_after_append: it is stored, but not as safely as
        the producer asked.
        """
        waiters = self._waiting.get(key)
        if not waiters:
            return
        keep: list[_Waiter] = []
        code: int | None = None
        for waiter in waiters:
            if waiter.future.done():
                continue
            if waiter.required_offset <= high_watermark:
                if code is None:
                    code = (
                        ErrorCode.none
                        if enough_isr()
                        else ErrorCode.not_enough_replicas_after_append
                    )
                waiter.future.set_result(code)
            else:
                keep.append(waiter)
        if keep:
            self._waiting[key] = keep
        else:
            del self._waiting[key]

    def fail(self, key: PartitionKey, error_code: int = ErrorCode.not_leader_or_follower) -> None:
        """Answer every waiter of ``key`` with ``error_code`` (leadership lost)."""
        for waiter in self._waiting.pop(key, ()):
            if not waiter.future.done():
                waiter.future.set_result(error_code)

    def fail_all(self, error_code: int = ErrorCode.not_leader_or_follower) -> None:
        for key in list(self._waiting):
            self.fail(key, error_code)

    def forget(self, key: PartitionKey, future: asyncio.Future[int]) -> None:
        """Drop a waiter whose request timed out or went away."""
        waiters = self._waiting.get(key)
        if not waiters:
            return
        waiters[:] = [w for w in waiters if w.future is not future]
        if not waiters:
            del self._waiting[key]


async def await_acks(
    purgatory: ProducePurgatory,
    waits: dict[PartitionKey, asyncio.Future[int]],
    timeout_s: float,
) -> dict[PartitionKey, int]:
    """Wait for every partition of one request; REQUEST_TIMED_OUT for those still waiting."""
    if waits:
        await asyncio.wait(list(waits.values()), timeout=max(timeout_s, 0.0))
    out: dict[PartitionKey, int] = {}
    for key, future in waits.items():
        if future.done() and not future.cancelled():
            out[key] = future.result()
        else:
            purgatory.forget(key, future)
            future.cancel()
            out[key] = ErrorCode.request_timed_out
    return out
