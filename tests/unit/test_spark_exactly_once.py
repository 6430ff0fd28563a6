"""The exactly-once sink's pure parts: options, ids, progress, which transactions to end."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark")

from headwater.client.types import TopicPartition, TransactionHandle
from headwater.spark.exactly_once import (
    TransactionalCommit,
    WritePlace,
    _handles,
    producer_settings,
    progress_of,
)
from headwater.spark.options import parse_sink_options
from headwater.spark.sink import ProducedCount

BASE = {"kafka.bootstrap.servers": "h:1", "topic": "out"}


def test_exactly_once_is_off_by_default_and_parsed_case_insensitively() -> None:
    assert not parse_sink_options(BASE).exactly_once
    opts = parse_sink_options({**BASE, "exactlyOnce": "true", "transactionalIdPrefix": "etl"})
    assert opts.exactly_once
    assert opts.transactional_id_prefix == "etl"


@pytest.mark.parametrize(
    "extra",
    [
        {"exactlyOnce": "yes"},
        {"exactlyOnce": "true", "transactionalIdPrefix": "has space"},
        {"exactlyOnce": "true", "kafka.transactional.id": "mine"},
        {"exactlyOnce": "true", "kafka.acks": "1"},
    ],
)
def test_bad_exactly_once_options_fail_on_the_driver(extra: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        parse_sink_options({**BASE, **extra})


def test_transactional_id_names_sink_and_task_and_settings_carry_it() -> None:
    place = WritePlace(sink_id="q-1", batch_id=4, partition_id=7)
    assert place.transactional_id("headwater-sink") == "headwater-sink-q-1-7"
    opts = parse_sink_options({**BASE, "exactlyOnce": "true", "kafka.linger.ms": "50"})
    settings = producer_settings(opts, "tid")
    assert settings["transactional.id"] == "tid"
    assert settings["linger.ms"] == "50", "the user's kafka.* settings win"
    assert settings["transaction.timeout.ms"] == "300000"
    assert settings["bootstrap.servers"] == "h:1"


def test_progress_is_the_highest_committed_next_batch() -> None:
    assert progress_of({}) == 0
    assert progress_of({TopicPartition("out", 0): 5, TopicPartition("other", 0): 3}) == 5


def test_only_real_transactions_are_ended_by_the_driver() -> None:
    handle = TransactionHandle("t-0", 11, 2)
    messages = [
        TransactionalCommit(10, handle),
        TransactionalCommit(0, None, skipped=True),
        TransactionalCommit(0, None),
        ProducedCount(3),
        None,
    ]
    assert _handles(messages) == [handle]


def test_commit_message_survives_pickling() -> None:
    message = TransactionalCommit(10, TransactionHandle("t-0", 11, 2))
    assert pickle.loads(pickle.dumps(message)) == message
