"""Does one client's heavy request delay everyone else's? (issue 12, item 5)

A pinger in its own process sends ApiVersions every 10 ms on its own
connection and records each round trip, while this process runs one heavy
operation at a time against the same broker:

- CreateTopics of one topic with ``--partitions`` partitions (default 100,000);
- one Produce that first touches ``--fresh`` partitions (default 10,000);
- a Metadata request for the big topic;
- a full fetch that creates a fetch session over every partition of it;
- a clean stop (SIGTERM) with all of that loaded.

The worst ping round trip during each operation is the longest any other
client waited; the target is under 50 ms. The pinger is a separate process
so that this process's own Python work cannot delay it.

Run: ``.venv/bin/python bench/bench_stalls.py [--partitions N] [--fresh N]
[--cases idle,create,produce,metadata,session,stop]`` (``--cases idle,create,session``
measures only the topic and the fetch session: seconds instead of a minute).
The fetch session case also sends one incremental fetch on the new session
(its answer must carry no partition: the session was filled correctly),
then creates a second session, sends an incremental fetch naming every
partition, and closes that session (epoch -1; the window includes 1 s after
the answer, while the broker unwatches the partitions in the background).
Prints a table and writes bench/results/stalls.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import struct
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Headwater, ScratchDir, machine_info
from fetch_session_client import FETCH_VERSION, TopicFetcher, WireClient

from headwater.protocol.apis import ApiKey
from headwater.protocol.fetch_types import FetchRequestData
from headwater.records.record import build_batch

RESULTS = Path(__file__).parent / "results" / "stalls.json"
PING_EVERY_S = 0.010


def pinger(port: int, control: Connection) -> None:
    """Ping until told to stop; answers each 'report' with the round trips since the last."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, 4) + b"ping"
    frame = struct.pack(">i", len(frame)) + frame
    samples: list[float] = []
    closed = False
    while True:
        if control.poll():
            command = control.recv()
            if command == "stop":
                break
            control.send(samples)
            samples = []
        if closed:
            time.sleep(PING_EVERY_S)
            continue
        start = time.perf_counter()
        try:
            sock.sendall(frame)
            size = struct.unpack(">i", _read(sock, 4))[0]
            _read(sock, size)
        except (ConnectionError, OSError):
            closed = True  # the broker stopped: the last samples stand
            continue
        rtt = time.perf_counter() - start
        samples.append(rtt * 1000)
        time.sleep(max(0.0, PING_EVERY_S - rtt))
    sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def measure(control: Connection, name: str, op: Any) -> dict[str, Any]:
    control.send("report")
    control.recv()  # discard samples from before the operation
    start = time.perf_counter()
    op()
    took = time.perf_counter() - start
    time.sleep(0.05)
    control.send("report")
    samples = sorted(control.recv())
    worst = samples[-1] if samples else float("nan")
    p99 = samples[int(len(samples) * 0.99)] if samples else float("nan")
    row = {"operation": name, "seconds": took, "pings": len(samples), "worst_ms": worst,
           "p99_ms": p99}  # fmt: skip
    print(f"{name:44} {took:8.2f} s {len(samples):6d} pings  worst {worst:8.1f} ms  p99 {p99:6.1f}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--fresh", type=int, default=10_000)
    parser.add_argument("--cases", default="idle,create,produce,metadata,session,stop")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    rows = []
    with ScratchDir("stalls") as data:
        broker = Headwater(data, ["num.partitions=1"]).start(timeout=60)
        try:
            parent, child = mp.Pipe()
            ping = mp.Process(target=pinger, args=(broker.port, child), daemon=True)
            ping.start()
            time.sleep(0.5)
            client = WireClient(broker.bootstrap)
            wide, fresh = "wide", "fresh"
            if "idle" in cases:  # what this machine's load alone does to a ping
                rows.append(measure(parent, "Nothing (idle broker, 3 s)", lambda: time.sleep(3)))
            create = measure(
                parent,
                f"CreateTopics {args.partitions:,} partitions",
                lambda: client.create_topic(wide, args.partitions),
            )
            if "create" in cases:
                rows.append(create)
            if "produce" in cases:
                client.create_topic(fresh, args.fresh)
                batch = build_batch([(int(time.time() * 1000), None, b"x" * 100)])
                rows.append(
                    measure(
                        parent,
                        f"Produce to {args.fresh:,} fresh partitions",
                        lambda: client.produce(fresh, range(args.fresh), batch),
                    )
                )

            def metadata() -> None:
                name = wide.encode()
                body = struct.pack(">ih", 1, len(name)) + name
                client.call(ApiKey.METADATA, 1, body)

            if "metadata" in cases:
                rows.append(
                    measure(parent, f"Metadata of {args.partitions:,} partitions", metadata)
                )
            fetcher = TopicFetcher(wide, args.partitions, use_session=True)

            def session() -> None:
                request = fetcher.next_request()
                response, _ = client.fetch(request)
                fetcher.handle_response(request, response)

            if "session" in cases:
                rows.append(
                    measure(parent, f"Fetch session of {args.partitions:,} partitions", session)
                )
                assert fetcher.session_id, "the broker declined the session"
                incremental = fetcher.next_request()
                response, _ = client.fetch(incremental)
                assert response.error_code == 0 and response.partitions == [], response
                # A second session over the same partitions: the logs are loaded
                # now, so this is the session work alone.
                fetcher = TopicFetcher(wide, args.partitions, use_session=True)
                rows.append(
                    measure(
                        parent,
                        f"Second fetch session of {args.partitions:,} partitions",
                        session,
                    )
                )

                def incremental_naming_all() -> None:
                    fetcher._moved = set(range(args.partitions))
                    session()

                rows.append(
                    measure(
                        parent,
                        f"Incremental fetch naming {args.partitions:,} partitions",
                        incremental_naming_all,
                    )
                )

                def close_session() -> None:
                    final = FetchRequestData(
                        version=FETCH_VERSION,
                        max_bytes=1 << 20,
                        session_id=fetcher.session_id,
                        session_epoch=-1,  # FINAL_EPOCH: the client closes its session
                    )
                    response, _ = client.fetch(final)
                    assert response.error_code == 0, response
                    time.sleep(1.0)  # the broker lets the partitions go after answering

                rows.append(
                    measure(
                        parent,
                        f"Closing a session of {args.partitions:,} partitions (+1 s)",
                        close_session,
                    )
                )
            client.close()
            if "stop" in cases:
                rows.append(measure(parent, "Clean stop (SIGTERM)", broker.stop))
            parent.send("stop")
            ping.join(5)
        finally:
            broker.stop()  # also when an operation failed: never leave a broker behind
    results: Path = args.results
    results.parent.mkdir(exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "partitions": args.partitions,
                "fresh": args.fresh,
                "rows": rows,
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    print(f"wrote {results}")


if __name__ == "__main__":
    main()
