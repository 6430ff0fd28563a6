"""Kafka's ZooKeeper-mode layout: znode paths and their JSON, and ``zookeeper.connect``.

Headwater keeps Kafka's paths and field names (``ZkData.scala``), so the layout
is one that ran in production for a decade and anyone who knows Kafka can read
a Headwater cluster's ZooKeeper with ``zkCli``. Everything here is pure: bytes
in, values out.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
DEFAULT_BROKER_ENTITY = "<default>"
"""``/config/brokers/<default>``: Kafka's cluster-wide dynamic broker configs."""
DELETE_TOPICS = "/admin/delete_topics"
CLUSTER_ID = "/cluster/id"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
"""Headwater's controlled shutdown: a stopping broker's ephemeral ``<id>`` child asks
the controller to move its leaderships (Kafka sent a ControlledShutdown request)."""

REASSIGNMENTS = "/admin/reassign_requests"
"""AlterPartitionReassignments (KIP-455) requests for the controller: sequential
children with the targets (null: cancel); the controller writes the results in."""
LEADER_ELECTIONS = "/admin/elect_leaders"
"""ElectLeaders (KIP-460) requests for the controller: sequential children holding
the election type and partitions; the controller writes the results into them."""

LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
"""Kafka's log directory failure notifications (KIP-112): sequential persistent
``log_dir_event_<seq>`` children, ``{"version":1,"broker":<id>,"event":1}``, which the
controller handles and deletes. See ``encode_log_dir_event`` for Headwater's extension."""
LOG_DIR_FAILURE_EVENT = 1

PERSISTENT_PATHS = (
    BROKER_IDS, TOPICS, CONFIG_TOPICS, DELETE_TOPICS, CONTROLLED_SHUTDOWN, LEADER_ELECTIONS,
    REASSIGNMENTS, LOG_DIR_EVENT_NOTIFICATION,
    "/cluster",
)  # fmt: skip
"""Created at start (like Kafka's ``ZkData.PersistentZkPaths``)."""


class ZkLayoutError(ValueError):
    """A znode's content or a ``zookeeper.connect`` string is malformed."""


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def broker_config_path(entity: str) -> str:
    """``entity``: a broker id, or ``<default>`` for the cluster-wide default."""
    return f"{CONFIG_BROKERS}/{entity}"


def encode_config_change(entity_path: str) -> bytes:
    """A ``/config/changes/config_change_<n>`` notification (Kafka's version 2)."""
    return _dump({"version": 2, "entity_path": entity_path})


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_topic_name(name: str) -> None:
    """Kafka's rule (``Topic.validate``); it also keeps names safe as path segments."""
    if name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise ZkLayoutError(
            f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-], not '.' or '..'"
        )


@dataclass(frozen=True, slots=True)
class ZkConnect:
    """A parsed ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``."""

    hosts: str
    chroot: str  # "" for none, else "/a/b" without a trailing slash

    def __str__(self) -> str:
        return self.hosts + self.chroot


def parse_zookeeper_connect(value: str) -> ZkConnect:
    """Split hosts from the chroot (Kafka's rule: the chroot starts at the first '/')."""
    text = value.strip()
    hosts, slash, chroot = text.partition("/")
    if not hosts:
        raise ZkLayoutError(f"zookeeper.connect {value!r} names no host")
    for entry in hosts.split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ZkLayoutError(f"zookeeper.connect {value!r}: {entry!r} is not host:port")
    root = ""
    if slash:
        root = "/" + chroot.strip("/")
        if root == "/":
            root = ""
        elif any(part in ("", ".", "..") for part in root[1:].split("/")):
            raise ZkLayoutError(f"zookeeper.connect {value!r}: bad chroot {root!r}")
    return ZkConnect(hosts=hosts, chroot=root)


# --- JSON --------------------------------------------------------------------


def _load(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkLayoutError(f"{what}: not JSON: {exc}") from None


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _endpoint_text(name: str, host: str, port: int) -> str:
    return f"{name}://[{host}]:{port}" if ":" in host else f"{name}://{host}:{port}"


def encode_broker(
    host: str,
    port: int,
    rack: str | None,
    endpoints: tuple[tuple[str, str, str, int], ...] = (),
) -> bytes:
    """``/brokers/ids/<id>`` as Kafka's version 4 registration.

    ``endpoints`` are (listener, protocol, host, port), every listener the
    broker has; without them the broker has one PLAINTEXT listener at
    ``host:port``. Like Kafka, ``host``/``port`` are the first endpoint's.
    """
    listed = endpoints or (("PLAINTEXT", "PLAINTEXT", host, port),)
    return _dump(
        {
            "listener_security_protocol_map": {name: proto for name, proto, _, _ in listed},
            "endpoints": [_endpoint_text(name, h, p) for name, _, h, p in listed],
            "jmx_port": -1,
            "host": host,
            "timestamp": _now_ms(),
            "port": port,
            "rack": rack,
            "version": 4,
        }
    )


def decode_broker_endpoints(data: bytes) -> tuple[tuple[str, str, str, int], ...]:
    """Every (listener, protocol, host, port) of a registration; protocol defaults to
    the listener's name (Kafka's default map)."""
    value = _load(data, "broker registration")
    try:
        protocols = value.get("listener_security_protocol_map") or {}
        out = []
        for text in value.get("endpoints") or []:
            name, _, address = str(text).partition("://")
            host, _, port = address.rpartition(":")
            out.append((name, str(protocols.get(name, name)), host.strip("[]"), int(port)))
        return tuple(out)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ZkLayoutError(f"broker registration: {exc!r}") from None


def decode_broker(data: bytes) -> tuple[str, int, str | None]:
    """(host, port, rack) of the first endpoint (falling back to the v1 host/port)."""
    value = _load(data, "broker registration")
    try:
        endpoints = value.get("endpoints") or []
        if endpoints:
            _, _, address = str(endpoints[0]).partition("://")
            host, _, port = address.rpartition(":")
            host = host.strip("[]")
            return host, int(port), value.get("rack")
        return str(value["host"]), int(value["port"]), value.get("rack")
    except (KeyError, ValueError, AttributeError, TypeError) as exc:
        raise ZkLayoutError(f"broker registration: {exc!r}") from None


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    value = _load(data, "controller")
    try:
        # Kafka before 0.9 wrote a bare number.
        return int(value) if isinstance(value, int) else int(value["brokerid"])
    except (KeyError, ValueError, TypeError) as exc:
        raise ZkLayoutError(f"controller: {exc!r}") from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ZkLayoutError(f"controller_epoch: {data!r} is not a number") from None


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        raise ZkLayoutError(f"topic_id {text!r} is not a Kafka Uuid") from None


def encode_topic(
    topic_id: uuid.UUID,
    replicas: dict[int, list[int]],
    adding: dict[int, list[int]] | None = None,
    removing: dict[int, list[int]] | None = None,
) -> bytes:
    """``/brokers/topics/<t>``: Kafka's version 3 (topic id, and per partition the
    replicas being added and removed by a reassignment in flight, KIP-455)."""
    return _dump(
        {
            "version": 3,
            "topic_id": encode_topic_id(topic_id),
            "partitions": {str(p): list(r) for p, r in sorted(replicas.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items()) if r},
            "removing_replicas": {
                str(p): list(r) for p, r in sorted((removing or {}).items()) if r
            },
        }
    )


def decode_topic_reassignments(
    data: bytes,
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(adding, removing) replicas per partition of a reassignment in flight."""
    value = _load(data, "topic assignment")
    try:
        adding = {
            int(p): [int(b) for b in r] for p, r in (value.get("adding_replicas") or {}).items()
        }
        removing = {
            int(p): [int(b) for b in r] for p, r in (value.get("removing_replicas") or {}).items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise ZkLayoutError(f"topic assignment: {exc!r}") from None
    return adding, removing


def decode_topic(data: bytes) -> tuple[uuid.UUID | None, dict[int, list[int]]]:
    value = _load(data, "topic assignment")
    try:
        raw_id = value.get("topic_id")
        topic_id = decode_topic_id(raw_id) if raw_id else None
        replicas = {int(p): [int(b) for b in r] for p, r in value["partitions"].items()}
    except (KeyError, ValueError, AttributeError, TypeError) as exc:
        raise ZkLayoutError(f"topic assignment: {exc!r}") from None
    return topic_id, replicas


def encode_partition_state(
    leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int
) -> bytes:
    return _dump(
        {
            "controller_epoch": controller_epoch,
            "leader": leader,
            "version": 1,
            "leader_epoch": leader_epoch,
            "isr": list(isr),
        }
    )


def decode_partition_state(data: bytes) -> tuple[int, int, tuple[int, ...], int]:
    """(leader, leader_epoch, isr, controller_epoch)."""
    value = _load(data, "partition state")
    try:
        return (
            int(value["leader"]),
            int(value["leader_epoch"]),
            tuple(int(b) for b in value["isr"]),
            int(value["controller_epoch"]),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise ZkLayoutError(f"partition state: {exc!r}") from None


def encode_configs(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(configs.items()))})


def decode_configs(data: bytes) -> dict[str, str]:
    value = _load(data, "topic config")
    try:
        return {str(k): str(v) for k, v in value["config"].items()}
    except (KeyError, AttributeError, TypeError) as exc:
        raise ZkLayoutError(f"topic config: {exc!r}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    value = _load(data, "cluster id")
    try:
        return str(value["id"])
    except (KeyError, TypeError) as exc:
        raise ZkLayoutError(f"cluster id: {exc!r}") from None


def encode_log_dir_event(broker_id: int, partitions: list[tuple[str, int]], reason: str) -> bytes:
    """Kafka's ``{"version":1,"broker":<id>,"event":1}`` plus which replicas of that broker
    are offline, and why ("log_dir_failure", or "corrupt" for a replica the scrubber found
    a corrupt range in). Kafka's ZooKeeper controller learned offline replicas from the
    LeaderAndIsr responses it sent after the event; Headwater has no such round trip, so
    the broker says them here (a reader of Kafka's fields alone ignores the extension)."""
    return _dump(
        {
            "version": 1,
            "broker": broker_id,
            "event": LOG_DIR_FAILURE_EVENT,
            "offline_partitions": [{"topic": t, "partition": p} for t, p in partitions],
            "reason": reason,
        }
    )


def decode_log_dir_event(data: bytes) -> tuple[int, list[tuple[str, int]], str]:
    """(broker, its offline partitions, reason) of a log directory event notification."""
    value = _load(data, "log dir event notification")
    try:
        listed = value.get("offline_partitions") or []
        partitions = [(str(e["topic"]), int(e["partition"])) for e in listed]
        return int(value["broker"]), partitions, str(value.get("reason", "log_dir_failure"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkLayoutError(f"malformed log dir event notification: {exc}") from None


def encode_election_request(election_type: int, partitions: list[tuple[str, int]] | None) -> bytes:
    """{"version":1,"type":0|1,"partitions":[{"topic":..,"partition":..}]|null}"""
    listed = None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions]
    return _dump({"version": 1, "type": election_type, "partitions": listed})


def decode_election_request(
    data: bytes,
) -> tuple[int, list[tuple[str, int]] | None, dict[str, Any] | None]:
    """(type, partitions or None for all, results or None while not decided)."""
    value = _load(data, "leader election request")
    try:
        listed = value["partitions"]
        partitions = (
            None if listed is None else [(str(e["topic"]), int(e["partition"])) for e in listed]
        )
        return int(value["type"]), partitions, value.get("results")
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkLayoutError(f"malformed leader election request: {exc}") from None


def encode_election_results(
    election_type: int,
    partitions: list[tuple[str, int]] | None,
    results: dict[tuple[str, int], int],
) -> bytes:
    """The request with the controller's error code per partition (0: elected)."""
    listed = None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions]
    decided = [
        {"topic": t, "partition": p, "error_code": code} for (t, p), code in sorted(results.items())
    ]
    return _dump({"version": 1, "type": election_type, "partitions": listed, "results": decided})


def decode_election_results(results: Any) -> dict[tuple[str, int], int]:
    return {(str(e["topic"]), int(e["partition"])): int(e["error_code"]) for e in results}


def encode_reassignment_request(
    targets: dict[tuple[str, int], list[int] | None],
    results: dict[tuple[str, int], tuple[int, str | None]] | None = None,
) -> bytes:
    """{"version":1,"partitions":[{"topic","partition","replicas"|null}],"results":[..]}"""
    body: dict[str, Any] = {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(targets.items())
        ],
    }
    if results is not None:
        body["results"] = [
            {"topic": t, "partition": p, "error_code": code, "error_message": message}
            for (t, p), (code, message) in sorted(results.items())
        ]
    return _dump(body)


def decode_reassignment_request(
    data: bytes,
) -> tuple[
    dict[tuple[str, int], list[int] | None], dict[tuple[str, int], tuple[int, str | None]] | None
]:
    value = _load(data, "reassignment request")
    try:
        targets = {
            (str(e["topic"]), int(e["partition"])): (
                None if e["replicas"] is None else [int(b) for b in e["replicas"]]
            )
            for e in value["partitions"]
        }
        raw = value.get("results")
        results = (
            None
            if raw is None
            else {
                (str(e["topic"]), int(e["partition"])): (
                    int(e["error_code"]),
                    e.get("error_message"),
                )
                for e in raw
            }
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkLayoutError(f"malformed reassignment request: {exc}") from None
    return targets, results
