"""An asyncio event loop on a daemon thread, for the blocking client classes.

``Consumer``, ``Producer`` and ``AdminClient`` are thin blocking fronts
over their async twins. Running the async client on its own loop thread
(rather than ``asyncio.run`` per call) keeps connections, the fetch
session and in-flight fetches alive between calls: the consumer's next
Fetch is on the wire while the calling thread processes records.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EventLoopThread:
    def __init__(self, name: str = "headwater-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the caller may wait on the future or not."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block for its result (exceptions propagate)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking client called from its own event loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the loop thread soon (thread-safe, does not wait)."""
        self.loop.call_soon_threadsafe(fn)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what is left, stop the loop and join the thread."""
        if not self.running:
            return

        async def cancel_all() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
