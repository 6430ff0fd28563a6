"""``meta.properties``: which cluster, and which broker of it, a data directory belongs to.

Why: at start a broker deletes the partition copies the cluster metadata no
longer lists for it (stray replicas). Pointed at the wrong ZooKeeper (a typo in
the chroot of ``zookeeper.connect``) or started with another ``broker.id``, it
would take every copy for a stray. Kafka keeps this file for that reason and
refuses to start on a mismatch (``InconsistentClusterIdException``,
``InconsistentBrokerIdException``); Headwater writes Kafka's format (``version=0``,
``broker.id``, ``cluster.id``) and refuses the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

META_PROPERTIES_FILE = "meta.properties"


class MetaPropertiesError(Exception):
    """The file cannot be read as Kafka's meta.properties."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    broker_id: int
    cluster_id: str


def parse_meta_properties(text: str) -> MetaProperties:
    """Kafka's ``version=0`` file (Java properties: ``key=value``, ``#`` comments)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise MetaPropertiesError(f"line {line!r} is not key=value")
        values[key.strip()] = value.strip()
    if values.get("version") != "0":
        raise MetaPropertiesError(f"version {values.get('version')!r} is not 0")
    try:
        return MetaProperties(int(values["broker.id"]), values["cluster.id"])
    except (KeyError, ValueError) as exc:
        raise MetaPropertiesError(f"broker.id and cluster.id are required: {exc!r}") from None


def format_meta_properties(meta: MetaProperties) -> str:
    return (
        "#Written by Headwater: the cluster and broker this data directory belongs to\n"
        f"version=0\nbroker.id={meta.broker_id}\ncluster.id={meta.cluster_id}\n"
    )


def inconsistency(stored: MetaProperties, broker_id: int, cluster_id: str | None) -> str | None:
    """Why a broker ``broker_id`` of cluster ``cluster_id`` (None: not compared) must not
    use a directory that ``stored`` describes; None when it may."""
    if cluster_id is not None and stored.cluster_id != cluster_id:
        return (
            f"the cluster id {cluster_id} does not match {stored.cluster_id} stored in "
            f"{META_PROPERTIES_FILE}: the broker is trying to join the wrong cluster "
            "(is zookeeper.connect, with its chroot, right?)"
        )
    if stored.broker_id != broker_id:
        return (
            f"broker.id {broker_id} does not match {stored.broker_id} stored in "
            f"{META_PROPERTIES_FILE}: if the data moved, configure broker.id "
            f"{stored.broker_id}; a new broker needs an empty data directory"
        )
    return None


def read_meta_properties(data_dir: Path) -> MetaProperties | None:
    """The directory's file, None when it has none; MetaPropertiesError when unreadable."""
    path = Path(data_dir) / META_PROPERTIES_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MetaPropertiesError(f"{path}: {exc}") from None
    try:
        return parse_meta_properties(text)
    except MetaPropertiesError as exc:
        raise MetaPropertiesError(f"{path}: {exc}") from None


def write_meta_properties(data_dir: Path, meta: MetaProperties) -> None:
    """Write the file atomically (a crash leaves the old one or the new one)."""
    path = Path(data_dir) / META_PROPERTIES_FILE
    tmp = path.with_name(META_PROPERTIES_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(format_meta_properties(meta))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
