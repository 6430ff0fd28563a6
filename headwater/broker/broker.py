"""The broker: wiring and lifecycle around the sans-I/O parts.

It builds the parts (the log directory, the fetch-session cache and
purgatory, the cluster membership with its partition layer, the handlers and
the coordinators), fills the handler table, and starts and stops them in
order. A single broker is a cluster of one (metadata in its data directory),
so there is one road to every partition. What each part does lives in its own
module: ``acceptor`` (sockets and connections), ``coordinators``, ``gauges``,
``housekeeping``, ``handler_table``, ``cluster_settings``, the handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable
from typing import Any

from headwater.broker.acceptor import ClientAcceptor, listen, raise_open_file_limit
from headwater.broker.cleaner_metrics import register_cleaner_metrics
from headwater.broker.cluster_settings import controller_config, replication_config
from headwater.broker.config import BrokerConfig
from headwater.broker.connection import CloseConnection, RequestContext, Response
from headwater.broker.connection_limits import ConnectionRegistry
from headwater.broker.coordinators import (
    Coordinators,
    advertise_coordinator,
    advertise_peer_coordinators,
)
from headwater.broker.gauges import bind_broker_gauges
from headwater.broker.handler_table import (
    HandlerTable,
    inline,
    kio_request,
    on_worker_thread,
)
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
from headwater.broker.housekeeping import housekeeping
from headwater.broker.memory_pool import MemoryPool
from headwater.broker.metrics import BrokerMetrics, kafka_request_name
from headwater.broker.producer_ids import ProducerIdAllocator
from headwater.cluster.node import (
    STOP_STEP_TIMEOUT_S,
    ClusterNode,
    ControlledShutdownConfig,
)
from headwater.cluster.zk_security import ZkSecurityStores
from headwater.coordinator.partition_state_log import OFFSETS_TOPIC
from headwater.fetch.purgatory import FetchPurgatory
from headwater.fetch.session_cache import FetchSessionCache
from headwater.gc_policy import COLLECTOR
from headwater.group.apis import SUPPORTED_VERSIONS as GROUP_API_VERSIONS
from headwater.log.cleaner_manager import LogCleanerManager
from headwater.log.log import CorruptBatch, Log
from headwater.log.log_directory import LogDirectory
from headwater.log.scrubber import LogScrubber
from headwater.protocol.apis import ApiKey
from headwater.records.validation import prepare as prepare_record_validation
from headwater.security.acl_store import AclStore, FileAclStore
from headwater.security.authorizer import AclAuthorizer, AllowAllAuthorizer, Authorizer
from headwater.security.config import TlsConfig
from headwater.security.credentials import CredentialStore, FileCredentialStore
from headwater.security.inter_broker import inter_broker_settings, with_new_keystore
from headwater.security.listeners import Listener, SecurityProtocol
from headwater.security.quotas import ClientQuotaManager, FileQuotaStore, QuotaKey, QuotaStore
from headwater.security.tls import ListenerTlsContexts
from headwater.txn.markers import TxnMarkerWriter

log = logging.getLogger(__name__)

#: The stop after the controlled shutdown (handlers, coordinators, cluster, logs) and
#: the process exit must end within this; see ``shutdown_watchdog``.
STOP_DRAIN_S = 30.0
#: The ``request`` label of Kafka's RequestMetrics, per API key.
_REQUEST_NAMES = {int(k): kafka_request_name(k.name) for k in ApiKey}
#: Longest wait for the request handlers' tasks, and for each coordinator, to stop.
STOP_TASKS_S = 5.0
#: Makes the stop on a failed last (or first) log directory happen once, whichever
#: thread meets the failure first and however many directories fail together.
_HALT_LOCK = threading.Lock()
#: How long the stop waits for the ZooKeeper session to close before exiting anyway.
HALT_SESSION_CLOSE_S = 5.0


class Broker(HandlerTable):
    """Wiring and lifecycle: the parts, the handler table, start and stop."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__()
        self.config = config
        self.metrics = BrokerMetrics()
        #: headwater_requests_total's child per API key, labelled once.
        self._request_counters: dict[int, Any] = {}
        self.logs = LogDirectory(config.data_dir, config.log, config.extra_data_dirs)
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
            rack=config.broker_rack,
        )
        self.metrics.bind_replica_manager(self.cluster.replicas)
        inter_broker = inter_broker_settings(config.security, config.all_listeners)
        self.cluster.replicas.connector.use(inter_broker.listener.name, inter_broker.security)
        self._server_socks: list[socket.socket] = []
        self.listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] = (config.host, config.port)
        #: What ``stop`` is doing (the shutdown watchdog names it if the stop hangs).
        self.stop_phase = "not stopping"

    # -- wiring ---------------------------------------------------------------------

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
        self.offsets = OffsetApis(replication)
        self.produce = ProduceApi(self.logs, self.admin, self.metrics, replication)
        self.fetch = FetchApi(
            self.config, self.logs, self.sessions, self.purgatory, self.metrics, replication
        )
        replication.out_of_sync_listeners.append(self.fetch.watcher.nudge_followers)
        self.register(ApiKey.API_VERSIONS, self._api_versions)
        self.register(ApiKey.PRODUCE, self.produce.handle)
        self.register(ApiKey.FETCH, self.fetch.handle)
        self.register(ApiKey.METADATA, kio_request(ApiKey.METADATA, self.cluster_admin.metadata))
        self.register_kio(ApiKey.CREATE_TOPICS, self.cluster_admin.create_topics)
        self.register_kio(ApiKey.DELETE_TOPICS, self.cluster_admin.delete_topics)
        self.register_kio(ApiKey.DESCRIBE_CLUSTER, self.cluster_admin.describe_cluster)
        self.register_kio(ApiKey.CREATE_PARTITIONS, self.cluster_admin.create_partitions)
        elections = ElectLeadersApi(cluster.store, cluster.view)
        self.register_kio(ApiKey.ELECT_LEADERS, elections.elect_leaders)
        moves = ReassignmentApis(cluster.store, cluster.view)
        self.register_kio(ApiKey.ALTER_PARTITION_REASSIGNMENTS, moves.alter_partition_reassignments)
        self.register_kio(ApiKey.LIST_PARTITION_REASSIGNMENTS, moves.list_partition_reassignments)
        self.coordinators = Coordinators(
            self.config, cluster, self.logs, self.cluster_admin, self._spawn
        )
        self.configs = ConfigsApi(self.config, self.logs, self.connections)
        self.configs.topic_config_writer = cluster.store.set_topic_configs
        self.configs.broker_config_writer = cluster.store.set_broker_configs
        self.configs.throttle_setter = cluster.replicas.throttles.set_rates
        self.configs.replica_fetchers_setter = cluster.replicas.resize_fetchers
        self.register_kio(ApiKey.DESCRIBE_CONFIGS, self.configs.describe_configs)
        self.register_kio(ApiKey.INCREMENTAL_ALTER_CONFIGS, self.configs.incremental_alter_configs)
        self.register_kio(ApiKey.ALTER_CONFIGS, self.configs.alter_configs)
        self.register_kio(ApiKey.INIT_PRODUCER_ID, self.admin.init_producer_id)
        self.register_kio(ApiKey.LIST_OFFSETS, self.offsets.list_offsets)
        self.register_kio(ApiKey.OFFSET_FOR_LEADER_EPOCH, self.offsets.offset_for_leader_epoch)
        partition_admin = PartitionAdminApis(replication)
        self.register_kio(ApiKey.DELETE_RECORDS, partition_admin.delete_records)
        self.register_kio(ApiKey.DESCRIBE_PRODUCERS, partition_admin.describe_producers)
        log_dirs = LogDirsApi(self.logs, self._spawn)
        self.register_kio(ApiKey.DESCRIBE_LOG_DIRS, log_dirs.describe_log_dirs)
        self.register_kio(ApiKey.ALTER_REPLICA_LOG_DIRS, log_dirs.alter_replica_log_dirs)
        # Transaction markers go to the logs this broker leads; the transaction
        # coordinator calls ``txn_markers.write`` directly for its own partitions.
        self.txn_markers = TxnMarkerWriter(replication)
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
        writes = on_worker_thread if self.zk_security is not None else inline
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
        self.groups = self.coordinators.group_service(host, port)
        groups = self.groups

        async def handle(ctx: RequestContext, req: Any) -> dict[str, Any]:
            decision = authorize_group_request(ctx, req, lambda: self.cluster.view.topics.keys())
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
                advertise_coordinator(response, self.config.node_id, *ctx.listener.advertised)
                advertise_peer_coordinators(response, self.cluster, ctx.listener.name)
            return response

        kip848 = (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE)
        for api_key, versions in GROUP_API_VERSIONS.items():
            if api_key in kip848 and "consumer" not in c.group_rebalance_protocols:
                continue  # group.coordinator.rebalance.protocols without consumer: not offered
            self.register_kio(api_key, handle, versions)

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
        self.transactions = self.coordinators.transaction_service(
            host, port, self.producer_ids.allocate, lambda: self.txn_markers
        )
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

    def dispatch(
        self, ctx: RequestContext, frame: memoryview, offset: int
    ) -> Response | Awaitable[Response]:
        header = ctx.header
        self.security.gate(ctx)
        # First, before any request queued during a stall of the process is answered
        # from leaderships the controller may have moved meanwhile.
        self.cluster.replicas.check_loop_stall()
        entry = self.handlers.get(header.api_key)
        if entry is None:
            raise CloseConnection(f"unknown or unsupported API key {header.api_key}")
        if header.api_key != ApiKey.API_VERSIONS and not (
            entry.min_version <= header.api_version <= entry.max_version
        ):
            raise CloseConnection(
                f"unsupported version {header.api_version} of API key {header.api_key}"
            )
        counter = self._request_counters.get(header.api_key)
        if counter is None:  # once per API key: labels() costs a lookup under a lock
            try:
                name = ApiKey(header.api_key).name.lower()
            except ValueError:
                name = str(header.api_key)
            counter = self._request_counters[header.api_key] = self.metrics.requests.labels(name)
        counter.inc()
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

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        raise_open_file_limit()
        prepare_record_validation(background=True)  # numba loads on a thread
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.get_running_loop()
        self.logs.open()
        self.logs.on_offline = self._log_dir_offline
        self._build_handlers()
        self._preload_schemas()
        if self.config.metrics_port is not None:
            port = self.metrics.serve(
                self.config.metrics_host or "127.0.0.1", self.config.metrics_port
            )
            log.info("metrics on http://%s:%d/metrics", self.config.metrics_host, port)
        # Start-up objects and the logs loaded so far live for the whole run;
        # later ones are frozen as they come (headwater.gc_policy).
        COLLECTOR.enable()
        COLLECTOR.freeze(collect=True)
        # One TLS context per TLS listener: its ``listener.name.<l>.ssl.*`` keys win;
        # a dynamic keystore change replaces it (ConfigsApi).
        tls = ListenerTlsContexts(
            {
                listener.name: self.config.security.for_listener(listener.name).tls
                for listener in self.config.all_listeners
                if listener.protocol.uses_tls
            }
        )
        self.configs.listener_tls = tls
        tls.replaced.append(self._refresh_inter_broker_tls)
        bound: list[tuple[socket.socket, Listener]] = []
        for listener in self.config.all_listeners:
            sock = listen(listener.host, listener.port)
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
        await self.coordinators.compact_internal_topics()
        self._build_group_apis()
        self._build_transaction_apis()
        await self.groups.start()
        await self.transactions.start()
        await self.cluster.replicas.start()
        if self.cluster.is_local:
            await self.coordinators.create_internal_topics()
            await self.cluster.leading_everything(self.config.request_timeout_ms / 1000)
        bind_broker_gauges(self.metrics, self.logs, self.cluster, self.groups)
        self._spawn(self.metrics.event_loop.monitor(), "event-loop-lag")
        acceptor = ClientAcceptor(
            self.config,
            self.connections,
            self.request_pool,
            authorizer=self.authorizer,
            quotas=self.quotas,
            security=self.security,
            dispatch=self.dispatch,
            observe=self._observe_request,
            spawn=self._spawn,
        )
        for sock, listener in bound:
            self._spawn(
                acceptor.accept_loop(sock, listener, tls),
                f"accept-{listener.name}",
            )
        self._spawn(housekeeping(self.config, self.logs), "housekeeping")
        self.cleaner = LogCleanerManager(
            self.configs.cleaner_config(), self.logs.compacted_logs, asyncio.get_running_loop()
        )
        register_cleaner_metrics(self.metrics.registry, self.cleaner)
        self.configs.on_cleaner_config = self.cleaner.reconfigure
        self.cleaner.start()
        loop = asyncio.get_running_loop()
        replicas = self.cluster.replicas

        def corrupt(topic: str, partition: int, _log: Log, _bad: CorruptBatch) -> None:
            # Repair from another replica (replica_manager.on_corrupt), on the loop.
            loop.call_soon_threadsafe(replicas.on_corrupt, topic, partition)

        self.scrubber = LogScrubber(
            self.logs.loaded_logs,
            self.config.log_scrub_bytes_per_second,
            on_corrupt=corrupt,
            pass_pause_s=self.config.log_scrub_pass_interval_ms / 1000,
            generation=lambda: self.logs.logs_created,
        )
        self.metrics.bind_corrupt_batches(self._corrupt_counts)
        self.metrics.bind_log_dir_offline(self.logs.dir_statuses)
        self.scrubber.start()
        self._spawn(acceptor.connection_sweep(), "connection-sweep")
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

    def _corrupt_counts(self) -> list[tuple[str, int, int]]:
        """(topic, partition, corrupt batches) for the metric (scrape thread)."""
        return [
            (topic, partition, len(found.corrupt_ranges()))
            for topic, partition, found in self.logs.loaded_logs()
            if found.corrupt
        ]

    def _log_dir_offline(self, path: str, reason: str) -> None:
        """A log directory failed (KIP-112). With none left the broker stops at once,
        as Kafka halts: one CRITICAL line, the ZooKeeper session closed so that the
        controller moves this broker's leaderships now rather than after the session
        timeout, then exit status 1 (no flush, no clean-shutdown marker: the next
        start recovers and checks the logs). Runs on its own thread: the caller may
        be the event loop or a worker in the middle of a write. Never raises into
        that caller."""
        if self.logs.offline is None:
            # Another directory is left (JBOD): serve it, hand the lost replicas over.
            try:
                self._loop.call_soon_threadsafe(self._log_dir_lost, path, reason)
            except RuntimeError:  # the loop is closed: the broker is stopping anyway
                log.error("log directory %s failed (%s) while stopping", path, reason)
            return
        with _HALT_LOCK:
            if getattr(self, "_halting", False):
                return  # a second directory failing at the same moment: one line only
            self._halting = True
        left = [d for d in self.logs.dirs if self.logs.dir_offline(str(d)) is None]
        why = (
            "it was the last one"
            if not left
            else "it is the first one, which holds the topic registry and checkpoints"
        )

        def halt() -> None:
            try:
                log.critical(
                    "stopping: log directory %s failed (%s) and %s (KIP-112); exit status 1",
                    path,
                    reason,
                    why,
                )
                if not self.cluster.is_local:
                    closer = threading.Thread(target=self.cluster.store.close, daemon=True)
                    closer.start()
                    closer.join(HALT_SESSION_CLOSE_S)
                # Not logging.shutdown(): it waits for every handler's lock, which a
                # thread stuck writing may hold; each record was flushed when logged.
                for stream in (sys.stderr, sys.stdout):
                    with contextlib.suppress(Exception):
                        stream.flush()
            finally:
                os._exit(1)

        threading.Thread(target=halt, name="log-dir-failure", daemon=True).start()

    def _log_dir_lost(self, path: str, reason: str) -> None:
        """One of several directories failed (on the loop): its partitions answer
        KAFKA_STORAGE_ERROR, the controller is told, the others are served."""
        lost = self.logs.partitions_in(path)
        log.error(
            "log directory %s failed (%s): %d partition(s) offline; serving the other "
            "directories (KIP-112)",
            path,
            reason,
            len(lost),
        )
        try:
            self.cluster.replicas.on_log_dir_failure(lost)
        except Exception:
            log.exception("handing over the partitions of log directory %s failed", path)

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop_budget_s(self) -> float:
        """See `stop_budget_s`: this broker's, from its configuration."""
        return stop_budget_s(self.config)

    def _refresh_inter_broker_tls(self, listener: str, tls: TlsConfig) -> None:
        """The inter-broker listener's keystore changed: new connections to peers
        (replica fetchers, marker senders) present and trust the new keys."""
        connector = self.cluster.replicas.connector
        if connector.security is None or listener != connector.listener:
            return
        try:
            connector.use(listener, with_new_keystore(connector.security, tls))
        except ValueError as exc:
            log.error("keeping the inter-broker TLS keys: %s", exc)
            return
        log.info("inter-broker connections on %s use the new TLS keys", listener)

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
        if getattr(self, "scrubber", None) is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.scrubber.stop)
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
                async with asyncio.timeout(STOP_TASKS_S):
                    await service.stop()
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


def stop_budget_s(config: BrokerConfig) -> float:
    """The longest a stop may take: the controlled shutdown's attempts and backoffs,
    then a bounded drain (what the shutdown watchdog allows before it exits).

    A function of the configuration alone, so that whoever waits for a broker
    to stop (the shutdown watchdog, a test harness) waits as long as it may take.
    """
    budget = STOP_DRAIN_S
    if config.controlled_shutdown_enable:
        attempts = max(1, config.controlled_shutdown_max_retries)
        attempt = ControlledShutdownConfig().attempt_timeout_ms / 1000 + STOP_STEP_TIMEOUT_S
        budget += (
            attempts * attempt + (attempts - 1) * config.controlled_shutdown_retry_backoff_ms / 1000
        )
    return budget
