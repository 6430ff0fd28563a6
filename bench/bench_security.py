"""What security costs: PLAINTEXT vs TLS vs SASL_SSL throughput, SCRAM handshakes, ACL checks.

Why this shape: the machine is small and shared, so the three listeners are
measured side by side on one broker process, in alternating rounds, with
the same confluent-kafka settings; broker CPU-seconds per GB come from the
broker's utime + stime. TLS turns zero-copy off (record data must be
encrypted in user space), which the consume figures show.

SCRAM handshakes per second are measured end to end (TLS connect,
SaslHandshake, two SaslAuthenticate round trips, with Headwater's own SCRAM
client on a few threads) with the broker's CPU per handshake, and the
sans-I/O server side alone. The ACL check is measured in process: one
``authorize`` call against 10,000 ACLs, and the per-partition cost of a
10,000-partition fetch authorized through the per-request topic memo.

Run: ``.venv/bin/python bench/bench_security.py`` (about 2 minutes; see --help).
Prints a table and writes bench/results/security.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench_broker import Phase, Workload, settle, summarise
from brokers import Headwater, ScratchDir, free_port, machine_info
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from headwater.broker.connection import RequestContext
from headwater.broker.connection_security import ConnectionSecurity
from headwater.protocol.apis import ApiKey
from headwater.protocol.header import RequestHeader
from headwater.protocol.messages import (
    build_request,
    decode_response,
    encode_request,
)
from headwater.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from headwater.security.acl_store import InMemoryAclStore
from headwater.security.authorizer import AclAuthorizer
from headwater.security.credentials import InMemoryCredentialStore
from headwater.security.principal import user
from headwater.security.scram import (
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramServer,
)
from tests.integration.tls_certs import Certs, make_certs

RESULTS = Path(__file__).parent / "results" / "security.json"
PASSWORD = "bench-password"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


class SecureHeadwater(Headwater):
    """One broker with a PLAINTEXT, an SSL and a SASL_SSL listener."""

    def __init__(self, data_dir: Path, certs: Certs) -> None:
        super().__init__(data_dir)
        self.ports = {"PLAINTEXT": self.port, "SSL": free_port(), "SASL_SSL": free_port()}
        listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        self.overrides = [
            f"listeners={listeners}",
            f"ssl.keystore.location={certs.server_keystore}",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
        ]

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "headwater.cli", "serve", "--data-dir", str(self.data_dir)]
        for item in self.overrides:
            cmd += ["--override", item]
        return cmd


def client_config(b: SecureHeadwater, listener: str, ca: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{b.ports[listener]}"}
    if listener != "PLAINTEXT":
        conf.update({"security.protocol": listener, "ssl.ca.location": str(ca)})
    if listener == "SASL_SSL":
        conf.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench",
                     "sasl.password": PASSWORD})  # fmt: skip
    return conf


def produce(b: SecureHeadwater, conf: dict[str, Any], topic: str, work: Workload) -> Phase:
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                         "compression.type": "none", "enable.idempotence": False})  # fmt: skip
    value = os.urandom(work.record_size)
    cpu0, client0, start = b.cpu_seconds(), time.process_time(), time.perf_counter()
    for _ in range(work.count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("produce did not finish")
    seconds = time.perf_counter() - start
    return Phase(seconds, work.count, work.total_bytes, b.cpu_seconds() - cpu0,
                 time.process_time() - client0)  # fmt: skip


def consume(b: SecureHeadwater, conf: dict[str, Any], topic: str, work: Workload) -> Phase:
    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 16 << 20,
                         "max.partition.fetch.bytes": 16 << 20})  # fmt: skip
    records = size = 0
    cpu0, client0, start = b.cpu_seconds(), time.process_time(), time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = start + 120
        while records < work.count and time.perf_counter() < deadline:
            want = min(work.count - records, 1000)
            for msg in consumer.consume(want, 1.0):
                if msg.error() is not None:
                    raise RuntimeError(str(msg.error()))
                records += 1
                size += len(msg.value() or b"")
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if size != work.total_bytes:
        raise RuntimeError(f"consumed {size} of {work.total_bytes} bytes")
    return Phase(seconds, records, size, b.cpu_seconds() - cpu0, time.process_time() - client0)


# --- SCRAM handshakes -----------------------------------------------------------------


def _request(sock: ssl.SSLSocket, api_key: int, version: int, body: dict[str, Any],
             corr: int) -> Any:  # fmt: skip
    payload = encode_request(build_request(api_key, version, body))
    head = struct.pack(">hhih", api_key, version, corr, 5) + b"bench"
    if api_key == ApiKey.SASL_AUTHENTICATE and version >= 2:
        head += b"\x00"
    sock.sendall(struct.pack(">i", len(head) + len(payload)) + head + payload)
    size = struct.unpack(">i", _read(sock, 4))[0]
    frame = _read(sock, size)
    skip = 5 if api_key == ApiKey.SASL_AUTHENTICATE and version >= 2 else 4
    return decode_response(api_key, version, frame[skip:], 0)


def _read(sock: ssl.SSLSocket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def one_handshake(port: int, ctx: ssl.SSLContext) -> None:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
        hs = _request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}, 1)
        assert int(hs.error_code) == 0
        client = ScramClient(SCRAM_SHA_512, "bench", PASSWORD)
        r1 = _request(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()}, 2)
        final = client.final(r1.auth_bytes)
        r2 = _request(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final}, 3)
        assert int(r2.error_code) == 0, r2.error_message
        client.verify(r2.auth_bytes)


def handshakes(b: SecureHeadwater, ca: Path, seconds: float, threads: int) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=str(ca))
    done = [0] * threads
    stop = time.perf_counter() + seconds

    def loop(i: int) -> None:
        while time.perf_counter() < stop:
            one_handshake(b.ports["SASL_SSL"], ctx)
            done[i] += 1

    cpu0, start = b.cpu_seconds(), time.perf_counter()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    total = sum(done)
    return {
        "threads": threads,
        "handshakes": total,
        "per_s": round(total / elapsed, 1),
        "broker_cpu_ms_per_handshake": round((b.cpu_seconds() - cpu0) * 1000 / total, 2),
    }


def scram_server_side(n: int) -> dict[str, Any]:
    """The broker's share of a SCRAM exchange alone (the client's PBKDF2 excluded)."""
    store = InMemoryCredentialStore()
    store.upsert("u", SCRAM_SHA_512, ScramCredential.from_password(SCRAM_SHA_512, PASSWORD))
    client = ScramClient(SCRAM_SHA_512, "u", PASSWORD, nonce="fixednonce")
    # Precompute client messages against a fixed server nonce.
    server = ScramServer(SCRAM_SHA_512, store.get, nonce="srv")
    first = client.first()
    final = client.final(server.step(first))
    start = time.perf_counter()
    for _ in range(n):
        s = ScramServer(SCRAM_SHA_512, store.get, nonce="srv")
        s.step(first)
        s.step(final)
    per = (time.perf_counter() - start) / n
    client_start = time.perf_counter()
    for _ in range(20):
        ScramClient(SCRAM_SHA_512, "u", PASSWORD, nonce="x").final(server_first_for(store))
    client_per = (time.perf_counter() - client_start) / 20
    return {"server_us": round(per * 1e6, 1), "client_pbkdf2_ms": round(client_per * 1000, 2)}


def server_first_for(store: InMemoryCredentialStore) -> bytes:
    cred = store.get("u", SCRAM_SHA_512)
    assert cred is not None
    import base64

    return f"r=x,s={base64.b64encode(cred.salt).decode()},i={cred.iterations}".encode()


# --- ACL checks ---------------------------------------------------------------------


def acl_checks(n_acls: int, partitions: int) -> dict[str, Any]:
    """10,000 ACLs: 1,000 principals x (8 literal topics + 1 prefix + 1 group)."""
    bindings = []
    principals = max(1, n_acls // 10)
    for i in range(principals):
        who = f"User:u{i}"
        for t in range(8):
            bindings.append(AclBinding(ResourcePattern(ResourceType.TOPIC, f"topic-{i}-{t}"),
                            AccessControlEntry(who, "*", AclOperation.READ,
                                               AclPermissionType.ALLOW)))  # fmt: skip
        bindings.append(AclBinding(
            ResourcePattern(ResourceType.TOPIC, f"team{i}-", PatternType.PREFIXED),
            AccessControlEntry(who, "*", AclOperation.READ, AclPermissionType.ALLOW)))  # fmt: skip
        bindings.append(AclBinding(ResourcePattern(ResourceType.GROUP, f"g{i}"),
                        AccessControlEntry(who, "*", AclOperation.READ,
                                           AclPermissionType.ALLOW)))  # fmt: skip
    authorizer = AclAuthorizer(InMemoryAclStore())
    t0 = time.perf_counter()
    authorizer.create_acls(bindings)
    index_ms = (time.perf_counter() - t0) * 1000
    who = user("u500")
    names = [f"team500-{k}" for k in range(100)]
    calls = 100_000
    start = time.perf_counter()
    for k in range(calls):
        authorizer.authorize(who, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC,
                             names[k % 100])  # fmt: skip
    per_call_ns = (time.perf_counter() - start) / calls * 1e9
    # A fetch of `partitions` partitions over 100 topics, as the handler authorizes it.
    ctx = RequestContext(RequestHeader(1, 12, 1, "bench"), "127.0.0.1:1", 1,
                         ConnectionSecurity(principal=who, authorizer=authorizer))  # fmt: skip
    topics = [names[p % 100] for p in range(partitions)]
    rounds = 20
    start = time.perf_counter()
    for _ in range(rounds):
        check = ctx.topic_check(AclOperation.READ)
        for t in topics:
            check(t)
    per_partition_ns = (time.perf_counter() - start) / (rounds * partitions) * 1e9
    open_ctx = RequestContext(RequestHeader(1, 12, 1, "bench"), "127.0.0.1:1", 1)
    start = time.perf_counter()
    for _ in range(rounds):
        check = open_ctx.topic_check(AclOperation.READ)
        for t in topics:
            check(t)
    allow_all_ns = (time.perf_counter() - start) / (rounds * partitions) * 1e9
    return {
        "acls": len(authorizer.acls()),
        "index_build_ms": round(index_ms, 1),
        "authorize_call_ns": round(per_call_ns),
        "fetch_partitions": partitions,
        "fetch_topics": 100,
        "per_partition_ns_with_acls": round(per_partition_ns),
        "per_partition_ns_acls_off": round(allow_all_ns),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--count", type=int, default=100_000, help="records per phase")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--handshake-seconds", type=float, default=8.0)
    parser.add_argument("--handshake-threads", type=int, default=2)
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--fetch-partitions", type=int, default=10_000)
    args = parser.parse_args()
    result: dict[str, Any] = {"machine": machine_info()}
    work = Workload(f"{args.record_size}B", args.record_size, args.count)
    phases: dict[tuple[str, str], list[Phase]] = {}
    with ScratchDir("hw-bench-sec-") as scratch:
        certs = make_certs(scratch / "certs")
        b = SecureHeadwater(scratch / "data", certs)
        subprocess.run([sys.executable, "-m", "headwater.cli", "users", "add", "bench",
                        "--password", PASSWORD, "--mechanism", "SCRAM-SHA-512",
                        "--data-dir", str(b.data_dir)], check=True)  # fmt: skip
        b.start()
        try:
            for rnd in range(args.rounds):
                for listener in LISTENERS:
                    conf = client_config(b, listener, certs.ca)
                    topic = f"bench-{listener}-{rnd}"
                    settle()
                    p = produce(b, conf, topic, work)
                    settle()
                    c = consume(b, conf, topic, work)
                    phases.setdefault((listener, "produce"), []).append(p)
                    phases.setdefault((listener, "consume"), []).append(c)
                    print(f"round {rnd} {listener:<10} produce {p.mb_per_s:7.1f} MB/s "
                          f"({p.broker_cpu_s_per_gb:5.1f} CPU-s/GB)  consume {c.mb_per_s:7.1f}"
                          f" MB/s ({c.broker_cpu_s_per_gb:5.1f} CPU-s/GB)", flush=True)  # fmt: skip
            result["handshakes"] = handshakes(
                b, certs.ca, args.handshake_seconds, args.handshake_threads
            )
        finally:
            b.stop()
    result["scram_server_side"] = scram_server_side(2000)
    result["acl_checks"] = acl_checks(args.acls, args.fetch_partitions)
    table: dict[str, Any] = {}
    for (listener, kind), rows in phases.items():
        table.setdefault(listener, {})[kind] = summarise(rows)
    result["throughput"] = table
    result["config"] = {"workload": {"record_size": args.record_size, "count": args.count},
                        "rounds": args.rounds, "tls": "TLSv1.3 (Python ssl, OpenSSL)",
                        "sasl": "SCRAM-SHA-512, 4096 iterations"}  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{'listener':<10} {'phase':<8} {'MB/s':>8} {'CPU-s/GB':>9}")
    for listener in LISTENERS:
        for kind in ("produce", "consume"):
            row = table[listener][kind]
            print(
                f"{listener:<10} {kind:<8} {row['mb_per_s']:8.1f} {row['broker_cpu_s_per_gb']:9.2f}"
            )
    hs = result["handshakes"]
    print(f"\nSCRAM-SHA-512 over TLS: {hs['per_s']} handshakes/s ({hs['threads']} client threads), "
          f"broker {hs['broker_cpu_ms_per_handshake']} CPU-ms each")  # fmt: skip
    ss = result["scram_server_side"]
    print(f"server side alone {ss['server_us']} us; client PBKDF2 {ss['client_pbkdf2_ms']} ms")
    ac = result["acl_checks"]
    print(f"ACLs {ac['acls']}: authorize {ac['authorize_call_ns']} ns/call; fetch of "
          f"{ac['fetch_partitions']} partitions: {ac['per_partition_ns_with_acls']} ns/partition "
          f"(ACLs off {ac['per_partition_ns_acls_off']} ns)")  # fmt: skip
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
