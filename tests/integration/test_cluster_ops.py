"""Operating a broker: the data directory lock, DeleteRecords, DescribeProducers,
DescribeCluster per listener, CREATE authorization for existing topics."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.broker_process import BrokerProcess, free_port


def test_second_broker_on_a_live_data_dir_refuses_in_one_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "serve", "--data-dir", str(broker.data_dir),
         "--listen", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert lines[-1].startswith("error: data directory"), lines
    assert "in use by another process" in lines[-1]
    assert not any("Traceback" in line for line in lines)
    assert not any(f"listening on 127.0.0.1:{port}" in line for line in lines)
    # The first broker is untouched and a restart after it stops works.
    broker.restart()
