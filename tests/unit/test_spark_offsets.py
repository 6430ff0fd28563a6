"""Offset JSON and offset specs of the Spark source."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.spark.offsets import (
    EarliestOffsets,
    LatestOffsets,
    SpecificOffsets,
    offsets_from_json,
    offsets_json_text,
    offsets_to_json,
    parse_offset_spec,
    resolve_offset_spec,
)

offset_maps = st.dictionaries(
    st.tuples(st.text(alphabet="abcxyz-._", min_size=1, max_size=6), st.integers(0, 200)),
    st.integers(0, 2**62),
    max_size=30,
)


@given(offset_maps, st.randoms())
def test_offset_json_text_is_independent_of_insertion_order(offsets, rnd) -> None:
    items = list(offsets.items())
    rnd.shuffle(items)
    assert offsets_json_text(dict(items)) == offsets_json_text(offsets)


@given(offset_maps)
def test_offset_json_keys_are_sorted_as_strings(offsets) -> None:
    text = offsets_json_text(offsets)
    assert text == json.dumps(json.loads(text), sort_keys=True)


@given(offset_maps)
def test_offset_json_round_trips_through_spark_text(offsets) -> None:
    assert offsets_from_json(json.loads(offsets_json_text(offsets))) == offsets


def test_partition_keys_are_strings_in_checkpoint_form() -> None:
    assert offsets_to_json({("t", 10): 5, ("t", 2): 7}) == {"t": {"10": 5, "2": 7}}


@pytest.mark.parametrize(
    "bad",
    [[1, 2], {"t": [0]}, {"t": {"x": 1}}, {"t": {"0": "5"}}, {"t": {"0": True}}],
)
def test_malformed_offset_json_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        offsets_from_json(bad)


def test_offset_spec_keywords_are_case_insensitive() -> None:
    assert parse_offset_spec(" Earliest ", "startingOffsets") == EarliestOffsets()
    assert parse_offset_spec("LATEST", "startingOffsets") == LatestOffsets()


def test_offset_spec_json_keeps_kafka_sentinels() -> None:
    spec = parse_offset_spec('{"a":{"0":23,"1":-2},"b":{"0":-1}}', "startingOffsets")
    assert spec == SpecificOffsets({("a", 0): 23, ("a", 1): -2, ("b", 0): -1})


@pytest.mark.parametrize("text", ["soon", '{"a":{"0":-3}}', "{"])
def test_offset_spec_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_offset_spec(text, "startingOffsets")


def test_resolve_spec_replaces_sentinels_with_log_bounds() -> None:
    parts = [("a", 0), ("a", 1), ("a", 2)]
    earliest = {tp: 10 for tp in parts}
    latest = {tp: 50 for tp in parts}
    spec = SpecificOffsets({("a", 0): -2, ("a", 1): -1, ("a", 2): 33})
    resolved = resolve_offset_spec(spec, parts, earliest, latest, "startingOffsets")
    assert resolved == {("a", 0): 10, ("a", 1): 50, ("a", 2): 33}
    assert resolve_offset_spec(EarliestOffsets(), parts, earliest, latest, "x") == earliest
    assert resolve_offset_spec(LatestOffsets(), parts, earliest, latest, "x") == latest


def test_resolve_spec_must_name_every_subscribed_partition() -> None:
    parts = [("a", 0), ("a", 1)]
    bounds = {tp: 0 for tp in parts}
    with pytest.raises(ValueError, match="missing"):
        resolve_offset_spec(SpecificOffsets({("a", 0): 1}), parts, bounds, bounds, "x")
    with pytest.raises(ValueError, match="not subscribed"):
        spec = SpecificOffsets({("a", 0): 1, ("a", 1): 1, ("b", 0): 1})
        resolve_offset_spec(spec, parts, bounds, bounds, "x")
