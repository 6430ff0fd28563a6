"""Request-rate quotas (KIP-124): an over-quota client is told so in ``throttle_time_ms``.

The handler time of a client id with ``request_percentage=1`` (1% of one
thread: 10 ms per second) adds up over a few hundred requests; from then on
every response, whether hand-encoded (Metadata) or built from a dict
(DescribeCluster), carries the throttle, and a client without the quota
gets 0.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.protocol.apis import ApiKey
from headwater.protocol.messages import build_request, decode_response, encode_request
from tests.integration.broker_process import BrokerProcess
from tests.integration.wire import WireClient


def request(w: WireClient, api_key: int, version: int, body: dict[str, Any]) -> Any:
    raw = w.request(api_key, version, encode_request(build_request(api_key, version, body)))
    return decode_response(api_key, version, raw, 0)


def throttle_ms(response: Any) -> int:
    value = getattr(response, "throttle_time_ms", None)
    if value is None:
        value = response.throttle_time
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", overrides=["quota.window.num=3"]).start()
    try:
        yield b
    finally:
        b.stop()


def test_an_over_quota_client_sees_throttle_time_in_every_response(broker: BrokerProcess) -> None:
    w = WireClient(broker.bootstrap)
    # WireClient sends client id "wire-test".
    altered = request(w, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "wire-test"}],
        "ops": [{"key": "request_percentage", "value": 1.0, "remove": False}]}],
        "validate_only": False})  # fmt: skip
    assert [int(e.error_code) for e in altered.entries] == [0]
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        md = request(w, ApiKey.METADATA, 9, {"topics": []})
        if throttle_ms(md) > 0:
            seen["metadata"] = throttle_ms(md)
        dc = request(w, ApiKey.DESCRIBE_CLUSTER, 0, {})
        if throttle_ms(dc) > 0:
            seen["describe_cluster"] = throttle_ms(dc)
    w.close()
    assert set(seen) == {"metadata", "describe_cluster"}, seen
    # The throttle is bounded by the quota window (3 samples of 1 s).
    assert all(0 < ms <= 3000 for ms in seen.values()), seen


def test_quota_of_one_client_does_not_throttle_another(broker: BrokerProcess) -> None:
    w = WireClient(broker.bootstrap)
    altered = request(w, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "someone-else"}],
        "ops": [{"key": "request_percentage", "value": 0.001, "remove": False}]}],
        "validate_only": False})  # fmt: skip
    assert [int(e.error_code) for e in altered.entries] == [0]
    for _ in range(300):
        assert throttle_ms(request(w, ApiKey.METADATA, 9, {"topics": []})) == 0
    w.close()
