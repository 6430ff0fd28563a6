from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.zookeeper import zk_connect, zookeeper  # noqa: F401 - fixtures


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh broker process with its own data directory."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess] | object]:
    """Start brokers with config overrides; all are stopped at the end."""
    started: list[BrokerProcess] = []

    def make(*overrides: str, name: str = "data") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, overrides=overrides).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.kill()
