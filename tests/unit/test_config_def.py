"""The broker's ConfigDef: every key the broker reads is in the table, values are checked."""

from __future__ import annotations

import pytest

from headwater.broker.config import BrokerConfig
from headwater.broker.config_def import BROKER_CONFIG_DEF, ConfigValueError, Type
from headwater.broker.connection_limits import ConnectionLimits
from headwater.log import config as log_config
from headwater.security.config import _OTHER_KEYS, INTER_BROKER_KEYS


def test_every_key_the_broker_reads_is_defined() -> None:
    # LogConfig reads broker and topic keys from one table: the broker's are log.*,
    # headwater.log.* and these two.
    broker_log_keys = [k for k in log_config._KEYS if k.startswith(("log.", "headwater."))]
    broker_log_keys += [k for k in log_config._BOTH_SIDES if k.startswith("log.")]
    broker_log_keys += ["message.max.bytes", "producer.id.expiration.ms"]
    for key in [*broker_log_keys, *ConnectionLimits.KEYS, *INTER_BROKER_KEYS, *_OTHER_KEYS]:
        assert key in BROKER_CONFIG_DEF.keys, key


def test_every_key_has_a_doc_and_its_default_is_valid() -> None:
    for key in BROKER_CONFIG_DEF.keys.values():
        assert key.doc, key.name
        if key.default not in (None, "") and key.type is not Type.PASSWORD:
            key.check(key.default)


def test_defaults_start_a_broker_config() -> None:
    props = {
        k.name: k.default
        for k in BROKER_CONFIG_DEF.keys.values()
        if k.default not in (None, "") and k.type is not Type.PASSWORD
        and not k.name.startswith(("ssl.", "listener"))
    }  # fmt: skip
    assert BrokerConfig.from_properties(props).num_partitions == 1


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("log.segment.bytes", "abc", "not an integer"),
        ("log.segment.bytes", "13", "must be at least 14"),
        ("log.segment.bytes", str(2**31), "must be at most 2147483647"),
        ("num.partitions", "-3", "must be at least 1"),
        ("auto.create.topics.enable", "maybe", "must be true or false"),
        ("headwater.event.loop", "trio", "must be asyncio, uvloop"),
        ("log.cleanup.policy", "delete,shred", "must be any of delete, compact"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "must be at most 1"),
    ],
)
def test_bad_values_are_refused_naming_key_value_and_rule(key: str, value: str, why: str) -> None:
    with pytest.raises(ConfigValueError) as refused:
        BROKER_CONFIG_DEF.validate({key: value}, {key: "from -o"})
    assert str(refused.value).startswith(f"invalid value {value!r} for {key} (")
    assert str(refused.value).endswith(f"{why} (from -o)")


def test_good_values_pass_and_unknown_keys_warn_with_the_nearest() -> None:
    warnings = BROKER_CONFIG_DEF.validate(
        {
            "log.segment.bytes": "1048576",
            "auto.create.topics.enable": "FALSE",
            "log.cleanup.policy": "compact,delete",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x",
            "log.segmnet.bytes": "1",
            "log.retension.ms": "1",
            "completely.unrelated": "1",
        }
    )
    assert warnings == [
        "unknown config key completely.unrelated; ignored",
        "unknown config key log.retension.ms; did you mean log.retention.ms?",
        "unknown config key log.segmnet.bytes; did you mean log.segment.bytes?",
    ]
