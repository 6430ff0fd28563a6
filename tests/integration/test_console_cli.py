"""The console's command-line entry points, without a browser: ``serve --console-listen``,
its config key, the refusal to bind off loopback without logins, and ``--add-user``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from headwater.console.auth import parse_user_file, verify_password
from tests.integration.broker_process import BrokerProcess, free_port


def _get(url: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_serve_console_listen_serves_the_console_beside_the_broker(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(
        tmp_path / "data", args=["--console-listen", f"127.0.0.1:{port}"]
    ).start()
    try:
        deadline = time.monotonic() + 30  # logged just after the broker's ready line
        while f"console on http://127.0.0.1:{port}/" not in broker.lines:
            assert time.monotonic() < deadline, broker.lines
            time.sleep(0.1)
        page = _get(f"http://127.0.0.1:{port}/")
        assert "<h1>Overview</h1>" in page
        assert f"127.0.0.1:{broker.port}" in page  # the broker, up, in its own console
        assert ">up<" in page
    finally:
        code = broker.stop()
        assert code == 0, "\n".join(broker.lines[-80:])


def test_the_config_key_serves_it_too(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(
        tmp_path / "data", overrides=[f"headwater.console.listen=127.0.0.1:{port}"]
    ).start()
    try:
        assert "Topics" in _get(f"http://127.0.0.1:{port}/topics?internal=1")
    finally:
        broker.stop()


def _cli(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args], input=stdin, capture_output=True,
        text=True, timeout=120, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_off_loopback_without_users_neither_serve_nor_console_starts(tmp_path: Path) -> None:
    listen = f"0.0.0.0:{free_port()}"
    served = _cli("serve", "--data-dir", str(tmp_path / "d"), "--listen",
                  f"127.0.0.1:{free_port()}", "--console-listen", listen)  # fmt: skip
    assert served.returncode == 1
    assert "is not a loopback address" in served.stderr and "--console-users FILE" in served.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").glob("*-0"))
    alone = _cli("console", "--bootstrap", "127.0.0.1:1", "--listen", "127.0.0.2:0")
    assert alone.returncode == 1
    assert "127.0.0.2:0, which is not a loopback address" in alone.stderr


def test_add_user_writes_a_scrypt_hash_the_console_accepts(tmp_path: Path) -> None:
    users = tmp_path / "users"
    done = _cli("console", "--users", str(users), "--add-user", "ops",
                env={"HEADWATER_CONSOLE_PASSWORD": "pw-1"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    _cli("console", "--users", str(users), "--add-user", "viewer",
         env={"HEADWATER_CONSOLE_PASSWORD": "pw-2"})  # fmt: skip
    parsed = parse_user_file(users.read_text())
    assert sorted(parsed) == ["ops", "viewer"]
    assert parsed["ops"].startswith("$scrypt$") and verify_password(parsed["ops"], "pw-1")
    assert oct(users.stat().st_mode & 0o777) == "0o600"
    bad = tmp_path / "bad"
    bad.write_text("ops:secret\n")
    refused = _cli(
        "console", "--bootstrap", "127.0.0.1:1", "--users", str(bad), "--listen", "127.0.0.1:0"
    )
    assert refused.returncode == 1 and "plain passwords are refused" in refused.stderr
