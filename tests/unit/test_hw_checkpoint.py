"""replication-offset-checkpoint: Kafka's format, atomic, tolerant of damage."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from headwater.log.hw_checkpoint import DirectoryCheckpoints, HighWatermarkCheckpoint


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


def test_each_data_directory_checkpoints_its_own_partitions(tmp_path: Path) -> None:
    """JBOD (issue 31): one file per directory, as Kafka. A failed directory's partitions
    are skipped, a failing one does not stop the others, and an older single file in
    the first directory yields to a partition's own directory when both list it."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    placement = {("t", 0): str(a), ("t", 1): str(b), ("u", 0): str(b)}
    offline: set[str] = set()
    checkpoints = DirectoryCheckpoints(
        [a, b], lambda t, p: placement[(t, p)], lambda d: "failed" if d in offline else None
    )
    # Written by an older Headwater: everything in the first directory.
    HighWatermarkCheckpoint(a / "replication-offset-checkpoint").write(
        {("t", 0): 5, ("t", 1): 7, ("u", 0): 9}
    )
    HighWatermarkCheckpoint(b / "replication-offset-checkpoint").write({("t", 1): 8})
    assert checkpoints.read() == {("t", 0): 5, ("t", 1): 8, ("u", 0): 9}

    assert checkpoints.write({("t", 0): 6, ("t", 1): 10, ("u", 0): 11}) == []
    assert HighWatermarkCheckpoint(a / "replication-offset-checkpoint").read() == {("t", 0): 6}
    assert HighWatermarkCheckpoint(b / "replication-offset-checkpoint").read() == {
        ("t", 1): 10,
        ("u", 0): 11,
    }
    offline.add(str(b))
    assert checkpoints.write({("t", 0): 7, ("t", 1): 12, ("u", 0): 13}) == []
    assert HighWatermarkCheckpoint(a / "replication-offset-checkpoint").read() == {("t", 0): 7}
    assert checkpoints.read() == {("t", 0): 7}  # an offline directory is not read
    offline.clear()
    shutil.rmtree(b)
    b.write_bytes(b"not a directory")  # a directory that fails every write
    failed = checkpoints.write({("t", 0): 8, ("t", 1): 14, ("u", 0): 15})
    assert [d for d, _ in failed] == [str(b)]
    assert HighWatermarkCheckpoint(a / "replication-offset-checkpoint").read() == {("t", 0): 8}
