"""Option parsing of the Spark source and sink, and topic subscriptions."""

from __future__ import annotations

import pytest

from headwater.client.config import ConsumerConfig
from headwater.spark.clients import CLIENT_RACK_ENV, ClientConfig, task_consumer_settings
from headwater.spark.offsets import EarliestOffsets, LatestOffsets, SpecificOffsets
from headwater.spark.options import (
    READ_COMMITTED,
    parse_sink_options,
    parse_source_options,
)
from headwater.spark.subscription import (
    Assign,
    Subscribe,
    SubscribePattern,
    parse_subscription,
)

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}


def test_streaming_defaults_follow_spark_kafka_source() -> None:
    opts = parse_source_options(BASE, streaming=True)
    assert opts.bootstrap == "h:9092"
    assert opts.subscription == Subscribe(("t",))
    assert opts.starting == LatestOffsets()
    assert opts.max_offsets_per_trigger is None
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.isolation_level == "read_uncommitted"


def test_batch_defaults_read_everything() -> None:
    opts = parse_source_options(BASE, streaming=False)
    assert opts.starting == EarliestOffsets()
    assert opts.ending == LatestOffsets()


def test_option_names_are_case_insensitive() -> None:
    opts = parse_source_options(
        {
            "Kafka.Bootstrap.Servers": "h:1",
            "subscribePattern": "t.*",
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "8",
            "failOnDataLoss": "FALSE",
            "includeHeaders": "true",
            "kafka.isolation.level": "READ_COMMITTED",
        },
        streaming=True,
    )
    assert opts.subscription == SubscribePattern("t.*")
    assert opts.max_offsets_per_trigger == 100
    assert opts.min_partitions == 8
    assert opts.fail_on_data_loss is False
    assert opts.include_headers is True
    assert opts.isolation_level == READ_COMMITTED


def test_headwater_bootstrap_key_is_an_alias() -> None:
    opts = parse_source_options(
        {"headwater.bootstrap.servers": "x:1", "subscribe": "t"}, streaming=True
    )
    assert opts.bootstrap == "x:1"


def test_bootstrap_is_required() -> None:
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers"):
        parse_source_options({"subscribe": "t"}, streaming=True)


@pytest.mark.parametrize(
    "extra",
    [
        {"subscribe": "a", "assign": '{"a":[0]}'},
        {"subscribe": ""},
    ],
)
def test_exactly_one_subscription_strategy(extra: dict[str, str]) -> None:
    opts = {"kafka.bootstrap.servers": "h:1", **extra}
    with pytest.raises(ValueError):
        parse_source_options(opts, streaming=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("maxOffsetsPerTrigger", "0"),
        ("maxOffsetsPerTrigger", "lots"),
        ("minPartitions", "-1"),
        ("failOnDataLoss", "yes"),
        ("kafka.isolation.level", "serializable"),
        ("kafka.auto.offset.reset", "earliest"),
        ("endingOffsets", "latest"),
        ("fetchOffset.numRetries", "-1"),
    ],
)
def test_invalid_streaming_options_fail_at_load(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        parse_source_options({**BASE, key: value}, streaming=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("startingOffsets", "latest"),
        ("endingOffsets", "earliest"),
        ("startingOffsets", '{"t":{"0":-1}}'),
        ("endingOffsets", '{"t":{"0":-2}}'),
    ],
)
def test_batch_bounds_that_read_nothing_by_construction_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        parse_source_options({**BASE, key: value}, streaming=False)


def test_batch_json_bounds_are_kept() -> None:
    opts = parse_source_options(
        {**BASE, "startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":9}}'},
        streaming=False,
    )
    assert opts.starting == SpecificOffsets({("t", 0): 5})
    assert opts.ending == SpecificOffsets({("t", 0): 9})


def test_offset_fetch_retries_follow_spark_names_and_defaults() -> None:
    assert parse_source_options(BASE, streaming=True).fetch_offset_retries == 3
    opts = parse_source_options(
        {**BASE, "fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "10"},
        streaming=True,
    )
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms) == (0, 10)


def test_other_kafka_options_reach_the_client_without_prefix() -> None:
    opts = parse_source_options({**BASE, "kafka.client.id": "me"}, streaming=True)
    assert opts.client_settings["client.id"] == "me"
    assert "bootstrap.servers" not in opts.client_settings


def test_sink_topic_option_is_optional() -> None:
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1"}).topic is None
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1", "TOPIC": "out"}).topic == "out"


def test_subscribe_lists_every_partition_of_named_topics() -> None:
    sub = parse_subscription({"subscribe": "a, b"})
    assert sub.select({"a": [1, 0], "b": [0], "c": [0]}) == [("a", 0), ("a", 1), ("b", 0)]


def test_subscribe_pattern_must_match_the_whole_topic_name() -> None:
    sub = parse_subscription({"subscribepattern": "page-.*"})
    assert sub.select({"page-views": [0], "my-page-views": [0], "page-": [0, 1]}) == [
        ("page-", 0),
        ("page-", 1),
        ("page-views", 0),
    ]


def test_assign_reads_only_listed_partitions_and_they_must_exist() -> None:
    sub = parse_subscription({"assign": '{"a":[1],"b":[0,2]}'})
    assert sub == Assign((("a", 1), ("b", 0), ("b", 2)))
    assert sub.select({"a": [0, 1], "b": [0, 1, 2]}) == [("a", 1), ("b", 0), ("b", 2)]
    with pytest.raises(ValueError, match="do not exist"):
        sub.select({"a": [0, 1], "b": [0]})


@pytest.mark.parametrize("text", ["[1]", '{"a":"0"}', '{"a":[-1]}', "{}", "nope"])
def test_malformed_assign_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="assign"):
        parse_subscription({"assign": text})


def test_client_rack_reaches_the_task_consumers() -> None:
    opts = parse_source_options({**BASE, "kafka.client.rack": "b"}, streaming=False)
    settings = task_consumer_settings(
        ClientConfig.of(opts.bootstrap, opts.client_settings), environ={}
    )
    assert settings["client.rack"] == "b"
    assert ConsumerConfig.from_mapping(settings).client_rack == "b"


@pytest.mark.parametrize(
    ("option", "env", "rack"), [("b", "c", "c"), (None, "c", "c"), ("b", " ", "b")]
)
def test_an_executors_own_rack_wins_over_the_option(
    option: str | None, env: str, rack: str
) -> None:
    extra = {} if option is None else {"kafka.client.rack": option}
    opts = parse_source_options({**BASE, **extra}, streaming=False)
    settings = task_consumer_settings(
        ClientConfig.of(opts.bootstrap, opts.client_settings), environ={CLIENT_RACK_ENV: env}
    )
    assert settings["client.rack"] == rack
