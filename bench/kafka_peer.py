"""Apache Kafka as a benchmark peer: jars from Maven Central, run as a real KRaft process.

Why: a user choosing between Headwater and Kafka asks how the two compare on
their own hardware (issue 33), so the throughput, latency and replication
benches run Kafka beside Headwater and tansu, with the same client.

How:

* **Fetch.** ``org.apache.kafka:kafka_2.13:<version>`` and its runtime
  dependencies (plus log4j's slf4j binding, so the broker's log can tell when
  it is up) are copied by ``mvn dependency:copy-dependencies`` from a
  throwaway pom into ``bench/.kafka-cache/<version>/lib`` (git-ignored, never
  committed), once; later runs reuse the cache. Nothing in CI fetches it.
* **Run.** ``java ... kafka.Kafka server.properties`` in KRaft combined mode
  (``process.roles=broker,controller``), with static voters
  (``controller.quorum.voters``), listeners ``PLAINTEXT`` and ``CONTROLLER``
  on free ports of 127.0.0.1 and ``log.dirs`` in the run's scratch space; the
  storage is formatted first with ``kafka.tools.StorageTool format``.
  Everything else is Kafka's default, plus what its shipped single-node
  ``config/server.properties`` sets for one node (internal topics at
  replication factor 1). The JVM gets what ``kafka-server-start.sh`` gives it:
  ``-Xmx1G -Xms1G`` and G1 with ``MaxGCPauseMillis=20``.
* **Clusters.** :class:`KafkaCluster` runs three such nodes, each a voter, so
  replicated topics (RF 3) work as on a real cluster.

The version is :data:`DEFAULT_VERSION` unless ``HEADWATER_BENCH_KAFKA_VERSION``
names another; ``HEADWATER_BENCH_JAVA`` picks the ``java`` binary (Kafka 4.x
brokers need Java 17 or newer).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Self

from brokers import BrokerUnderTest, free_port

#: The newest kafka_2.13 that Maven Central serves here (4.0.0 ... 4.4.0).
DEFAULT_VERSION = "4.4.0"
CACHE = Path(__file__).resolve().parent / ".kafka-cache"
#: What kafka-server-start.sh and kafka-run-class.sh give the broker's JVM.
HEAP_OPTS = ("-Xmx1G", "-Xms1G")
JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
#: Beside Kafka's own runtime dependencies: an slf4j binding for its log.
EXTRA_ARTIFACTS = (("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.5"),)
LOG4J2_PROPERTIES = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""
READY_LINE = "Kafka Server started"


class KafkaUnavailable(RuntimeError):
    """Kafka cannot be run here: no java or mvn, or the jars could not be fetched."""


def kafka_version() -> str:
    return os.environ.get("HEADWATER_BENCH_KAFKA_VERSION", DEFAULT_VERSION)


def pom_xml(version: str, extra: Iterable[tuple[str, str, str]] = EXTRA_ARTIFACTS) -> str:
    """A throwaway pom whose runtime dependencies are the Kafka broker's classpath."""
    deps = [("org.apache.kafka", "kafka_2.13", version), *extra]
    body = "".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>\n"
        for g, a, v in deps
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>headwater.bench</groupId><artifactId>kafka-peer</artifactId>"
        "<version>0</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{body}  </dependencies>\n"
        "</project>\n"
    )


def fetch_jars(version: str | None = None, cache: Path = CACHE) -> list[Path]:
    """The broker's jars, fetched into ``cache/<version>/lib`` by mvn on first use."""
    version = version or kafka_version()
    lib = cache / version / "lib"
    marker = cache / version / "complete"
    if not marker.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaUnavailable(
                "Kafka peer: `mvn` is not on PATH, so Kafka's jars cannot be fetched from "
                "Maven Central (apt-get install maven)"
            )
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="kafka-pom-", dir=cache) as work:
            (Path(work) / "pom.xml").write_text(pom_xml(version))
            out = Path(work) / "lib"
            print(f"fetching org.apache.kafka:kafka_2.13:{version} with mvn ...", flush=True)
            proc = subprocess.run(
                [mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={out}"],
                cwd=work, capture_output=True, text=True, timeout=900, check=False,
            )  # fmt: skip
            if proc.returncode != 0 or not any(out.glob("kafka_2.13-*.jar")):
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
                raise KafkaUnavailable(
                    f"Kafka peer: mvn could not fetch org.apache.kafka:kafka_2.13:{version} "
                    f"(exit {proc.returncode}):\n{tail}"
                )
            shutil.rmtree(lib, ignore_errors=True)
            lib.parent.mkdir(parents=True, exist_ok=True)
            out.rename(lib)
        marker.write_text(version + "\n")
    return sorted(lib.glob("*.jar"))


def java_binary() -> str:
    """``HEADWATER_BENCH_JAVA``, else ``java`` on PATH; Kafka 4.x needs 17 or newer."""
    java = os.environ.get("HEADWATER_BENCH_JAVA") or shutil.which("java")
    if java is None:
        raise KafkaUnavailable("Kafka peer: no `java` on PATH (Kafka 4.x needs Java 17+)")
    major = java_major_version(java_version_text(java))
    if major is not None and major < 17:
        raise KafkaUnavailable(f"Kafka peer: {java} is Java {major}; Kafka 4.x needs 17+")
    return java


def java_version_text(java: str) -> str:
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).strip()


def java_major_version(text: str) -> int | None:
    """17 from ``openjdk version "17.0.15" ...``; 8 from ``"1.8.0_402"``."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def render_server_properties(
    node_id: int,
    broker_port: int,
    controller_ports: Mapping[int, int],
    log_dir: Path,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """server.properties of one combined-mode node; ``controller_ports`` maps every voter.

    Only what a node needs to run here is set; the rest is Kafka's default.
    With fewer than three nodes the internal topics get replication factor
    1, as in Kafka's shipped single-node config/server.properties.
    """
    nodes = len(controller_ports)
    voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(controller_ports.items()))
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},"
        f"CONTROLLER://127.0.0.1:{controller_ports[node_id]}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
    }
    if nodes < 3:
        internal_rf = str(nodes)
        props |= {
            "offsets.topic.replication.factor": internal_rf,
            "transaction.state.log.replication.factor": internal_rf,
            "transaction.state.log.min.isr": internal_rf,
            "share.coordinator.state.topic.replication.factor": internal_rf,
            "share.coordinator.state.topic.min.isr": internal_rf,
        }
    props |= dict(overrides or {})
    return "".join(f"{k}={v}\n" for k, v in props.items())


def jvm_command(
    java: str, jars: Sequence[Path], main: str, args: Sequence[str], log4j: Path
) -> list[str]:
    return [
        java,
        *HEAP_OPTS,
        *JVM_PERFORMANCE_OPTS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        os.pathsep.join(str(j) for j in jars),
        main,
        *args,
    ]


class Kafka(BrokerUnderTest):
    """One Kafka node in KRaft combined mode, its data under ``data_dir``.

    Alone by default; :class:`KafkaCluster` makes three that vote together
    (``node_id`` and ``controller_ports`` then come from it). ``overrides``
    are extra server.properties lines.
    """

    name = "kafka"

    def __init__(
        self,
        data_dir: Path,
        node_id: int = 0,
        controller_ports: Mapping[int, int] | None = None,
        cluster_id: str | None = None,
        overrides: Mapping[str, str] | None = None,
        version: str | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.node_id = node_id
        self.controller_ports = dict(controller_ports or {node_id: free_port()})
        self.cluster_id = cluster_id or random_cluster_id()
        self.overrides = dict(overrides or {})
        self.version = version or kafka_version()
        self._command: list[str] | None = None

    def prepare(self) -> None:
        """Fetch the jars, write the config files and format the storage (once)."""
        if self._command is not None:
            return
        java = java_binary()
        jars = fetch_jars(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES)
        config.write_text(
            render_server_properties(
                self.node_id, self.port, self.controller_ports, self.data_dir / "logs",
                self.overrides,
            )
        )  # fmt: skip
        fmt = subprocess.run(
            jvm_command(
                java, jars, "kafka.tools.StorageTool",
                ["format", "-t", self.cluster_id, "-c", str(config)], log4j,
            ),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RuntimeError(
                f"kafka node {self.node_id}: storage format failed:\n{fmt.stdout}{fmt.stderr}"
            )
        self._command = jvm_command(java, jars, "kafka.Kafka", [str(config)], log4j)

    def command(self) -> list[str]:
        self.prepare()
        assert self._command is not None
        return self._command

    def _ready(self) -> bool:
        if not any(READY_LINE in line for line in self.lines):
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def start(self, timeout: float = 120.0) -> Self:
        self.prepare()
        return super().start(timeout)

    def describe(self) -> dict[str, object]:
        """What a result file records about this peer."""
        return peer_info(self.version)


def peer_info(version: str | None = None) -> dict[str, object]:
    java = os.environ.get("HEADWATER_BENCH_JAVA") or shutil.which("java") or "java"
    return {
        "kafka": f"org.apache.kafka:kafka_2.13:{version or kafka_version()}",
        "mode": "KRaft combined (process.roles=broker,controller), static voters",
        "jvm": java_version_text(java).splitlines()[0] if shutil.which(java) else java,
        "jvm_options": [*HEAP_OPTS, *JVM_PERFORMANCE_OPTS],
        "config": "Kafka defaults; listeners, log.dirs and, with fewer than 3 nodes, "
        "internal topics at replication factor 1 (as its shipped server.properties)",
    }


def random_cluster_id() -> str:
    """What ``kafka-storage.sh random-uuid`` prints: 16 random bytes, URL-safe base64."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaCluster:
    """``size`` combined-mode nodes (node ids 0..size-1), every one a voter.

    Started together, since no node is ready before a quorum of voters is up.
    """

    def __init__(
        self,
        root: Path,
        size: int = 3,
        overrides: Mapping[str, str] | None = None,
        version: str | None = None,
    ) -> None:
        ports = {n: free_port() for n in range(size)}
        cluster_id = random_cluster_id()
        self.brokers = [
            Kafka(root / f"kafka-{n}", n, ports, cluster_id, overrides, version)
            for n in range(size)
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.proc is not None)

    def start(self, timeout: float = 180.0) -> Self:
        for broker in self.brokers:
            broker.prepare()
        try:
            for broker in self.brokers:
                broker.launch()
            deadline = time.monotonic() + timeout
            for broker in self.brokers:
                broker.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        stop_all(self.brokers, timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all(brokers: Sequence[BrokerUnderTest], timeout: float = 30.0) -> None:
    """SIGTERM every node at once, then wait: one by one, the last nodes lose their quorum
    and their controlled shutdown waits for a controller that never answers."""
    procs = [b.proc for b in brokers if b.proc is not None]
    for b in brokers:
        b.proc = None
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
