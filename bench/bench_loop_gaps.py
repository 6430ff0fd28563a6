"""How long the broker's event loop is held by one huge fetch, measured from inside.

``bench_stalls.py`` pings a broker process from outside, so its figures
include the OS scheduling either process out. This benchmark runs the
broker's real Fetch handler in this process, next to an asyncio ticker that
wakes every millisecond: the longest gap between two ticks is the longest
any other connection would have waited for the loop. The requests are built
and encoded before the clock starts, so only the broker's work is timed.

Cases, over one topic of ``--partitions`` empty partitions:

- a full fetch creating a session over every partition (loads every log);
- an incremental fetch on that session naming every partition again;
- closing the session (its partitions are unwatched in the background).

Also reported: CPython's collections during each case (generation 2 are
the long ones this benchmark was written to hunt).

Run: ``.venv/bin/python bench/bench_loop_gaps.py [--partitions N]``. Prints a
table and writes bench/results/loop_gaps.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import ScratchDir, machine_info
from fetch_session_client import TopicFetcher

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.cooperative import sliced
from headwater.gc_policy import COLLECTOR
from headwater.protocol.fetch_codec import decode_fetch_request_steps, encode_fetch_request
from headwater.protocol.fetch_types import FetchRequestData

RESULTS = Path(__file__).parent / "results" / "loop_gaps.json"


class Collections:
    """Durations of CPython's collections, per generation, while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.active:
            self.pauses.append((info["generation"], (time.perf_counter() - self._started) * 1e3))

    def worst(self, generation: int) -> float:
        return max((ms for g, ms in self.pauses if g == generation), default=0.0)

    def count(self, generation: int) -> int:
        return sum(1 for g, _ in self.pauses if g == generation)


async def _serve(broker: Broker, raw: bytes, version: int) -> None:
    """What the Fetch handler does with a large frame (``FetchApi._handle_large``)."""
    with COLLECTOR.heavy():
        req = await sliced(decode_fetch_request_steps(raw, 0, version))
        await sliced(broker.fetch._resolve_names_steps(req))
        await broker.fetch._fetch(req)


async def measure(partitions: int, data: Path) -> list[dict[str, Any]]:
    broker = Broker(BrokerConfig.from_properties({"log.dirs": str(data), "num.partitions": "1"}))
    broker._build_handlers()
    COLLECTOR.enable()
    COLLECTOR.freeze(collect=True)  # as Broker.start does
    broker.logs.create_topic("wide", partitions)
    fetcher = TopicFetcher("wide", partitions, use_session=True)
    collections = Collections()
    gaps: list[float] = []
    running = True

    async def ticker() -> None:
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append((now - last) * 1e3)
            last = now

    async def case(name: str, work: Any) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        gaps.clear()
        collections.pauses.clear()
        collections.active = True
        started = time.perf_counter()
        await work()
        took = time.perf_counter() - started
        await asyncio.sleep(0.05)
        collections.active = False
        row = {
            "case": name,
            "seconds": took,
            "worst_gap_ms": max(gaps),
            "p99_gap_ms": sorted(gaps)[int(len(gaps) * 0.99)],
            "gen2_collections": collections.count(2),
            "worst_gen2_ms": collections.worst(2),
            "worst_gen1_ms": collections.worst(1),
        }
        print(
            f"{name:52} {took:6.2f} s  worst gap {row['worst_gap_ms']:6.1f} ms  "
            f"p99 {row['p99_gap_ms']:5.1f} ms  full collections {row['gen2_collections']} "
            f"(worst {row['worst_gen2_ms']:.0f} ms)"
        )
        return row

    tick = asyncio.create_task(ticker())
    rows = []
    full = fetcher.next_request()
    raw_full = encode_fetch_request(full, full.version)
    rows.append(
        await case(
            f"full fetch creating a {partitions:,}-partition session",
            lambda: _serve(broker, raw_full, full.version),
        )
    )
    session = broker.sessions.sessions()[0]
    fetcher.session_id, fetcher.epoch = session.id, 1
    fetcher._moved = set(range(partitions))
    incremental = fetcher.next_request()
    raw_incremental = encode_fetch_request(incremental, incremental.version)
    rows.append(
        await case(
            f"incremental fetch naming all {partitions:,} partitions",
            lambda: _serve(broker, raw_incremental, incremental.version),
        )
    )
    close = FetchRequestData(
        version=full.version, max_bytes=1 << 20, session_id=session.id, session_epoch=-1
    )
    raw_close = encode_fetch_request(close, close.version)

    async def close_session() -> None:
        await _serve(broker, raw_close, close.version)
        await broker.fetch.background.wait()  # the partitions are let go after the answer

    rows.append(await case(f"closing the {partitions:,}-partition session", close_session))
    running = False
    await tick
    COLLECTOR.disable()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    with ScratchDir("loop-gaps") as data:
        rows = asyncio.run(measure(args.partitions, data))
    results: Path = args.results
    results.parent.mkdir(exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "partitions": args.partitions,
                "rows": rows,
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
