"""The CLI's security options: JAAS lines, environment variables, the file winning."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from headwater.cli.common import command_security, env_name, security_properties
from headwater.security.client_security import jaas_credentials


def test_jaas_line_gives_username_and_password() -> None:
    line = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="a \\"quoted\\" secret";'
    )
    assert jaas_credentials(line) == ("alice", 'a "quoted" secret')
    assert jaas_credentials("PlainLoginModule required username=bob password=x;") == ("bob", "x")
    assert jaas_credentials("X required;") == (None, None)


def test_environment_names_follow_the_keys() -> None:
    assert env_name("sasl.username") == "HEADWATER_SASL_USERNAME"
    assert env_name("ssl.ca.location") == "HEADWATER_SSL_CA_LOCATION"


def test_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.username=file-user\n")
    env = {"HEADWATER_SASL_USERNAME": "env-user", "HEADWATER_SASL_PASSWORD": "pw", "HOME": "/"}
    props = security_properties(argparse.Namespace(command_config=str(path)), env)
    assert props == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.username": "file-user",
        "sasl.password": "pw",
    }


def test_no_security_keys_means_plaintext(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEADWATER_SECURITY_PROTOCOL", raising=False)
    assert command_security(argparse.Namespace(command_config=None)) is None


def test_a_missing_command_config_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--command-config .*nope: No such file"):
        command_security(argparse.Namespace(command_config=str(tmp_path / "nope")))


def test_sasl_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWATER_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("HEADWATER_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv(
        "HEADWATER_SASL_JAAS_CONFIG", 'ScramLoginModule required username="u" password="p";'
    )
    security = command_security(argparse.Namespace(command_config=None))
    assert security is not None
    assert (security.protocol, security.sasl_mechanism, security.username, security.password) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "u",
        "p",
    )
