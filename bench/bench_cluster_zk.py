"""Times the ZooKeeper side of the cluster with 10,000 partitions on a real ZooKeeper.

Why: a broker's ``ClusterView`` reads every partition state at start and keeps
one watch per state, and the controller writes every state at topic creation
and re-elects leaders when a broker goes. These are the steps whose cost grows
with the partition count; ZooKeeper round trips, not Python, are expected to
dominate, which is why all of them pipeline their requests.

Measures (four brokers' sessions, one topic of N partitions, replication factor 3):
- controller: time from writing the topic to all N initial states written;
- failover, controller only: broker 4's session closes; time until every
  partition it led has a new leader and the controller is idle;
- view start: pipelined read of topics and brokers, and of N states through
  the requests that arm their N watches;
- failover seen by a view: broker 1's session closes; time until the view
  (same process, so it competes with the controller for the GIL) shows no
  partition led by broker 1, and the number of ``ClusterChange`` batches;
- the server's watch count (``wchs``).

Run: ``.venv/bin/python bench/bench_cluster_zk.py [--partitions N]``.
Prints the figures and writes bench/results/cluster_zk.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from pathlib import Path

from headwater.cluster.cluster_view import ClusterChange, ClusterView
from headwater.cluster.controller import Controller, create_topic
from headwater.cluster.store import BrokerRegistration, ZkClusterStore
from headwater.cluster.zookeeper_server import ZooKeeperServer, four_letter_word

RESULTS = Path(__file__).parent / "results" / "cluster_zk.json"


def wait_until(check: object, timeout: float = 300.0) -> float:
    start = time.perf_counter()
    while not check():  # type: ignore[operator]
        if time.perf_counter() - start > timeout:
            raise TimeoutError("condition not met")
        time.sleep(0.01)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    args = parser.parse_args()
    n = args.partitions
    results: dict[str, object] = {"partitions": n, "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer(Path(tmp) / "zk") as server:
        connect = f"{server.connect_string}/bench"
        stores = {}
        for broker_id in (1, 2, 3, 4):
            store = ZkClusterStore(connect, session_timeout_ms=6000)
            store.start(timeout=10)
            store.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id))
            stores[broker_id] = store
        controller = Controller(stores[2], 2, auto_leader_rebalance_enable=False)
        controller.start()
        wait_until(lambda: controller.is_active, 10)
        reader = stores[3]

        start = time.perf_counter()
        create_topic(reader, "big", n, 3)
        wait_until(lambda: controller.wait_idle(1) and len(reader.partition_states(
            [("big", p) for p in (0, n // 2, n - 1)])) == 3)  # fmt: skip
        created = time.perf_counter() - start
        results["controller_initial_states_s"] = round(created, 3)
        print(f"controller: {n} initial partition states in {created:.2f} s")

        # Controller alone (nothing else in this process): broker 4 goes away.
        states = reader.partition_states([("big", p) for p in range(n)])
        led_by_4 = [k for k, s in states.items() if s.leader == 4]
        t0 = time.perf_counter()
        stores.pop(4).close()

        def all_moved() -> bool:
            got = reader.partition_states([led_by_4[-1], led_by_4[0]])
            return all(s.leader != 4 for s in got.values())

        wait_until(all_moved)
        wait_until(lambda: controller.wait_idle(1))
        alone = time.perf_counter() - t0
        results["failover_controller_alone_s"] = round(alone, 3)
        results["failover_controller_alone_leaders"] = len(led_by_4)
        print(
            f"failover (controller only): {len(led_by_4)} new leaders and "
            f"{sum(4 in s.isr for s in states.values())} ISR shrinks written in {alone:.2f} s"
        )

        async def view_part() -> None:
            view = ClusterView(reader)
            t0 = time.perf_counter()
            await view.start()
            started = time.perf_counter() - t0
            assert len(view.partition_states) == n, len(view.partition_states)
            results["view_start_s"] = round(started, 3)
            print(f"view: snapshot of {n} partition states + watches in {started:.2f} s")
            await asyncio.sleep(1.0)  # let the watches' first reads settle
            watches = four_letter_word(server.host, server.port, "wchs")
            results["zookeeper_wchs"] = watches.strip()
            print(f"zookeeper wchs: {' '.join(watches.split())}")

            batches: list[ClusterChange] = []
            view.on_change(batches.append)
            led_by_1 = sum(1 for s in view.partition_states.values() if s.leader == 1)
            last_led = max(k for k, s in view.partition_states.items() if s.leader == 1)
            t0 = time.perf_counter()
            await asyncio.to_thread(stores[1].close)

            def last_written() -> bool:
                state = reader.partition_state(*last_led)
                return state is not None and state.leader != 1

            written = await asyncio.to_thread(wait_until, last_written)
            results["failover_controller_written_s"] = round(written, 3)
            print(f"failover: controller wrote {led_by_1} new leaders in about {written:.2f} s")
            while any(s.leader == 1 for s in view.partition_states.values()):
                await asyncio.sleep(0.01)
                if time.perf_counter() - t0 > 300:
                    raise TimeoutError("failover not seen")
            failover = time.perf_counter() - t0
            moved = len(set().union(*(c.partitions_changed for c in batches)))
            results.update(
                failover_partitions=led_by_1,
                failover_s=round(failover, 3),
                failover_change_batches=len(batches),
                failover_partitions_changed=moved,
            )
            print(
                f"failover: {led_by_1} leaders of broker 1 re-elected and seen by the view "
                f"in {failover:.2f} s ({moved} partition changes in {len(batches)} batches)"
            )
            view.stop()

        asyncio.run(view_part())
        controller.stop()
        for store in stores.values():
            store.close()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
