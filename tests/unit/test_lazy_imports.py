"""Spark starts a fresh Python process for every streaming query's reader (and
its planning workers): what unpickling the data source imports is paid per
query. These checks run in a fresh interpreter, since this one has long
imported everything."""

from __future__ import annotations

import subprocess
import sys

import headwater.client


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


def test_the_data_source_imports_neither_client_nor_sink() -> None:
    loaded = _modules_after("from headwater.spark.source import HeadwaterDataSource")
    heavy = {
        "headwater.client.consumer",
        "headwater.client.producer",
        "headwater.client.admin",
        "headwater.spark.sink",
        "headwater.spark.reader",
    }
    assert not heavy & loaded


def test_a_reader_does_not_import_the_producer() -> None:
    loaded = _modules_after(
        "from headwater.spark.source import HeadwaterDataSource\n"
        "HeadwaterDataSource({'kafka.bootstrap.servers': 'h:1', 'subscribe': 't'})"
        ".streamReader(None)\n"
        "from headwater.client.consumer import Consumer"
    )
    assert "headwater.spark.reader" in loaded
    assert not {"headwater.client.producer", "headwater.client.admin"} & loaded


def test_the_client_package_still_offers_every_name() -> None:
    for name in headwater.client.__all__:
        value = getattr(headwater.client, name)
        assert value.__name__ == name
    assert set(headwater.client.__all__) <= set(dir(headwater.client))


def test_an_unknown_client_name_is_an_attribute_error() -> None:
    try:
        headwater.client.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("expected AttributeError")
