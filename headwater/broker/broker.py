"""The broker: a thin asyncio shell around the sans-I/O parts.

It owns the listening socket, the data directory, the fetch-session cache,
the purgatory and the handler table, and runs periodic housekeeping
(retention, segment roll, time-based flush). Everything that decides what
bytes go on the wire lives in ``headwater.protocol``, ``headwater.log`` and
``headwater.fetch``; this module only wires them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import resource
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from headwater.broker.cleaner_metrics import register_cleaner_metrics
from headwater.broker.config import BrokerConfig
from headwater.broker.connection import CloseConnection, Connection, RequestContext, Response
from headwater.broker.connection_limits import Admission, ConnectionRegistry
from headwater.broker.connection_security import ConnectionSecurity
from headwater.broker.handlers.admin import AdminApis
from headwater.broker.handlers.cluster_admin import ClusterAdminApis
from headwater.broker.handlers.configs import ConfigsApi
from headwater.broker.handlers.elections import ElectLeadersApi
from headwater.broker.handlers.fetch import FetchApi
from headwater.broker.handlers.group_authorization import authorize_group_request
from headwater.broker.handlers.log_dirs import LogDirsApi
from headwater.broker.handlers.offsets import OffsetApis
from headwater.broker.handlers.partition_admin import PartitionAdminApis
from headwater.broker.handlers.produce import ProduceApi
from headwater.broker.handlers.reassignments import ReassignmentApis
from headwater.broker.handlers.security import SASL_APIS, SecurityApis
from headwater.broker.handlers.transactions import TransactionApis
from headwater.broker.handlers.txn_markers import WriteTxnMarkersApi
from headwater.broker.internal_topics import INTERNAL_TOPIC_CONFIGS, compacted_configs
from headwater.broker.memory_pool import MemoryPool
from headwater.broker.metrics import BrokerMetrics, PartitionHealth, kafka_request_name
from headwater.broker.producer_ids import ProducerIdAllocator
from headwater.broker.rejection_log import RejectionLog
from headwater.broker.tls_stream import TlsStream
from headwater.cluster.node import (
    STOP_STEP_TIMEOUT_S,
    ClusterNode,
    ControlledShutdownConfig,
    ControllerConfig,
)
from headwater.cluster.replica_fetcher import FetcherConfig
from headwater.cluster.replica_manager import ReplicationConfig
from headwater.cluster.replication_quota import ReplicationQuotaConfig
from headwater.cluster.zk_security import ZkSecurityStores
from headwater.coordinator.partition_state_log import OFFSETS_TOPIC, PartitionStateLog
from headwater.fetch.purgatory import FetchPurgatory
from headwater.fetch.session_cache import FetchSessionCache
from headwater.gc_policy import COLLECTOR
from headwater.group.apis import SUPPORTED_VERSIONS as GROUP_API_VERSIONS
from headwater.group.coordinator import GroupConfig
from headwater.group.service import GroupService
from headwater.log.cleaner_manager import LogCleanerManager
from headwater.log.log_directory import LogDirectory
from headwater.malloc_policy import trim_native_heap
from headwater.protocol.apis import SUPPORTED, ApiKey
from headwater.protocol.header import api_versions_error_body
from headwater.protocol.messages import build_response, decode_request, encode_response
from headwater.protocol.messages import preload as preload_schemas
from headwater.records.validation import prepare as prepare_record_validation
from headwater.security.acl_store import AclStore, FileAclStore
from headwater.security.authorizer import AclAuthorizer, AllowAllAuthorizer, Authorizer
from headwater.security.credentials import CredentialStore, FileCredentialStore
from headwater.security.inter_broker import inter_broker_settings
from headwater.security.listeners import Listener, SecurityProtocol
from headwater.security.principal import principal_from_certificate
from headwater.security.quotas import ClientQuotaManager, FileQuotaStore, QuotaKey, QuotaStore
from headwater.security.tls import server_context
from headwater.txn import TRANSACTION_STATE_TOPIC
from headwater.txn.marker_sender import MarkerSender
from headwater.txn.markers import TxnMarkerWriter
from headwater.txn.service import TransactionCoordinatorService, TxnConfig

log = logging.getLogger(__name__)

#: The stop after the controlled shutdown (handlers, coordinators, cluster, logs) and
#: the process exit must end within this; see ``shutdown_watchdog``.
STOP_DRAIN_S = 30.0
#: The ``request`` label of Kafka's RequestMetrics, per API key.
_REQUEST_NAMES = {int(k): kafka_request_name(k.name) for k in ApiKey}
#: Longest wait for the request handlers' tasks, and for each coordinator, to stop.
STOP_TASKS_S = 5.0

RawHandler = Callable[[RequestContext, memoryview, int], "Response | Awaitable[Response]"]
KioHandler = Callable[[RequestContext, Any], "dict[str, Any] | Awaitable[dict[str, Any]]"]


#: Freeze the collector's long-lived objects again once this many new logs are open.


@dataclass(frozen=True, slots=True)
class ApiEntry:
    min_version: int
    max_version: int
    call: RawHandler


def _with_request_throttle(ctx: RequestContext, out: dict[str, Any]) -> dict[str, Any]:
    """KIP-124: the request-rate throttle in the response's throttle field (kio names it
    ``throttle_time_ms`` or ``throttle_time``; a response without one drops both keys)."""
    ms = ctx.request_throttle_ms()
    if not ms:
        return out
    out = dict(out)
    for key in ("throttle_time_ms", "throttle_time"):
        existing = out.get(key)
        out[key] = max(ms, existing if isinstance(existing, int) else 0)
    return out


def _kio(api_key: int, fn: KioHandler) -> RawHandler:
    """Adapt a dict-returning handler of kio request entities to the raw interface."""

    def call(ctx: RequestContext, frame: memoryview, offset: int) -> Response | Awaitable[Response]:
        version = ctx.header.api_version
        req = decode_request(api_key, version, frame, offset)
        out = fn(ctx, req)
        if inspect.isawaitable(out):
            pending = out

            async def finish() -> bytes:
                answer = _with_request_throttle(ctx, await pending)
                return encode_response(build_response(api_key, version, answer))

            return finish()
        return encode_response(build_response(api_key, version, _with_request_throttle(ctx, out)))

    return call


def _inline(fn: KioHandler) -> KioHandler:
    return fn


def _on_worker_thread(fn: KioHandler) -> KioHandler:
    """Run a handler that blocks on ZooKeeper off the event loop."""

    def call(ctx: RequestContext, req: Any) -> Awaitable[dict[str, Any]]:
        return asyncio.get_running_loop().run_in_executor(None, fn, ctx, req)  # type: ignore[arg-type]

    return call


def _kio_request(api_key: int, fn: Callable[[RequestContext, Any], bytes]) -> RawHandler:
    """Decode the request with kio but let ``fn`` encode the response itself."""

    def call(ctx: RequestContext, frame: memoryview, offset: int) -> bytes:
        return fn(ctx, decode_request(api_key, ctx.header.api_version, frame, offset))

    return call


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _advertise_coordinator(response: dict[str, Any], node_id: int, host: str, port: int) -> None:
    """When this broker is the coordinator, name the listener the client came in on.

    Another broker (in a cluster) keeps the address it registered.
    """
    for answer in response.get("coordinators", [response]):
        if answer.get("node_id", -1) == node_id:
            answer["host"], answer["port"] = host, port


def _advertise_peer_coordinators(
    response: dict[str, Any], cluster: ClusterNode, listener: str
) -> None:
    """A peer coordinator at its endpoint on the client's listener, as in Metadata."""
    brokers = cluster.view.brokers
    for answer in response.get("coordinators", [response]):
        registration = brokers.get(answer.get("node_id", -1))
        endpoint = registration.endpoint(listener) if registration is not None else None
        if endpoint is not None:
            answer["host"], answer["port"] = endpoint


def _raise_open_file_limit() -> None:
    """Use the whole hard limit of open files, as Kafka's docs ask operators to.

    Segment files sent by ``sendfile`` stay open while responses are queued.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def replication_config(c: BrokerConfig) -> ReplicationConfig:
    return ReplicationConfig(
        replica_lag_time_max_ms=c.replica_lag_time_max_ms,
        min_insync_replicas=c.min_insync_replicas,
        num_replica_fetchers=c.num_replica_fetchers,
        high_watermark_checkpoint_interval_ms=c.replica_high_watermark_checkpoint_interval_ms,
        fetcher=FetcherConfig(
            max_bytes=c.replica_fetch_max_bytes,
            response_max_bytes=c.replica_fetch_response_max_bytes,
            max_wait_ms=c.replica_fetch_wait_max_ms,
            min_bytes=c.replica_fetch_min_bytes,
            backoff_ms=c.replica_fetch_backoff_ms,
            sessions=c.replica_fetch_sessions_enable,
        ),
        throttles=ReplicationQuotaConfig(
            leader_rate=c.leader_replication_throttled_rate,
            follower_rate=c.follower_replication_throttled_rate,
            window_ms=c.replication_quota_window_size_seconds * 1000,
            samples=c.replication_quota_window_num,
        ),
    )


def controller_config(c: BrokerConfig) -> ControllerConfig:
    return ControllerConfig(
        unclean_leader_election_enable=c.unclean_leader_election_enable,
        auto_leader_rebalance_enable=c.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_seconds=c.leader_imbalance_check_interval_seconds,
    )


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.logs = LogDirectory(config.data_dir, config.log)
        self.purgatory = FetchPurgatory()
        self.sessions = FetchSessionCache(
            max_slots=config.max_incremental_fetch_session_cache_slots,
            eviction_ms=config.min_incremental_fetch_session_eviction_ms,
            min_session_size=config.min_incremental_fetch_session_size,
            consumer_slots=config.incremental_fetch_session_consumer_cache_slots,
            retransmit_enabled=config.fetch_session_retransmit,
            max_slots_per_client=config.fetch_session_slots_per_client,
            slots_per_owner=config.max_incremental_fetch_session_cache_slots_per_principal,
        )
        self.metrics.bind_session_cache(self.sessions)
        self.connections = ConnectionRegistry(config.connections)
        self.request_pool = MemoryPool(config.connections.queued_max_request_bytes)
        self._connection_refusals = RejectionLog(log)
        self._slot_freed = asyncio.Event()
        self.handlers: dict[int, ApiEntry] = {}
        #: (API key, version) pairs served through kio schemas, preloaded at start.
        self._kio_schemas: set[tuple[int, int]] = set()
        #: Membership of the cluster: on ZooKeeper (``zookeeper.connect``), or a
        #: cluster of one whose metadata lives in the data directory. Either way
        #: the same controller, view and replica manager serve every partition.
        self.cluster = ClusterNode(
            config.node_id,
            config.zookeeper_connect or "",
            self.logs,
            config.data_dir,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connect_timeout_ms=(
                config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
            ),
            replication=replication_config(config),
            controller=controller_config(config),
        )
        self.metrics.bind_replica_manager(self.cluster.replicas)
        inter_broker = inter_broker_settings(config.security, config.all_listeners)
        self.cluster.replicas.connector.use(inter_broker.listener.name, inter_broker.security)
        self._server_socks: list[socket.socket] = []
        self.listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._conn_ids = itertools.count(1)
        #: ``sasl.enabled.mechanisms`` per listener (``listener.name.<l>.`` resolved once).
        self._sasl_mechanisms: dict[str, tuple[str, ...]] = {}
        self.address: tuple[str, int] = (config.host, config.port)
        #: What ``stop`` is doing (the shutdown watchdog names it if the stop hangs).
        self.stop_phase = "not stopping"

    # -- wiring ---------------------------------------------------------------------

    def register(
        self, api_key: int, call: RawHandler, versions: tuple[int, int] | None = None
    ) -> None:
        lo, hi = versions or SUPPORTED[ApiKey(api_key)]
        self.handlers[api_key] = ApiEntry(lo, hi, call)

    def register_kio(
        self, api_key: int, fn: KioHandler, versions: tuple[int, int] | None = None
    ) -> None:
        self.register(api_key, _kio(api_key, fn), versions)
        lo, hi = versions or SUPPORTED[ApiKey(api_key)]
        self._kio_schemas.update((api_key, v) for v in range(lo, hi + 1))

    def _preload_schemas(self) -> None:
        """Load every kio schema the broker serves, on a thread (see ``messages.preload``)."""
        pairs = sorted(self._kio_schemas)

        def load() -> None:
            try:
                preload_schemas(pairs)
            except Exception:
                log.exception("cannot preload the protocol schemas; they load on first use")
                return
            COLLECTOR.freeze()  # schemas live as long as the process

        threading.Thread(target=load, name="schema-preload", daemon=True).start()

    def _build_handlers(self) -> None:
        cluster = self.cluster
        replication = cluster.replicas
        self.producer_ids = ProducerIdAllocator(
            self.config.data_dir / "producer_id_block",
            # A cluster of one hands out ids without a broker stride (no peer to collide with).
            None if cluster.is_local else self.config.node_id,
        )
        self.cluster_admin = ClusterAdminApis(self.config, cluster.view, cluster.store)
        self.admin = AdminApis(
            self.config,
            self.logs,
            self.producer_ids,
            auto_create=self.cluster_admin.auto_create,
            topic_exists=lambda name: name in cluster.view.topics,
            is_creating=self.cluster_admin.is_creating,
            wait_for_leaders=self.cluster_admin.wait_for_leaders,
        )
        self.offsets = OffsetApis(self.logs, replication)
        self.produce = ProduceApi(self.logs, self.admin, self.metrics, replication)
        self.fetch = FetchApi(
            self.config, self.logs, self.sessions, self.purgatory, self.metrics, replication
        )
        replication.out_of_sync_listeners.append(self.fetch.watcher.nudge_followers)
        self.register(ApiKey.API_VERSIONS, self._api_versions)
        self.register(ApiKey.PRODUCE, self.produce.handle)
        self.register(ApiKey.FETCH, self.fetch.handle)
        self.register(ApiKey.METADATA, _kio_request(ApiKey.METADATA, self.cluster_admin.metadata))
        self.register_kio(ApiKey.CREATE_TOPICS, self.cluster_admin.create_topics)
        self.register_kio(ApiKey.DELETE_TOPICS, self.cluster_admin.delete_topics)
        self.register_kio(ApiKey.DESCRIBE_CLUSTER, self.cluster_admin.describe_cluster)
        self.register_kio(ApiKey.CREATE_PARTITIONS, self.cluster_admin.create_partitions)
        elections = ElectLeadersApi(cluster.store, cluster.view)
        self.register_kio(ApiKey.ELECT_LEADERS, elections.elect_leaders)
        moves = ReassignmentApis(cluster.store, cluster.view)
        self.register_kio(ApiKey.ALTER_PARTITION_REASSIGNMENTS, moves.alter_partition_reassignments)
        self.register_kio(ApiKey.LIST_PARTITION_REASSIGNMENTS, moves.list_partition_reassignments)
        self.configs = ConfigsApi(self.config, self.logs, self.connections)
        self.configs.topic_config_writer = cluster.store.set_topic_configs
        self.configs.broker_config_writer = cluster.store.set_broker_configs
        self.configs.throttle_setter = cluster.replicas.throttles.set_rates
        self.register_kio(ApiKey.DESCRIBE_CONFIGS, self.configs.describe_configs)
        self.register_kio(ApiKey.INCREMENTAL_ALTER_CONFIGS, self.configs.incremental_alter_configs)
        self.register_kio(ApiKey.ALTER_CONFIGS, self.configs.alter_configs)
        self.register_kio(ApiKey.INIT_PRODUCER_ID, self.admin.init_producer_id)
        self.register_kio(ApiKey.LIST_OFFSETS, self.offsets.list_offsets)
        self.register_kio(ApiKey.OFFSET_FOR_LEADER_EPOCH, self.offsets.offset_for_leader_epoch)
        partition_admin = PartitionAdminApis(self.logs, replication)
        self.register_kio(ApiKey.DELETE_RECORDS, partition_admin.delete_records)
        self.register_kio(ApiKey.DESCRIBE_PRODUCERS, partition_admin.describe_producers)
        self.register_kio(ApiKey.DESCRIBE_LOG_DIRS, LogDirsApi(self.logs).describe_log_dirs)
        # Transaction markers go to the logs this broker leads; the transaction
        # coordinator calls ``txn_markers.write`` directly for its own partitions.
        self.txn_markers = TxnMarkerWriter(self.logs, replication)
        self.register_kio(
            ApiKey.WRITE_TXN_MARKERS, WriteTxnMarkersApi(self.txn_markers).write_txn_markers
        )
        # The group and transaction APIs are built once the cluster view is loaded
        # (the internal topics' partition counts live in the metadata): see start().
        self._build_security_apis()

    def _build_security_apis(self) -> None:
        """SASL, ACL, SCRAM-credential and quota APIs over their stores.

        A single broker keeps credentials, ACLs and quotas in its data dir; a
        cluster keeps them in ZooKeeper (Kafka's layout), loaded in ``start``
        once the session is up, and the APIs that write them run on a worker
        thread (ZooKeeper round trips must not stall the event loop).
        """
        sec = self.config.security
        acl_store: AclStore
        quota_store: QuotaStore
        self.zk_security: ZkSecurityStores | None = None
        if not self.cluster.is_local:
            self.zk_security = ZkSecurityStores(self.cluster.store)
            self.credentials: CredentialStore = self.zk_security.credentials
            acl_store, quota_store = self.zk_security.acls, self.zk_security.quotas
        else:
            self.credentials = FileCredentialStore.in_dir(self.config.data_dir)
            acl_store = FileAclStore.in_dir(self.config.data_dir)
            quota_store = FileQuotaStore.in_dir(self.config.data_dir)
        self.authorizer: Authorizer = AllowAllAuthorizer()
        if sec.acls_enabled:
            self.authorizer = AclAuthorizer(
                acl_store,
                super_users=sec.super_users,
                allow_everyone_if_no_acl_found=sec.allow_everyone_if_no_acl_found,
            )
        self.quotas = ClientQuotaManager(
            quota_store,
            window_ms=sec.quota_window_size_seconds * 1000,
            samples=sec.quota_window_num,
        )
        self.security = SecurityApis(sec, self.credentials, self.authorizer, self.quotas)
        api = self.security
        writes = _on_worker_thread if self.zk_security is not None else _inline
        self.register_kio(ApiKey.DESCRIBE_CLIENT_QUOTAS, api.describe_client_quotas)
        self.register_kio(ApiKey.ALTER_CLIENT_QUOTAS, writes(api.alter_client_quotas))
        self.register_kio(ApiKey.SASL_HANDSHAKE, api.sasl_handshake)
        self.register_kio(ApiKey.SASL_AUTHENTICATE, api.sasl_authenticate)
        self.register_kio(ApiKey.DESCRIBE_ACLS, api.describe_acls)
        self.register_kio(ApiKey.CREATE_ACLS, writes(api.create_acls))
        self.register_kio(ApiKey.DELETE_ACLS, writes(api.delete_acls))
        self.register_kio(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, api.describe_user_scram_credentials
        )
        self.register_kio(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, writes(api.alter_user_scram_credentials)
        )

    async def _follow_dynamic_broker_configs(self, cluster: ClusterNode) -> None:
        """Apply ``/config/brokers/<default>`` and ``/config/brokers/<id>`` now and on
        every change (Kafka's dynamic broker configs, kept in ZooKeeper)."""
        loop = asyncio.get_running_loop()
        configs = self.configs
        for entity in ("<default>", str(self.config.node_id)):

            def changed(values: dict[str, str], entity: str = entity) -> None:
                loop.call_soon_threadsafe(configs.on_broker_configs, entity, values)

            await loop.run_in_executor(None, cluster.store.watch_broker_configs, entity, changed)

    async def _start_zk_security(self, stores: ZkSecurityStores) -> None:
        """Load credentials, ACLs and quotas from ZooKeeper and follow their changes.

        Changes arrive on the store's threads; the authorizer's index and the
        quota settings are rebuilt on the event loop, between requests.
        """
        loop = asyncio.get_running_loop()

        def changed() -> None:
            loop.call_soon_threadsafe(self._security_changed)

        stores.on_change(changed)
        await loop.run_in_executor(None, stores.start)
        self._security_changed()

    def _security_changed(self) -> None:
        if isinstance(self.authorizer, AclAuthorizer):
            self.authorizer.reload()
        self.quotas.reload()

    def _build_group_apis(self) -> None:
        """The group coordinator over the partitions of ``__consumer_offsets`` this
        broker leads (every one, in a cluster of one); see ``_group_service``."""
        c = self.config
        host, port = c.advertised
        self.groups = self._group_service(self.cluster, host, port)
        groups = self.groups

        async def handle(ctx: RequestContext, req: Any) -> dict[str, Any]:
            decision = authorize_group_request(ctx, req)
            if decision.response is not None:
                return decision.response
            response = decision.finish(
                await groups.handle(
                    decision.request,
                    client_id=ctx.header.client_id or "",
                    client_host="/" + ctx.client_host.rsplit(":", 1)[0],
                    waited=ctx.add_remote_time,
                )
            )
            if ctx.header.api_key == ApiKey.FIND_COORDINATOR and ctx.listener.port:
                _advertise_coordinator(response, self.config.node_id, *ctx.listener.advertised)
                _advertise_peer_coordinators(response, self.cluster, ctx.listener.name)
            return response

        for api_key, versions in GROUP_API_VERSIONS.items():
            self.register_kio(api_key, handle, versions)

    def _group_config(self) -> GroupConfig:
        c = self.config
        return GroupConfig(
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            max_size=c.group_max_size,
            max_metadata_bytes=c.offset_metadata_max_bytes,
            empty_group_retention_ms=c.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=c.offsets_retention_check_interval_ms,
        )

    def _group_service(self, cluster: ClusterNode, host: str, port: int) -> GroupService:
        """A group's coordinator leads its ``__consumer_offsets`` partition.

        The offsets topic is created on first need (FindCoordinator), like
        Kafka, with ``offsets.topic.replication.factor`` replicas, or as many
        as there are live brokers when fewer. Leadership of its partitions
        loads and unloads their groups here; commits are answered once the
        ISR has them.
        """
        c = self.config
        view = cluster.view
        replicas = cluster.replicas
        existing = view.topics.get(OFFSETS_TOPIC)
        num_partitions = len(existing.replicas) if existing else c.offsets_topic_num_partitions

        def coordinator_of(partition: int) -> tuple[int, str, int] | None:
            if OFFSETS_TOPIC not in view.topics:
                rf = max(1, min(c.offsets_topic_replication_factor, len(view.brokers)))
                self.cluster_admin.auto_create(
                    OFFSETS_TOPIC, num_partitions, rf, configs=dict(INTERNAL_TOPIC_CONFIGS)
                )
                return None
            state = view.partition_states.get((OFFSETS_TOPIC, partition))
            if state is not None and replicas.leads_per_stale_view(state.leader):
                return None
            broker = view.brokers.get(state.leader) if state is not None else None
            return None if broker is None else (broker.broker_id, broker.host, broker.port)

        def wait_replicated(partition: int, offset: int) -> Awaitable[int]:
            return replicas.wait_replicated(
                OFFSETS_TOPIC, partition, offset, c.offsets_commit_timeout_ms / 1000
            )

        groups = GroupService.create(
            lambda topic, partition: self.logs.existing_log(topic, partition) is not None,
            num_partitions=num_partitions,
            node_id=c.node_id,
            host=host,
            port=port,
            coordinator_of=coordinator_of,
            wait_replicated=wait_replicated,
            config=self._group_config(),
        )

        def on_leadership(topic: str, partition: int, is_leader: bool) -> None:
            if topic != OFFSETS_TOPIC:
                return
            if is_leader:
                offsets_log = PartitionStateLog(self.logs.log(OFFSETS_TOPIC, partition))
                self._spawn(groups.load_partition(partition, offsets_log), f"load-{partition}")
            else:
                groups.unload_partition(partition)

        replicas.leadership_listeners.append(on_leadership)
        return groups

    def _txn_config(self, num_partitions: int) -> TxnConfig:
        c = self.config
        return TxnConfig(
            num_partitions=num_partitions,
            max_timeout_ms=c.transaction_max_timeout_ms,
            abort_interval_ms=c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            expiration_ms=c.transactional_id_expiration_ms,
            removal_interval_ms=c.transaction_remove_expired_transaction_cleanup_interval_ms,
        )

    def _build_transaction_apis(self) -> None:
        """The transaction coordinator over ``__transaction_state`` and its APIs.

        Built like the group coordinator: a single broker leads (and loads at
        start) every partition; in a cluster, leadership of each partition
        loads and unloads its transactional ids (see `_transaction_service`).
        Markers go through the broker's ``txn_markers`` writer for partitions
        led here and WriteTxnMarkers to other leaders.
        """
        c = self.config
        host, port = c.advertised
        self.transactions = self._transaction_service(self.cluster, host, port)
        service = self.transactions
        self.groups.apis.transaction_coordinator_of = service.coordinator_for
        group_apis = self.groups.apis

        def settle_txn_offsets(producer_id: int, topic: str, partition: int, ok: bool) -> None:
            """A marker reached an offsets partition: its TxnOffsetCommits count or go."""
            if topic == OFFSETS_TOPIC:
                group_apis.complete_txn(producer_id, partition, ok)

        self.txn_markers.listeners.append(settle_txn_offsets)
        offsets_partitions = self.groups.shards.num_partitions
        self.transaction_apis = TransactionApis(
            service,
            self._topic_partition_exists,
            lambda: offsets_partitions,
            self.admin.init_producer_id,
        )
        api = self.transaction_apis
        self.register_kio(ApiKey.INIT_PRODUCER_ID, api.init_producer_id)
        self.register_kio(ApiKey.ADD_PARTITIONS_TO_TXN, api.add_partitions_to_txn)
        self.register_kio(ApiKey.ADD_OFFSETS_TO_TXN, api.add_offsets_to_txn)
        self.register_kio(ApiKey.END_TXN, api.end_txn)
        self.register_kio(ApiKey.DESCRIBE_TRANSACTIONS, api.describe_transactions)
        self.register_kio(ApiKey.LIST_TRANSACTIONS, api.list_transactions)

    def _topic_partition_exists(self, topic: str, partition: int) -> bool:
        """In the cluster's metadata (this broker may hold no replica of it)."""
        return (topic, partition) in self.cluster.view.partition_states

    def _transaction_service(
        self, cluster: ClusterNode, host: str, port: int
    ) -> TransactionCoordinatorService:
        """An id's coordinator leads its ``__transaction_state``
        partition; the coordinator epoch is that partition's leader epoch.

        The topic is created on first need (FindCoordinator) with
        ``transaction.state.log.replication.factor`` replicas and
        ``transaction.state.log.min.isr``, both capped by the live brokers.
        """
        c = self.config
        view = cluster.view
        replicas = cluster.replicas
        existing = view.topics.get(TRANSACTION_STATE_TOPIC)
        num_partitions = (
            len(existing.replicas) if existing else c.transaction_state_log_num_partitions
        )

        def coordinator_of(partition: int) -> tuple[int, str, int] | None:
            if TRANSACTION_STATE_TOPIC not in view.topics:
                rf = max(1, min(c.transaction_state_log_replication_factor, len(view.brokers)))
                min_isr = max(1, min(c.transaction_state_log_min_isr, rf))
                self.cluster_admin.auto_create(
                    TRANSACTION_STATE_TOPIC,
                    num_partitions,
                    rf,
                    configs={**INTERNAL_TOPIC_CONFIGS, "min.insync.replicas": str(min_isr)},
                )
                return None
            state = view.partition_states.get((TRANSACTION_STATE_TOPIC, partition))
            if state is not None and replicas.leads_per_stale_view(state.leader):
                return None
            broker = view.brokers.get(state.leader) if state is not None else None
            return None if broker is None else (broker.broker_id, broker.host, broker.port)

        def wait_replicated(partition: int, offset: int) -> Awaitable[int]:
            return replicas.wait_replicated(
                TRANSACTION_STATE_TOPIC, partition, offset, c.request_timeout_ms / 1000
            )

        def leader_of(topic: str, partition: int) -> int | None:
            state = view.partition_states.get((topic, partition))
            return None if state is None or state.leader < 0 else state.leader

        service = TransactionCoordinatorService(
            node_id=c.node_id,
            host=host,
            port=port,
            config=self._txn_config(num_partitions),
            new_producer_id=self.producer_ids.allocate,
            markers=MarkerSender(
                c.node_id,
                lambda: self.txn_markers,
                leader_of=leader_of,
                partition_exists=lambda t, p: (t, p) in view.partition_states,
                connector=replicas.connector,
            ),
            coordinator_of=coordinator_of,
            wait_replicated=wait_replicated,
        )

        def on_leadership(topic: str, partition: int, is_leader: bool) -> None:
            if topic != TRANSACTION_STATE_TOPIC:
                return
            if is_leader:
                state = view.partition_states.get((topic, partition))
                epoch = state.leader_epoch if state is not None else 0
                state_log = PartitionStateLog(self.logs.log(topic, partition))
                self._spawn(
                    service.load_partition(partition, state_log, epoch), f"txn-load-{partition}"
                )
            else:
                service.unload_partition(partition)

        replicas.leadership_listeners.append(on_leadership)
        return service

    async def _compact_internal_topics(self) -> None:
        """Internal topics from before Headwater compacted them switch to
        ``cleanup.policy=compact`` (through the metadata, so every replica follows)."""
        loop = asyncio.get_running_loop()
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            assignment = self.cluster.view.topics.get(topic)
            if assignment is None:
                continue
            configs = compacted_configs(assignment.configs)
            if configs is None:
                continue
            await loop.run_in_executor(None, self.cluster.store.set_topic_configs, topic, configs)
            log.info(
                "%s switched to cleanup.policy=compact (was %s)",
                topic,
                assignment.configs.get("cleanup.policy", "the broker default"),
            )

    async def _create_internal_topics(self) -> None:
        """A cluster of one creates ``__consumer_offsets`` and ``__transaction_state`` at
        start, so the first group or transactional producer finds its coordinator ready
        (a cluster creates them on first need, as Kafka does)."""
        c = self.config
        wanted = (
            (OFFSETS_TOPIC, c.offsets_topic_num_partitions, INTERNAL_TOPIC_CONFIGS),
            (
                TRANSACTION_STATE_TOPIC,
                c.transaction_state_log_num_partitions,
                {**INTERNAL_TOPIC_CONFIGS, "min.insync.replicas": "1"},
            ),
        )
        admin = self.cluster_admin
        for topic, partitions, configs in wanted:
            if topic not in self.cluster.view.topics:
                admin.auto_create(topic, partitions, 1, configs=dict(configs))
        await admin.wait_for_leaders([topic for topic, _, _ in wanted], c.request_timeout_ms)

    def advertised_versions(self) -> dict[int, tuple[int, int]]:
        """Only what is implemented: clients switch features on what they see here."""
        return {k: (e.min_version, e.max_version) for k, e in sorted(self.handlers.items())}

    def _api_versions(self, ctx: RequestContext, frame: memoryview, offset: int) -> bytes:
        version = ctx.header.api_version
        entry = self.handlers[ApiKey.API_VERSIONS]
        table = self.advertised_versions()
        if not entry.min_version <= version <= entry.max_version:
            # Error 35 with a v0 body; the client retries with a version we list.
            return api_versions_error_body(table)  # type: ignore[arg-type]
        data = {
            "error_code": 0,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in table.items()
            ],
        }
        return encode_response(build_response(ApiKey.API_VERSIONS, version, data))

    def dispatch(
        self, ctx: RequestContext, frame: memoryview, offset: int
    ) -> Response | Awaitable[Response]:
        header = ctx.header
        self.security.gate(ctx)
        entry = self.handlers.get(header.api_key)
        if entry is None:
            raise CloseConnection(f"unknown or unsupported API key {header.api_key}")
        if header.api_key != ApiKey.API_VERSIONS and not (
            entry.min_version <= header.api_version <= entry.max_version
        ):
            raise CloseConnection(
                f"unsupported version {header.api_version} of API key {header.api_key}"
            )
        try:
            name = ApiKey(header.api_key).name.lower()
        except ValueError:
            name = str(header.api_key)
        self.metrics.requests.labels(name).inc()
        if (
            self.quotas.enabled
            and header.api_key not in SASL_APIS
            and not ctx.security.quota_exempt
        ):
            # request_percentage (KIP-124): handler time on the event loop. The
            # response carries the throttle earned so far (request_throttle_ms);
            # this request's own time mutes the connection and shows in the next.
            started = time.perf_counter()
            result = entry.call(ctx, frame, offset)
            if not ctx.request_quota_exempt:
                ctx.throttle(QuotaKey.REQUEST_PERCENTAGE, (time.perf_counter() - started) * 1000)
            return result
        return entry.call(ctx, frame, offset)

    # -- metrics -----------------------------------------------------------------

    def _observe_request(
        self, ctx: RequestContext, times_ms: tuple[float, float, float, float, float, float]
    ) -> None:
        """Kafka's RequestMetrics: fetches count as FetchConsumer or FetchFollower, as there."""
        header = ctx.header
        key = header.api_key
        if key == ApiKey.FETCH:
            name = "FetchFollower" if ctx.request_quota_exempt else "FetchConsumer"
        else:
            name = _REQUEST_NAMES.get(key) or str(key)
        self.metrics.request_times.observe(name, header.api_version, times_ms)

    def _bind_metrics(self) -> None:
        """The gauges read at scrape time: partition states, controller, consumer lag."""
        m = self.metrics
        m.topics.existing = lambda: tuple(self.logs.topics())
        cluster = self.cluster
        replicas, view = cluster.replicas, cluster.view

        def health() -> Iterator[PartitionHealth]:
            for p in tuple(replicas.replicas.values()):
                if p.is_leader:
                    min_isr = replicas.min_insync_replicas(p.topic)
                    yield PartitionHealth(len(p.isr), len(p.replicas), min_isr)

        def offline() -> int:
            live = view.brokers
            states = tuple(view.partition_states.values())
            return sum(1 for s in states if s.leader < 0 or s.leader not in live)

        def replica_end_offset(topic: str, partition: int) -> int | None:
            replica = replicas.replicas.get((topic, partition))
            return None if replica is None else replica.log.high_watermark

        m.bind_partition_states(health)
        m.bind_controller(lambda: cluster.controller.is_active, offline)
        end_offset = replica_end_offset
        m.bind_consumer_lag(asyncio.get_running_loop(), self._committed_offsets, end_offset)
        self._spawn(m.event_loop.monitor(), "event-loop-lag")

    def _committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, partition, offset) of every group coordinated here."""
        for coordinator in self.groups.shards.coordinators():
            store = coordinator.offsets
            for group in store.group_ids():
                for topic, partition, committed in store.fetch(group, None):
                    if committed is not None:
                        yield group, topic, partition, committed.offset

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        _raise_open_file_limit()
        prepare_record_validation(background=True)  # numba loads on a thread
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs.open()
        self._build_handlers()
        self._preload_schemas()
        # Start-up objects and the logs loaded so far live for the whole run;
        # later ones are frozen as they come (headwater.gc_policy).
        COLLECTOR.enable()
        COLLECTOR.freeze(collect=True)
        # One TLS context per TLS listener: its ``listener.name.<l>.ssl.*`` keys win.
        tls = {
            listener.name: server_context(self.config.security.for_listener(listener.name).tls)
            for listener in self.config.all_listeners
            if listener.protocol.uses_tls
        }
        bound: list[tuple[socket.socket, Listener]] = []
        for listener in self.config.all_listeners:
            sock = _listen(listener.host, listener.port)
            self._server_socks.append(sock)
            bound.append((sock, listener.with_port(sock.getsockname()[1])))
        self.listeners = [listener for _, listener in bound]
        self.address = bound[0][0].getsockname()[:2]
        # Registered in the metadata under the first listener's advertised address.
        host, port = self.config.advertised
        if port == 0:
            port = self.address[1]
        endpoints = tuple(
            (listener.name, listener.protocol.value, *listener.advertised)
            for listener in self.listeners
        )
        await self.cluster.start(host, port, endpoints)
        await self._follow_dynamic_broker_configs(self.cluster)
        if self.zk_security is not None:
            await self._start_zk_security(self.zk_security)
        await self._compact_internal_topics()
        self._build_group_apis()
        self._build_transaction_apis()
        await self.groups.start()
        await self.transactions.start()
        await self.cluster.replicas.start()
        if self.cluster.is_local:
            await self._create_internal_topics()
            await self.cluster.leading_everything(self.config.request_timeout_ms / 1000)
        self._bind_metrics()
        if self.config.metrics_port is not None:
            port = self.metrics.serve(
                self.config.metrics_host or "127.0.0.1", self.config.metrics_port
            )
            log.info("metrics on http://%s:%d/metrics", self.config.metrics_host, port)
        for sock, listener in bound:
            self._spawn(
                self._accept_loop(sock, listener, tls.get(listener.name)),
                f"accept-{listener.name}",
            )
        self._spawn(self._housekeeping(), "housekeeping")
        self.cleaner = LogCleanerManager(
            self.configs.cleaner_config(), self.logs.compacted_logs, asyncio.get_running_loop()
        )
        register_cleaner_metrics(self.metrics.registry, self.cleaner)
        self.configs.on_cleaner_config = self.cleaner.reconfigure
        self.cleaner.start()
        self._spawn(self._connection_sweep(), "connection-sweep")
        for sock, listener in bound:
            host, port = sock.getsockname()[:2]
            if listener.protocol is SecurityProtocol.PLAINTEXT:
                # The exact line tests and tools wait for.
                log.info("listening on %s:%d", host, port)
            elif listener.name == listener.protocol.value:
                log.info("listening on %s://%s:%d", listener.name, host, port)
            else:
                log.info(
                    "listening on %s://%s:%d (%s)",
                    listener.name,
                    host,
                    port,
                    listener.protocol.value,
                )
        return self.address

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(
        self, sock: socket.socket, listener: Listener, tls: ssl.SSLContext | None
    ) -> None:
        loop = asyncio.get_running_loop()
        registry = self.connections
        while True:
            while registry.full:
                # max.connections: stop accepting; clients wait in the listen backlog.
                self._slot_freed.clear()
                await self._slot_freed.wait()
            delay = registry.creation_delay(time.monotonic())
            if delay > 0:
                await asyncio.sleep(delay)  # max.connection.creation.rate
            try:
                client, addr = await loop.sock_accept(sock)
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.05)
                continue
            if registry.admit(addr[0]) is Admission.TOO_MANY_FROM_IP:
                self._connection_refusals.reject(
                    "connection",
                    f"{addr[0]}:{addr[1]}",
                    None,
                    f"max.connections.per.ip ({registry.limits.limit_for(addr[0])}) reached",
                )
                client.close()
                continue
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn, stream = self._connection(client, f"{addr[0]}:{addr[1]}", listener, tls)
            # Counted now, before the next accept: the limits see every connection.
            registry.add(conn)
            self._spawn(self._serve(conn, stream), f"conn-{conn.connection_id}")

    def _connection(
        self,
        client: socket.socket,
        peer: str,
        listener: Listener,
        tls: ssl.SSLContext | None,
    ) -> tuple[Connection, TlsStream | None]:
        """A connection on ``listener``: TLS over the socket there (handshake in ``_serve``)."""
        security = ConnectionSecurity(
            listener=listener, authorizer=self.authorizer, quotas=self.quotas
        )
        stream = None
        if listener.protocol.uses_tls:
            assert tls is not None
            stream = TlsStream(client, tls)
        if listener.protocol.uses_sasl:
            mechanisms = self._sasl_mechanisms.get(listener.name)
            if mechanisms is None:
                own = self.config.security.for_listener(listener.name)
                mechanisms = self._sasl_mechanisms[listener.name] = own.sasl_enabled_mechanisms
            security.sasl = self.security.new_sasl_session(mechanisms)
        conn = Connection(
            client,
            peer,
            next(self._conn_ids),
            self.dispatch,
            max_frame_bytes=self.config.socket_request_max_bytes,
            zero_copy=self.config.zero_copy,
            pool=self.request_pool,
            max_queued=self.connections.limits.max_queued_requests,
            stream=stream,
            security=security,
            observe=self._observe_request,
        )
        return conn, stream

    async def _serve(self, conn: Connection, stream: TlsStream | None) -> None:
        """TLS handshake (on TLS listeners), then the connection's request loop.

        Whatever happens, the connection's place in the registry (counted
        against the connection limits by the accept loop) is given back.
        """
        try:
            if stream is not None:
                listener = conn.security.listener
                timeout = self.config.security.tls.handshake_timeout_ms / 1000
                try:
                    await asyncio.wait_for(stream.handshake(), timeout)
                except (TimeoutError, ssl.SSLError, OSError) as exc:
                    log.info(
                        "TLS handshake with %s on %s failed: %s", conn.peer, listener.name, exc
                    )
                    conn.close_socket()
                    return
                if listener.protocol is SecurityProtocol.SSL:
                    conn.security.principal = principal_from_certificate(stream.peer_certificate())
            await conn.run()
        finally:
            self.connections.remove(conn)
            self._slot_freed.set()

    async def _connection_sweep(self) -> None:
        """Close idle, slowloris and stuck connections (see ``connection_limits``)."""
        limits = self.config.connections
        shortest = min(limits.idle_ms, limits.receive_timeout_ms, limits.completion_timeout_ms)
        interval = min(max(shortest / 4000, 0.05), 1.0)
        while True:
            await asyncio.sleep(interval)
            for conn, reason in self.connections.expired(time.monotonic()):
                if isinstance(conn, Connection):
                    # Idle closes are routine (Kafka logs them at debug); the rest are not.
                    conn.close(
                        reason,
                        logging.INFO
                        if conn.busy_since is None and conn.frame_started is None
                        else logging.WARNING,
                    )

    async def _housekeeping(self) -> None:
        """Retention and time-based roll every ``log.retention.check.interval.ms``
        (as Kafka; they touch every partition, so not every tick), time-based
        flush every tick when ``flush.ms`` is in use anywhere."""
        interval = self.config.housekeeping_interval_ms / 1000
        next_retention = time.monotonic() + self.config.retention_check_interval_ms / 1000
        trim_every = self.config.malloc_trim_interval_ms / 1000
        next_trim = time.monotonic() + trim_every
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
            try:
                if time.monotonic() >= next_retention:
                    next_retention = (
                        time.monotonic() + self.config.retention_check_interval_ms / 1000
                    )
                    self.logs.roll_due(now_ms)
                    self.logs.run_retention(now_ms)
                if self._time_based_flush():
                    self.logs.flush_due(now_ms)
                if trim_every > 0 and time.monotonic() >= next_trim:
                    next_trim = time.monotonic() + trim_every
                    trim_native_heap()  # see headwater.malloc_policy
            except Exception:
                log.exception("housekeeping failed; will retry")

    def _time_based_flush(self) -> bool:
        if self.config.log.flush_interval_ms is not None:
            return True
        return any("flush.ms" in t.configs for t in self.logs.topics().values())

    def stop_budget_s(self) -> float:
        """The longest a stop may take: the controlled shutdown's attempts and backoffs,
        then a bounded drain (what the shutdown watchdog allows before it exits)."""
        c = self.config
        budget = STOP_DRAIN_S
        if c.controlled_shutdown_enable:
            attempts = max(1, c.controlled_shutdown_max_retries)
            attempt = ControlledShutdownConfig().attempt_timeout_ms / 1000 + STOP_STEP_TIMEOUT_S
            budget += (
                attempts * attempt + (attempts - 1) * c.controlled_shutdown_retry_backoff_ms / 1000
            )
        return budget

    async def stop(self) -> None:
        """Controlled shutdown first (a cluster member moves its leaderships away while
        still serving), then stop serving and close everything."""
        c = self.config
        self.stop_phase = "controlled shutdown"
        if c.controlled_shutdown_enable:
            try:
                await self.cluster.controlled_shutdown(
                    ControlledShutdownConfig(
                        enable=True,
                        max_retries=c.controlled_shutdown_max_retries,
                        retry_backoff_ms=c.controlled_shutdown_retry_backoff_ms,
                    )
                )
            except Exception:
                log.exception("controlled shutdown failed; stopping anyway")
        self.stop_phase = "request handlers"
        for sock in self._server_socks:
            sock.close()
        self._server_socks = []
        if getattr(self, "cleaner", None) is not None:
            # Off the loop: a cleaner thread may be waiting for the loop to swap.
            await asyncio.get_running_loop().run_in_executor(None, self.cleaner.stop)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded: a task that swallows its cancellation must not keep the broker
            # (and its ZooKeeper session, hence its leaderships) alive.
            _, pending = await asyncio.wait(tasks, timeout=STOP_TASKS_S)
            if pending:
                names = sorted(t.get_name() for t in pending)
                log.warning("stopping: %d task(s) did not end within %.0f s: %s; going on",
                            len(pending), STOP_TASKS_S, ", ".join(names[:10]))  # fmt: skip
        self.stop_phase = "the transaction and group coordinators"
        for name in ("transactions", "groups"):
            service = getattr(self, name, None)
            if service is None:
                continue
            try:
                await asyncio.wait_for(service.stop(), STOP_TASKS_S)
            except TimeoutError:
                log.warning("stopping: the %s coordinator did not stop within %.0f s; going on",
                            name, STOP_TASKS_S)  # fmt: skip
            except Exception:
                log.exception("stopping the %s coordinator failed", name)
        if getattr(self, "zk_security", None) is not None:
            assert self.zk_security is not None
            self.zk_security.stop()
        self.stop_phase = "leaving the cluster (replicas, controller, ZooKeeper)"
        await self.cluster.stop()
        self.stop_phase = "closing the logs"
        self.metrics.close()
        self.logs.close()
        self.stop_phase = "process exit (worker threads)"
        COLLECTOR.disable()
        log.info("stopped")
