"""The kernel's floor under issue 21's CPU ratio: one replica copy with no broker at all.

Issue 21 asks the three brokers of an RF 3 cluster to spend at most 3x the
CPU per GB of RF 1. This measures what the operating system alone charges
for the copies, with the least code that can move the bytes (so almost all
of it is kernel time), each role in a process of its own on loopback:

* **ingest** (RF 1's whole broker cost, ``I``): a producer process
  ``sendall``s 1 MB chunks; the "leader" ``recv_into``s them and ``write``s
  them to a segment file.
* **replicate** (each follower copy at RF 3): the "leader" ``sendfile``s that
  file in 1 MB pieces (``S``, as Headwater's fetch path does); the "follower"
  ``recv_into``s and ``write``s them to its own file (``F``).

On loopback the sending process also runs the receiving side of the TCP
stack, so at RF 1 the producer pays the leader's TCP receive, while at RF 3
the leader pays each follower's. The floor ratio ``(I + 2S + 2F) / I`` is what
any broker would measure here for this work alone; CRCs, parsing and
bookkeeping come on top. The page cache is settled before each phase (this
VM's fresh memory is slow, see docs/benchmarks.md) and rounds alternate.

Run: ``.venv/bin/python bench/bench_copy_floor.py`` (``--mb 300 --rounds 5``).
Prints CPU-s per GB per role, user and system apart, and the floor ratio;
writes bench/results/copy_floor.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import socket
import statistics
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from brokers import machine_info, settle_page_cache

RESULTS = Path(__file__).parent / "results" / "copy_floor.json"
CHUNK = 1 << 20


def _usage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _receive_to_file(listener: socket.socket, path: str, total: int, out: Connection) -> None:
    """Accept one connection; receive ``total`` bytes in 1 MB reads and append them to ``path``."""
    conn, _ = listener.accept()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    u0, s0 = _usage()
    got = 0
    while got < total:
        filled = 0
        want = min(CHUNK, total - got)
        while filled < want:
            n = conn.recv_into(view[filled:want])
            if n == 0:
                raise RuntimeError("sender closed early")
            filled += n
        os.write(fd, view[:filled])
        got += filled
    u1, s1 = _usage()
    os.close(fd)
    conn.close()
    out.send((u1 - u0, s1 - s0))


def _send_from_memory(port: int, total: int, out: Connection) -> None:
    """A producer: ``sendall`` 1 MB chunks from memory."""
    data = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        u0, s0 = _usage()
        sent = 0
        while sent < total:
            n = min(CHUNK, total - sent)
            sock.sendall(data[:n])
            sent += n
        u1, s1 = _usage()
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)
    out.send((u1 - u0, s1 - s0))


def _sendfile(port: int, path: str, total: int, out: Connection) -> None:
    """A leader answering follower fetches: ``sendfile`` the segment in 1 MB pieces."""
    fd = os.open(path, os.O_RDONLY)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        u0, s0 = _usage()
        offset = 0
        while offset < total:
            n = min(CHUNK, total - offset)
            while n > 0:
                sent = os.sendfile(sock.fileno(), fd, offset, n)
                offset += sent
                n -= sent
        u1, s1 = _usage()
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)
    os.close(fd)
    out.send((u1 - u0, s1 - s0))


def _phase(sender: Any, sender_args: tuple[Any, ...], path: str, total: int) -> dict[str, Any]:
    """Run one receiver and one sender process; their (user, system) seconds."""
    ctx = mp.get_context("fork")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    r_recv, w_recv = ctx.Pipe(duplex=False)
    r_send, w_send = ctx.Pipe(duplex=False)
    receiver = ctx.Process(target=_receive_to_file, args=(listener, path, total, w_recv))
    receiver.start()
    listener.close()
    send = ctx.Process(target=sender, args=(port, *sender_args, total, w_send))
    send.start()
    got = {"receiver": r_recv.recv(), "sender": r_send.recv()}
    receiver.join()
    send.join()
    return got


def one_round(directory: Path, total: int) -> dict[str, dict[str, float]]:
    gb = total / 1e9
    leader_file = str(directory / "leader.log")
    follower_file = str(directory / "follower.log")
    settle_page_cache()
    ingest = _phase(_send_from_memory, (), leader_file, total)
    settle_page_cache()
    # The leader's segment is in the page cache when a caught-up follower fetches it.
    with open(leader_file, "rb") as f:
        while f.read(CHUNK):
            pass
    replicate = _phase(_sendfile, (leader_file,), follower_file, total)
    os.unlink(follower_file)
    os.unlink(leader_file)

    def per_gb(pair: tuple[float, float]) -> dict[str, float]:
        return {"user": pair[0] / gb, "system": pair[1] / gb, "total": sum(pair) / gb}

    return {
        "producer_send": per_gb(ingest["sender"]),
        "I_leader_ingest": per_gb(ingest["receiver"]),
        "S_leader_sendfile": per_gb(replicate["sender"]),
        "F_follower_take": per_gb(replicate["receiver"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mb",
        type=int,
        default=300,
        help="MB per phase (at 1,000 the follower part varied 2x between rounds here)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    total = args.mb * 1_000_000
    rounds = []
    with tempfile.TemporaryDirectory(prefix="hw-copy-floor-", dir="/var/tmp") as d:
        for i in range(args.rounds):
            r = one_round(Path(d), total)
            i_cost = r["I_leader_ingest"]["total"]
            s_cost = r["S_leader_sendfile"]["total"]
            f_cost = r["F_follower_take"]["total"]
            r["floor_ratio"] = {"total": (i_cost + 2 * s_cost + 2 * f_cost) / i_cost}
            rounds.append(r)
            print(
                f"round {i + 1}: "
                + ", ".join(f"{k} {v['total']:.3f}" for k, v in r.items() if k != "floor_ratio")
                + f" CPU-s/GB; floor ratio {r['floor_ratio']['total']:.2f}x",
                flush=True,
            )
    median = {
        role: {part: statistics.median(r[role][part] for r in rounds) for part in rounds[0][role]}
        for role in rounds[0]
    }
    print("\nmedians, CPU-s per GB (user / system / total):")
    for role, parts in median.items():
        if role == "floor_ratio":
            continue
        print(f"  {role:20} {parts['user']:.3f} / {parts['system']:.3f} / {parts['total']:.3f}")
    print(
        f"floor ratio (I + 2S + 2F) / I: {median['floor_ratio']['total']:.2f}x "
        "(issue 21's target for the whole broker: <= 3x)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"machine": machine_info(), "mb": args.mb, "rounds": rounds, "median": median},
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
