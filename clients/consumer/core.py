"""What the push and the lite pull consumer share (RocketMQ's DefaultMQPushConsumerImpl /
DefaultLitePullConsumerImpl with RebalanceImpl and MQClientInstance, the consumer's part): the
group's subscriptions, heartbeats to every broker of its topics, the offset store, and the rebalance
that decides which queues this member holds.

Rebalance runs on a timer (`rebalance_interval_ms`, 20 s) and at once when a broker sends
NOTIFY_CONSUMER_IDS_CHANGED down this client's connection (a member joined or left; what a broker
asks of a member is clients.consumer.remoting_processor's): per topic, the members from
GET_CONSUMER_LIST_BY_GROUP (clients.consumer.members: one broker, or with `route_union` the union of
every broker's), sorted, the readable queues sorted, then the strategy. A queue that leaves this
member has its offset committed and is dropped (orderly: after its listener returns, then unlocked
on the broker); a queue that comes is started from the group's offset on the broker (or the
consume-from-where rule). The owner (`QueueOwner`) is told of both. Offsets are committed every
`persist_consumer_offset_interval_ms` and on shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

from clients.consumer.broker_api import CALL_TIMEOUT_S, ConsumerBrokerApi
from clients.consumer.locks import QueueLocks
from clients.consumer.members import GroupMembers
from clients.consumer.remoting_processor import ClientRemotingProcessor
from clients.consumer.routes import ConsumerRoutes
from clients.impl.client_instance import build_client_id
from clients.impl.namesrv_client import NameServerClient, discover_namesrvs
from clients.impl.route_views import RouteViews
from namesrv.client.consume_from import compute_pull_from_where
from namesrv.client.consumer.config import ConsumerConfig, MessageModel
from namesrv.client.consumer.process_queue import ProcessQueue
from namesrv.client.consumer.subscription import MessageSelector, Subscription
from namesrv.client.errors import MQClientError, NoNameServerAvailable
from namesrv.client.message import check_group
from namesrv.client.offsets import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from namesrv.protocol.broker_headers import DEFAULT_CONSUMER_GROUP
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.models import MessageQueue

log = logging.getLogger(__name__)


class QueueOwner(Protocol):
    """What a consumer does when a queue comes to it or leaves it."""

    def queue_added(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None: ...

    def queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None: ...


class _Offsets:
    """The broker calls of the offset store and of the consume-from-where rule, by queue."""

    def __init__(self, api: ConsumerBrokerApi, routes: ConsumerRoutes) -> None:
        self.api = api
        self.routes = routes

    def _addr(self, mq: MessageQueue) -> str:
        addr = self.routes.broker_addr(mq.broker_name) or (self.routes.refresh(mq.topic) and
                                                           self.routes.broker_addr(mq.broker_name))
        if not addr:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        return self.api.query_consumer_offset(self._addr(mq), group, mq)

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self.api.update_consumer_offset(self._addr(mq), group, mq, offset)

    def max_offset(self, mq: MessageQueue) -> int:
        return self.api.max_offset(self._addr(mq), mq)

    def min_offset(self, mq: MessageQueue) -> int:
        return self.api.min_offset(self._addr(mq), mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self.api.search_offset(self._addr(mq), mq, timestamp_ms)


class ConsumerCore:
    def __init__(self, group: str, config: ConsumerConfig, consume_type: str, namesrv: list[str] | None,
                 namespace: str, instance_name: str | None, orderly: bool = False) -> None:
        check_group(group)
        if group == DEFAULT_CONSUMER_GROUP:
            raise MQClientError(f"consumerGroup can not equal {DEFAULT_CONSUMER_GROUP}, please specify another one")
        self.group = group
        self.config = config
        self.consume_type = consume_type
        self.orderly = orderly
        self.namespace = namespace
        self.namesrv_names = namesrv
        self.client_id = build_client_id(instance_name or f"{time.time_ns():x}")
        self.subscriptions: dict[str, Subscription] = {}
        self.owner: QueueOwner | None = None
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pq_lock = threading.RLock()
        self._persist_lock = threading.Lock()
        """Held by the periodic commit and by a reset, so a commit of offsets read before a reset
        never lands on the broker after the reset's."""
        self._rebalance_now = threading.Event()
        self.processor = ClientRemotingProcessor(group, self.client_id, self._rebalance_now.set, self.reset_offsets)
        """What this member answers when a broker calls it."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.rebalances = 0
        self.api: ConsumerBrokerApi | None = None
        self.routes: ConsumerRoutes | None = None
        self.members: GroupMembers | None = None
        self.offset_store: OffsetStore = LocalFileOffsetStore()
        self.queue_offsets: _Offsets | None = None
        self.locks: QueueLocks
        self.assigned: set[MessageQueue] | None = None
        """Lite pull's assign(): exactly these queues, no allocation (None: the group allocates)."""

    @property
    def clustering(self) -> bool:
        return self.config.message_model is MessageModel.CLUSTERING

    def subscribe(self, topic: str, selector: MessageSelector) -> None:
        self.subscriptions[topic] = Subscription.of(topic, selector)

    # ------------------------------------------------------------------ lifecycle
    def make_routes(self) -> ConsumerRoutes:
        """Routes from the NameServer actors named, else from every one of the namespace."""
        names = self.namesrv_names if self.namesrv_names is not None else discover_namesrvs(self.namespace)
        if not names:
            raise NoNameServerAvailable(f"no NameServer actor in Ray namespace {self.namespace!r}")
        namesrv = NameServerClient(names, self.namespace, credentials=self.config.credentials)
        return ConsumerRoutes(RouteViews(namesrv) if self.config.route_union else namesrv)

    def start(self, owner: QueueOwner) -> None:
        if self.api is not None:
            raise MQClientError("The PushConsumer service state not OK, maybe started once")
        if not self.subscriptions:
            raise MQClientError("no subscription: call subscribe(topic, expression) before start()")
        if self.clustering and self.assigned is None:  # copySubscription: a member also reads its retry topic
            retry = f"{RETRY_GROUP_TOPIC_PREFIX}{self.group}"
            self.subscriptions.setdefault(retry, Subscription.of(retry, MessageSelector.by_tag("*")))
        self.owner = owner
        self.routes = self.make_routes()
        self.api = ConsumerBrokerApi(self.client_id, self.processor.process_request, self.config.credentials)
        api = self.api
        self.members = GroupMembers(lambda addr: api.consumer_id_list(addr, self.group), self.config.route_union,
                                    CALL_TIMEOUT_S)
        self.locks = QueueLocks(self.group, self.api, self.routes)
        self.queue_offsets = _Offsets(self.api, self.routes)
        if self.clustering:
            self.offset_store = RemoteBrokerOffsetStore(self.group, self.queue_offsets)
        else:
            where = self.config.offset_store_dir
            self.offset_store = LocalFileOffsetStore(
                Path(where) / self.client_id.replace("@", "_") / self.group / "offsets.json" if where else None)
        for topic in self.subscriptions:
            self.routes.refresh(topic)
        self.heartbeat()
        self.rebalance()
        for target, name in ((self._rebalance_loop, "rebalance"), (self._timers_loop, "timers")):
            t = threading.Thread(target=target, name=f"{self.group}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def shutdown(self) -> None:
        """Stop the timers, drop every queue (committing its offset; orderly: unlocking it), leave
        the group on every broker."""
        if self.api is None or self._stop.is_set():
            return
        self._stop.set()
        self._rebalance_now.set()
        for t in self._threads:
            t.join(timeout=5)
        with self._pq_lock:
            held = dict(self.process_queues)
        for pq in held.values():
            pq.drop()
        self.offset_store.persist_all(set(held))
        if self.orderly and self.clustering:
            self.locks.unlock(list(held))
        assert self.routes is not None
        for addr in sorted(self.routes.broker_addrs(set(self.subscriptions))):
            try:
                self.api.unregister(addr, self.group)
            except Exception as e:
                log.info("unregistering %s from %s failed: %s", self.client_id, addr, e)
        if self.members is not None:
            self.members.close()
        self.api.close()

    @property
    def running(self) -> bool:
        return self.api is not None and not self._stop.is_set()

    # ------------------------------------------------------------------ membership
    def heartbeat(self) -> None:
        """HEART_BEAT to every broker of the subscribed topics (a broker that refuses is logged)."""
        assert self.api is not None and self.routes is not None
        data = [{"groupName": self.group, "consumeType": self.consume_type,
                 "messageModel": self.config.message_model.value,
                 "consumeFromWhere": self.config.consume_from_where.value, "unitMode": False,
                 "subscriptionDataSet": [s.to_wire() for s in self.subscriptions.values()]}]
        for addr in sorted(self.routes.broker_addrs(set(self.subscriptions))):
            try:
                self.api.heartbeat(addr, data)
            except Exception as e:
                log.warning("heartbeat of %s to %s failed: %s", self.client_id, addr, e)

    def reset_offsets(self, topic: str, table: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: drop the queues of `topic` this member holds, set the
        offsets, commit them, and take the queues again from there (RocketMQ's resetOffset)."""
        with self._persist_lock:
            with self._pq_lock:
                held = {mq: pq for mq, pq in self.process_queues.items() if mq.topic == topic and mq in table}
                for mq, pq in held.items():
                    pq.drop()
                    del self.process_queues[mq]
                    if self.owner is not None:
                        self.owner.queue_removed(mq, pq)
                for mq, offset in table.items():
                    if mq in held:
                        self.offset_store.update_offset(mq, offset)
            for mq in held:  # one by one: persist_all would drop every other queue's offset from memory
                self.offset_store.persist(mq)
                self.offset_store.remove_offset(mq)
        self._rebalance_now.set()

    # ------------------------------------------------------------------ rebalance
    def _rebalance_loop(self) -> None:
        while not self._stop.is_set():
            self._rebalance_now.wait(self.config.rebalance_interval_ms / 1000)
            self._rebalance_now.clear()
            if self._stop.is_set():
                return
            try:
                self.rebalance()
            except Exception:
                log.exception("rebalance of %s failed", self.group)

    def _timers_loop(self) -> None:
        cfg = self.config
        period = {"persist": cfg.persist_consumer_offset_interval_ms, "heartbeat": cfg.heartbeat_broker_interval_ms,
                  "lock": cfg.lock_interval_ms}
        due = {k: time.monotonic() + v / 1000 for k, v in period.items()}
        while not self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
            now = time.monotonic()
            for what in [k for k, t in due.items() if t <= now]:
                due[what] = now + period[what] / 1000
                try:
                    if what == "persist":
                        with self._persist_lock:
                            with self._pq_lock:
                                held = set(self.process_queues)
                            self.offset_store.persist_all(held)
                    elif what == "heartbeat":
                        self.heartbeat()
                    elif self.orderly and self.clustering:
                        self.locks.lock_all(self.assignment_table())
                except Exception:
                    log.exception("%s timer of %s failed", what, self.group)

    def consumer_ids(self, topic: str) -> list[str]:
        assert self.members is not None and self.routes is not None
        return self.members.of(self.routes.broker_addrs({topic}))

    def members_of_pass(self) -> list[str]:
        """With the union of views: the members every broker of any subscribed topic knows, asked
        once per rebalance pass (a broker's list is the group's, not a topic's; RocketMQ asks per
        topic, so a hung broker would hold each topic's allocation in turn)."""
        assert self.members is not None and self.routes is not None
        return self.members.of(self.routes.broker_addrs(set(self.subscriptions)))

    def rebalance(self) -> None:
        """One pass over every subscribed topic (RebalanceImpl.doRebalance)."""
        assert self.routes is not None
        self.rebalances += 1
        pass_members: list[str] | None = None
        for topic in list(self.subscriptions):
            self.routes.refresh(topic)
            mq_all = self.routes.queues(topic)
            if not mq_all:
                log.debug("%s: no readable queue of %s yet", self.group, topic)
                continue
            if self.assigned is not None:
                self._update_process_queues(topic, {mq for mq in self.assigned if mq.topic == topic})
                continue
            if not self.clustering:
                self._update_process_queues(topic, set(mq_all))
                continue
            if self.config.route_union:  # the group's members are the group's, whatever the topic: asked once
                if pass_members is None:
                    pass_members = self.members_of_pass()
                cids = pass_members
            else:
                cids = sorted(self.consumer_ids(topic))
            if not cids:
                log.info("%s: no member list for %s yet", self.group, topic)
                continue
            mine = self.config.strategy.allocate(self.group, self.client_id, mq_all, cids)
            self._update_process_queues(topic, set(mine))
        with self._pq_lock:
            stale = [mq for mq in self.process_queues if mq.topic not in self.subscriptions]
        for mq in stale:
            self._release(mq)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume `mq` from `offset` next: its cached messages are dropped and its pulls start
        again there (the queue must be held)."""
        with self._pq_lock:
            old = self.process_queues.get(mq)
            if old is None:
                raise MQClientError(f"The message queue is not in assigned list, may be rebalancing, {mq}")
            old.drop()
            pq = self.process_queues[mq] = ProcessQueue()
            pq.locked, pq.last_lock_s = old.locked, old.last_lock_s
            self.offset_store.update_offset(mq, offset)
        assert self.owner is not None
        self.owner.queue_removed(mq, old)
        self.owner.queue_added(mq, pq, offset)

    def assignment_table(self) -> dict[MessageQueue, ProcessQueue]:
        with self._pq_lock:
            return dict(self.process_queues)

    def assignment(self) -> set[MessageQueue]:
        with self._pq_lock:
            return set(self.process_queues)

    def _update_process_queues(self, topic: str, mine: set[MessageQueue]) -> None:
        assert self.queue_offsets is not None
        with self._pq_lock:
            current = {mq for mq in self.process_queues if mq.topic == topic}
        for mq in sorted(current - mine, key=str):
            self._release(mq)
        for mq in sorted(mine - current, key=lambda q: (q.broker_name, q.queue_id)):
            if self._stop.is_set():
                return
            pq = ProcessQueue()
            if self.orderly and self.clustering and not self.locks.lock(mq, pq):
                log.info("%s: %s is locked by another member; tried again at the next rebalance", self.group, mq)
                continue
            self.offset_store.remove_offset(mq)
            offset = compute_pull_from_where(mq, self.offset_store, self.config.consume_from_where,
                                             self.config.consume_timestamp_ms, self.queue_offsets)
            if offset < 0:
                log.warning("%s: no start offset for %s (the broker did not answer); next rebalance", self.group, mq)
                continue
            with self._pq_lock:
                self.process_queues[mq] = pq
            log.info("%s: %s takes %s from offset %d", self.group, self.client_id, mq, offset)
            assert self.owner is not None
            self.owner.queue_added(mq, pq, offset)

    def _release(self, mq: MessageQueue) -> None:
        with self._pq_lock:
            pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.drop()
        assert self.owner is not None
        self.owner.queue_removed(mq, pq)
        if self.orderly and self.clustering:
            got = pq.consume_lock.acquire(timeout=1.0)  # let a listener running on it finish first
            try:
                self.offset_store.persist(mq)
                self.locks.unlock([mq])
            finally:
                if got:
                    pq.consume_lock.release()
        else:
            self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        log.info("%s: %s leaves %s", self.group, self.client_id, mq)
