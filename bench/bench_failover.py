"""Unplanned failover: a leader's ``kill -9`` to the first successful ``acks=all`` write.

A three-broker cluster on a real ZooKeeper, one partition with replication
factor 3 and ``min.insync.replicas=2``, and an idempotent ``acks=all``
confluent-kafka producer writing a record every few milliseconds. Each trial
kills the partition's leader with SIGKILL and times how long until a record
produced after the kill is acknowledged (by the new leader, with the ISR's
acknowledgement), then restarts the killed broker and waits for the full ISR.
Whether the killed leader was also the controller is recorded (its death
adds a controller election).

A crash is detected through the broker's ZooKeeper session, so the figure
is expected to be ``zookeeper.session.timeout.ms`` plus the election, the
state write, the watch that tells the new leader, and the producer's
metadata refresh (every 100 ms here, so that the figure is the cluster's and
not the client's refresh interval): the target is the session timeout plus 1 s.

Run: ``.venv/bin/python bench/bench_failover.py`` (defaults: 3,000 and
6,000 ms sessions, 6 trials each, a few minutes); ``--help`` for options.
Prints a table, writes bench/results/failover.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster
from brokers import ScratchDir, machine_info
from confluent_kafka import Producer

RESULTS = Path(__file__).parent / "results" / "failover.json"
TOPIC = "failover"


class SteadyWriter:
    """Produces a record every ``interval_s``; remembers when each was acknowledged."""

    def __init__(self, bootstrap: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self.acked: list[tuple[float, float]] = []  # (produced at, acknowledged at)
        self.failed = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 120_000,
                "topic.metadata.refresh.interval.ms": 100,
                "retry.backoff.ms": 20,
                "retry.backoff.max.ms": 100,
            }
        )
        self._thread = threading.Thread(target=self._run, name="steady-writer", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            produced = time.perf_counter()

            def done(err: object, _msg: object, produced: float = produced) -> None:
                if err is None:
                    self.acked.append((produced, time.perf_counter()))
                else:
                    self.failed += 1

            with contextlib.suppress(BufferError):
                self._producer.produce(TOPIC, value=b"%.6f" % produced, on_delivery=done)
            self._producer.poll(self.interval_s)

    def first_ack_of_a_record_produced_after(self, t: float) -> float | None:
        after = [acked for produced, acked in list(self.acked) if produced >= t]
        return min(after) if after else None

    def __enter__(self) -> SteadyWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(60)


class ZooKeeperClock:
    """When ZooKeeper itself saw each step: the dead broker's registration gone
    (its session expired) and the partition's new state (the controller's
    election), polled every few milliseconds on a session of its own."""

    def __init__(self, connect: str) -> None:
        from kazoo.client import KazooClient

        self._zk = KazooClient(hosts=connect, timeout=10)
        self._zk.start(30)

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

    def times(
        self, broker: int, old_epoch: int, start: float, timeout_s: float = 60
    ) -> tuple[float, float]:
        """(registration gone, new leader epoch written), seconds after ``start``."""
        gone = elected = None
        state_path = f"/brokers/topics/{TOPIC}/partitions/0/state"
        deadline = time.perf_counter() + timeout_s
        while (gone is None or elected is None) and time.perf_counter() < deadline:
            now = time.perf_counter()
            if gone is None and not self._zk.exists(f"/brokers/ids/{broker}"):
                gone = now - start
            if elected is None:
                data, _ = self._zk.get(state_path)
                if json.loads(data)["leader_epoch"] > old_epoch:
                    elected = now - start
            time.sleep(0.005)
        return (gone if gone is not None else -1.0), (elected if elected is not None else -1.0)

    def leader_epoch(self) -> int:
        data, _ = self._zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")
        return int(json.loads(data)["leader_epoch"])


def partition_state(cluster: LocalCluster) -> tuple[int, set[int], int]:
    """(leader, ISR, controller) as the live brokers tell a client."""
    admin = cluster.admin()
    md = admin.list_topics(TOPIC, timeout=10)
    p = md.topics[TOPIC].partitions[0]
    controller = int(admin.describe_cluster(request_timeout=10).result().controller.id)
    return int(p.leader), set(p.isrs), controller


def wait_until(what: str, check: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # the cluster is between states
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}; last: {last!r}")


def run_session(session_ms: int, trials: int, interval_s: float) -> dict[str, Any]:
    overrides = ["replica.lag.time.max.ms=10000", "auto.leader.rebalance.enable=false"]
    with (
        ScratchDir(f"hw-bench-failover-{session_ms}-") as root,
        LocalCluster(root, 3, overrides, session_timeout_ms=session_ms) as cluster,
    ):
        cluster.create_topic(TOPIC, 1, 3, **{"min.insync.replicas": "2"})
        rows: list[dict[str, Any]] = []
        zk = ZooKeeperClock(cluster.zookeeper.connect_string + "/bench")
        with SteadyWriter(cluster.bootstrap, interval_s) as writer:
            wait_until("first writes", lambda: len(writer.acked) > 20)
            for trial in range(trials):
                leader, _isr, controller = partition_state(cluster)
                broker = cluster.brokers[leader]
                assert broker.proc is not None
                old_epoch = zk.leader_epoch()
                killed_at = time.perf_counter()
                broker.proc.kill()
                broker.proc.wait()
                broker.proc = None
                gone_s, elected_s = zk.times(leader, old_epoch, killed_at)
                first = wait_until(
                    "a write after the kill",
                    lambda t=killed_at: writer.first_ack_of_a_record_produced_after(t),
                )
                seconds = first - killed_at
                rows.append(
                    {
                        "trial": trial,
                        "killed": leader,
                        "killed_was_controller": leader == controller,
                        "kill_to_registration_gone_s": gone_s,
                        "kill_to_new_state_in_zookeeper_s": elected_s,
                        "kill_to_first_acks_all_write_s": seconds,
                    }
                )
                print(
                    f"  session {session_ms} ms, trial {trial}: killed broker {leader}"
                    f"{' (controller)' if leader == controller else ''}: "
                    f"session gone {gone_s:.2f} s, new leader in ZooKeeper {elected_s:.2f} s, "
                    f"first acks=all write {seconds:.2f} s",
                    flush=True,
                )
                broker.lines.clear()  # its readiness line is looked for afresh
                broker.start(timeout=120)
                wait_until(
                    "the full ISR again",
                    lambda: len(partition_state(cluster)[1]) == 3,
                )
        zk.close()
        figures = [r["kill_to_first_acks_all_write_s"] for r in rows]
        return {
            "zookeeper_session_timeout_ms": session_ms,
            "trials": rows,
            "min_s": min(figures),
            "median_s": statistics.median(figures),
            "max_s": max(figures),
            "max_over_session_s": max(figures) - session_ms / 1000,
            "within_session_plus_1s": max(figures) <= session_ms / 1000 + 1,
            "median_session_gone_s": statistics.median(
                r["kill_to_registration_gone_s"] for r in rows
            ),
            "median_new_state_s": statistics.median(
                r["kill_to_new_state_in_zookeeper_s"] for r in rows
            ),
            "producer_failures": writer.failed,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--session-ms", type=int, action="append", help="zookeeper.session.timeout.ms values"
    )
    parser.add_argument("--trials", type=int, default=6, help="kills per session timeout")
    parser.add_argument("--interval-ms", type=float, default=5.0, help="between two writes")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": machine_info(), "sessions": []}
    for session_ms in args.session_ms or [3000, 6000]:
        print(f"== zookeeper.session.timeout.ms={session_ms}", flush=True)
        r = run_session(session_ms, args.trials, args.interval_ms / 1000)
        result["sessions"].append(r)
        print(
            f"  kill -9 to first acks=all write: min {r['min_s']:.2f} s, "
            f"median {r['median_s']:.2f} s, max {r['max_s']:.2f} s "
            f"(session {session_ms / 1000:.1f} s; max - session = "
            f"{r['max_over_session_s']:+.2f} s); producer failures {r['producer_failures']}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
