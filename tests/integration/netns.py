"""Network namespaces, a private bridge and nftables cuts for partition tests (issue 31).

Topology: one namespace per node (ZooKeeper, each broker, the clients), each
with one veth link into a *switch* namespace that holds the bridge. The
root namespace gets nothing: no address, no bridge, no link (every veth is
created inside the switch namespace with its peer sent straight into the
node's). Addresses (``10.231.0.0/24``) exist only inside the node
namespaces, so no traffic can leave them.

A *cut* between two nodes is a pair of nftables drop rules in each of the
two node namespaces (a table of our own, ``inet hwt``, with a set of cut-off
peers that ``input`` and ``output`` drop): packets vanish, connections hang
until their own timeouts, as in a real partition. ``heal()`` empties every
set.

Safety: everything is named with one prefix, ``hwt-<pid>-`` (namespaces; the
links and nft tables live inside them), and ``remove()`` deletes exactly the
namespaces this object created, which takes their links and tables with
them. It runs from the caller's finalizer and from ``atexit`` (whichever
comes first), and it first kills the processes still inside those
namespaces: those can only be ones the test started there.

Processes enter a node with ``ip netns exec <namespace>`` (see ``wrap``);
``ip`` execs the command, so the process keeps the pid the caller sees and
``kill -9``/SIGSTOP reach it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

SUBNET = "10.231.0"
TABLE = "hwt"


class NetnsUnavailableError(Exception):
    """This machine cannot make the topology (not root, no ``ip`` or ``nft``)."""


def unavailable_reason() -> str | None:
    """Why network namespaces with nftables cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (bash scripts/system-deps.sh)"
    return None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise NetnsUnavailableError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done


class Network:
    """Node namespaces on a private bridge; ``cut``/``heal`` partition them."""

    def __init__(self, nodes: Sequence[str], prefix: str | None = None) -> None:
        self.prefix = prefix if prefix is not None else f"hwt-{os.getpid()}-"
        self.nodes = list(nodes)
        self.address = {node: f"{SUBNET}.{10 + i}" for i, node in enumerate(self.nodes)}
        #: Pairs cut now (each sorted), for the report.
        self.cuts: set[tuple[str, str]] = set()
        self._created: list[str] = []
        self._removed = False

    def namespace(self, node: str) -> str:
        return f"{self.prefix}{node}"

    @property
    def switch(self) -> str:
        return f"{self.prefix}sw"

    def wrap(self, node: str) -> list[str]:
        """The command prefix that runs a process inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node)]

    # -- lifecycle -------------------------------------------------------------------

    def create(self) -> Network:
        """Make the switch, the nodes, their links, addresses and nft tables."""
        reason = unavailable_reason()
        if reason is not None:
            raise NetnsUnavailableError(reason)
        atexit.register(self.remove)
        try:
            self._add_namespace(self.switch)
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
            for i, node in enumerate(self.nodes):
                ns = self.namespace(node)
                self._add_namespace(ns)
                port = f"p{i}"
                # Created in the switch namespace, the peer sent straight into the node's:
                # no link ever exists in the root namespace.
                _run("ip", "-n", self.switch, "link", "add", port, "type", "veth",
                     "peer", "name", "eth0", "netns", ns)  # fmt: skip
                _run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "addr", "add", f"{self.address[node]}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                self._nft(node, _TABLE_SCRIPT)
        except BaseException:
            self.remove()
            raise
        return self

    def _add_namespace(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self._created.append(ns)

    def remove(self) -> None:
        """Delete every namespace this object made (their links and tables go with
        them), after killing what still runs inside. Idempotent; never raises."""
        if self._removed:
            return
        self._removed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.remove)
        for ns in reversed(self._created):
            with contextlib.suppress(Exception):
                pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(Exception):
                _run("ip", "netns", "del", ns, check=False)
        self._created.clear()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- cuts -------------------------------------------------------------------------

    def _nft(self, node: str, script: str) -> None:
        done = subprocess.run(
            [*self.wrap(node), "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise NetnsUnavailableError(f"nft in {node} failed: {done.stderr.strip()}")

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between nodes ``a`` and ``b`` (both directions, both ends)."""
        self._nft(a, f"add element inet {TABLE} cut {{ {self.address[b]} }}\n")
        self._nft(b, f"add element inet {TABLE} cut {{ {self.address[a]} }}\n")
        self.cuts.add((min(a, b), max(a, b)))

    def cut_off(self, node: str, others: Iterable[str]) -> None:
        for other in others:
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        """Every cut undone."""
        for node in self.nodes:
            self._nft(node, f"flush set inet {TABLE} cut\n")
        self.cuts.clear()

    def dropped(self, node: str) -> list[str]:
        """The peers ``node`` drops now (read back from nft, for checks)."""
        done = _run(*self.wrap(node), "nft", "-j", "list", "set", "inet", TABLE, "cut")
        return [a for a in self.address.values() if f'"{a}"' in done.stdout]


_TABLE_SCRIPT = f"""
table inet {TABLE} {{
    set cut {{ type ipv4_addr; }}
    chain input {{ type filter hook input priority 0; policy accept; ip saddr @cut drop; }}
    chain output {{ type filter hook output priority 0; policy accept; ip daddr @cut drop; }}
}}
"""


#: The line a worker prints its JSON result on.
RESULT = "NETNS-RESULT "
REPO = Path(__file__).resolve().parents[2]


def run_in(
    network: Network, node: str, target: str, timeout_s: float, **kwargs: Any
) -> dict[str, Any]:
    """Run ``target`` (``module:function``) in a worker process inside ``node``'s
    namespace, as ``function(prefix=<the network's prefix>, **kwargs)``; its output
    is passed through and its JSON result returned. The worker's clients (librdkafka,
    Headwater's) are thereby inside the namespace; the calling process never enters
    one. Raises ``AssertionError`` with the worker's tail when it fails."""
    command = [
        *network.wrap(node),
        sys.executable,
        "-m",
        "tests.integration.netns",
        target,
        json.dumps({"prefix": network.prefix, **kwargs}),
    ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    result: dict[str, Any] | None = None
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.startswith(RESULT):
                result = json.loads(line[len(RESULT) :])
                continue
            lines.append(line.rstrip("\n"))
            print(line, end="", flush=True)
            if time.monotonic() > deadline:
                break
        proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or result is None:
        tail = "\n".join(lines[-60:])
        raise AssertionError(f"{target} in {node} failed (exit {proc.returncode}):\n{tail}")
    return result


def _worker(target: str, arguments: str) -> None:
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(**json.loads(arguments))
    print(RESULT + json.dumps(result), flush=True)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
