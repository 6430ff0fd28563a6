"""What hostile and careless connections cost the broker (issue 12, items 2-4).

Measures the broker's RSS and open descriptors, from /proc, around:

- ``--idle`` idle connections (default 2,000): memory per connection;
- 10 connections that each declare a 100 MiB request and send 14 bytes;
- 15 connections that pipeline 300 Metadata requests each (about 150 KB
  responses) and disconnect without reading: what is left afterwards.

Run: ``.venv/bin/python bench/bench_connections.py [--idle N]``.
Prints a table and writes bench/results/connections.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Headwater, ScratchDir, machine_info

from headwater.protocol.apis import ApiKey

RESULTS = Path(__file__).parent / "results" / "connections.json"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, 5) + b"bench"
    return struct.pack(">i", len(head) + len(body)) + head + body


def metadata(topic: str, correlation: int) -> bytes:
    name = topic.encode()
    return frame(ApiKey.METADATA, 1, correlation, struct.pack(">ih", 1, len(name)) + name)


def settle(seconds: float = 1.5) -> None:
    time.sleep(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=2000)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows: list[dict[str, Any]] = []

    def row(name: str, before: tuple[float, int], after: tuple[float, int], **extra: Any) -> None:
        entry = {"case": name, "rss_before_mb": before[0], "rss_after_mb": after[0],
                 "fds_before": before[1], "fds_after": after[1], **extra}  # fmt: skip
        rows.append(entry)
        print(f"{name:58} RSS {before[0]:7.1f} -> {after[0]:7.1f} MB   "
              f"fds {before[1]:5d} -> {after[1]:5d}")  # fmt: skip

    with ScratchDir("connections") as data:
        broker = Headwater(data, ["num.partitions=5000"]).start(timeout=60)
        pid = broker.pid
        probe = socket.create_connection(("127.0.0.1", broker.port))
        probe.sendall(metadata("wide", 1))  # creates the 5,000-partition topic
        probe.recv(1 << 20)
        probe.close()
        settle()

        def sample() -> tuple[float, int]:
            return rss_mb(pid), fds(pid)

        before = sample()
        idle = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(args.idle)]
        settle()
        during = sample()
        per_connection_kb = (during[0] - before[0]) * 1024 / args.idle
        row(f"{args.idle:,} idle connections (open)", before, during,
            per_connection_kb=per_connection_kb)  # fmt: skip
        for s in idle:
            s.close()
        settle()
        row(f"{args.idle:,} idle connections (after closing)", before, sample())

        before = sample()
        declared = []
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", broker.port))
            s.sendall(struct.pack(">i", 100 << 20) + b"\x00\x03\x00\x01" + b"x" * 10)
            declared.append(s)
        settle()
        row("10 x declared 100 MiB, sent 14 bytes (open)", before, sample())
        for s in declared:
            s.close()

        settle()
        before = sample()
        for _ in range(3):
            socks = []
            for _ in range(5):
                s = socket.create_connection(("127.0.0.1", broker.port))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(b"".join(metadata("wide", i) for i in range(300)))
                socks.append(s)
            time.sleep(1.0)
            peak = sample()
            for s in socks:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
        settle(3)
        row("15 x 300 pipelined Metadata, then reset", before, sample(), peak_rss_mb=peak[0])
        broker.stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "rows": rows,
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            },
            indent=2,
        )
    )
    print(f"per idle connection: {rows[0]['per_connection_kb']:.1f} KB")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
