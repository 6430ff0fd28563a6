"""The Kafka bench peer's pure helpers: its server.properties, its pom, its JVM command.

No network, no java and no mvn: these check only what the peer would write
and run (bench/kafka_peer.py), never Kafka itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import kafka_peer  # noqa: E402


def parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_single_node_is_combined_mode_with_internal_topics_at_rf_1(tmp_path: Path) -> None:
    props = parse(kafka_peer.render_server_properties(0, 9092, {0: 9093}, tmp_path / "logs"))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "0"
    assert props["controller.quorum.voters"] == "0@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "logs")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"


def test_three_nodes_vote_together_and_keep_kafkas_internal_topic_defaults(
    tmp_path: Path,
) -> None:
    ports = {2: 7002, 0: 7000, 1: 7001}
    props = parse(kafka_peer.render_server_properties(1, 9101, ports, tmp_path))
    assert props["controller.quorum.voters"] == (
        "0@127.0.0.1:7000,1@127.0.0.1:7001,2@127.0.0.1:7002"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9101,CONTROLLER://127.0.0.1:7001"
    assert "offsets.topic.replication.factor" not in props


def test_overrides_come_last_and_win(tmp_path: Path) -> None:
    text = kafka_peer.render_server_properties(
        0, 1, {0: 2}, tmp_path, {"file.delete.delay.ms": "1000", "num.io.threads": "2"}
    )
    props = parse(text)
    assert props["file.delete.delay.ms"] == "1000"
    assert text.splitlines()[-1] == "num.io.threads=2"


def test_pom_names_kafka_and_the_log_binding() -> None:
    pom = kafka_peer.pom_xml("4.4.0")
    assert "<artifactId>kafka_2.13</artifactId><version>4.4.0</version>" in pom
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in pom
    assert pom.count("<dependency>") == 1 + len(kafka_peer.EXTRA_ARTIFACTS)


def test_jvm_command_has_kafkas_start_script_heap_and_the_classpath(tmp_path: Path) -> None:
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    cmd = kafka_peer.jvm_command("java", jars, "kafka.Kafka", ["x.properties"], tmp_path / "l")
    assert cmd[0] == "java"
    assert "-Xmx1G" in cmd and "-Xms1G" in cmd and "-XX:+UseG1GC" in cmd
    assert cmd[cmd.index("-cp") + 1] == f"{jars[0]}:{jars[1]}"
    assert cmd[-2:] == ["kafka.Kafka", "x.properties"]


def test_java_major_version() -> None:
    assert kafka_peer.java_major_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert kafka_peer.java_major_version('openjdk version "25" 2025-09-16') == 25
    assert kafka_peer.java_major_version('java version "1.8.0_402"') == 8
    assert kafka_peer.java_major_version("no version here") is None


def test_cluster_id_is_a_22_character_url_safe_uuid() -> None:
    cid = kafka_peer.random_cluster_id()
    assert len(cid) == 22
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_missing_mvn_is_a_clear_error(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("shutil.which", lambda _name: None)
    try:
        kafka_peer.fetch_jars("4.4.0", cache=tmp_path)
    except kafka_peer.KafkaUnavailable as e:
        assert "mvn" in str(e)
    else:
        raise AssertionError("fetch_jars without mvn did not fail")
