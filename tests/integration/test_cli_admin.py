"""The admin subcommands against a real broker: topics describe/alter, configs, --json."""

from __future__ import annotations

import json
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
