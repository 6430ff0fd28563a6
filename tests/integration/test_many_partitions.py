"""Idle partitions are cheap: 100,000 of them hold no files, tasks or much memory."""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.broker_process import BrokerProcess

OPEN_FILES_MAX = 64


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_hundred_thousand_partitions_open_files_stay_bounded(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "d", overrides=[f"headwater.log.open.files.max={OPEN_FILES_MAX}"]
    ).start()
    try:
        assert b.proc is not None
        pid = b.proc.pid
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("huge", 100_000, 1)], request_timeout=60).values():
            f.result(60)
        baseline = _open_fds(pid)
        assert len(list((tmp_path / "d").iterdir())) < 10, "no directory per idle partition"

        used = list(range(0, 100_000, 200))  # 500 partitions with data
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20})
        for q in used:
            p.produce("huge", value=b"%d" % q, partition=q)
        assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "n/a"})
        c.assign([TopicPartition("huge", q, 0) for q in used])
        got: set[int] = set()
        deadline = time.monotonic() + 60
        while len(got) < len(used) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                assert int(m.value()) == m.partition()
                got.add(m.partition())
        c.close()
        assert got == set(used)
        # Segment files come and go through a bounded LRU of handles.
        assert _open_fds(pid) <= baseline + OPEN_FILES_MAX + 8
    finally:
        b.kill()
