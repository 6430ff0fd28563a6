"""This broker's membership of a cluster: its ZooKeeper session and everything on it.

Start-up follows Kafka's ZooKeeper mode: connect (retrying while ZooKeeper
is unreachable, saying so), register ``/brokers/ids/<id>`` as an ephemeral
znode (refusing to start when another live broker holds the id), start the
cluster view (the watches every broker keeps), stand for controller, and
only then take up replica roles. A session that expires is re-established
by the store, which re-registers the broker; meanwhile leaders keep serving
``acks=1`` and refuse ISR changes (they fail in the store, not here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.cluster.cluster_view import ClusterView
from headwater.cluster.controller import Controller
from headwater.cluster.replica_manager import ReplicaManager, ReplicationConfig
from headwater.cluster.store import (
    BrokerIdInUseError,
    BrokerRegistration,
    ClusterStoreUnavailableError,
    ZkClusterStore,
)
from headwater.log.log_directory import LogDirectory

log = logging.getLogger(__name__)


class ClusterStartError(Exception):
    """The broker cannot join the cluster; the message says why."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's broker settings (Kafka's key names in the broker config)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300.0


class ClusterNode:
    """Store, registration, controller, view and replica manager of one broker."""

    def __init__(
        self,
        broker_id: int,
        zookeeper_connect: str,
        logs: LogDirectory,
        data_dir: Path,
        *,
        session_timeout_ms: int,
        connect_timeout_ms: int,
        replication: ReplicationConfig,
        controller: ControllerConfig,
    ) -> None:
        self.broker_id = broker_id
        self.zookeeper_connect = zookeeper_connect
        self.connect_timeout_ms = connect_timeout_ms
        self.store = ZkClusterStore(zookeeper_connect, session_timeout_ms=session_timeout_ms)
        self.view = ClusterView(self.store)
        self.controller = Controller(
            self.store,
            broker_id,
            unclean_leader_election_enable=controller.unclean_leader_election_enable,
            auto_leader_rebalance_enable=controller.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_s=controller.leader_imbalance_check_interval_seconds,
        )
        self.replicas = ReplicaManager(
            broker_id, logs, self.view, self.store, replication, data_dir=data_dir
        )

    async def start(
        self, host: str, port: int, endpoints: tuple[tuple[str, str, str, int], ...] = ()
    ) -> None:
        """Join: ``host:port`` is the default address, ``endpoints`` every listener's
        (name, security protocol, advertised host, port), as registered for peers
        and clients."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.connect_timeout_ms / 1000
        while True:
            try:
                await loop.run_in_executor(None, self.store.start, 10.0)
                break
            except ClusterStoreUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise ClusterStartError(
                        f"ZooKeeper at {self.zookeeper_connect} is unreachable: {exc}"
                    ) from exc
                log.warning(
                    "ZooKeeper at %s is unreachable (%s); retrying", self.zookeeper_connect, exc
                )
                await asyncio.sleep(1.0)
        registration = BrokerRegistration(self.broker_id, host, port, endpoints=endpoints)
        try:
            # A broker restarted right after a kill -9 finds its own old registration
            # until that session expires: wait for it rather than refuse at once.
            await loop.run_in_executor(
                None,
                lambda: self.store.register_broker(
                    registration, wait_s=self.store.session_timeout_ms / 1000 + 2
                ),
            )
        except BrokerIdInUseError as exc:
            await loop.run_in_executor(None, self.store.close)
            raise ClusterStartError(
                f"broker.id {self.broker_id} is already registered by another live broker "
                f"in ZooKeeper ({self.zookeeper_connect}); refusing to start"
            ) from exc
        await self.view.start()
        await loop.run_in_executor(None, self.controller.start)  # it blocks: its own thread
        # The broker starts ``self.replicas`` itself, once its group service is
        # ready to hear about leadership of the offsets topic.
        log.info("joined the cluster at %s as broker %d", self.zookeeper_connect, self.broker_id)

    async def stop(self) -> None:
        """Leave the cluster; safe after a partial start."""
        loop = asyncio.get_running_loop()
        try:
            await self.replicas.stop()
        except Exception:
            log.exception("stopping the replica manager failed")
        for step in (self.controller.stop, self.view.stop, self.store.close):
            try:
                await loop.run_in_executor(None, step)
            except Exception:
                log.exception("stopping %s failed", getattr(step, "__qualname__", step))
