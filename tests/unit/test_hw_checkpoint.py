"""replication-offset-checkpoint: Kafka's format, atomic, tolerant of damage."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from headwater.log.hw_checkpoint import HighWatermarkCheckpoint


def test_write_then_read_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path / "replication-offset-checkpoint")
    assert checkpoint.write({("orders", 1): 42, ("a.b-c_d", 0): 7, ("orders", 0): 0})
    assert checkpoint.path.read_text() == "0\n3\na.b-c_d 0 7\norders 0 0\norders 1 42\n"
    again = HighWatermarkCheckpoint(checkpoint.path)
    assert again.read() == {("orders", 1): 42, ("a.b-c_d", 0): 7, ("orders", 0): 0}
    assert not os.path.exists(str(checkpoint.path) + ".tmp")


def test_an_unchanged_mapping_is_not_rewritten(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path / "replication-offset-checkpoint")
    assert checkpoint.write({("t", 0): 5})
    os.utime(checkpoint.path, (0, 0))
    assert not checkpoint.write({("t", 0): 5})
    assert checkpoint.path.stat().st_mtime == 0
    assert checkpoint.write({("t", 0): 6})
    assert HighWatermarkCheckpoint(checkpoint.path).read() == {("t", 0): 6}


def test_an_empty_mapping_writes_an_empty_checkpoint(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path / "sub" / "replication-offset-checkpoint")
    assert checkpoint.write({})
    assert checkpoint.path.read_text() == "0\n0\n"
    assert checkpoint.read() == {}


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert HighWatermarkCheckpoint(tmp_path / "none").read() == {}


@pytest.mark.parametrize(
    "content",
    ["", "0\n", "1\n1\nt 0 5\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\nz\n"],
)
def test_a_corrupt_file_reads_as_empty_with_a_warning(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert HighWatermarkCheckpoint(path).read() == {}
    assert "unreadable high-watermark checkpoint" in caplog.text


def test_a_topic_name_with_whitespace_is_refused(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path / "replication-offset-checkpoint")
    with pytest.raises(ValueError):
        checkpoint.write({("bad topic", 0): 1})
    assert not checkpoint.path.exists()
