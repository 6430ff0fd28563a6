"""KIP-848: a fourth member joins a group of three that is consuming 12 partitions.

Why: in the classic protocol a join is a barrier. With the eager protocol
(``partition.assignment.strategy=range``) every member revokes everything and
waits for the new generation; cooperative-sticky keeps the partitions a member
keeps but still needs two JoinGroup/SyncGroup rounds. With the consumer
protocol (``group.protocol=consumer``) the coordinator computes the target
(the server-side ``uniform`` assignor), revokes only what moves, and the
members keep fetching the rest: the stop on kept partitions should be zero.

One Headwater broker; per trial a fresh 12-partition topic and group, a
producer writing a steady ``--rate`` records/s across the partitions, three
confluent-kafka consumers in steady state, then a fourth subscribes. Measured
per trial:

* ``first_record_s``: from the fourth member's ``subscribe`` to its first record;
* ``kept_stop_s`` per old member: the longest stretch, from one second before
  the join to ``--observe`` seconds after it, in which none of the partitions
  it owned both before and after the join made progress (a record past the
  highest offset it had read there; re-reads after a rebalance do not count),
  and the worst of the three;
* ``steady_gap_s``: the same measure over the steady stretch before the join
  (``--observe`` / 2), the floor set by the produce rate and fetch batching;
* ``moved``: how many of the 12 partitions changed owner.

Modes run interleaved (the order rotates per round) and the table shows medians
over ``--rounds``. Client settings are librdkafka's defaults (classic:
heartbeat.interval.ms 3000, so members learn of a rebalance within 3 s;
consumer protocol: the broker's group.consumer.heartbeat.interval.ms, 5000).
The ``consumer`` mode runs only if the broker advertises ConsumerGroupHeartbeat
(API 68); otherwise it is reported as not served.

Run: ``.venv/bin/python bench/bench_consumer_groups.py [--rounds 5 --rate 1200 --observe 15]``
(``--tree DIR`` runs the broker from another checkout, e.g. an exported commit,
so a tree being edited does not change what is measured).
Prints a table, writes bench/results/consumer_groups.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import statistics
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brokers import Headwater, ScratchDir, machine_info
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from headwater.group.assignors import ASSIGNORS, MemberSpec, TopicSpec

RESULTS = Path(__file__).parent / "results" / "consumer_groups.json"
PARTITIONS = 12
CONSUMER_GROUP_HEARTBEAT = 68

MODES: dict[str, dict[str, str]] = {
    "classic_eager": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "classic_cooperative": {
        "group.protocol": "classic",
        "partition.assignment.strategy": "cooperative-sticky",
    },
    "consumer": {"group.protocol": "consumer"},
}
LABELS = {
    "classic_eager": "classic eager (range)",
    "classic_cooperative": "classic cooperative-sticky",
    "consumer": "consumer protocol (uniform)",
}


def advertised_api_keys(host: str, port: int) -> set[int]:
    """The API keys in an ApiVersions v0 answer (a few lines of wire format)."""
    client_id = b"bench"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(s, 4))[0]
        data = _read(s, size)
    count = struct.unpack_from(">i", data, 6)[0]
    return {struct.unpack_from(">h", data, 10 + 6 * i)[0] for i in range(count)}


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return out


@dataclass
class Member:
    """One consumer thread: the records it saw and its assignment over time."""

    name: str
    config: dict[str, str]
    topic: str
    records: list[tuple[float, int]] = field(default_factory=list)
    #: (time, partition) of records past the highest offset this member had read there.
    progress: list[tuple[float, int]] = field(default_factory=list)
    assignments: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    started: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: str | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.started = time.monotonic()
        self.thread.start()

    def _run(self) -> None:
        consumer = Consumer(self.config)
        consumer.subscribe([self.topic])
        current: frozenset[int] = frozenset()
        highest: dict[int, int] = {}
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.05)
                now = time.monotonic()
                if message is not None:
                    error = message.error()
                    if error is None:
                        partition, offset = message.partition(), message.offset()
                        assert partition is not None and offset is not None
                        self.records.append((now, partition))
                        if offset > highest.get(partition, -1):
                            highest[partition] = offset
                            self.progress.append((now, partition))
                    elif error.code() != KafkaError._PARTITION_EOF:
                        self.error = str(error)
                owned = frozenset(tp.partition for tp in consumer.assignment())
                if owned != current:
                    current = owned
                    self.assignments.append((now, owned))
        finally:
            consumer.close()

    def join(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    def owned_at(self, moment: float) -> frozenset[int]:
        owned: frozenset[int] = frozenset()
        for at, partitions in self.assignments:
            if at > moment:
                break
            owned = partitions
        return owned

    def longest_gap(self, partitions: frozenset[int], start: float, end: float) -> float:
        """The longest stretch in [start, end] in which none of ``partitions`` moved on.

        Progress, not arrivals: after an eager rebalance a member re-reads from
        the committed offset, and records it had already seen are no progress.
        """
        times = [at for at, p in self.progress if p in partitions and start <= at <= end]
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))


class Load:
    """A producer writing ``rate`` records/s round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
        self.topic = topic
        self.rate = rate
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                self.producer.produce(self.topic, b"x" * 100, partition=self.sent % PARTITIONS)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(10)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def steady(members: list[Member], since: float) -> bool:
    """Every partition owned once, and every member reading since ``since``."""
    now = time.monotonic()
    owned = [m.owned_at(now) for m in members]
    if sum(len(o) for o in owned) != PARTITIONS or len(frozenset().union(*owned)) != PARTITIONS:
        return False
    return all(any(at >= since for at, _ in m.records[-50:]) for m in members)


def one_trial(bootstrap: str, mode: str, rate: float, observe: float) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"join-{mode}-{suffix}", f"g-{mode}-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": "false",
        **MODES[mode],
    }
    old = [Member(f"c{i}", dict(base), topic) for i in range(3)]
    with Load(bootstrap, topic, rate):
        for m in old:
            # Started a second apart, as members of a real group are: their
            # heartbeats (3 s apart in the classic protocol) are out of phase,
            # so a rebalance barrier waits for the last of them to notice.
            m.start()
            time.sleep(1.0)
        wait_until(lambda: steady(old, time.monotonic() - 1.0), 90, f"{mode}: 3 members steady")
        formed = time.monotonic()
        time.sleep(observe / 2)
        joined = time.monotonic()
        new = Member("c3", dict(base), topic)
        new.start()
        wait_until(lambda: bool(new.records), 90, f"{mode}: the new member's first record")
        everyone = [*old, new]
        wait_until(
            lambda: (
                steady(everyone, time.monotonic() - 1.0) and time.monotonic() >= joined + observe
            ),
            90,
            f"{mode}: 4 members steady",
        )
        end = joined + observe
        for m in everyone:
            m.join()
    errors = [m.error for m in everyone if m.error]
    per_member = []
    moved = 0
    for m in old:
        before = m.owned_at(joined)
        after = m.owned_at(end)
        kept = before & after
        moved += len(before - after)
        per_member.append(
            {
                "before": sorted(before),
                "after": sorted(after),
                "kept": sorted(kept),
                "kept_stop_s": m.longest_gap(kept, joined - 1.0, end) if kept else None,
                "any_stop_s": m.longest_gap(after | before, joined - 1.0, end),
                "steady_gap_s": m.longest_gap(before, formed, joined),
            }
        )
    stops = [p["kept_stop_s"] for p in per_member if p["kept_stop_s"] is not None]
    return {
        "mode": mode,
        "first_record_s": new.records[0][0] - joined,
        "kept_stop_max_s": max(stops) if stops else None,
        "kept_stop_median_member_s": statistics.median(stops) if stops else None,
        "steady_gap_max_s": max(p["steady_gap_s"] for p in per_member),
        "moved": moved,
        "new_member_got": sorted(new.owned_at(end)),
        "members": per_member,
        "errors": errors[:5],
    }


def assignor_timings(repeats: int = 5) -> list[dict[str, Any]]:
    """The server-side assignors alone: 1,000 members over 10,000 partitions
    (10 topics of 1,000), first assignment and then a member joining with the
    first result as ``owned``; same and mixed subscriptions, without and with
    racks (3 racks, 2 replica racks per partition). Medians of ``repeats``."""
    rows = []
    names = [f"t{i}" for i in range(10)]
    racks = ("a", "b", "c")
    for mixed in (False, True):
        for with_racks in (False, True):
            topics = {
                t: TopicSpec(
                    t,
                    1000,
                    {p: frozenset({racks[p % 3], racks[(p + i) % 3 or 1]}) for p in range(1000)}
                    if with_racks
                    else {},
                )
                for i, t in enumerate(names)
            }
            members = {
                f"m{i:04d}": MemberSpec(
                    f"m{i:04d}",
                    racks[i % 3] if with_racks else None,
                    frozenset(names[: 1 + i % 10] if mixed else names),
                    {},
                )
                for i in range(1000)
            }
            for name, assignor in ASSIGNORS.items():
                first, join = [], []
                for _ in range(repeats):
                    start = time.perf_counter()
                    result = assignor.assign(members, topics)
                    first.append(time.perf_counter() - start)
                    newcomer = MemberSpec("new", "a" if with_racks else None, frozenset(names), {})
                    grown = {
                        m: MemberSpec(m, s.rack, s.subscribed_topics, result[m])
                        for m, s in members.items()
                    } | {"new": newcomer}
                    start = time.perf_counter()
                    assignor.assign(grown, topics)
                    join.append(time.perf_counter() - start)
                rows.append(
                    {
                        "assignor": name,
                        "subscriptions": "mixed" if mixed else "same",
                        "racks": with_racks,
                        "first_ms": 1000 * statistics.median(first),
                        "join_ms": 1000 * statistics.median(join),
                    }
                )
    return rows


def median_of(trials: list[dict[str, Any]], key: str) -> float | None:
    values = [t[key] for t in trials if t.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} {unit}" if unit else f"{value:g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1200.0, help="records/s, all partitions")
    parser.add_argument("--observe", type=float, default=15.0, help="seconds after the join")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tree", type=Path, help="run the broker from this checkout")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]

    timings = assignor_timings()
    print("| assignor, 1,000 members x 10,000 partitions | first assignment | a member joins |")
    print("| --- | ---: | ---: |")
    for row in timings:
        label = f"{row['assignor']}, {row['subscriptions']} subscriptions" + (
            ", racks" if row["racks"] else ""
        )
        print(f"| {label} | {row['first_ms']:.0f} ms | {row['join_ms']:.0f} ms |")
    print(flush=True)

    trials: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    skipped: dict[str, str] = {}
    with ScratchDir("hw-bench-groups-") as data:
        broker = Headwater(data, source_tree=args.tree).start(timeout=60)
        try:
            keys = advertised_api_keys("127.0.0.1", broker.port)
            if "consumer" in modes and CONSUMER_GROUP_HEARTBEAT not in keys:
                skipped["consumer"] = "the broker does not advertise ConsumerGroupHeartbeat (68)"
                modes.remove("consumer")
            for round_ in range(args.rounds):
                order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
                for mode in order:
                    trial = one_trial(broker.bootstrap, mode, args.rate, args.observe)
                    trial["round"] = round_
                    trials[mode].append(trial)
                    print(
                        f"round {round_} {mode:20s} first record {trial['first_record_s']:.2f} s,"
                        f" worst kept stop {fmt(trial['kept_stop_max_s'])},"
                        f" steady gap {trial['steady_gap_max_s']:.3f} s, moved {trial['moved']}",
                        flush=True,
                    )
        finally:
            broker.stop()

    summary = {
        mode: {
            "first_record_s": median_of(rows, "first_record_s"),
            "kept_stop_max_s": median_of(rows, "kept_stop_max_s"),
            "kept_stop_median_member_s": median_of(rows, "kept_stop_median_member_s"),
            "steady_gap_max_s": median_of(rows, "steady_gap_max_s"),
            "moved": median_of(rows, "moved"),
            "rounds": len(rows),
        }
        for mode, rows in trials.items()
        if rows
    }
    shown = list(summary)
    header = "| median of rounds | " + " | ".join(LABELS[m] for m in shown) + " |"
    print()
    print(header)
    print("| --- |" + " ---: |" * len(shown))
    for key, label, unit in [
        ("first_record_s", "new member: join to first record", "s"),
        ("kept_stop_max_s", "old members: longest stop on kept partitions (worst of 3)", "s"),
        (
            "kept_stop_median_member_s",
            "old members: longest stop on kept partitions (median member)",
            "s",
        ),
        ("steady_gap_max_s", "before the join: longest gap (the floor)", "s"),
        ("moved", "partitions that changed owner", ""),
    ]:
        print(f"| {label} | " + " | ".join(fmt(summary[m][key], unit) for m in shown) + " |")
    for mode, why in skipped.items():
        print(f"{LABELS[mode]}: not run, {why}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "a fourth member joins a group of 3 consuming 12 partitions",
                "args": {k: str(v) for k, v in vars(args).items()},
                "machine": machine_info(),
                "summary": summary,
                "assignor_timings": timings,
                "skipped": skipped,
                "trials": trials,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
