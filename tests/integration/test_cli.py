"""The client-side CLI commands as a user runs them: subprocesses against a real broker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess, free_port

ENTRY = "headwater.cli"  # exactly what `headwater ...` runs


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("cli")) / "data").start()
    try:
        yield b
    finally:
        b.stop()


def run(
    broker: BrokerProcess | None, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    bootstrap = broker.bootstrap if broker else f"127.0.0.1:{free_port()}"
    return subprocess.run(
        [sys.executable, "-m", ENTRY, *args, "--bootstrap", bootstrap],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_topics_create_list_describe_delete(broker: BrokerProcess) -> None:
    created = run(
        broker, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000"
    )
    assert created.returncode == 0, created.stderr
    listed = run(broker, "topics", "list")
    assert listed.returncode == 0 and "orders" in listed.stdout.decode().split()

    described = run(broker, "topics", "describe", "orders")
    assert described.returncode == 0, described.stderr
    text = described.stdout.decode()
    assert "Partitions: 3" in text and "TopicId: " in text
    assert "retention.ms=60000" in text
    rows = [line for line in text.splitlines() if "Partition: " in line]
    assert len(rows) == 3
    assert all("LogStartOffset: 0" in r and "LogEndOffset: 0" in r for r in rows)

    deleted = run(broker, "topics", "delete", "orders")
    assert deleted.returncode == 0, deleted.stderr
    assert "orders" not in run(broker, "topics", "list").stdout.decode().split()


def test_kafka_errors_exit_1_with_one_line(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "twice").returncode == 0
    again = run(broker, "topics", "create", "twice")
    assert again.returncode == 1
    assert again.stderr.decode().strip().splitlines() == [
        "error: TOPIC_ALREADY_EXISTS (36): topic 'twice' already exists"
    ]
    missing = run(broker, "topics", "describe", "no-such-topic")
    assert missing.returncode == 1
    assert missing.stderr.decode().startswith("error: UNKNOWN_TOPIC_OR_PARTITION (3)")
    unreachable = run(None, "topics", "list")
    assert unreachable.returncode == 1
    assert unreachable.stderr.decode().startswith("error: NETWORK_EXCEPTION (13)")


def test_produce_lines_with_keys_and_consume_them_back(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    assert run(broker, "topics", "create", "lines", "--partitions", "2").returncode == 0
    lines = [f"key{i % 5}\tvalue {i}" for i in range(200)] + ["no separator here"]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n")
    produced = run(
        broker,
        "produce",
        "lines",
        "--file",
        str(source),
        "--key-separator",
        "\t",
        "--compression",
        "gzip",
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 201 of 201 records" in produced.stderr.decode()

    consumed = run(
        broker,
        "consume",
        "lines",
        "--from-beginning",
        "--max-messages",
        "201",
        "--format",
        "{partition} {offset} {key} {value}",
    )
    assert consumed.returncode == 0, consumed.stderr
    out = [line.split(" ", 3) for line in consumed.stdout.decode().splitlines()]
    assert len(out) == 201
    assert sorted(f"{k}\t{v}" if k != "null" else v for _, _, k, v in out) == sorted(lines)
    # Each key sits in one partition, and offsets are dense per partition.
    partitions_of_key: dict[str, set[str]] = {}
    for partition, _, key, _ in out:
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())
    for p in ("0", "1"):
        offsets = sorted(int(o) for part, o, _, _ in out if part == p)
        assert offsets == list(range(len(offsets)))


def test_produce_from_stdin_and_consume_one_partition(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "piped", "--partitions", "4").returncode == 0
    produced = run(broker, "produce", "piped", stdin=b"a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    everything = run(
        broker,
        "consume",
        "piped",
        "--from-beginning",
        "--max-messages",
        "3",
        "--format",
        "{partition} {value}",
    )
    rows = [line.split() for line in everything.stdout.decode().splitlines()]
    assert sorted(v for _, v in rows) == ["a", "b", "c"]
    p = rows[0][0]
    mine = [v for q, v in rows if q == p]
    one = run(
        broker,
        "consume",
        "piped",
        "--from-beginning",
        "--partition",
        p,
        "--max-messages",
        str(len(mine)),
    )
    assert one.returncode == 0, one.stderr
    assert one.stdout.decode().split() == mine
    empty = next(q for q in ("0", "1", "2", "3") if q not in {r[0] for r in rows})
    nothing = run(
        broker, "consume", "piped", "--from-beginning", "--partition", empty, "--timeout-ms", "300"
    )
    assert nothing.returncode == 0 and nothing.stdout == b""


def test_synthetic_load_lands_in_the_log(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "load", "--partitions", "4").returncode == 0
    produced = run(
        broker, "produce", "load", "--count", "5000", "--size", "200", "--compression", "zstd"
    )
    assert produced.returncode == 0, produced.stderr
    described = run(broker, "topics", "describe", "load").stdout.decode()
    ends = [
        int(line.rsplit("LogEndOffset: ", 1)[1])
        for line in described.splitlines()
        if "LogEndOffset: " in line
    ]
    assert sum(ends) == 5000
    consumed = run(broker, "consume", "load", "--from-beginning", "--max-messages", "5000")
    values = consumed.stdout.splitlines()
    assert len(values) == 5000 and {len(v) for v in values} == {200}
