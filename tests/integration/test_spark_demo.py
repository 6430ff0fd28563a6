"""``headwater demo`` end to end: a short run against a test broker leaves results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.spark


def test_demo_short_run_writes_parquet_and_the_counts_topic(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from kafka import KafkaConsumer

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        output = tmp_path / "demo-output"
        cmd = [sys.executable, "-m", "headwater.cli", "demo", "--bootstrap", broker.bootstrap]
        cmd += ["--master", "local[2]", "--output", str(output), "--duration", "20"]
        cmd += ["--events-per-second", "500", "--window", "2", "--lateness", "1"]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "demo running" in done.stdout
        assert "page views produced" in done.stdout
        assert "committed running-count updates" in done.stdout
        assert not (tmp_path / "headwater-data").exists(), "started an embedded broker"

        files = [p for p in (output / "page_view_counts").glob("*.parquet")]
        table = pq.ParquetDataset(files).read()
        assert table.num_rows > 0
        assert set(table.column_names) >= {"window_start", "window_end", "page", "views", "users"}
        assert min(table.column("views").to_pylist()) >= 1

        consumer = KafkaConsumer(
            "page-view-counts",
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            isolation_level="read_committed",  # the demo writes the counts in transactions
            consumer_timeout_ms=5000,
        )
        counts = [m for _, m in zip(range(10), consumer, strict=False)]
        consumer.close()
        assert counts and all(b'"views"' in m.value for m in counts)
    finally:
        broker.stop()
