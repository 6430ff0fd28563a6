"""The soak of issue 12, short: good clients keep working while bad ones hammer the broker.

``bench/bench_soak.py`` runs it for 30 minutes and reports latencies; here
it runs ``HEADWATER_SOAK_MINUTES`` (default 3) and checks what must hold
whatever the machine's load: no acknowledged record is lost, the broker
stays up, its memory stays flat after warm-up, and every descriptor the bad
clients took is given back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_soak import run_soak

MINUTES = float(os.environ.get("HEADWATER_SOAK_MINUTES", "3"))


@pytest.mark.slow
@pytest.mark.timeout(int(MINUTES * 60) + 400)
def test_soak_with_hostile_clients(tmp_path: Path) -> None:
    result = run_soak(MINUTES, tmp_path / "data")
    assert result["broker_alive"]
    assert result["records_acked"] > 1000
    assert result["acked_records_lost"] == 0
    assert result["rss_drift"] < 0.10, result["samples"]
    assert result["fds_end"] < 60, result["samples"]
    assert all(n > 0 for n in result["bad_client_rounds"].values()), result["bad_client_rounds"]
