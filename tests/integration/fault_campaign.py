"""A fault campaign against a real 3-broker cluster on its own real ZooKeeper (issue 20).

While three confluent-kafka workloads run, a seeded random schedule injects
one fault at a time:

* ``kill -9`` of a broker (sometimes the controller), restarted a moment later;
* SIGSTOP of a broker past its ZooKeeper session, then SIGCONT;
* a stop of ZooKeeper itself for a few seconds;
* with a ``Network`` (issue 31: every node in its own network namespace on a
  private bridge, ``tests/integration/netns.py``), four network partitions made
  with nftables drop rules: (a) ``cut-leader``, the broker leading the most
  partitions cut from ZooKeeper and its peers while clients still reach it;
  (b) ``cut-pair``, two brokers cut from each other, both still reaching the
  third and ZooKeeper; (c) ``isolate``, one broker cut from everything, clients
  included; (d) ``cut-zookeeper``, ZooKeeper cut from every broker. After each
  heal the time to full ISRs is measured (at most 30 s).

Workloads:

* **idempotent**: an ``acks=all`` idempotent producer writes numbered records
  to ``src`` (3 partitions), remembering what was acknowledged;
* **transactional**: a producer writes each transaction to 2 of the 3
  partitions of ``tx``, committing or aborting at random;
* **copy loop**: a ``read_committed`` consumer of ``src`` and a transactional
  producer copy every record to ``dst`` with ``send_offsets_to_transaction``
  (consume -> transform -> produce, exactly once).

After the faults the cluster heals (every broker up, ZooKeeper up) and the
checks run: no acknowledged record lost, no duplicate, every committed
transaction whole, no aborted record visible, the copy loop exact, every ISR
full, every acknowledged record at the offset it was acknowledged at, exactly
the broker ZooKeeper names answering as each partition's leader at its epoch,
and, after a clean stop, every replica of every partition byte-identical.

The campaign is plain code (a ``Campaign`` object) so that the test's short
version and a long run share it; the length and seed come from the caller.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from headwater.cluster.zookeeper_server import ZooKeeperServer
from tests.integration.broker_process import free_port
from tests.integration.cluster_process import Cluster, wait_for
from tests.integration.idempotence_forensics import (
    ClientLogHandler,
    LineClock,
    StoredCopy,
    TimedLines,
    is_epoch_bump_duplicate,
    logged_epoch_bumps,
    stored_copies,
    wall,
)
from tests.integration.leadership import short_isrs, stale_leaders
from tests.integration.netns import Network

SESSION_MS = 3000
CAMPAIGN_OVERRIDES = (
    f"zookeeper.session.timeout.ms={SESSION_MS}",
    "transaction.state.log.num.partitions=4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    "offsets.topic.replication.factor=3",
    "transaction.state.log.replication.factor=3",
    "transaction.state.log.min.isr=2",
    "default.replication.factor=3",
    "auto.leader.rebalance.enable=true",
    "leader.imbalance.check.interval.seconds=10",
)
PARTITIONS = 3
CHROOT = "/campaign"

#: The fault kinds: the process faults of issue 20 and the network cuts of issue 31.
PROCESS_FAULTS = ("kill", "kill-controller", "pause", "zookeeper")
NETWORK_FAULTS = ("cut-leader", "cut-pair", "isolate", "cut-zookeeper")
#: How long a cut lasts: past the session and the lag time, so that leaders move.
CUT_S = (8.0, 12.0)
#: Every ISR must be full again this soon after a heal (issue 31).
FULL_ISR_AFTER_HEAL_S = 30.0
#: Node names in a ``Network``: ZooKeeper, brokers b0.., the clients.
ZK_NODE = "zk"
CLIENT_NODE = "cl"


def broker_node(broker_id: int) -> str:
    return f"b{broker_id}"


def campaign_network(prefix: str | None = None, brokers: int = 3) -> Network:
    """The namespaces a partition campaign runs in (not created yet)."""
    return Network([ZK_NODE, *(broker_node(i) for i in range(brokers)), CLIENT_NODE], prefix)


def log(message: str) -> None:
    print(f"[campaign {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- workloads -------------------------------------------------------------------------


class Workload:
    """A thread running ``step`` until stopped; errors that are not the cluster's
    transient answers are kept for the report."""

    name = "workload"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.notes: list[str] = []
        #: What the thread is doing now (and since when): named when it does not stop.
        self.doing = "starting"
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 120) -> None:
        self.stopping.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.notes.append(f"did not stop in time; it was {self.doing}")

    def now_doing(self, what: str) -> None:
        self.doing = f"{what} (since {time.strftime('%H:%M:%S')})"

    def _run(self) -> None:
        try:
            self.run()
        except Exception as exc:  # reported, never silently lost
            self.notes.append(f"crashed: {exc!r}")
            log(f"{self.name} crashed: {exc!r}")

    def run(self) -> None:
        raise NotImplementedError


#: librdkafka lines of the idempotent producer worth a note: its idempotence state
#: machine (drains, epoch bumps, PIDs), sequence errors and anything it warns about.
CLIENT_EVENT = re.compile(
    r"DRAIN|GETPID|IDEMPSTATE|ERRSEQ|DUPSEQ|UNKPID|ERRPID|IMPLICITACK|PID|epoch|[Ss]equence|"
    r"persisted|[Ff]atal|FATAL"
)
#: ``HEADWATER_CAMPAIGN_DUMP=DIR``: every broker line and the transactional producer's
#: librdkafka ``debug=eos`` log, timestamped, are written there at the end of a run.
DUMP_DIR = os.environ.get("HEADWATER_CAMPAIGN_DUMP", "")


def dump_logs(broker_lines: TimedLines, txn_client_log: TimedLines) -> None:
    if not DUMP_DIR:
        return
    os.makedirs(DUMP_DIR, exist_ok=True)
    for name, lines in (("brokers.log", broker_lines), ("transactional.log", txn_client_log)):
        with open(os.path.join(DUMP_DIR, name), "w") as f:
            f.write("\n".join(lines.between(0, float("inf"), limit=10**9)) + "\n")


#: The events that change what a retry means: epoch bumps, sequence errors, fatal ones.
NOTABLE_EVENT = re.compile(
    r"previous PID|epoch bump|bumped epoch|ERRSEQ|DUPSEQ|UNKPID|ERRPID|IMPLICITACK|[Ff]atal|"
    r"FATAL"
)
#: A note from librdkafka's log: reported, but a problem only when it says fatal.
CLIENT_NOTE = "librdkafka: "
#: The librdkafka lines that tell a transaction's story: API calls, state changes,
#: partition registration, EndTxn answers, errors.
TXN_STORY = re.compile(r"TXNAPI|TXNSTATE|ADDPARTS|ENDTXN|TXNERR|TXNCOORD|FATAL|[Ff]atal")


class IdempotentWriter(Workload):
    """``acks=all`` idempotent writes of ``<n>`` to ``src``; remembers the acknowledged.

    librdkafka logs its idempotence state machine (``debug=eos``) into
    ``client_log``: the epoch bumps and sequence errors that explain a duplicate."""

    name = "idempotent"

    def __init__(self, bootstrap: str, rate_per_s: float = 200) -> None:
        super().__init__()
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        #: The offset each acknowledged value was acknowledged at, per partition.
        self.acked_offsets: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        #: Values acknowledged without an offset: librdkafka acks a request that failed
        #: "possibly persisted" implicitly when a later one of the partition succeeds
        #: (IMPLICITACK: the broker took the later sequence, so it has the earlier
        #: ones), and a DUPLICATE_SEQUENCE_NUMBER answer, with no offset either.
        self.acked_without_offset: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.failed = 0
        self.interval = 1 / rate_per_s
        self.client_log = TimedLines()
        logger = logging.getLogger(f"campaign.idempotent.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_NotingHandler(self, self.client_log))
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "log_level": 7,
                "debug": "eos",
                "logger": logger,
            }
        )

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            self.notes.append(f"delivery failed: {err} (value {msg.value()!r})")
            return
        value, offset = int(msg.value()), msg.offset()
        self.acked[msg.partition()].append(value)
        if offset is None:  # librdkafka's delivery report carries no offset
            self.acked_without_offset[msg.partition()].append(value)
        else:
            self.acked_offsets[msg.partition()][value] = offset

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            with contextlib.suppress(BufferError):
                self.producer.produce(
                    "src", value=str(n).encode(), partition=n % PARTITIONS, on_delivery=self._done
                )
                n += 1
            self.producer.poll(self.interval)
        remaining = self.producer.flush(300)
        if remaining:
            self.notes.append(f"{remaining} records never delivered")


class _NotingHandler(ClientLogHandler):
    """Every librdkafka line into the writer's ``client_log``; the idempotence events
    and warnings also into its notes (with the time), so the report shows them."""

    def __init__(self, writer: Workload, into: TimedLines) -> None:
        super().__init__(into, "librdkafka idempotent")
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        message = record.getMessage()
        if record.levelno >= logging.WARNING or CLIENT_EVENT.search(message):
            self.writer.notes.append(f"{CLIENT_NOTE}{wall(record.created)} {message}")


@dataclass
class TxnOutcome:
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)


def is_fatal(exc: KafkaException) -> bool:
    error = exc.args[0]
    return bool(getattr(error, "fatal", lambda: False)())


class TransactionalWriter(Workload):
    """Transactions of 2 x 5 records over 2 of the 3 partitions of ``tx``, committed
    or aborted at random; a failed commit is retried or aborted as librdkafka says."""

    name = "transactional"

    def __init__(self, bootstrap: str, seed: int) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)
        self.outcome = TxnOutcome()
        self.fatal = 0
        #: librdkafka's transaction state machine (``debug=eos``), timestamped: a fatal
        #: error's transaction is reported with its lines (``fatal_story``).
        self.client_log = TimedLines()
        self.fatal_story: list[str] = []
        self.producer = self._producer()

    def _producer(self) -> Producer:
        logger = logging.getLogger(f"campaign.transactional.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        if not logger.handlers:
            logger.addHandler(ClientLogHandler(self.client_log, "librdkafka transactional"))
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "campaign-txn",
                "transaction.timeout.ms": 20_000,
                "message.timeout.ms": 20_000,
                "log_level": 7,
                "debug": "eos",
                "logger": logger,
            }
        )
        self._retry(lambda: producer.init_transactions(30))
        return producer

    def _retry(self, action: Callable[[], Any]) -> None:
        while True:
            try:
                action()
                return
            except KafkaException as exc:
                if is_fatal(exc) or (self.stopping.is_set() and not exc.args[0].retriable()):
                    raise
                time.sleep(0.5)

    def run(self) -> None:
        txn = 0
        while not self.stopping.is_set():
            txn += 1
            pair = tuple(self.rng.sample(range(PARTITIONS), 2))
            self.outcome.partitions[txn] = (pair[0], pair[1])
            commit = self.rng.random() < 0.7
            began = time.time()
            self.now_doing("begin_transaction/produce")
            try:
                self.producer.begin_transaction()
                for i in range(10):
                    self.producer.produce("tx", value=f"{txn}:{i}".encode(), partition=pair[i % 2])
                self._end(txn, commit)
            except KafkaException as exc:
                self.outcome.unknown.add(txn)
                if is_fatal(exc):
                    self.fatal += 1
                    self.notes.append(f"fatal in {self.doing}, transaction {txn}: {exc}")
                    self.fatal_story += [
                        f"librdkafka's transaction lines of transaction {txn} ({self.doing}):",
                        *self.client_log.between(began - 0.5, time.time(), keep=TXN_STORY.search),
                    ]
                    self.producer = self._producer()
                    continue
                self._settle(txn)
            time.sleep(0.05)

    def _end(self, txn: int, commit: bool) -> None:
        if commit:
            self.now_doing("commit_transaction")
            self.producer.commit_transaction(30)
            self.outcome.committed.add(txn)
        else:
            # librdkafka sends EndTxn(abort) once it has *sent* an AddPartitionsToTxn,
            # even one the coordinator refused: its handler counts every answer but
            # success as "maybe received" (rdkafka_txnmgr.c, txn_req_cnt). A refusal is
            # CONCURRENT_TRANSACTIONS while the previous commit's markers are still being
            # written, and the coordinator, still at PrepareCommit or CompleteCommit of
            # that commit, answers the abort INVALID_TXN_STATE, as Kafka's does
            # (TransactionCoordinator.endTransaction); librdkafka makes it fatal
            # (confluentinc/librdkafka#4849, open). Faults slow the markers and widen the
            # window. Delivering the records first means the coordinator took the
            # partitions, so the abort ends a transaction it knows.
            self.now_doing("flush before abort_transaction")
            self.producer.flush(30)
            self.now_doing("abort_transaction")
            self.producer.abort_transaction(30)
            self.outcome.aborted.add(txn)

    def _settle(self, txn: int) -> None:
        """After a failed begin/produce/commit: abort (or finish) until librdkafka is ready."""
        for _ in range(40):
            try:
                self.producer.abort_transaction(30)
                return
            except KafkaException as exc:
                if is_fatal(exc):
                    self.fatal += 1
                    self.notes.append(f"fatal while aborting: {exc}")
                    self.producer = self._producer()
                    return
                error = exc.args[0]
                if "No transaction" in str(error) or "not in" in str(error).lower():
                    return  # nothing to abort
                time.sleep(0.5)
        self.notes.append(f"transaction {txn} never settled")


#: Answers of a group coordinator that is moving (librdkafka does not always mark
#: them retriable on OffsetFetch).
COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)

#: How long the copy loop's new producer may take to initialise (a fence during
#: faults waits for the coordinator's abort to complete: seconds, not minutes).
REINIT_S = 120.0


class ReinitFailed(Exception):
    """The copy loop's new producer never got through init_transactions."""


#: librdkafka (2.16 here) can block in send_offsets_to_transaction far past its
#: timeout: its group-coordinator request waits for a broker state change that a
#: healed cluster never makes (confluentinc/librdkafka#5456: the coordinator
#: request's timeout is never checked). Seen in this campaign after a broker was
#: frozen: the broker side was done (the transaction CompleteAbort, TxnOffsetCommit
#: answered), the call never returned, and only dropping the client's
#: connections woke it. Past this, the copy loop gives that producer up.
CLIENT_HANG_S = 60.0


class ClientHung(Exception):
    """A librdkafka call did not return in ``CLIENT_HANG_S``."""


def bounded_call(call: Callable[[], Any], limit_s: float, what: str) -> Any:
    """``call()`` on a helper thread, waited for at most ``limit_s`` (a blocked C
    call cannot be interrupted: the thread is left to it)."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"copy-loop {what}", daemon=True).start()
    if not done.wait(limit_s):
        raise ClientHung(f"{what} did not return in {limit_s:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class CopyLoop(Workload):
    """read_committed ``src`` -> ``dst`` (value ``copy:<n>``), exactly once."""

    name = "copy-loop"

    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.fatal = 0
        self.aborts = 0
        self.commits = 0
        #: Why transactions failed (librdkafka's error names), for the report.
        self.errors: Counter[str] = Counter()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "campaign-copy",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 30_000,
                "log_level": 2,
            }
        )
        self.consumer.subscribe(["src"])
        #: Every error a re-init got, with its time (for the report).
        self.reinit_errors: list[str] = []
        #: Producers given up while blocked in librdkafka: kept, never destroyed mid-call.
        self.abandoned: list[Producer] = []
        self.producer = self._producer()
        self.caught_up = threading.Event()

    def _producer(self) -> Producer:
        """A new producer of ``campaign-copy`` (after a fence), initialised within
        ``REINIT_S``. Every error on the way is logged with its time and kept, so a
        copy loop that cannot get its producer back says which answer kept it out."""
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "campaign-copy",
                "transaction.timeout.ms": 20_000,
                "message.timeout.ms": 20_000,
                "log_level": 2,
            }
        )
        started = time.monotonic()
        self.now_doing("init_transactions of a new producer")
        errors: list[str] = []
        while True:
            left = started + REINIT_S - time.monotonic()
            if left <= 0:
                raise ReinitFailed(
                    f"init_transactions did not succeed in {REINIT_S:.0f} s; "
                    f"{len(errors)} errors: {errors}"
                )
            try:
                producer.init_transactions(min(30, left))
            except KafkaException as exc:
                error = exc.args[0]
                entry = f"{time.strftime('%H:%M:%S')} {error.name()}: {error.str()}"
                errors.append(entry)
                self.reinit_errors.append(entry)
                log(f"copy-loop: init_transactions failed: {entry}")
                if is_fatal(exc):
                    raise
                time.sleep(0.5)
                continue
            if errors:
                log(
                    f"copy-loop: producer re-initialised after {time.monotonic() - started:.1f} s "
                    f"and {len(errors)} errors"
                )
            self.now_doing("copying")
            return producer

    def _rewind(self) -> None:
        """Back to the committed offsets: the aborted batch is read again. The
        group's coordinator may be moving (NOT_COORDINATOR...): retried, bounded."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        deadline = time.monotonic() + REINIT_S
        while True:
            try:
                committed = self.consumer.committed(assignment, timeout=30)
                break
            except KafkaException as exc:
                error = exc.args[0]
                self.errors[f"{error.name()} (committed offsets)"] += 1
                log(f"copy-loop: reading the committed offsets failed: {error.name()}")
                transient = error.retriable() or error.code() in COORDINATOR_MOVING
                if is_fatal(exc) or not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else 0
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def run(self) -> None:
        drain_deadline: float | None = None
        while True:
            if self.stopping.is_set() and drain_deadline is None:
                drain_deadline = time.monotonic() + 120
            msgs = self.consumer.consume(200, timeout=0.5)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                if drain_deadline is not None and self._at_end():
                    self.caught_up.set()
                    return
                if drain_deadline is not None and time.monotonic() > drain_deadline:
                    self.notes.append("never caught up with src")
                    return
                continue
            try:
                self.now_doing(f"copying {len(msgs)} records in a transaction")
                self.producer.begin_transaction()
                for m in msgs:
                    self.producer.produce(
                        "dst", value=b"copy:" + m.value(), partition=m.partition()
                    )
                positions = self.consumer.position(self.consumer.assignment())
                group = self.consumer.consumer_group_metadata()
                self.now_doing("send_offsets_to_transaction")
                bounded_call(
                    functools.partial(
                        self.producer.send_offsets_to_transaction, positions, group, 30
                    ),
                    CLIENT_HANG_S,
                    "send_offsets_to_transaction",
                )
                self._commit()
                self.commits += 1
            except ClientHung as hung:
                # A new producer of the id fences the blocked one and aborts its
                # transaction (records and offsets alike): nothing of it can count.
                self.aborts += 1
                self.errors["client call hung (librdkafka#5456)"] += 1
                log(f"copy-loop: {hung}; replacing its producer")
                self.abandoned.append(self.producer)
                self.producer = self._producer()
                self.now_doing("rewinding to the committed offsets")
                self._rewind()
            except KafkaException as exc:
                self.aborts += 1
                self.errors[exc.args[0].name()] += 1
                if is_fatal(exc):
                    self.fatal += 1
                    if exc.args[0].code() != KafkaError._FENCED:
                        self.notes.append(f"fatal: {exc}")
                    # Fenced: a transaction that outlived transaction.timeout.ms
                    # (across faults) was aborted by its coordinator with a bumped
                    # epoch, so its producer is fenced, as in Kafka. Counted in
                    # the report (``errors``); the copy must stay exact anyway.
                    self.producer = self._producer()
                else:
                    self._abort()
                self.now_doing("rewinding to the committed offsets")
                self._rewind()

    def _commit(self) -> None:
        for _ in range(4):
            try:
                self.producer.commit_transaction(30)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.retriable() and not error.txn_requires_abort() and not is_fatal(exc):
                    self.errors[f"{error.name()} (commit retried)"] += 1
                    time.sleep(0.2)
                    continue
                raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit never finished"))

    def _abort(self) -> None:
        for attempt in range(10):
            self.now_doing(f"abort_transaction, attempt {attempt + 1}")
            try:
                self.producer.abort_transaction(30)
                return
            except KafkaException as exc:
                self.errors[f"{exc.args[0].name()} (abort)"] += 1
                log(f"copy-loop: abort_transaction failed: {exc.args[0].name()}: {exc}")
                if is_fatal(exc):
                    self.fatal += 1
                    self.producer = self._producer()
                    return
                time.sleep(0.5)

    def _at_end(self) -> bool:
        assignment = self.consumer.assignment()
        if len(assignment) < PARTITIONS:
            return False
        for tp in self.consumer.position(assignment):
            try:
                _low, high = self.consumer.get_watermark_offsets(tp, timeout=10)
            except KafkaException as exc:  # a leader moving: ask again next round
                log(f"copy-loop: high watermark of src-{tp.partition}: {exc.args[0].name()}")
                return False
            if tp.offset < high:
                return False
        return True


# -- faults -----------------------------------------------------------------------------


@dataclass
class FaultLog:
    done: list[str] = field(default_factory=list)
    #: How many of each kind were injected.
    counts: Counter[str] = field(default_factory=Counter)
    #: Seconds from each heal of a network cut to every ISR full: (kind, seconds).
    full_isr_after_heal: list[tuple[str, float]] = field(default_factory=list)
    #: When each fault was in force: (what, wall-clock start, wall-clock end).
    windows: list[tuple[str, float, float]] = field(default_factory=list)

    def active(self, start: float, end: float) -> list[str]:
        """The faults in force at some moment of [start, end] (wall clock), with their times."""
        return [
            f"{what} ({wall(began)}-{wall(ended)})"
            for what, began, ended in self.windows
            if began <= end and ended >= start
        ]


class Faults:
    """Injects one fault at a time on a seeded schedule.

    ``kinds``: the kinds to draw from; each round of ``len(kinds)`` faults takes
    every kind once, in a seeded order, so a short campaign injects each of them.
    """

    def __init__(
        self,
        cluster: Cluster,
        zookeeper: ZooKeeperServer,
        seed: int,
        *,
        network: Network | None = None,
        kinds: tuple[str, ...] = PROCESS_FAULTS,
        full_isrs: Callable[[float], float | None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.zookeeper = zookeeper
        self.rng = random.Random(seed)
        self.log = FaultLog()
        self.network = network
        self.kinds = kinds
        self._round: list[str] = []
        #: When the running network cut was healed (wall clock), for its window.
        self._healed_at: float | None = None
        #: Waits (at most the given seconds) for full ISRs; the seconds it took, or None.
        self.full_isrs = full_isrs
        if network is None and set(kinds) & set(NETWORK_FAULTS):
            raise ValueError("network faults need a Network")

    def _next_kind(self) -> str:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        return self._round.pop(0)

    def one(self) -> None:
        kind = self._next_kind()
        started = time.monotonic()
        began = time.time()
        self._healed_at = None
        if kind in NETWORK_FAULTS:
            what = self._cut(kind)
        elif kind in ("kill", "kill-controller"):
            victim = self._controller() if kind == "kill-controller" else None
            if victim is None:
                victim = self.rng.randrange(len(self.cluster.brokers))
            self.cluster.kill(victim)
            time.sleep(self.rng.uniform(0.5, 3.0))
            self.cluster.restart(victim)
            what = f"kill -9 broker {victim}{' (controller)' if kind == 'kill-controller' else ''}"
        elif kind == "pause":
            victim = self.rng.randrange(len(self.cluster.brokers))
            proc = self.cluster.brokers[victim].proc
            assert proc is not None
            proc.send_signal(signal.SIGSTOP)
            time.sleep(SESSION_MS / 1000 + self.rng.uniform(2.0, 4.0))
            proc.send_signal(signal.SIGCONT)
            what = f"SIGSTOP broker {victim} past its session"
        else:
            self.zookeeper.stop()
            time.sleep(self.rng.uniform(3.0, 8.0))
            self.zookeeper.start()
            what = "ZooKeeper stopped"
        self.log.counts[kind] += 1
        entry = f"{what} ({time.monotonic() - started:.1f} s)"
        self.log.done.append(entry)
        self.log.windows.append((f"{kind}: {what}", began, self._healed_at or time.time()))
        log(entry)

    def _cut(self, kind: str) -> str:
        """One network partition: cut, hold for ``CUT_S``, heal, time the ISRs' return."""
        network = self.network
        assert network is not None
        brokers = list(range(len(self.cluster.brokers)))
        nodes = [broker_node(b) for b in brokers]
        if kind == "cut-leader":
            victim = self._leading_most()
            network.cut_off(broker_node(victim), [ZK_NODE, *nodes])
            what = f"broker {victim} (leading the most partitions) cut from ZooKeeper and peers"
        elif kind == "cut-pair":
            a, b = self.rng.sample(brokers, 2)
            network.cut(broker_node(a), broker_node(b))
            what = f"brokers {a} and {b} cut from each other"
        elif kind == "isolate":
            victim = self.rng.choice(brokers)
            network.cut_off(broker_node(victim), [ZK_NODE, CLIENT_NODE, *nodes])
            what = f"broker {victim} cut from everything, clients included"
        else:
            for node in nodes:
                network.cut(ZK_NODE, node)
            what = "ZooKeeper cut from every broker"
        held = self.rng.uniform(*CUT_S)
        time.sleep(held)
        network.heal()
        self._healed_at = time.time()
        what += f", {held:.1f} s"
        if self.full_isrs is not None:
            took = self.full_isrs(FULL_ISR_AFTER_HEAL_S)
            self.log.full_isr_after_heal.append((kind, took if took is not None else -1.0))
            what += (
                f"; ISRs full {took:.1f} s after the heal"
                if took is not None
                else f"; ISRs NOT full {FULL_ISR_AFTER_HEAL_S:.0f} s after the heal"
            )
        return what

    def _leading_most(self) -> int:
        """The broker leading the most partitions (internal topics too) now."""
        led: Counter[int] = Counter()
        try:
            md = self.cluster.admin().list_topics(timeout=10)
            for tm in md.topics.values():
                for pm in tm.partitions.values():
                    if pm.leader >= 0:
                        led[pm.leader] += 1
        except Exception as exc:
            log(f"cannot read the leaders ({exc!r}); cutting a random broker")
        if not led:
            return self.rng.randrange(len(self.cluster.brokers))
        return led.most_common(1)[0][0]

    def _controller(self) -> int | None:
        try:
            return self.cluster.controller_id()
        except Exception:
            return None


# -- the campaign ------------------------------------------------------------------------


@dataclass
class Report:
    seed: int
    faults: list[str]
    idempotent_acked: int
    transactions: dict[str, int]
    copy_commits: int
    copy_aborts: int
    copy_errors: dict[str, int]
    partitions_compared: int
    problems: list[str]
    fault_counts: dict[str, int] = field(default_factory=dict)
    full_isr_after_heal: list[tuple[str, float]] = field(default_factory=list)
    idempotent_lost: int = 0
    idempotent_duplicated: int = 0
    #: Duplicates whose copies are in successive epochs after a bump librdkafka logged
    #: (docs/reliability.md, "Duplicates from librdkafka's epoch bump"): counted apart.
    idempotent_epoch_bump_duplicated: int = 0
    #: Each duplicate explained: its copies' offsets, producer id/epoch/sequence, the
    #: faults in force, librdkafka's and the brokers' lines around it.
    duplicates: list[str] = field(default_factory=list)
    #: librdkafka's idempotence events (drains, epoch bumps, sequence errors, warnings).
    idempotent_client_events: list[str] = field(default_factory=list)
    #: Offsets the checking consumers were handed twice (one record each, not duplicates).
    redelivered: list[str] = field(default_factory=list)
    #: Records librdkafka acknowledged without an offset (implicit acks): checked for
    #: presence, once, but not for their offset.
    idempotent_acked_without_offset: int = 0
    #: librdkafka's transaction lines (API calls, state changes, registrations, EndTxn
    #: answers) of each transaction that ended in a fatal error.
    transactional_fatal_story: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"seed {self.seed}; {len(self.faults)} faults: {'; '.join(self.faults)}",
            f"faults by kind: {self.fault_counts}",
            f"idempotent records acknowledged: {self.idempotent_acked}, lost: "
            f"{self.idempotent_lost}, duplicated: {self.idempotent_duplicated} (and "
            f"{self.idempotent_epoch_bump_duplicated} after a librdkafka epoch bump)",
            f"librdkafka idempotence events: {len(self.idempotent_client_events)}; notable:",
            *[f"  {e}" for e in self.idempotent_client_events if NOTABLE_EVENT.search(e)][:40],
            *self.duplicates,
            f"offsets a checking consumer delivered twice: {self.redelivered or 'none'}",
            f"idempotent records acknowledged without an offset (librdkafka's implicit ack): "
            f"{self.idempotent_acked_without_offset}",
            "seconds to full ISRs after each heal: "
            + (", ".join(f"{k} {t:.1f}" for k, t in self.full_isr_after_heal) or "none"),
            f"transactions: {self.transactions}",
            f"copy loop: {self.copy_commits} commits, {self.copy_aborts} aborts "
            f"({self.copy_errors or 'no errors'})",
            f"partitions whose replicas were compared byte for byte: {self.partitions_compared}",
            f"problems: {self.problems or 'none'}",
            *self.transactional_fatal_story,
        ]


class Campaign:
    """``network``: run every node in its own namespace of this (created) ``Network``;
    this process must then run in its client namespace (``CLIENT_NODE``)."""

    def __init__(
        self,
        root: Path,
        seed: int,
        *,
        network: Network | None = None,
        kinds: tuple[str, ...] = PROCESS_FAULTS,
    ) -> None:
        self.root = root
        self.seed = seed
        self.network = network
        self.kinds = kinds
        if network is None:
            self.zookeeper = ZooKeeperServer(root / "zookeeper", port=free_port(), tick_time_ms=500)
        else:
            self.zookeeper = ZooKeeperServer(
                root / "zookeeper",
                port=2181,
                host=network.address[ZK_NODE],
                tick_time_ms=500,
                wrapper=network.wrap(ZK_NODE),
            )
        self.cluster: Cluster | None = None
        self.zk_connect = self.zookeeper.connect_string + CHROOT
        #: Offsets a checking consumer delivered a second time (topic-partition@offset):
        #: one record each, reported, not counted as duplicates.
        self.redelivered: list[str] = []

    def __enter__(self) -> Campaign:
        self.zookeeper.start(timeout=120)
        cluster = Cluster(self.root, self.zk_connect, overrides=CAMPAIGN_OVERRIDES)
        if self.network is not None:
            for i, broker in enumerate(cluster.brokers):
                broker.host = self.network.address[broker_node(i)]
                broker.port = 9092
                broker.wrapper = self.network.wrap(broker_node(i))
        self.cluster = cluster
        for b in cluster.brokers:
            b.start(timeout=120)
        wait_for(
            lambda: len(cluster.live_broker_ids()) == len(cluster.brokers),
            timeout=120,
            what="all brokers",
        )
        return self

    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        cluster = self.cluster
        assert cluster is not None
        return {i: (b.host, b.port) for i, b in enumerate(cluster.brokers)}

    def __exit__(self, *exc: object) -> None:
        try:
            if self.cluster is not None:
                self.cluster.stop()
        finally:
            self.zookeeper.stop()

    def run(
        self, fault_seconds: float, gap_s: tuple[float, float] = (3.0, 8.0), min_faults: int = 1
    ) -> Report:
        """Faults for ``fault_seconds`` (and at least ``min_faults`` of them), then the checks."""
        cluster = self.cluster
        assert cluster is not None
        admin = cluster.admin()
        topics = [
            NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
            for t in ("src", "tx", "dst")
        ]
        for future in admin.create_topics(topics, request_timeout=60).values():
            future.result(60)
        for t in ("src", "tx", "dst"):
            wait_for(lambda t=t: cluster.all_have_leaders(t, PARTITIONS), what=f"leaders of {t}")
        idem = IdempotentWriter(cluster.bootstrap)
        txn = TransactionalWriter(cluster.bootstrap, self.seed)
        copy = CopyLoop(cluster.bootstrap)
        workloads: list[Workload] = [idem, txn, copy]
        broker_lines = TimedLines()
        clock = LineClock(cluster.brokers, broker_lines)
        clock.start()
        for w in workloads:
            w.start()
        faults = Faults(
            cluster,
            self.zookeeper,
            self.seed,
            network=self.network,
            kinds=self.kinds,
            full_isrs=self._time_to_full_isrs,
        )
        try:
            wait_for(
                lambda: sum(map(len, idem.acked.values())) > 200,
                timeout=60,
                what="the workloads to run",
            )
            end = time.monotonic() + fault_seconds
            while time.monotonic() < end or len(faults.log.done) < min_faults:
                time.sleep(faults.rng.uniform(*gap_s))
                faults.one()
            log("faults over; healing")
            self._heal()
            time.sleep(3)  # the workloads run on a healthy cluster for a moment
        finally:
            if self.network is not None:
                self.network.heal()
            if not self.zookeeper.running:
                self.zookeeper.start()
            for w in (idem, txn):
                w.stop(300)
            copy.stop(300)
        problems: list[str] = []
        for w in workloads:
            problems += [f"{w.name}: {n}" for n in w.notes if is_problem_note(n)]
        problems += self._full_isrs()
        problems += self._check_leaders()
        idem_problems, lost, dups = self._check_idempotent(idem)
        problems += idem_problems
        problems += [
            f"ISRs not full {FULL_ISR_AFTER_HEAL_S:.0f} s after healing a {kind}"
            for kind, took in faults.log.full_isr_after_heal
            if took < 0
        ]
        problems += self._check_transactions(txn.outcome)
        problems += self._check_copy()
        cluster.stop()
        self.cluster = None
        compared, mismatches = self._check_replicas_identical(cluster)
        problems += mismatches
        clock.stop()
        explained = explain_duplicates(cluster, dups, idem, faults.log, broker_lines)
        problems += [d.text for d in explained if not d.epoch_bump]
        dump_logs(broker_lines, txn.client_log)
        return Report(
            seed=self.seed,
            faults=faults.log.done,
            idempotent_acked=sum(map(len, idem.acked.values())),
            transactions={
                "committed": len(txn.outcome.committed),
                "aborted": len(txn.outcome.aborted),
                "unknown": len(txn.outcome.unknown),
                "fatal": txn.fatal,
            },
            copy_commits=copy.commits,
            copy_aborts=copy.aborts,
            copy_errors=dict(copy.errors),
            partitions_compared=compared,
            problems=problems,
            fault_counts=dict(faults.log.counts),
            full_isr_after_heal=faults.log.full_isr_after_heal,
            idempotent_lost=lost,
            idempotent_duplicated=sum(not d.epoch_bump for d in explained),
            idempotent_epoch_bump_duplicated=sum(d.epoch_bump for d in explained),
            duplicates=[d.text for d in explained],
            idempotent_client_events=[
                n[len(CLIENT_NOTE) :] for n in idem.notes if n.startswith(CLIENT_NOTE)
            ][:500],
            redelivered=self.redelivered,
            idempotent_acked_without_offset=sum(map(len, idem.acked_without_offset.values())),
            transactional_fatal_story=txn.fatal_story[:300],
        )

    # -- healing and checks --------------------------------------------------------------

    def _heal(self) -> None:
        cluster = self.cluster
        assert cluster is not None
        if self.network is not None:
            self.network.heal()
        if not self.zookeeper.running:
            self.zookeeper.start()
        for b in cluster.brokers:
            if b.proc is None or b.proc.poll() is not None:
                b.proc = None
                b.start(timeout=120)
            else:
                b.proc.send_signal(signal.SIGCONT)
        wait_for(
            lambda: len(cluster.live_broker_ids()) == len(cluster.brokers),
            timeout=120,
            what="every broker registered",
        )

    def _all_partitions(self) -> dict[tuple[str, int], Any]:
        cluster = self.cluster
        assert cluster is not None
        md = cluster.admin().list_topics(timeout=10)
        return {(t, p): meta for t, tm in md.topics.items() for p, meta in tm.partitions.items()}

    def _isrs_full(self) -> bool:
        """Every partition (internal ones too) led, with every replica in its ISR, as
        ZooKeeper says (a broker's metadata answer may lag behind it)."""
        return not short_isrs(self.zk_connect)

    def _time_to_full_isrs(self, limit_s: float) -> float | None:
        """Seconds until every ISR is full (None: not within ``limit_s``)."""
        started = time.monotonic()
        try:
            wait_for(self._isrs_full, timeout=limit_s, what="full ISRs")
        except AssertionError:
            return None
        return time.monotonic() - started

    def _check_leaders(self) -> list[str]:
        """No broker serves a partition ZooKeeper does not give it at that epoch (asked
        of every broker; a view catching up with a change is given 30 s)."""
        problems: list[str] = []

        def agree() -> bool:
            problems[:] = stale_leaders(self.zk_connect, self.broker_addresses())
            return not problems

        try:
            wait_for(agree, timeout=30, what="leaders as ZooKeeper says")
        except AssertionError:
            return [f"stale leadership: {p}" for p in problems] or ["leaders never checked"]
        return []

    def _full_isrs(self) -> list[str]:
        """Every partition (internal ones too) back at 3 in-sync replicas, without writes."""
        short: dict[tuple[str, int], Any] = {}

        def full() -> bool:
            short.clear()
            short.update(short_isrs(self.zk_connect))
            return not short

        try:
            wait_for(full, timeout=90, what="full ISRs")
        except AssertionError:
            return [f"ISR not full after healing: {dict(sorted(short.items()))}"]
        return []

    def _read(
        self,
        topic: str,
        partition: int,
        committed: bool,
        offsets: dict[int, list[int]] | None = None,
    ) -> list[bytes]:
        """The partition's values, one per offset (a record the consumer delivers again,
        at an offset it already gave, is one record, not a duplicate); ``offsets`` (when
        given) gets every offset of each integer value."""
        cluster = self.cluster
        assert cluster is not None
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": f"campaign-check-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if committed else "read_uncommitted",
                "log_level": 2,
            }
        )
        try:
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            consumer.assign([TopicPartition(topic, partition, low)])
            values: list[bytes] = []
            seen: set[int] = set()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    if msg.offset() in seen:
                        self.redelivered.append(f"{topic}-{partition}@{msg.offset()}")
                        continue
                    seen.add(msg.offset())
                    values.append(msg.value())
                    if offsets is not None:
                        with contextlib.suppress(ValueError):
                            offsets.setdefault(int(msg.value()), []).append(msg.offset())
                    if msg.offset() + 1 >= high:
                        break
                elif msg is None and consumer.position([tp])[0].offset >= high:
                    break
            return values
        finally:
            consumer.close()

    def _check_idempotent(
        self, idem: IdempotentWriter
    ) -> tuple[list[str], int, dict[int, list[int]]]:
        """(problems, acknowledged records lost, values read more than once per partition):
        every acknowledged record present once, at the offset it was acknowledged at.
        Duplicates become problems once explained (``explain_duplicates``)."""
        problems = []
        lost_total = 0
        duplicated: dict[int, list[int]] = {}
        for p in range(PARTITIONS):
            at: dict[int, list[int]] = {}
            read = self._read("src", p, committed=False, offsets=at)
            values = [int(v) for v in read]
            counts = Counter(values)
            dups = sorted(v for v, c in counts.items() if c > 1)
            lost = sorted(set(idem.acked[p]) - set(values))
            # A duplicate's acknowledged copy may be its later one (acknowledged after
            # the retry that wrote it): the record must be at that offset, duplicated
            # or not (the duplicate itself is reported as such).
            moved = sorted(
                v for v, offset in idem.acked_offsets[p].items() if v in at and offset not in at[v]
            )
            lost_total += len(lost)
            if dups:
                duplicated[p] = dups
            if lost:
                problems.append(f"src-{p}: {len(lost)} acknowledged records lost, e.g. {lost[:10]}")
            if moved:
                problems.append(
                    f"src-{p}: {len(moved)} acknowledged records not at their acknowledged "
                    f"offset, e.g. {[(v, idem.acked_offsets[p][v], at[v]) for v in moved[:5]]}"
                )
            # First copies: a duplicate's later copy is reported as a duplicate.
            firsts = list(dict.fromkeys(values))
            if firsts != sorted(firsts):
                problems.append(f"src-{p}: records out of order")
        return problems, lost_total, duplicated

    def _check_transactions(self, outcome: TxnOutcome) -> list[str]:
        problems = []
        seen: dict[int, list[tuple[int, int]]] = {}
        for p in range(PARTITIONS):
            for v in self._read("tx", p, committed=True):
                txn, i = (int(x) for x in v.decode().split(":"))
                seen.setdefault(txn, []).append((p, i))
        for txn, records in seen.items():
            if len(records) != len(set(records)):
                problems.append(f"transaction {txn}: duplicates {records}")
            if txn in outcome.aborted:
                problems.append(f"transaction {txn} was aborted but is visible")
            elif len(set(records)) != 10:
                problems.append(f"transaction {txn}: {len(set(records))} of 10 records visible")
        missing = sorted(outcome.committed - set(seen))
        if missing:
            problems.append(f"committed transactions missing: {missing[:10]}")
        return problems

    def _check_copy(self) -> list[str]:
        problems = []
        for p in range(PARTITIONS):
            src = [int(v) for v in self._read("src", p, committed=True)]
            dst = [int(v.split(b":", 1)[1]) for v in self._read("dst", p, committed=True)]
            # Each src record copied exactly once: as multisets, so that a value src
            # holds twice (a duplicate, reported as such) is expected twice in dst.
            wanted, copied = Counter(src), Counter(dst)
            twice = sorted((copied - wanted).elements())
            if twice:
                problems.append(f"dst-{p}: {len(twice)} records copied twice, e.g. {twice[:10]}")
            missing = sorted((wanted - copied).elements())
            if missing or set(copied) - set(wanted):
                extra = sorted(set(copied) - set(wanted))
                problems.append(
                    f"dst-{p} is not src-{p}: {len(missing)} missing (e.g. {missing[:5]}), "
                    f"{len(extra)} extra"
                )
        return problems

    @staticmethod
    def _check_replicas_identical(cluster: Cluster) -> tuple[int, list[str]]:
        """After a clean stop, the log bytes of each partition on every replica agree:
        (partitions compared, mismatches)."""
        problems = []
        by_partition: dict[str, dict[int, bytes]] = {}
        for broker_id, b in enumerate(cluster.brokers):
            data = b.data_dir
            for part_dir in sorted(p for p in data.iterdir() if p.is_dir() and "-" in p.name):
                segments = sorted(part_dir.glob("*.log"))
                if not segments:
                    continue
                content = b"".join(s.read_bytes() for s in segments)
                by_partition.setdefault(part_dir.name, {})[broker_id] = content
        compared = 0
        for name, copies in sorted(by_partition.items()):
            if len(copies) < 2:
                continue
            compared += 1
            if len(set(copies.values())) > 1:
                sizes = {b: len(c) for b, c in copies.items()}
                problems.append(f"replicas of {name} differ: bytes {sizes}")
        if not compared:
            problems.append("no partition found on two replicas to compare")
        return compared, problems


def is_problem_note(note: str) -> bool:
    """A workload's note is a problem unless it is a delivery failure (counted apart)
    or a librdkafka log line that is not fatal (kept for the report)."""
    if note.startswith("delivery failed"):
        return False
    if note.startswith(CLIENT_NOTE):
        return "fatal" in note.lower()
    return True


@dataclass
class Duplicate:
    """One duplicated value with what explains it."""

    partition: int
    value: int
    epoch_bump: bool  # copies in successive epochs after a logged bump
    text: str


#: Broker lines shown around a duplicate: about its partition, sessions, step-downs,
#: and anything logged at WARNING or louder.
def _relevant_broker_line(partition: int) -> Callable[[str], bool]:
    name = f"src-{partition}"

    def keep(line: str) -> bool:
        return (
            name in line
            or "session" in line
            or "stepping down" in line
            or line.startswith(("WARNING", "ERROR", "CRITICAL"))
        )

    return keep


def acknowledged(idem: IdempotentWriter, partition: int, value: int) -> str:
    """How the producer was told ``value`` was written: at which offset, or not."""
    if value in idem.acked_offsets[partition]:
        return f"at offset {idem.acked_offsets[partition][value]}"
    if value in idem.acked_without_offset[partition]:
        return "without an offset (librdkafka's implicit ack)"
    return "never"


def explain_duplicates(
    cluster: Cluster,
    duplicated: dict[int, list[int]],
    idem: IdempotentWriter,
    faults: FaultLog,
    broker_lines: TimedLines,
    detailed: int = 3,
) -> list[Duplicate]:
    """Each duplicated value of ``src`` with its stored copies (read from the stopped
    brokers' segment files: offset, producer id, epoch, sequence), the offset it was
    acknowledged at, the faults in force, and, for the first ``detailed`` ones of a
    partition, librdkafka's and the brokers' lines around it."""
    bumps = logged_epoch_bumps(idem.client_log.lines())
    out: list[Duplicate] = []
    for p, values in sorted(duplicated.items()):
        per_broker: dict[int, dict[int, list[StoredCopy]]] = {}
        for broker_id, broker in enumerate(cluster.brokers):
            directory = broker.data_dir / f"src-{p}"
            if directory.is_dir():
                per_broker[broker_id] = stored_copies(directory, values)
        for n, value in enumerate(values):
            held = {b: copies.get(value, []) for b, copies in per_broker.items()}
            reference = max(held.values(), key=len, default=[])
            agree = sorted(b for b, c in held.items() if c == reference)
            epoch_bump = is_epoch_bump_duplicate(reference, bumps)
            kind = (
                "copies in successive epochs after a librdkafka epoch bump"
                if epoch_bump
                else "NOT explained by an epoch bump"
            )
            lines = [
                f"src-{p} value {value} stored {len(reference)} times ({kind}); "
                f"acknowledged {acknowledged(idem, p, value)}; "
                f"on brokers {agree}:",
                *[f"    {c.describe()}" for c in reference],
            ]
            lines += [
                f"    broker {b} differs: {[c.describe() for c in c_]}"
                for b, c_ in held.items()
                if b not in agree
            ]
            if reference:
                created = reference[0].timestamp_ms / 1000
                lines.append(
                    f"  faults in force from 10 s before its creation to 60 s after: "
                    f"{faults.active(created - 10, created + 60) or 'none'}"
                )
                lines.append(f"  librdkafka epoch bumps logged: {bumps or 'none'}")
                if n < detailed:
                    client = idem.client_log.between(created - 10, created + 120)
                    lines.append("  librdkafka (debug=eos) from 10 s before to 120 s after:")
                    lines += [f"    {line}" for line in client or ["(nothing)"]]
                    near = broker_lines.between(
                        created - 10, created + 60, keep=_relevant_broker_line(p), limit=80
                    )
                    lines.append(f"  brokers on src-{p}, sessions, warnings, -10 s to +60 s:")
                    lines += [f"    {line}" for line in near or ["(nothing)"]]
            out.append(Duplicate(p, value, epoch_bump, "\n".join(lines)))
    return out


def partition_campaign(
    prefix: str, root: str, seed: int, seconds: float, kinds: list[str], min_faults: int
) -> dict[str, Any]:
    """The campaign on the namespaces of ``campaign_network(prefix)`` (made by the
    caller), run inside its client namespace (``netns.run_in``); the report as a dict."""
    network = campaign_network(prefix)
    with Campaign(Path(root), seed, network=network, kinds=tuple(kinds)) as campaign:
        report = campaign.run(seconds, min_faults=min_faults)
    for line in report.lines():
        log(line)
    return dataclasses.asdict(report)
