"""``headwater serve`` refuses bad input in one line, warns about typos, and says ready once.

Each bad input of issue 19 (point 3) gets its one-line error on stderr, exit
code 1 and no traceback; ``--log-level debug`` still shows the traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess, free_port


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", "serve", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd,
    )  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_each_bad_input_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=-3\n")
    port = str(free_port())
    cases = {
        ("-o", "log.segment.bytes=abc"): (
            "error: invalid value 'abc' for log.segment.bytes (int): not an integer (from -o)"
        ),
        ("--config", str(tmp_path / "missing.properties")): (
            f"error: cannot read --config {tmp_path / 'missing.properties'}: "
            "No such file or directory"
        ),
        ("--listen", "127.0.0.1:notaport"): "error: --listen 127.0.0.1:notaport: ",
        ("--log-level", "chatty"): (
            "error: --log-level chatty: must be one of debug, info, warning, error, critical"
        ),
        ("--data-dir", str(a_file)): (
            f"error: data directory {a_file} is a file; pass --data-dir a directory"
        ),
        ("--config", str(props)): (
            f"error: invalid value '-3' for num.partitions (int): must be at least 1 (in {props})"
        ),
        ("-o", "auto.create.topics.enable=maybe"): (
            "error: invalid value 'maybe' for auto.create.topics.enable (boolean): "
            "must be true or false (from -o)"
        ),
    }
    for args, expected in cases.items():
        line = one_line_error(serve("--listen", f"127.0.0.1:{port}", *args, cwd=tmp_path))
        assert line.startswith(expected), (args, line)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = serve("--log-level", "debug", "-o", "log.segment.bytes=abc", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: invalid value 'abc'")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_data_dir_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "ro"
    data.mkdir(mode=0o500)
    line = one_line_error(serve("--data-dir", str(data), cwd=tmp_path))
    assert line == f"error: data directory {data} is not writable by this user"


def test_a_busy_metrics_port_is_named_as_such(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = serve("--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "d"),
                       "--metrics-listen", f"127.0.0.1:{busy}", cwd=tmp_path)  # fmt: skip
    line = one_line_error(result)
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{busy} (--metrics-listen)"), line


def test_a_busy_kafka_port_is_named_as_the_listener(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = serve("--listen", f"127.0.0.1:{busy}", "--data-dir", str(tmp_path / "d"),
                       cwd=tmp_path)  # fmt: skip
    line = one_line_error(result)
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{busy} (listener PLAINTEXT)"), line


def test_a_typo_is_a_warning_naming_the_key_and_the_broker_says_ready_once(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(
        tmp_path / "data", overrides=["log.segmnet.bytes=1048576", "log.retension.ms=1000"]
    ).start()
    try:
        lines = list(broker.lines)
    finally:
        broker.stop()
    assert (
        "WARNING headwater: unknown config key log.segmnet.bytes (from -o); "
        "did you mean log.segment.bytes?"
    ) in lines
    assert (
        "WARNING headwater: unknown config key log.retension.ms (from -o); "
        "did you mean log.retention.ms?"
    ) in lines
    assert lines.count(f"listening on {broker.bootstrap}") == 1


def test_help_config_and_version(tmp_path: Path) -> None:
    table = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "serve", "--help-config"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "  log.segment.bytes  [int, default 1073741824, valid [14,...,2147483647]]" in table
    assert "  num.partitions  [int, default 1, valid [1,...]]" in table
    version = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "--version"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert version.startswith("headwater ")


def test_cluster_data_dir_naming_a_file_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "cluster", "--data-dir", str(a_file)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout.strip() == (
        f"error: data directory {a_file} is a file; pass --data-dir a directory"
    )
