"""``headwater cluster``: ZooKeeper + N broker processes, bootstrap line, clean stop.

The brokers get ``zookeeper.connect``; until the broker acts on it they run as
independent single brokers, which is all these tests rely on (the launcher's
contract: start, report, stop everything).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.cluster.local_cluster import ClusterStartError, LocalCluster, free_port_range
from headwater.cluster.zookeeper_server import four_letter_word


def connectable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_cluster_command_starts_everything_and_stops_it_on_sigterm(tmp_path: Path) -> None:
    base = free_port_range(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "cluster", "--brokers", "2",
         "--data-dir", str(tmp_path), "--base-port", str(base)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        zookeeper = proc.stdout.readline().strip()
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap == f"bootstrap: 127.0.0.1:{base},127.0.0.1:{base + 1}", zookeeper
        zk_host, zk_port = zookeeper.removeprefix("zookeeper: ").split(":")
        assert "Mode: standalone" in four_letter_word(zk_host, int(zk_port), "srvr")
        assert connectable("127.0.0.1", base) and connectable("127.0.0.1", base + 1)
        for i in (1, 2):
            assert (tmp_path / f"broker-{i}").is_dir()
            assert (
                f"listening on 127.0.0.1:{base + i - 1}"
                in (tmp_path / "logs" / f"broker-{i}.log").read_text()
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not connectable("127.0.0.1", base)
    assert not connectable("127.0.0.1", base + 1)
    assert not connectable(zk_host, int(zk_port))


def test_a_broker_that_cannot_start_stops_the_cluster(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, 2, base_port=None, overrides=["headwater.event.loop=not-a-loop"]
    )
    with pytest.raises(ClusterStartError, match="exited"):
        cluster.start(timeout=30)
    assert not cluster.zookeeper.running
    assert not any(b.running for b in cluster.brokers)


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = LocalCluster(tmp_path, 1, base_port=port)
        with pytest.raises(ClusterStartError, match=f"port {port}"):
            cluster.start()
    assert not cluster.zookeeper.running


def test_bad_broker_count_is_an_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "cluster", "--brokers", "0",
         "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--brokers must be at least 1" in result.stdout


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_the_dev_cluster_survives_a_broker_kill_and_restarts_it(tmp_path: Path) -> None:
    import json
    import threading
    import time

    base = free_port_range(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "cluster", "--brokers", "2",
         "--data-dir", str(tmp_path), "--base-port", str(base)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    def wait_for(prefix: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(lines):
                if line.startswith(prefix):
                    return line
            assert proc.poll() is None, lines
            time.sleep(0.05)
        raise AssertionError(f"no line {prefix!r} in {lines}")

    threading.Thread(target=pump, daemon=True).start()
    status: list[str] = []
    try:
        wait_for("bootstrap: ")
        status = _cli("cluster", "--data-dir", str(tmp_path), "status").stdout.splitlines()
        assert [row.split()[3] for row in status[3:]] == ["up", "up"], status

        state = json.loads((tmp_path / "cluster.json").read_text())
        victim = next(b for b in state["brokers"] if b["id"] == 2)
        os.kill(victim["pid"], signal.SIGKILL)
        died = wait_for("broker 2 exited")
        assert "the others keep running" in died and "restart-broker 2" in died
        assert proc.poll() is None and connectable("127.0.0.1", base)
        listed = _cli("topics", "list", "--bootstrap", f"127.0.0.1:{base}")
        assert listed.returncode == 0, listed.stderr
        status = _cli("cluster", "--data-dir", str(tmp_path), "status").stdout.splitlines()
        assert [row.split()[3] for row in status[3:]] == ["up", "down"], status

        restarted = _cli("cluster", "--data-dir", str(tmp_path), "restart-broker", "2")
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout.strip() == f"broker 2 listening on 127.0.0.1:{base + 1}"
        assert connectable("127.0.0.1", base + 1)

        stopped = _cli("cluster", "--data-dir", str(tmp_path), "stop-broker", "1")
        assert stopped.stdout.strip() == "stopped broker 1", stopped.stderr
        status = _cli("cluster", "--data-dir", str(tmp_path), "status").stdout.splitlines()
        assert [row.split()[3] for row in status[3:]] == ["down", "up"], status
        assert not any(line.startswith("broker 1 exited") for line in lines)
        unknown = _cli("cluster", "--data-dir", str(tmp_path), "stop-broker", "7")
        assert unknown.returncode == 1 and "no broker 7" in unknown.stderr

        proc.send_signal(signal.SIGINT)  # Ctrl-C stops everything
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not connectable("127.0.0.1", base + 1)
    assert not (tmp_path / "cluster.json").exists()
    gone = _cli("cluster", "--data-dir", str(tmp_path), "status")
    assert gone.returncode == 1 and gone.stderr.startswith("error: no cluster runs in")
