"""A broker's lifecycle owner (RocketMQ's BrokerController), inside the actor's event loop.

It owns the topic config, the commit log, consumer offsets, the request processor, the remoting
server clients dial, the registration with every NameServer, and one control loop of periodic
steps: registration, flushing an ASYNC_FLUSH log, the store's checkpoint (consume queues and message
index synced), retention, persisting consumer offsets (off the loop), sampling the runtime stats
once a second, and expiring silent clients.

In controller mode (`controller_mode`) the role is the controller's (actors.broker.ha.replicas_manager): the
broker starts fenced as a slave, registers with the NameServers only once the controller decided
its role, and starts or stops its master-only services (scheduled delivery, transaction checks,
replication as a slave) when the role changes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from actors.broker.ha.master import HAMasterService
from actors.broker.ha.replicas_manager import ReplicasManager
from actors.broker.ha.service import HAClient
from actors.broker.registration import NamesrvRegistrar
from actors.broker.to_client import Broker2Client
from actors.namesrv.housekeeping import BrokerChannel, BrokerHousekeepingService
from actors.runtime.metrics import BROKER_UNTAGGED, FLUSH_INTERVAL_S, NO_METRICS, Metrics
from namesrv.acl.plain_acl import SUB, AclManager
from namesrv.acl.rpc_hook import AclHook, check_broker
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.config_update import CONFIG_FILE, BrokerConfigFile
from namesrv.broker.metadata_log import message_count
from namesrv.broker.processor.admin import AdminBrokerProcessor
from namesrv.broker.processor.admin_queries import AdminQueries
from namesrv.broker.processor.consumer_calls import ConsumerCalls
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.offset_reset import OffsetResetProcessor
from namesrv.broker.processor.reply import ReplyMessageProcessor
from namesrv.broker.processor.subscription_group import SubscriptionGroupProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.broker.role import RoleGuard
from namesrv.broker.schedule.service import ScheduleService
from namesrv.broker.stats import SAMPLE_INTERVAL_S
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import Clock, system_clock
from namesrv.common.control_loop import ControlLoop
from namesrv.common.persist import BackgroundWriter
from namesrv.protocol.codes import BROKER_LARGE_REQUEST_CODES, ResponseCode
from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.connection import Connection
from namesrv.remoting.limits import server_limits
from namesrv.remoting.pipeline import Answer, RequestContext, RequestPipeline, resolve
from namesrv.remoting.server import RemotingServer
from namesrv.store.message_store import MessageStore
from namesrv.store.retention import CleanCommitLogService
from namesrv.store.types import BrokerRole, FlushDiskType

log = logging.getLogger(__name__)

OFFSET_PERSIST_INTERVAL_S = 5.0
"""RocketMQ's flushConsumerOffsetInterval."""
CLIENT_SCAN_INTERVAL_S = 10.0


class BrokerController:
    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        store_dir: Path,
        config: BrokerConfig,
        namesrv_names: list[str],
        namespace: str,
        remoting: RemotingServerConfig | None,
        advertise: Callable[[int], str],
        channel_of: Callable[[str], BrokerChannel],
        ray_name: str,
        clock: Clock = system_clock,
        metrics: Metrics | None = None,
        master_name: str | None = None,
        controller_mode: bool = False,
    ) -> None:
        """Binds the client port at once (a taken port fails the start). The broker's address is
        `advertise(port)`, or `ray_name` without TCP; `channel_of(token)` is what NameServers watch.
        A slave (brokerId > 0) replicates from the actor `master_name` (actors.broker.ha.service)."""
        self.config_file = BrokerConfigFile(store_dir / "config" / CONFIG_FILE)
        # What UPDATE_BROKER_CONFIG changed before a restart, read before the port is bound: a file
        # it cannot read stops the start with nothing to release.
        if self.config_file.load(config):
            log.info("broker %s: config %s applied from %s", broker_name, self.config_file.values,
                     self.config_file.path)
        self._remoting_config = remoting
        self.remoting = RemotingServer(
            ray_name, lambda conn, cmd: self.pipeline.handle_command(cmd, RequestContext(conn.token, conn.peer)),
            self._connection_closed, remoting.server_channel_max_idle_time_seconds if remoting else 0,
            lambda coro: self.loop.spawn("request", coro), server_limits(remoting, BROKER_LARGE_REQUEST_CODES))
        if remoting is not None:
            port = self.remoting.bind(remoting.listen_host, remoting.listen_port)
            addr, ha_addr = advertise(port), advertise(port + 1)
        else:
            addr, ha_addr = ray_name, f"{ray_name}:ha"
        self.identity = identity = BrokerIdentity(cluster_name, broker_name, broker_id, addr)
        self.incarnation = uuid.uuid4().hex[:12]
        self.token = f"{addr}#{self.incarnation}"
        """Unique per incarnation: NameServers tell a restarted broker from its predecessor by it."""
        master_role = config.broker_role if config.broker_role is not BrokerRole.SLAVE else BrokerRole.ASYNC_MASTER
        if broker_id != MASTER_ID or controller_mode:
            config.broker_role = BrokerRole.SLAVE  # controller mode: fenced until the controller decides
        self.config = config
        self.store_dir = store_dir
        self.clock = clock
        started = time.perf_counter()
        self.writer = BackgroundWriter(identity.broker_addr)
        """Topic-config writes, off the event loop; answers that changed topics wait for `durable()`."""
        self.topics = TopicConfigManager(store_dir / "config" / "topics.json", clock, config.auto_create_topic_enable,
                                         config.default_topic_queue_nums, writer=self.writer.write)
        self.store = MessageStore(store_dir / "store", config.flush_disk_type, clock, config.group_commit,
                                  segment_size=config.mapped_file_size_commit_log,
                                  consume_queue_file_size=config.mapped_file_size_consume_queue)
        self.cleaner = CleanCommitLogService(self.store, lambda: self.config.retention_policy())
        """Reads the retention settings at each run: UPDATE_BROKER_CONFIG changes them live."""
        self.offsets = ConsumerOffsetManager(store_dir / "config" / "consumerOffset.json")
        self.groups = SubscriptionGroupManager(store_dir / "config" / "subscriptionGroup.json", clock,
                                               config.auto_create_subscription_group, writer=self.writer.write)
        self.recovery_ms = (time.perf_counter() - started) * 1000
        self.loop = ControlLoop(identity.broker_addr)
        self.role = RoleGuard(config, broker_id, clock)
        self.processor = BrokerProcessor(identity, config, self.topics, self.store, self.offsets, clock,
                                         on_topic_created=self._topic_created,
                                         on_group_changed=self._group_changed, role=self.role, groups=self.groups,
                                         pop_journal=store_dir / "config" / "popInflight.journal")
        self.ha_master = HAMasterService(self.store, self.role, self.topics, self.offsets, config)
        self.ha_master.groups = self.groups
        self.ha_master.tcp_addr = addr if remoting is not None else None
        self.ha_client = HAClient(broker_id, master_name, namespace, self.store, self.topics, self.offsets,
                                  self.processor.context.fence, self.processor.context.metadata, config, clock) \
            if config.broker_role is BrokerRole.SLAVE and master_name and not controller_mode else None
        self.role.controlled = controller_mode
        if self.ha_client is not None:
            self.ha_client.groups = self.groups
            self.role.master_reachable = self.ha_client.reachable
            self.ha_client.channel = channel_of(self.token)
        self._slave_channels: dict[str, int] = {}
        self.slave_watch = BrokerHousekeepingService(self.loop, self._slave_channel_closed)
        self.ha_master.on_slave_channel = self._watch_slave
        self.ha_master.processor.is_open = lambda token: self.remoting.connection(token) is not None
        self.ha_master.processor.on_slave_disconnected = lambda slave_id: self._slave_gone(slave_id, "disconnected")
        ident = {"clusterName": identity.cluster_name, "brokerAddr": identity.broker_addr,
                 "brokerName": identity.broker_name, "brokerId": identity.broker_id}
        self.registrar = NamesrvRegistrar(ident, ha_addr, namesrv_names, namespace, config, channel_of(self.token),
                                          lambda: self.topics.build_serialize_wrapper(self.config.broker_permission),
                                          lambda: self.topics.data_version)
        self.metrics = metrics if metrics is not None else NO_METRICS
        self.admin = AdminBrokerProcessor(self.topics, self.writer, self._register_topic, self._register_all,
                                          self.config, self.config_file, self._topic_change_replicated)
        self.pipeline = RequestPipeline(identity.broker_addr, BrokerWireEncoder(identity.broker_addr).encode)
        """Every request, from TCP or Ray: ACL hook, then the admin codes or the broker processor."""
        self.acl = AclHook(AclManager(config.acl_file), check_broker, self._count_acl_refusal) \
            if config.acl_enable else None
        if self.acl is not None:
            self.pipeline.add_hook(self.acl)
            self.processor.may_read = self._may_read
        self.pipeline.register(self.admin.handlers)
        self.pipeline.register(SubscriptionGroupProcessor(self.groups, self.offsets, self.writer).handlers)
        self.pipeline.register(self.ha_master.processor.handlers)  # HA_TRANSFER (actors.broker.ha.tcp)
        self.schedule = ScheduleService(self.store, store_dir / "config" / "delayOffset.json", clock,
                                        self.processor.context.delay_levels_ms, self._deliver_due)
        self.processor.context.on_parked = self.schedule.notify
        self.processor.broker_stats.timers = self.schedule.timer_figures  # the runtime info's timer fields
        self.ha_master.delay_offsets = self.schedule.encode
        self.processor.context.metadata.follow_delay_progress(self.schedule)  # the progress follows the log too

        def may_read(request: RemotingRequest, ctx: RequestContext, topic: str) -> str | None:
            return self.processor.may_read(request, ctx, topic)  # looked up per call: the ACL's when on

        self.queries = AdminQueries(identity, config, self.topics, self.store, self.processor.context.fence,
                                    self.offsets, lambda: self.processor.consumers, str(store_dir), may_read,
                                    lambda: self.processor.context.producers)
        self.pipeline.register(self.queries.handlers)
        self.pipeline.register(ConsumerCalls(
            identity, self.topics, self.store, self.processor.context.fence, lambda: self.processor.consumers,
            may_read, lambda token, request, timeout_s: self.to_clients.call_client(token, request, timeout_s),
        ).handlers)
        self.pipeline.register_default(self.serve)
        self._flushed_stats: collections.Counter[tuple[str, str]] = collections.Counter()
        self.to_clients = Broker2Client(identity, self.remoting, self.processor)
        self.pipeline.register(OffsetResetProcessor(self.processor.context, self.to_clients.reset_offsets).handlers)
        self.pipeline.register(ReplyMessageProcessor(self.processor.context, self.to_clients.call_client).handlers)
        self._schedule_task: asyncio.Task[None] | None = None
        self._revive_task: asyncio.Task[None] | None = None
        self.replicas = ReplicasManager(self, namespace, broker_id, master_role, channel_of(self.token)) \
            if controller_mode else None
        if self.replicas is not None:
            self.processor.context.epochs = self.replicas.epoch_cache  # GET_BROKER_EPOCH_CACHE (1007)

    def start(self) -> None:
        cfg = self.config
        # As RocketMQ's BrokerController.start: one registration at once, then one every period from
        # the initial delay on (with no initial delay the periodic step itself runs at once).
        if cfg.register_initial_delay_ms > 0 and self.replicas is None:
            self.loop.spawn("register-at-start", self.registrar.register_broker_all())
        self.loop.every("register-broker-all", cfg.effective_register_period_ms() / 1000,
                        self._register_periodically, initial_delay_s=cfg.register_initial_delay_ms / 1000)
        if self.replicas is not None:
            self.loop.spawn("controller-replicas", self.replicas.run())
            self.loop.every("controller-heartbeat", cfg.controller_heartbeat_interval_ms / 1000,
                            self.replicas.heartbeat)
            self.loop.every("controller-sync-state-set", 0.2, self.replicas.maintain_sync_state_set)
        if cfg.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self.loop.every("flush-commit-log", cfg.flush_interval_ms / 1000, self._flush)
        self.loop.every("sample-stats-items", SAMPLE_INTERVAL_S, self.processor.context.stats_items.sample)
        self.loop.every("checkpoint-store", cfg.flush_interval_consume_queue_ms / 1000, self._checkpoint,
                        initial_delay_s=cfg.flush_interval_consume_queue_ms / 1000)
        self.loop.every("clean-store", cfg.clean_resource_interval_ms / 1000, self._clean, initial_delay_s=0)
        self.loop.every("flush-metrics", FLUSH_INTERVAL_S, self.flush_metrics, initial_delay_s=FLUSH_INTERVAL_S)
        self.loop.every("persist-consumer-offsets", OFFSET_PERSIST_INTERVAL_S, self.persist_offsets,
                        initial_delay_s=OFFSET_PERSIST_INTERVAL_S)
        if self.ha_client is not None:
            self.loop.spawn("ha-replicate", self.ha_client.run())
        if self.ha_client is not None or self.replicas is not None:
            self.loop.every("ha-sync-metadata", cfg.slave_sync_interval_ms / 1000, self._sync_metadata)
        if cfg.broker_role is BrokerRole.SYNC_MASTER:  # controller mode: replicas.maintain_sync_state_set
            self.loop.every("ha-shrink-sync-state-set", 1.0, self.role.shrink, initial_delay_s=1.0)
        if self.acl is not None:
            self.loop.every("reload-acl", 1.0, self.acl.reload, initial_delay_s=1.0)
        self.loop.every("sample-broker-stats", SAMPLE_INTERVAL_S, self.processor.broker_stats.sample,
                        initial_delay_s=SAMPLE_INTERVAL_S)
        scan_s = min(CLIENT_SCAN_INTERVAL_S, cfg.channel_expired_timeout_ms / 4000)
        self.loop.every("scan-not-active-clients", scan_s, self.processor.scan_not_active_clients,
                        initial_delay_s=scan_s)
        if cfg.broker_role is not BrokerRole.SLAVE or self.replicas is not None:
            # a slave's log is its master's copy: it writes nothing itself
            self.start_master_services()
            self.loop.every("check-transactions",
                            min(cfg.transaction_check_interval_ms, cfg.transaction_timeout_ms) / 1000,
                            self._check_transactions, initial_delay_s=cfg.transaction_timeout_ms / 1000)
        self.loop.start()
        if self._remoting_config is not None:
            self.loop.spawn("remoting-serve", self.remoting.serve())

    async def shutdown(self) -> dict[str, str]:
        """Graceful: unregister from every NameServer, stop serving, release held pulls, persist
        offsets, close the store."""
        outcomes = await self.registrar.unregister_broker_all()
        self.processor.closed = True
        self.processor.hold.notify_all()
        await self.remoting.stop()
        await self.loop.shutdown()
        await self.persist_offsets()
        await self.schedule.persist(force=True)
        await self.durable()
        await asyncio.to_thread(self.processor.pop_state.close)
        await asyncio.to_thread(self.store.close)
        return outcomes

    def _watch_slave(self, slave_id: int, channel: BrokerChannel) -> None:
        if channel.token not in self._slave_channels:
            self._slave_channels[channel.token] = slave_id
            self.slave_watch.watch(channel)

    def _slave_channel_closed(self, token: str, how: str) -> None:
        slave_id = self._slave_channels.pop(token, None)
        if slave_id is not None:
            self._slave_gone(slave_id, how)

    def _slave_gone(self, slave_id: int, how: str) -> None:
        log.warning("slave %d %s: out of the SyncStateSet", slave_id, how)
        self.role.slave_gone(slave_id)
        self.ha_master.lag.forget(slave_id)

    # ------------------------------------------------------------------ roles (controller mode)
    def start_master_services(self) -> None:
        """Scheduled delivery and the pop revive (transaction checks and the SyncStateSet shrink
        are steps that act only while this broker is a master)."""
        if self.role.writable and (self._schedule_task is None or self._schedule_task.done()):
            self._schedule_task = self.loop.spawn(
                "deliver-scheduled", self.schedule.run(lambda: self.loop.closed or not self.role.writable))
        if self.role.writable and (self._revive_task is None or self._revive_task.done()):
            self._revive_task = self.loop.spawn(
                "pop-revive", self.processor.revive.run(lambda: self.loop.closed or not self.role.writable))

    async def stop_master_services(self) -> None:
        """After the fence: the schedule service sees it is no longer master, persists and ends
        (the pop revive sees it too)."""
        self.processor.revive.notify()
        task = self._schedule_task
        if task is not None and not task.done():
            self.schedule.notify()
            try:
                await asyncio.wait_for(asyncio.shield(task), 5.0)
            except TimeoutError:
                task.cancel()

    def _check_transactions(self) -> Awaitable[None] | None:
        return self.to_clients.check_transactions() if self.role.writable else None

    async def _sync_metadata(self) -> None:
        client = self.ha_client
        if client is not None:
            await client.sync_metadata()
            if not self.role.writable and (self._schedule_task is None or self._schedule_task.done()):
                await self.schedule.sync_from_master(client.delay_offsets)
                await self.schedule.persist(force=True)  # what the log's records brought, if anything

    async def _register_periodically(self) -> dict[str, str] | None:
        if self.replicas is not None and not self.replicas.role_decided.is_set():
            return None  # controller mode: no registration before the controller decided the role
        return await self.registrar.register_broker_all()

    async def reregister(self, broker_id: int, epoch: int) -> dict[str, str]:
        """Register with every NameServer under `broker_id` (0 as master, the controller id as a
        slave) at once, in full. A new master first stamps its topic table's DataVersion with its
        epoch (stateVersion, RocketMQ's nextVersion(newMasterEpoch)): NameServers keep the higher."""
        if broker_id == MASTER_ID:
            self.topics.next_version(epoch)
        self.identity.broker_id = broker_id
        self.registrar.set_broker_id(broker_id)
        return await self.registrar.register_broker_all(force_full=True)

    # ------------------------------------------------------------------ steps
    async def _flush(self) -> None:
        """ASYNC_FLUSH's flush: the commit log, and the pop journal's acks written since the last."""
        await asyncio.to_thread(self.store.flush)
        await self.processor.pop_state.flush()

    async def _clean(self) -> None:
        """Retention (namesrv.store.retention), in a worker thread: the loop never waits for it."""
        await asyncio.to_thread(self.cleaner.run)

    async def _checkpoint(self) -> None:
        """RocketMQ's FlushConsumeQueueService with the index's flush: the consume queues and the
        message index synced, then the store's checkpoint written. On a full disk it fails (the
        checkpoint on disk stays the last one written: a restart re-reads more of the log) and is
        tried again at the next turn: one line in the log, not a traceback every second."""
        try:
            await asyncio.to_thread(self.store.checkpoint)
        except OSError as e:
            log.warning("broker %s: store checkpoint not written (tried again in %d ms): %s",
                        self.identity.broker_addr, self.config.flush_interval_consume_queue_ms, e)

    async def persist_offsets(self) -> None:
        data = self.offsets.snapshot()
        if data is not None:
            await asyncio.to_thread(self.offsets.write, data)

    def flush_metrics(self) -> None:
        stats = self.processor.stats
        for (kind, result), total in stats.items():
            delta = total - self._flushed_stats[(kind, result)]
            if delta:
                if kind in BROKER_UNTAGGED:
                    self.metrics.inc(kind, delta)
                else:
                    self.metrics.inc(kind, delta, result=result)
        self._flushed_stats = collections.Counter(stats)
        self.metrics.set("store_size_bytes", self.store.size_bytes() - self.store.min_physical_offset())
        self.metrics.set("messages", message_count(self.store))
        self.metrics.flush()

    # ------------------------------------------------------------------ requests
    def serve(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """The broker processor behind the pipeline. An answer whose request changed the topic table
        (a topic auto-created by a send or a consumer's heartbeat) is given once that is on disk,
        or is an error when it could not be written. A subscription group auto-created by a pull or
        a heartbeat does not hold its request (as RocketMQ, whose persist only logs): a consumer
        drains a broker whose disk is full."""
        before = self.writer.submitted
        answer = self.processor.process(request, ctx)
        if isinstance(answer, RemotingResponse) and self.writer.submitted == before:
            return answer
        return self._when_durable(answer, before)

    async def _when_durable(self, answer: Answer, since: int) -> RemotingResponse:
        response = await resolve(answer)
        if self.writer.submitted == since:  # nothing to wait for (a send's usual case): no further await
            return response
        failed = await self.writer.written(since, self.topics.path)  # the topic is not on disk: rolled back
        return error(ResponseCode.SYSTEM_ERROR, failed) if failed is not None else response

    def _may_read(self, request: RemotingRequest, ctx: RequestContext, topic: str) -> str | None:
        assert self.acl is not None
        return self.acl.may(request, ctx, topic, SUB)

    async def _topic_change_replicated(self) -> None:
        """The topic changes made so far are in the log and, on a SYNC_MASTER, held by every
        member of the SyncStateSet (or the slave timeout passed: the change stands on the master)."""
        end = await self.processor.context.metadata.written()
        if end and self.role.writable:
            await self.role.replicated(end)

    async def _deliver_due(self, message: MessageInner) -> None:
        """A delayed or timed message whose time came, into its real queue (its held pulls woken)."""
        stored = await self.store.put(message)
        self.processor.context.fence.written(stored.commit_log_offset + stored.store_size, message.topic,
                                             message.queue_id)

    def _count_acl_refusal(self, reason: str) -> None:
        self.metrics.inc("acl_rejections", reason=reason)

    async def _register_topic(self, tc: TopicConfig) -> dict[str, str]:
        """A created or updated topic to every NameServer: alone (enableSingleTopicRegister) or with
        the whole table (RocketMQ's default)."""
        if self.config.enable_single_topic_register:
            return await self.registrar.register_single_topic_all(tc)
        return await self._register_all()

    async def _register_all(self) -> dict[str, str]:
        """The whole table to every NameServer now, in full (forceRegister, as RocketMQ registers an
        admin change), even if a periodic round already carried its DataVersion."""
        return await self.registrar.register_broker_all(force_full=True)

    def _topic_created(self, topic: str) -> None:
        log.info("topic %s created: registering with every NameServer", topic)
        tc = self.topics.topic_config_table.get(topic)
        if tc is not None:
            self.loop.spawn("register-new-topic", self._register_topic(tc))

    async def durable(self, since: int | None = None) -> None:
        """Returns once every topic-config change made so far (or, with `since`, made after that
        `writer.submitted` count: none, and it returns at once) is on disk; with `since`, raises
        DurableWriteError when one of those changes could not be written (it is rolled back)."""
        await self.writer.drained(since)

    def _connection_closed(self, conn: Connection, reason: str) -> None:
        self.processor.channel_closed(conn.token)
        self.ha_master.processor.connection_closed(conn.token)

    def _group_changed(self, group: str, channels: list[str]) -> None:
        self.to_clients.notify_consumer_ids_changed(group, channels)
