"""The fault campaign (issue 20): random kill -9, pauses past the ZooKeeper session
and ZooKeeper stops under idempotent, transactional and copy-loop workloads.

The short version (about 40 s of faults, 2-3 minutes in all) runs with the
``cluster`` marker. Longer runs take the same code:

    HEADWATER_FAULT_CAMPAIGN_S=600 HEADWATER_FAULT_CAMPAIGN_SEED=7 \\
        .venv/bin/python -m pytest -s tests/integration/test_fault_campaign.py

(``-s`` shows the report: seed, faults, figures).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.integration.fault_campaign import Campaign

pytestmark = pytest.mark.cluster

SECONDS = float(os.environ.get("HEADWATER_FAULT_CAMPAIGN_S", "40"))


#: Start-up, healing and the checks take minutes on a loaded 2-core machine.
@pytest.mark.timeout(600 + 2 * SECONDS)
def test_fault_campaign(tmp_path: Path) -> None:
    seconds = SECONDS
    seed = int(os.environ.get("HEADWATER_FAULT_CAMPAIGN_SEED", random.randrange(1 << 16)))
    with Campaign(tmp_path, seed) as campaign:
        report = campaign.run(seconds)
    for line in report.lines():
        print(f"[campaign] {line}")
    assert report.faults, "no fault was injected"
    assert report.idempotent_acked > 0 and report.transactions["committed"] > 0
    assert report.copy_commits > 0 and report.partitions_compared >= 9
    assert not report.problems, "\n".join(report.lines())
