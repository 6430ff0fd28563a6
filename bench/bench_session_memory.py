"""Broker memory per fetch-session partition (issue 12, item 6: at most 250 bytes).

In one process, without sockets: a broker's handlers over a scratch log
directory with one topic of ``--partitions`` partitions. The logs are
loaded first by a sessionless fetch, so only the session is measured.
Then ``--sessions`` consumers each create a session over every partition
through the real Fetch path (decode, cache admission, population, log
watches); tracemalloc counts what stays allocated once the responses are
dropped. Reported: bytes per session-partition for the first session and
on average over all of them.

Run: ``.venv/bin/python bench/bench_session_memory.py [--partitions N] [--sessions S]``.
Prints the figures and writes bench/results/session_memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import ScratchDir, machine_info
from fetch_session_client import TopicFetcher

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.protocol.fetch_codec import decode_fetch_request, encode_fetch_request

RESULTS = Path(__file__).parent / "results" / "session_memory.json"
TARGET_BYTES = 250


def _fetch(broker: Broker, raw: bytes, version: int) -> None:
    """One FetchRequest through the broker's Fetch handler; the response is dropped."""

    async def run() -> None:
        req = decode_fetch_request(memoryview(raw), 0, version)
        broker.fetch._resolve_names(req)
        await broker.fetch._fetch(req)

    asyncio.run(run())


def measure(partitions: int, sessions: int, data: Path) -> dict[str, Any]:
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(data),
            "num.partitions": "1",
            "max.incremental.fetch.session.cache.slots": str(sessions + 1),
        }
    )
    broker = Broker(config)
    broker._build_handlers()
    broker.logs.create_topic("wide", partitions)
    sessionless = TopicFetcher("wide", partitions, use_session=False).next_request()
    _fetch(broker, encode_fetch_request(sessionless, sessionless.version), sessionless.version)
    requests = []
    for _ in range(sessions):
        req = TopicFetcher("wide", partitions, use_session=True).next_request()
        requests.append(encode_fetch_request(req, req.version))
    version = sessionless.version
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    per_session: list[int] = []
    started = time.perf_counter()
    for raw in requests:
        before = tracemalloc.get_traced_memory()[0]
        _fetch(broker, raw, version)
        gc.collect()
        per_session.append(tracemalloc.get_traced_memory()[0] - before)
    took = time.perf_counter() - started
    total = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    created = broker.sessions.num_incremental_fetch_sessions
    assert created == sessions, f"only {created} of {sessions} sessions were created"
    cells = partitions * sessions
    return {
        "partitions": partitions,
        "sessions": sessions,
        "first_session_bytes_per_partition": per_session[0] / partitions,
        "bytes_per_session_partition": total / cells,
        "target_bytes": TARGET_BYTES,
        "seconds_with_tracemalloc": took,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    with ScratchDir("session-memory") as data:
        result = measure(args.partitions, args.sessions, data)
    result["machine"] = machine_info()
    result["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"{args.sessions} sessions x {args.partitions:,} partitions: "
        f"{result['bytes_per_session_partition']:.0f} bytes per session-partition "
        f"(first session {result['first_session_bytes_per_partition']:.0f}; "
        f"target <= {TARGET_BYTES})"
    )
    results: Path = args.results
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(result, indent=2))
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
