"""Times the Fetch codec against kio on one topic x 100,000 partitions (Fetch v12).

Why these two: the broker decodes a full fetch request and encodes a fetch
response with every session partition on each full fetch; both sit on the
hot path. Also times ``build`` + kio encode of a 10,000-topic Metadata
response, the largest cold-API message a client asks for.

Run: ``.venv/bin/python bench/bench_codec.py [--partitions N] [--repeat R]``.
Prints a table and writes bench/results/codec.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_codec import (
    decode_fetch_request,
    encode_fetch_request,
    encode_fetch_response,
)
from headwater.protocol.fetch_types import (
    ZERO_UUID,
    FetchRequestData,
    FetchResponseData,
    PartitionData,
    PartitionFetch,
)
from headwater.protocol.messages import (
    build_response,
    decode_request,
    encode_response,
)

VERSION = 12
RESULTS = Path(__file__).parent / "results" / "codec.json"


def _samples(fn: Callable[[], Any], repeat: int, gc_on: bool) -> list[float]:
    samples = []
    for _ in range(repeat):
        gc.collect()
        if not gc_on:
            gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            samples.append((time.perf_counter() - start) * 1000)
        finally:
            gc.enable()
        del result
    return samples


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    """Wall time in ms: best with the garbage collector off (timeit's convention:
    the codec's own cost), median with it on (what a busy broker process sees:
    100,000 new objects trigger collections that scan every live object)."""
    off = _samples(fn, repeat, gc_on=False)
    on = _samples(fn, repeat, gc_on=True)
    return {
        "best_ms_gc_off": round(min(off), 2),
        "median_ms_gc_on": round(statistics.median(on), 2),
    }


def fetch_request_bytes(partitions: int) -> bytes:
    req = FetchRequestData(
        version=VERSION,
        max_wait_ms=500,
        min_bytes=1,
        partitions=[
            PartitionFetch(ZERO_UUID, "bench-topic", i, 1000 + i, -1, 1 << 20, 0, 0)
            for i in range(partitions)
        ],
    )
    return encode_fetch_request(req, VERSION)


def fetch_response(partitions: int) -> FetchResponseData:
    return FetchResponseData(
        session_id=1,
        partitions=[
            PartitionData(ZERO_UUID, "bench-topic", i, 0, 5000, 5000, 0) for i in range(partitions)
        ],
    )


def kio_fetch_response(resp: FetchResponseData) -> Any:
    partitions = [
        {
            "partition_index": p.partition,
            "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset,
            "log_start_offset": p.log_start_offset,
            "records": b"",
        }
        for p in resp.partitions
    ]
    data = {
        "session_id": resp.session_id,
        "responses": [{"topic": "bench-topic", "partitions": partitions}],
    }
    return build_response(ApiKey.FETCH, VERSION, data)


def kio_to_fetch_request_data(request: bytes) -> FetchRequestData:
    """kio's decode plus the conversion a broker would need: the fair comparison."""
    entity: Any = decode_request(ApiKey.FETCH, VERSION, request)
    return FetchRequestData(
        version=VERSION,
        replica_id=entity.replica_id,
        max_wait_ms=int(entity.max_wait.total_seconds() * 1000),
        min_bytes=entity.min_bytes,
        max_bytes=entity.max_bytes,
        isolation_level=entity.isolation_level,
        session_id=entity.session_id,
        session_epoch=entity.session_epoch,
        partitions=[
            PartitionFetch(
                ZERO_UUID,
                topic.topic,
                p.partition,
                p.fetch_offset,
                p.log_start_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
                p.last_fetched_epoch,
            )
            for topic in entity.topics
            for p in topic.partitions
        ],
        rack_id=entity.rack_id,
    )


def metadata_dict(topics: int) -> dict[str, Any]:
    return {
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092}],
        "cluster_id": "headwater",
        "controller_id": 0,
        "topics": [
            {
                "name": f"topic-{i}",
                "topic_id": uuid.UUID(int=i + 1),
                "partitions": [
                    {"partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
                ],
            }
            for i in range(topics)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.partitions, args.repeat

    request = fetch_request_bytes(n)
    response = fetch_response(n)
    kio_response = kio_fetch_response(response)
    assert encode_fetch_response(response, VERSION).to_bytes() == encode_response(kio_response)
    assert kio_to_fetch_request_data(request) == decode_fetch_request(request, 0, VERSION)
    metadata = metadata_dict(args.topics)

    figures = {
        "fetch_request_decode": {
            "headwater": timed(lambda: decode_fetch_request(request, 0, VERSION), repeat),
            "kio": timed(lambda: decode_request(ApiKey.FETCH, VERSION, request), repeat),
            "kio_to_dataclasses": timed(lambda: kio_to_fetch_request_data(request), repeat),
        },
        "fetch_response_encode": {
            "headwater": timed(lambda: encode_fetch_response(response, VERSION), repeat),
            "kio": timed(lambda: encode_response(kio_response), max(1, repeat // 2)),
        },
        "metadata_response_10k_topics": {
            "build": timed(lambda: build_response(ApiKey.METADATA, 12, metadata), repeat),
            "build_and_kio_encode": timed(
                lambda: encode_response(build_response(ApiKey.METADATA, 12, metadata)), repeat
            ),
        },
    }

    print(f"Fetch v{VERSION}, 1 topic x {n} partitions; Metadata v12, {args.topics} topics")
    print(f"  {'':30} {'':20} {'gc off, best':>14} {'gc on, median':>14}")
    for name, rows in figures.items():
        for who, t in rows.items():
            off, on = t["best_ms_gc_off"], t["median_ms_gc_on"]
            print(f"  {name:30} {who:20} {off:11.1f} ms {on:11.1f} ms")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "fetch_version": VERSION,
                "partitions": n,
                "metadata_topics": args.topics,
                "repeat": repeat,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "results": figures,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
