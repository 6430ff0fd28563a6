"""The admin subcommands against a real broker: topics describe/alter, configs, --json."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("cli-admin")) / "data").start()
    try:
        yield b
    finally:
        b.stop()


def sigint_default() -> None:
    """Ctrl-C as a terminal sends it, whatever started the tests: a command started in
    the background by a shell without job control (``make test &`` in a script)
    inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt
    handler, so the CLI would never see the test's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def hw(broker: BrokerProcess, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args, "--bootstrap", broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if ok:
        assert result.returncode == 0, (args, result.stderr)
    return result


def test_describe_shows_overrides_and_all_configs_on_request(broker: BrokerProcess) -> None:
    hw(broker, "topics", "create", "shown", "--partitions", "2", "--config", "retention.ms=60000")
    text = hw(broker, "topics", "describe", "shown").stdout
    assert text.splitlines()[1] == "Configs: retention.ms=60000"
    everything = hw(broker, "topics", "describe", "shown", "--all-configs").stdout
    assert "segment.bytes=1073741824" in everything and "retention.ms=60000" in everything
    described = json.loads(hw(broker, "topics", "describe", "shown", "--json").stdout)
    assert described[0]["configs"] == {"retention.ms": "60000"}
    assert [p["partition"] for p in described[0]["partitions"]] == [0, 1]
    assert "shown" in json.loads(hw(broker, "topics", "list", "--json").stdout)
    # A single broker: every partition has its one replica in the ISR and a leader.
    assert hw(broker, "topics", "describe", "--under-replicated-partitions").stdout == ""
    assert hw(broker, "topics", "describe", "shown", "--unavailable-partitions").stdout == ""


def test_alter_partitions_and_configs(broker: BrokerProcess) -> None:
    hw(broker, "topics", "create", "grown")
    out = hw(broker, "topics", "alter", "grown", "--partitions", "3").stdout
    assert out.strip() == "topic grown now has 3 partitions"
    assert "Partitions: 3" in hw(broker, "topics", "describe", "grown").stdout
    hw(broker, "topics", "alter", "grown", "--config", "retention.ms=1234")
    assert "Configs: retention.ms=1234" in hw(broker, "topics", "describe", "grown").stdout
    hw(broker, "topics", "alter", "grown", "--delete-config", "retention.ms")
    assert "Configs: \n" in hw(broker, "topics", "describe", "grown").stdout
    bad = hw(broker, "topics", "alter", "grown", "--config", "retention.ms=abc", ok=False)
    assert bad.returncode == 1 and bad.stderr.startswith("error: INVALID_CONFIG (40)")
    fewer = hw(broker, "topics", "alter", "grown", "--partitions", "2", ok=False)
    assert fewer.returncode == 1 and fewer.stderr.startswith("error: INVALID_PARTITIONS (37)")
    negative = hw(broker, "topics", "create", "negative", "--partitions", "-1", ok=False)
    assert negative.stderr.strip() == "error: --partitions must be at least 1, got -1"


def test_broker_configs_describe_and_alter(broker: BrokerProcess) -> None:
    assert "No configs set on broker 0" in hw(broker, "configs", "describe", "--broker", "0").stdout
    hw(broker, "configs", "alter", "--broker", "0", "--add-config", "log.retention.ms=3600000")
    described = hw(broker, "configs", "describe", "--broker", "0").stdout
    assert "  log.retention.ms=3600000\t(dynamic broker)" in described
    listed = json.loads(
        hw(broker, "configs", "describe", "--broker", "0", "--all", "--json").stdout
    )
    assert listed["num.partitions"]["source"] in ("static", "default")
    hw(broker, "configs", "alter", "--broker", "0", "--delete-config", "log.retention.ms")
    assert "log.retention.ms" not in hw(broker, "configs", "describe", "--broker", "0").stdout


def _committed(broker: BrokerProcess, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        parts = c.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=20)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        c.close()


def test_groups_reset_offsets_then_a_consumer_starts_there(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer

    hw(broker, "topics", "create", "resettable", "--partitions", "2")
    lines = "".join(f"k{i}:v{i}\n" for i in range(40))
    subprocess.run(
        [sys.executable, "-m", "headwater.cli", "produce", "resettable", "--key-separator", ":",
         "--bootstrap", broker.bootstrap],
        input=lines, text=True, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ends = {
        p["partition"]: p["log_end_offset"]
        for p in json.loads(hw(broker, "topics", "describe", "resettable", "--json").stdout)[0][
            "partitions"
        ]
    }
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe(["resettable"])
    seen = 0
    while seen < 40:
        msg = consumer.poll(10)
        assert msg is not None, "consumer got nothing"
        seen += 1
    consumer.commit(asynchronous=False)
    busy = hw(broker, "groups", "reset-offsets", "billing", "--all-topics", "--to-earliest",
              "--execute", ok=False)  # fmt: skip
    assert busy.returncode == 1 and "stop its consumers first" in busy.stderr
    consumer.close()
    assert _committed(broker, "billing", "resettable") == ends

    plan = hw(broker, "groups", "reset-offsets", "billing", "--topic", "resettable",
              "--to-earliest", "--dry-run").stdout.splitlines()  # fmt: skip
    assert plan[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [row.split() for row in plan[1:]] == [
        ["billing", "resettable", "0", "0"],
        ["billing", "resettable", "1", "0"],
    ]
    assert _committed(broker, "billing", "resettable") == ends  # a dry run changes nothing

    hw(broker, "groups", "reset-offsets", "billing", "--topic", "resettable:0",
       "--shift-by", "-3", "--execute")  # fmt: skip
    hw(broker, "groups", "reset-offsets", "billing", "--topic", "resettable:1",
       "--to-offset", "2", "--execute")  # fmt: skip
    assert _committed(broker, "billing", "resettable") == {0: ends[0] - 3, 1: min(2, ends[1])}

    # The consumer's position afterwards: a new member starts at the reset offsets.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing",
                         "auto.offset.reset": "latest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe(["resettable"])
    first: dict[int, int] = {}
    try:
        while len(first) < 2:
            msg = consumer.poll(10)
            assert msg is not None, first
            first.setdefault(msg.partition(), msg.offset())
    finally:
        consumer.close()
    assert first == {0: ends[0] - 3, 1: min(2, ends[1])}

    hw(broker, "groups", "reset-offsets", "billing", "--all-topics", "--to-datetime",
       "2000-01-01T00:00:00", "--execute")  # fmt: skip
    assert _committed(broker, "billing", "resettable") == {0: 0, 1: 0}
    assert hw(broker, "groups", "delete", "billing").stdout.strip() == "deleted group billing"
    assert "billing" not in hw(broker, "groups", "list").stdout


def test_ctrl_c_on_produce_says_what_was_acknowledged(broker: BrokerProcess) -> None:
    import time

    hw(broker, "topics", "create", "interrupted")
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "produce", "interrupted", "--linger-ms", "0",
         "--bootstrap", broker.bootstrap],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write("".join(f"r{i}\n" for i in range(50)))
    proc.stdin.flush()  # stdin stays open: the producer waits for more
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        shown = json.loads(hw(broker, "topics", "describe", "interrupted", "--json").stdout)
        if shown[0]["partitions"][0]["log_end_offset"] == 50:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 130
    proc.stdin.close()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert err.strip().splitlines()[-1:] == [
        "interrupted: 50 of 50 records acknowledged by interrupted; last offset per partition: 0:49"
    ], err


def test_consume_from_an_offset_and_as_a_group(broker: BrokerProcess) -> None:
    hw(broker, "topics", "create", "replayed")
    subprocess.run(
        [sys.executable, "-m", "headwater.cli", "produce", "replayed",
         "--bootstrap", broker.bootstrap],
        input="".join(f"v{i}\n" for i in range(10)), text=True, check=True,
        capture_output=True, timeout=60,
    )  # fmt: skip
    read = ["--timeout-ms", "3000"]
    at = hw(broker, "consume", "replayed", "--partition", "0", "--offset", "7", *read).stdout
    assert at.split() == ["v7", "v8", "v9"]
    bad = hw(broker, "consume", "replayed", "--offset", "7", ok=False)
    assert bad.stderr.strip() == (
        "error: --offset N needs --partition (an offset belongs to one partition)"
    )
    first = hw(broker, "consume", "replayed", "--group", "reader", "--from-beginning",
               "--max-messages", "4", *read).stdout  # fmt: skip
    assert first.split() == ["v0", "v1", "v2", "v3"]
    rest = hw(broker, "consume", "replayed", "--group", "reader", *read).stdout
    assert rest.split() == [f"v{i}" for i in range(4, 10)]
    described = hw(broker, "groups", "describe", "reader").stdout
    assert "  replayed\t0\t10\t10\t0\t" in described
    as_json = json.loads(hw(broker, "groups", "describe", "reader", "--json").stdout)
    assert as_json["partitions"] == [
        {"topic": "replayed", "partition": 0, "committed_offset": 10, "log_end_offset": 10,
         "lag": 0, "owner": None, "metadata": ""}
    ]  # fmt: skip
    assert {
        "group": "reader",
        "protocol_type": "",
        "state": "Empty",
        "type": "classic",
    } in json.loads(hw(broker, "groups", "list", "--json").stdout)


def test_health_log_dirs_and_quotas(broker: BrokerProcess) -> None:
    hw(broker, "topics", "create", "sized", "--partitions", "2")
    subprocess.run(
        [sys.executable, "-m", "headwater.cli", "produce", "sized", "--count", "20", "--size",
         "100", "--bootstrap", broker.bootstrap],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    health = hw(broker, "health").stdout.splitlines()
    assert health[0] == "Healthy: yes" and health[1] == "Brokers: 0"
    assert "Under-replicated partitions: 0" in health and "Offline partitions: 0" in health
    assert json.loads(hw(broker, "health", "--json").stdout)["controller"] == 0

    dirs = json.loads(hw(broker, "log-dirs", "--topic", "sized", "--json").stdout)
    assert sorted(d["partition"] for d in dirs) == ["sized-0", "sized-1"]
    assert sum(d["size"] for d in dirs) > 20 * 100
    assert hw(broker, "log-dirs", "--topic", "sized").stdout.startswith("BROKER  LOG-DIR")

    hw(broker, "quotas", "alter", "--user", "alice", "--add-config", "producer_byte_rate=1048576")
    hw(broker, "quotas", "alter", "--client-defaults", "--add-config", "consumer_byte_rate=2048")
    described = hw(broker, "quotas", "describe").stdout
    assert "user=alice\tproducer_byte_rate=1048576" in described, described
    assert "client-id=<default>\tconsumer_byte_rate=2048" in described
    hw(broker, "quotas", "alter", "--user", "alice", "--delete-config", "producer_byte_rate")
    assert "user=alice" not in hw(broker, "quotas", "describe").stdout


def test_ctrl_c_on_consume_counts_what_was_printed(broker: BrokerProcess) -> None:
    import time

    hw(broker, "topics", "create", "long-read")
    subprocess.run(
        [sys.executable, "-m", "headwater.cli", "produce", "long-read", "--count", "20000",
         "--size", "40", "--bootstrap", broker.bootstrap],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "consume", "long-read", "--from-beginning",
         "--bootstrap", broker.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # printing has begun
    assert first
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()  # through the same buffered reader as readline
    assert proc.stderr is not None and proc.wait(60) == 0
    err = proc.stderr.read()
    printed = 1 + len(out.splitlines())
    counted = int(err.strip().splitlines()[-1].split()[1])
    assert 0 < counted <= printed <= counted + 256, (counted, printed)
