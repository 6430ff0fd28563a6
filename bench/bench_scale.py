"""Scale: N partitions at replication factor 3 on 3 brokers (issue 33 item 2).

Why: issue 33 asks that 50,000 partitions (then 200,000) at RF 3 on three
brokers over a real ZooKeeper be created with full ISRs in 60 s, idle at 5 %
of a core per broker, cost at most 8 KB of RSS per replica, answer a Metadata
request for every partition in 1 s, fail over a killed leader's partitions
within the session timeout plus 4 s, and get every ISR full again within 60 s
of the killed broker's restart. This measures each figure for a given
partition count, on this machine, and prints it against its target.

What (one three-broker ``LocalCluster`` of ``bench_replication.py``: real
``headwater serve`` processes on a real ZooKeeper), phase by phase:

1. baseline: RSS and CPU of each empty broker (``/proc/PID/stat`` and
   ``/proc/PID/status``; child processes, if a broker has any, are counted in
   and reported);
2. create: K topics holding N partitions at RF 3 in one CreateTopics request;
   the time until one Metadata request shows every partition with a leader and
   an ISR of 3, and (reported apart) until the brokers' metrics count all 3N
   replicas in place;
3. idle: each broker's CPU (utime+stime delta over wall time) sampled every
   second for ``--idle-seconds``, mean % of a core per broker; RSS per
   replica beyond the empty broker, (RSS now - baseline) / replicas hosted;
4. metadata: a Metadata request for all topics (``list_topics``), median of 3;
5. failover: the broker leading the most partitions is ``kill -9``'d while
   an idempotent ``acks=all`` producer writes to every partition it led (one
   record each before the kill; after it, one record each, re-sent on a
   failed delivery, round robin); the time until every one of them has
   acknowledged a record produced after the kill;
6. restart: the killed broker is started again; the time until every ISR is
   full (from its launch, and from its ``listening`` line).

A sampler records each broker's CPU and RSS every second through all phases
(``timeline`` in the JSON). A figure that could not be measured (a phase
timed out or was skipped) is reported as such, never estimated.

Run: ``nice -n 10 .venv/bin/python bench/bench_scale.py --partitions 10000``
(options: ``--session-ms``, ``--topics``, ``--idle-seconds``,
``--skip-failover``, ``--skip-restart``, ``--skip-metadata``,
``--profile-idle SECONDS``, ``--profile-failover SECONDS``,
``--profile-restart SECONDS``, ``--keep-logs DIR``,
``--producer-override KEY=VALUE``, ``--help``).
``--profile-idle`` runs ``py-spy record`` against every broker for that long
after the idle sampling (not during it: the sampler would count py-spy's
pauses), and prints each broker's top functions by own and by total samples;
the raw collapsed stacks are written next to the JSON.
Prints each phase as it ends and a final table; writes
bench/results/scale-<N>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_replication import LocalCluster
from brokers import ScratchDir, machine_info
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

RESULTS_DIR = Path(__file__).parent / "results"
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")

# -- per-process figures from /proc ------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every child process of ``pid``, recursively (``/proc/PID/task/*/children``)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            with contextlib.suppress(OSError):
                for child in Path(f"/proc/{parent}/task/{tid}/children").read_text().split():
                    found.append(int(child))
                    todo.append(int(child))
    return found


def _cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def process_figures(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, RSS bytes, number of processes) of a broker and its children."""
    cpu = 0.0
    rss = 0
    pids = [pid, *descendants(pid)]
    counted = 0
    for p in pids:
        with contextlib.suppress(OSError, ValueError):
            cpu += _cpu_s(p)
            rss += _rss_bytes(p)
            counted += 1
    return cpu, rss, counted


class Sampler:
    """Each live broker's CPU (% of a core over the last second) and RSS, every second."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.phase = "start"
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._t0 = time.monotonic()

    def _run(self) -> None:
        last: dict[int, tuple[float, float]] = {}  # broker -> (wall, cpu s)
        while not self._stop.wait(1.0):
            now = time.monotonic()
            row: dict[str, Any] = {"t": round(now - self._t0, 2), "phase": self.phase}
            for i, broker in enumerate(self.cluster.brokers):
                proc = broker.proc
                if proc is None or proc.poll() is not None:
                    last.pop(i, None)
                    row[str(i)] = None
                    continue
                try:
                    cpu, rss, _n = process_figures(proc.pid)
                except OSError:
                    row[str(i)] = None
                    continue
                pct = None
                if i in last:
                    wall0, cpu0 = last[i]
                    pct = round(100 * (cpu - cpu0) / (now - wall0), 1)
                last[i] = (now, cpu)
                row[str(i)] = {"cpu_pct": pct, "rss_mb": round(rss / 2**20, 1)}
            self.rows.append(row)

    def summary(self, phase: str) -> str:
        """Per broker: mean and max CPU %, last RSS, over one phase's samples."""
        parts = []
        for i in range(len(self.cluster.brokers)):
            cells = [r[str(i)] for r in self.rows if r["phase"] == phase and r.get(str(i))]
            pcts = [c["cpu_pct"] for c in cells if c["cpu_pct"] is not None]
            if not cells:
                parts.append(f"b{i}: -")
                continue
            mean = statistics.fmean(pcts) if pcts else float("nan")
            top = max(pcts) if pcts else float("nan")
            parts.append(
                f"b{i}: cpu mean {mean:.0f}% max {top:.0f}%, rss {cells[-1]['rss_mb']:.0f} MB"
            )
        return "; ".join(parts)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# -- cluster state through Metadata -------------------------------------------------------


def metadata(bootstrap: str, timeout_s: float = 60) -> Any:
    """One Metadata request for all topics (a fresh client each time, so never cached)."""
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout_s)


def state_of(md: Any, topics: list[str]) -> dict[str, Any]:
    """Partitions seen, with a leader, with a full ISR; leaders and replicas per broker."""
    seen = led = full = 0
    leaders: dict[int, list[tuple[str, int]]] = {}
    replicas: dict[int, int] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            continue
        for pid, p in t.partitions.items():
            seen += 1
            if p.leader >= 0:
                led += 1
                leaders.setdefault(p.leader, []).append((name, pid))
            if p.leader >= 0 and len(p.isrs) == len(p.replicas) == 3:
                full += 1
            for r in p.replicas:
                replicas[r] = replicas.get(r, 0) + 1
    return {"seen": seen, "led": led, "full": full, "leaders": leaders, "replicas": replicas}


def wait_full_isr(
    bootstrap: str, topics: list[str], n: int, timeout_s: float, start: float
) -> tuple[float | None, dict[str, Any]]:
    """Seconds from ``start`` until one Metadata answer shows all n partitions with full ISRs."""
    deadline = start + timeout_s
    last: dict[str, Any] = {}
    prior: list[tuple[float, int | None]] = []  # (s, partitions with a full ISR)
    while time.monotonic() < deadline:
        try:
            last = state_of(metadata(bootstrap, 30), topics)
        except Exception as exc:  # the cluster is between states
            last = {"error": repr(exc)}
        progress = last.setdefault("progress", [])
        progress.extend(prior)
        prior = progress
        progress.append((round(time.monotonic() - start, 1), last.get("full")))
        if last.get("full") == n:
            return time.monotonic() - start, last
        time.sleep(0.5)
    return None, last


def wait_replicas_in_place(cluster: LocalCluster, expected: int, timeout_s: float) -> float | None:
    """Seconds until the brokers' PartitionCount metrics sum to ``expected``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        with contextlib.suppress(Exception):
            if cluster.metric("kafka_server_replicamanager_partitioncount") >= expected:
                return time.monotonic() - start
        time.sleep(1)
    return None


# -- phases ----------------------------------------------------------------------------------


def fmt(x: float | None, unit: str = "s", digits: int = 2) -> str:
    return "not measured" if x is None else f"{x:.{digits}f} {unit}".rstrip()


class FailoverWatch:
    """When, after the kill, ZooKeeper lost the broker's registration (its session
    expired) and a survivor's Metadata answer first showed a new leader for every
    partition it led: splits the failover into detection, election and the rest."""

    def __init__(
        self,
        cluster: LocalCluster,
        victim: int,
        owned: list[tuple[str, int]],
        survivors: str,
        killed_at: float,
    ) -> None:
        from kazoo.client import KazooClient

        self.times: dict[str, float | None] = {"registration_gone_s": None, "new_leaders_s": None}
        self._zk = KazooClient(hosts=cluster.zookeeper.connect_string + "/bench", timeout=10)
        self._zk.start(30)
        self._victim = victim
        self._owned = owned
        self._survivors = survivors
        self._killed_at = killed_at
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._registration, daemon=True),
            threading.Thread(target=self._leaders, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _registration(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                if not self._zk.exists(f"/brokers/ids/{self._victim}"):
                    self.times["registration_gone_s"] = time.perf_counter() - self._killed_at
                    return
            time.sleep(0.01)

    def _leaders(self) -> None:
        topics = sorted({t for t, _ in self._owned})
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                md = metadata(self._survivors, 30)
                at = time.perf_counter() - self._killed_at
                if all(
                    0 <= md.topics[t].partitions[p].leader != self._victim
                    for t, p in self._owned
                    if t in topics
                ):
                    self.times["new_leaders_s"] = at
                    return
            time.sleep(0.25)

    def stop(self) -> dict[str, float | None]:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        self._zk.stop()
        self._zk.close()
        return self.times


def failover(
    cluster: LocalCluster,
    topics: list[str],
    session_ms: int,
    timeout_s: float,
    profile_s: int = 0,
    out: Path | None = None,
    producer_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    st = state_of(metadata(cluster.bootstrap), topics)
    victim = max(st["leaders"], key=lambda b: len(st["leaders"][b]))
    owned: list[tuple[str, int]] = st["leaders"][victim]
    survivors = ",".join(b.bootstrap for i, b in enumerate(cluster.brokers) if i != victim)
    print(f"  broker {victim} leads {len(owned)} partitions; warming the producer", flush=True)
    producer = Producer(
        {
            "bootstrap.servers": survivors,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int((timeout_s + 60) * 1000),
            "topic.metadata.refresh.interval.ms": 250,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 250,
            "queue.buffering.max.messages": 1_000_000,
            # librdkafka sends one partition per ProduceRequest (its issue #1700) and,
            # idempotent, at most 5 requests in flight per broker: with thousands of
            # partitions per broker that, not the broker, can bound this phase.
            # ``--producer-override enable.idempotence=false`` lifts the 5.
            **dict(o.split("=", 1) for o in producer_overrides),
        }
    )
    first_ack: dict[tuple[str, int], float] = {}
    outstanding: dict[tuple[str, int], int] = {}
    errors: list[str] = []
    killed_at = float("inf")

    def delivered(err: KafkaError | None, msg: Any) -> None:
        key = (msg.topic(), msg.partition())
        outstanding[key] = outstanding.get(key, 1) - 1
        if err is not None:
            if len(errors) < 20:
                errors.append(str(err))
            return
        produced = float(msg.value())
        if produced >= killed_at and key not in first_ack:
            first_ack[key] = time.perf_counter()

    def send(key: tuple[str, int]) -> None:
        while True:
            try:
                producer.produce(
                    key[0],
                    b"%.6f" % time.perf_counter(),
                    partition=key[1],
                    on_delivery=delivered,
                )
                outstanding[key] = outstanding.get(key, 0) + 1
                return
            except BufferError:
                producer.poll(0.01)

    warm = time.monotonic()
    for key in owned:
        send(key)
    left = producer.flush(120)
    warm_s = time.monotonic() - warm
    print(
        f"  warm-up: {len(owned)} records in {warm_s:.1f} s"
        f" ({left} unacknowledged, {len(errors)} errors)",
        flush=True,
    )
    broker = cluster.brokers[victim]
    assert broker.proc is not None
    killed_at = time.perf_counter()
    broker.proc.kill()
    broker.proc.wait()
    broker.proc = None
    profiling = (
        start_profiles(cluster, profile_s, out, "failover", skip=victim)
        if profile_s and out is not None
        else None
    )
    watch = FailoverWatch(cluster, victim, owned, survivors, killed_at)
    # Round robin: each partition gets a record produced after the kill; one
    # whose delivery failed (and has none in flight) gets another.
    for key in owned:
        send(key)
        producer.poll(0)
    deadline = killed_at + timeout_s
    while len(first_ack) < len(owned) and time.perf_counter() < deadline:
        producer.poll(0.2)
        for key in owned:
            if key not in first_ack and outstanding.get(key, 0) <= 0:
                send(key)
    done = len(first_ack)
    seen = watch.stop()
    times = sorted(t - killed_at for t in first_ack.values())
    with contextlib.suppress(Exception):
        producer.flush(10)
    result: dict[str, Any] = {
        "killed_broker": victim,
        "producer_overrides": list(producer_overrides),
        "partitions_led": len(owned),
        "partitions_written_after_kill": done,
        "warm_up_one_record_each_before_kill_s": warm_s,
        "zookeeper_session_timeout_s": session_ms / 1000,
        "kill_to_every_partition_acked_s": times[-1] if done == len(owned) else None,
        "first_partition_s": times[0] if times else None,
        "p50_partition_s": times[len(times) // 2] if times else None,
        "p90_partition_s": times[int(len(times) * 0.9)] if times else None,
        "kill_to_registration_gone_in_zookeeper_s": seen["registration_gone_s"],
        "kill_to_metadata_shows_every_new_leader_s": seen["new_leaders_s"],
        "delivery_errors_sample": errors,
        "timed_out_after_s": None if done == len(owned) else timeout_s,
    }
    if profiling is not None:
        print(f"  profiles of the survivors, {profile_s} s from the kill:", flush=True)
        result["profile"] = collect_profiles(profiling, profile_s)
    return result


def restart(
    cluster: LocalCluster,
    victim: int,
    topics: list[str],
    n: int,
    timeout_s: float,
    profile_s: int = 0,
    out: Path | None = None,
) -> dict[str, Any]:
    broker = cluster.brokers[victim]
    broker.lines.clear()
    launched = time.monotonic()
    broker.launch()
    profiling = (
        start_profiles(cluster, profile_s, out, "restart", only=victim)
        if profile_s and out is not None
        else None
    )
    # Not ``wait_ready``: the launcher keeps only a broker's first 10,000
    # output lines, and a broker restarting with thousands of replicas prints
    # one line per partition before ``listening on``. Its port accepting a
    # connection is the same moment (it binds, then prints the line).
    ready: float | None = None
    while time.monotonic() - launched < timeout_s:
        proc = broker.proc
        if proc is None or proc.poll() is not None:
            return {
                "port_accepting_s": None,
                "launch_to_full_isr_s": None,
                "error": broker.log_tail(),
            }
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", broker.port), timeout=1),
        ):
            ready = time.monotonic() - launched
            break
        time.sleep(0.1)
    if ready is None:
        return {"port_accepting_s": None, "launch_to_full_isr_s": None, "error": "no port"}
    print(f"  broker {victim} accepts connections after {ready:.1f} s", flush=True)
    full, last = wait_full_isr(cluster.bootstrap, topics, n, timeout_s, launched)
    result: dict[str, Any] = {
        "port_accepting_s": ready,
        "launch_to_full_isr_s": full,
        "port_accepting_to_full_isr_s": None if full is None else full - ready,
        "last_state": {k: last.get(k) for k in ("seen", "led", "full", "error")},
    }
    if profiling is not None:
        print(f"  profile of the restarted broker, {profile_s} s from its launch:", flush=True)
        result["profile"] = collect_profiles(profiling, profile_s)
    return result


def top_functions(raw: str, limit: int = 20) -> dict[str, Any]:
    """Own and total samples per function of py-spy's raw (collapsed) stacks, busiest first."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        if not frames:
            continue
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + count

    def ranked(counts: dict[str, int]) -> list[tuple[str, float]]:
        rows = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
        return [(name, round(100 * c / max(samples, 1), 1)) for name, c in rows]

    return {"samples": samples, "own_pct": ranked(own), "total_pct": ranked(total)}


Profiling = list[tuple[int, Path, "subprocess.Popen[bytes]"]]


def start_profiles(
    cluster: LocalCluster,
    seconds: int,
    out: Path,
    label: str,
    skip: int | None = None,
    only: int | None = None,
) -> Profiling:
    """``py-spy record`` (non-blocking, busy samples only) on every live broker but
    ``skip`` (or on ``only``), in the background, for ``seconds``."""
    spy = Path(sys.executable).with_name("py-spy")
    procs: Profiling = []
    for i, b in enumerate(cluster.brokers):
        if i == skip or b.proc is None or (only is not None and i != only):
            continue
        raw_path = out.with_name(f"{out.stem}-{label}-b{i}.txt")
        cmd = [str(spy), "record", "--nonblocking", "--nolineno", "-r", "100"]
        cmd += ["-f", "raw", "-d", str(seconds), "-p", str(b.pid), "-o", str(raw_path)]
        procs.append((i, raw_path, subprocess.Popen(cmd, stdout=subprocess.DEVNULL)))
    return procs


def collect_profiles(procs: Profiling, seconds: int) -> dict[str, Any]:
    """Per profiled broker the top functions, as % of the busy samples."""
    result: dict[str, Any] = {"seconds": seconds, "brokers": {}}
    for i, raw_path, proc in procs:
        proc.wait(seconds + 60)
        try:
            top = top_functions(raw_path.read_text())
        except OSError as exc:
            top = {"error": repr(exc)}
        result["brokers"][i] = top
        print(f"   profile b{i}: {top.get('samples')} busy samples in {seconds} s", flush=True)
        for name, pct in top.get("own_pct", [])[:12]:
            print(f"     own {pct:5.1f}%  {name}", flush=True)
        for name, pct in top.get("total_pct", [])[:25]:
            print(f"     tot {pct:5.1f}%  {name}", flush=True)
    return result


def profile_brokers(cluster: LocalCluster, seconds: int, out: Path) -> dict[str, Any]:
    """Every broker profiled at once for ``seconds`` (see ``start_profiles``)."""
    return collect_profiles(start_profiles(cluster, seconds, out, "profile"), seconds)


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.partitions
    k = args.topics or max(1, -(-n // 1000))
    per = [n // k + (1 if i < n % k else 0) for i in range(k)]
    topics = [f"scale-{i:04d}" for i in range(k)]
    out: dict[str, Any] = {
        "machine": machine_info(),
        "partitions": n,
        "topics": k,
        "replication_factor": 3,
        "brokers": 3,
        "zookeeper_session_timeout_ms": args.session_ms,
        "overrides": args.override,
        "phases": {},
    }
    phases = out["phases"]
    with (
        ScratchDir(f"hw-bench-scale-{n}-") as root,
        LocalCluster(
            root, 3, args.override, session_timeout_ms=args.session_ms, log_dir=args.keep_logs
        ) as cluster,
        Sampler(cluster) as sampler,
    ):
        # 1. baseline
        sampler.phase = "baseline"
        time.sleep(args.baseline_seconds)
        base: dict[int, dict[str, Any]] = {}
        before = {i: process_figures(b.pid) for i, b in enumerate(cluster.brokers)}
        t0 = time.monotonic()
        time.sleep(5)
        wall = time.monotonic() - t0
        for i, b in enumerate(cluster.brokers):
            cpu, rss, procs = process_figures(b.pid)
            base[i] = {
                "rss_mb": rss / 2**20,
                "cpu_pct": 100 * (cpu - before[i][0]) / wall,
                "processes": procs,
            }
        phases["baseline"] = {"brokers": base}
        print(
            "1. baseline (empty): "
            + "; ".join(
                f"b{i} rss {v['rss_mb']:.0f} MB, cpu {v['cpu_pct']:.1f}%, "
                f"{v['processes']} process{'es' if v['processes'] > 1 else ''}"
                for i, v in base.items()
            ),
            flush=True,
        )

        # 2. create
        sampler.phase = "create"
        admin = cluster.admin()
        new = [NewTopic(t, c, 3) for t, c in zip(topics, per, strict=True)]
        start = time.monotonic()
        futures = admin.create_topics(new, request_timeout=args.phase_timeout)
        create_errors = []
        for name, fut in futures.items():
            try:
                fut.result(args.phase_timeout)
            except Exception as exc:
                create_errors.append(f"{name}: {exc}")
        answered = time.monotonic() - start
        full_s, last = wait_full_isr(cluster.bootstrap, topics, n, args.phase_timeout, start)
        in_place = wait_replicas_in_place(
            cluster, 3 * n, max(10.0, args.phase_timeout - (time.monotonic() - start))
        )
        in_place_s = None if in_place is None else time.monotonic() - start
        phases["create"] = {
            "create_topics_answered_s": answered,
            "full_isr_in_metadata_s": full_s,
            "all_replicas_in_place_s": in_place_s,
            "errors": create_errors[:20],
            "last_state": {k: last.get(k) for k in ("seen", "led", "full", "error")},
            "full_isr_progress": last.get("progress", [])[::4],
        }
        print(
            f"2. create {k} topics, {n} partitions: CreateTopics answered {answered:.1f} s, "
            f"full ISRs in Metadata {fmt(full_s)}, all {3 * n} replicas in place "
            f"{fmt(in_place_s)}; {sampler.summary('create')}",
            flush=True,
        )
        if create_errors:
            print(f"   create errors: {create_errors[:3]}", flush=True)
        if full_s is None:
            print("   not every ISR became full: later phases skipped", flush=True)
            out["timeline"] = sampler.rows
            return out

        # 3. idle
        sampler.phase = "settle"
        time.sleep(args.settle_seconds)
        sampler.phase = "idle"
        hosted = state_of(metadata(cluster.bootstrap), topics)["replicas"]
        samples: dict[int, list[float]] = {i: [] for i in range(3)}
        prev = {
            i: (time.monotonic(), process_figures(b.pid)[0]) for i, b in enumerate(cluster.brokers)
        }
        for _ in range(args.idle_seconds):
            time.sleep(1)
            for i, b in enumerate(cluster.brokers):
                now, cpu = time.monotonic(), process_figures(b.pid)[0]
                samples[i].append(100 * (cpu - prev[i][1]) / (now - prev[i][0]))
                prev[i] = (now, cpu)
        idle: dict[int, dict[str, Any]] = {}
        for i, b in enumerate(cluster.brokers):
            rss_mb = process_figures(b.pid)[1] / 2**20
            replicas = hosted.get(i, 0)
            idle[i] = {
                "cpu_pct_mean": statistics.fmean(samples[i]),
                "cpu_pct_max": max(samples[i]),
                "cpu_pct_samples": [round(s, 1) for s in samples[i]],
                "rss_mb": rss_mb,
                "replicas_hosted": replicas,
                "kb_per_replica": (
                    (rss_mb - base[i]["rss_mb"]) * 1024 / replicas if replicas else None
                ),
            }
        phases["idle"] = {"seconds": args.idle_seconds, "brokers": idle}
        if args.profile_idle:
            sampler.phase = "profile"
            phases["idle"]["profile"] = profile_brokers(
                cluster, args.profile_idle, args.out or RESULTS_DIR / f"scale-{n}.json"
            )
        print(
            f"3. idle {args.idle_seconds} s: "
            + "; ".join(
                f"b{i} cpu {v['cpu_pct_mean']:.1f}% (max {v['cpu_pct_max']:.0f}%), "
                f"rss {v['rss_mb']:.0f} MB, {v['replicas_hosted']} replicas, "
                f"{fmt(v['kb_per_replica'], 'KB/replica', 1)}"
                for i, v in idle.items()
            ),
            flush=True,
        )

        # 4. metadata
        if not args.skip_metadata:
            sampler.phase = "metadata"
            client = cluster.admin()
            client.list_topics(timeout=60)  # connected before the clock starts
            times = []
            for _ in range(3):
                t = time.perf_counter()
                md = client.list_topics(timeout=60)
                times.append(time.perf_counter() - t)
            counted = sum(len(md.topics[t].partitions) for t in topics if t in md.topics)
            phases["metadata"] = {
                "median_s": statistics.median(times),
                "all_s": times,
                "partitions_in_answer": counted,
            }
            print(
                f"4. metadata for all topics ({counted} partitions): median "
                f"{statistics.median(times):.3f} s of {[round(x, 3) for x in times]}",
                flush=True,
            )

        # 5. failover, 6. restart
        if not args.skip_failover:
            sampler.phase = "failover"
            fo = failover(
                cluster,
                topics,
                args.session_ms,
                args.phase_timeout,
                args.profile_failover,
                args.out or RESULTS_DIR / f"scale-{n}.json",
                args.producer_override,
            )
            phases["failover"] = fo
            print(
                f"5. failover: killed broker {fo['killed_broker']} leading "
                f"{fo['partitions_led']}; every partition acked after "
                f"{fmt(fo['kill_to_every_partition_acked_s'])} "
                f"(first {fmt(fo['first_partition_s'])}, p50 {fmt(fo['p50_partition_s'])}, "
                f"p90 {fmt(fo['p90_partition_s'])}; {fo['partitions_written_after_kill']}/"
                f"{fo['partitions_led']} done; session {args.session_ms / 1000:.1f} s; "
                f"registration gone {fmt(fo['kill_to_registration_gone_in_zookeeper_s'])}, "
                f"Metadata shows every new leader "
                f"{fmt(fo['kill_to_metadata_shows_every_new_leader_s'])}); "
                f"{sampler.summary('failover')}",
                flush=True,
            )
            if not args.skip_restart:
                sampler.phase = "restart"
                rs = restart(
                    cluster,
                    fo["killed_broker"],
                    topics,
                    n,
                    args.phase_timeout,
                    args.profile_restart,
                    args.out or RESULTS_DIR / f"scale-{n}.json",
                )
                phases["restart"] = rs
                print(
                    f"6. restart: port open {fmt(rs.get('port_accepting_s'))}, every ISR full "
                    f"{fmt(rs.get('launch_to_full_isr_s'))} after launch; "
                    f"{sampler.summary('restart')}",
                    flush=True,
                )
        sampler.phase = "stop"
        out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        out["timeline"] = sampler.rows
    return out


def verdicts(out: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, measured, target, PASS/MISS/not measured) rows of the issue's six targets."""
    ph = out["phases"]
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: float | None, target: float, shown: str, tgt: str) -> None:
        verdict = "not measured" if value is None else ("PASS" if value <= target else "MISS")
        rows.append((name, shown if value is not None else "not measured", tgt, verdict))

    created = ph.get("create", {}).get("full_isr_in_metadata_s")
    row("created, full ISRs", created, 60, fmt(created), "<= 60 s")
    idle = ph.get("idle", {}).get("brokers")
    worst_cpu = max(v["cpu_pct_mean"] for v in idle.values()) if idle else None
    row("idle CPU per broker (worst)", worst_cpu, 5, fmt(worst_cpu, "%", 1), "<= 5 %")
    kbs = (
        [v["kb_per_replica"] for v in idle.values() if v["kb_per_replica"] is not None]
        if idle
        else []
    )
    worst_kb = max(kbs) if kbs else None
    row("RSS per replica (worst)", worst_kb, 8, fmt(worst_kb, "KB", 1), "<= 8 KB")
    md = ph.get("metadata", {}).get("median_s")
    row("full Metadata", md, 1, fmt(md, "s", 3), "<= 1 s")
    fo = ph.get("failover", {})
    session = out["zookeeper_session_timeout_ms"] / 1000
    fo_s = fo.get("kill_to_every_partition_acked_s")
    row("failover, every partition", fo_s, session + 4, fmt(fo_s), f"<= {session + 4:.0f} s")
    rs = ph.get("restart", {}).get("launch_to_full_isr_s")
    row("restart to every ISR full", rs, 60, fmt(rs), "<= 60 s")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--topics", type=int, default=0, help="default: <= 1000 partitions each")
    parser.add_argument("--idle-seconds", type=int, default=30)
    parser.add_argument("--settle-seconds", type=int, default=10, help="before the idle sampling")
    parser.add_argument("--baseline-seconds", type=int, default=5, help="before the baseline")
    parser.add_argument("--phase-timeout", type=float, default=600, help="give up a phase after")
    parser.add_argument("--override", action="append", default=[], help="extra broker config")
    parser.add_argument(
        "--producer-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka config of the failover's producer",
    )
    parser.add_argument("--skip-metadata", action="store_true")
    parser.add_argument("--skip-failover", action="store_true", help="also skips the restart")
    parser.add_argument("--skip-restart", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--profile-idle",
        type=int,
        default=0,
        metavar="SECONDS",
        help="py-spy record every broker this long after the idle sampling",
    )
    parser.add_argument(
        "--profile-failover",
        type=int,
        default=0,
        metavar="SECONDS",
        help="py-spy record the surviving brokers this long from the kill on",
    )
    parser.add_argument(
        "--profile-restart",
        type=int,
        default=0,
        metavar="SECONDS",
        help="py-spy record the restarted broker this long from its launch",
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        metavar="DIR",
        help="write each broker's whole output to DIR/broker-<i>.log",
    )
    args = parser.parse_args()
    started = time.monotonic()
    out = run(args)
    out["wall_s"] = time.monotonic() - started
    rows = verdicts(out)
    out["verdicts"] = [
        dict(zip(("figure", "measured", "target", "verdict"), r, strict=True)) for r in rows
    ]
    print(f"\n{args.partitions} partitions, RF 3, 3 brokers, session {args.session_ms} ms")
    width = max(len(r[0]) for r in rows)
    for name, value, target, verdict in rows:
        print(f"  {name:<{width}}  {value:>14}  {target:>9}  {verdict}")
    path = args.out or RESULTS_DIR / f"scale-{args.partitions}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
