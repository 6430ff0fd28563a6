"""The null-key check of compacted topics: the pure walk the produce path uses
until numba's kernels are loaded agrees with the compiled one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.log import offset_map
from headwater.records.batch import HEADER_SIZE
from headwater.records.record import RecordBatchBuilder


def records_region(keys: list[bytes | None]) -> tuple[np.ndarray, int]:
    builder = RecordBatchBuilder()
    for i, key in enumerate(keys):
        builder.append(1_700_000_000_000 + i, key, b"v" * (i % 3), [("h", b"x")] if i % 2 else [])
    batch = builder.build()
    return np.frombuffer(batch[HEADER_SIZE:], dtype=np.uint8), len(keys)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=40))
def test_the_pure_walk_finds_the_same_first_null_key_as_the_kernel(
    keys: list[bytes | None],
) -> None:
    data, count = records_region(keys)
    expected = next((i for i, k in enumerate(keys) if k is None), -1)
    assert offset_map._first_null_key_python(data, count) == expected
    _, _, compiled = offset_map.kernels()
    assert int(compiled(data, count)) == expected


def test_a_truncated_region_is_unparsable_not_an_exception() -> None:
    data, count = records_region([b"k", b"k2"])
    assert offset_map._first_null_key_python(data[:-3], count) == -2


def test_before_the_kernels_load_the_check_walks_in_python_and_starts_loading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(offset_map, "_kernels", None)
    started: list[bool] = []
    monkeypatch.setattr(offset_map, "load_in_background", lambda: started.append(True))
    data, count = records_region([b"a", None])
    assert offset_map.first_null_key(data, count) == 1
    assert started == [True]
