"""The broker's request processing (RocketMQ's SendMessageProcessor, PullMessageProcessor,
ClientManageProcessor, ConsumerManageProcessor, the offset queries and AdminBrokerProcessor's runtime
info), one handler per code.

Pure: no Ray, no sockets. It answers the neutral `RemotingRequest`s of the broker's request
pipeline (`namesrv.remoting.pipeline`), which TCP frames and Ray calls both become, so both pass
the same checks; `namesrv.broker.wire` writes its answers in RocketMQ's wire format. Handlers that
wait (a send until its record is durable, a pull held for new messages) are coroutines on the
caller's event loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from namesrv.broker.broker_stats import BrokerStats
from namesrv.broker.commit_log import CommitLog, MessageInner
from namesrv.broker.config import BrokerConfig
from namesrv.broker.consumer_manager import ClientChannel, ConsumerManager, SubscriptionData
from namesrv.broker.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.message_codec import decode_batch, offset_msg_id, string_to_properties
from namesrv.broker.message_properties import MessageIllegal
from namesrv.broker.processor_types import BrokerError, BrokerIdentity, PullOutcome, SendOutcome
from namesrv.broker.pull_hold import LONG_POLLING_CHECK_INTERVAL_S, PullHoldService
from namesrv.broker.role import FLUSH_SLAVE_TIMEOUT_REMARK, RoleGuard
from namesrv.broker.subscription_filter import check_client_config, note_unservable, pull_subscription
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.clock import Clock
from namesrv.protocol import fastjson
from namesrv.protocol.broker_headers import (
    ConsumerQueueHeader,
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    PullMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    TopicQueueHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    request_header,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    MASTER_ID,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    is_readable,
    is_writeable,
)
from namesrv.protocol.headers import Header
from namesrv.protocol.types import InvalidInput, describe_errors
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext

log = logging.getLogger(__name__)

FLAG_COMMIT_OFFSET = 1
FLAG_SUSPEND = 2
MAX_RECONSUME_TIMES = 16
SEND_CODES = frozenset({BrokerRequestCode.SEND_MESSAGE, BrokerRequestCode.SEND_MESSAGE_V2,
                        BrokerRequestCode.SEND_BATCH_MESSAGE})
QUERY_OFFSET_NOT_FOUND = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"

Answer = RemotingResponse | Awaitable[RemotingResponse]


class BrokerProcessor:
    def __init__(
        self,
        identity: BrokerIdentity,
        config: BrokerConfig,
        topics: TopicConfigManager,
        store: CommitLog,
        offsets: ConsumerOffsetManager,
        clock: Clock,
        on_topic_created: Callable[[str], None] = lambda topic: None,
        on_group_changed: Callable[[str, list[str]], None] = lambda group, channels: None,
        role: RoleGuard | None = None,
    ) -> None:
        self.identity = identity
        self.config = config
        self.topics = topics
        self.store = store
        self.offsets = offsets
        self.clock = clock
        self.consumers = ConsumerManager(clock)
        self.producers: dict[str, dict[str, int]] = {}
        """producer group -> {channel: last heartbeat}."""
        self.hold = PullHoldService()
        self.role = role if role is not None else RoleGuard(config, identity.broker_id, clock)
        """The broker role's checks on sends and pulls (namesrv.broker.role)."""
        self.locks: dict[tuple[str, str, int], tuple[str, int]] = {}
        """(group, topic, queue) -> (client id, locked at) for orderly consumers (LOCK_BATCH_MQ)."""
        self.stats: collections.Counter[tuple[str, str]] = collections.Counter()
        """Cumulative ("sends" | "pulls" | "pulled_messages", answer code name) counts, for metrics."""
        self.sends_waiting = 0
        """Messages whose send waits for the store (its flush, under SYNC_FLUSH)."""
        self.broker_stats = BrokerStats(clock, lambda: (self.stats[("sends", "SUCCESS")],
                                                        self.stats[("pulled_messages", "")]))
        self.on_topic_created = on_topic_created
        self.on_group_changed = on_group_changed
        self.may_read: Callable[[RemotingRequest, RequestContext, str], str | None] = _anyone_may_read
        """With ACL on: None when the request's account may SUB `topic`, else why not (for a
        resource the request does not name, only points at: a message sent back by its offset)."""
        self.closed = False
        self.handlers: dict[int, Callable[[RemotingRequest, RequestContext], Answer]] = {
            BrokerRequestCode.SEND_MESSAGE: self._send_message,
            BrokerRequestCode.SEND_MESSAGE_V2: self._send_message,
            BrokerRequestCode.SEND_BATCH_MESSAGE: self._send_message,
            BrokerRequestCode.PULL_MESSAGE: self._pull_message,
            BrokerRequestCode.HEART_BEAT: self._heart_beat,
            BrokerRequestCode.UNREGISTER_CLIENT: self._unregister_client,
            BrokerRequestCode.GET_CONSUMER_LIST_BY_GROUP: self._get_consumer_list_by_group,
            BrokerRequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            BrokerRequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            BrokerRequestCode.GET_MAX_OFFSET: self._get_max_offset,
            BrokerRequestCode.GET_MIN_OFFSET: self._get_min_offset,
            BrokerRequestCode.GET_EARLIEST_MSG_STORETIME: self._get_earliest_msg_storetime,
            BrokerRequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset_by_timestamp,
            BrokerRequestCode.CONSUMER_SEND_MSG_BACK: self._consumer_send_msg_back,
            BrokerRequestCode.LOCK_BATCH_MQ: self._lock_batch_mq,
            BrokerRequestCode.UNLOCK_BATCH_MQ: self._unlock_batch_mq,
            BrokerRequestCode.CHECK_CLIENT_CONFIG: lambda cmd, client: cmd.response(
                *check_client_config(cmd.body, self.config.enable_property_filter)),
            BrokerRequestCode.GET_BROKER_RUNTIME_INFO: self._get_broker_runtime_info,
        }

    # ------------------------------------------------------------------ entry point
    def process(self, cmd: RemotingRequest, client: RequestContext) -> Answer:
        """Answer one request of either transport (never raises): bad input becomes an error answer."""
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        try:
            answer = handler(cmd, client)
        except BrokerError as e:
            self._count_refusal(cmd.code, e.code)
            return cmd.response(e.code, e.remark)
        except ValidationError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"invalid request: {describe_errors(e)}")
        except InvalidInput as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"invalid request: {e}")
        if isinstance(answer, RemotingResponse):
            return answer
        return self._guard(cmd, answer)

    async def _guard(self, cmd: RemotingRequest, pending: Awaitable[RemotingResponse]) -> RemotingResponse:
        try:
            return await pending
        except BrokerError as e:
            self._count_refusal(cmd.code, e.code)
            return cmd.response(e.code, e.remark)
        except (InvalidInput, ValueError) as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        except OSError as e:  # the disk refused the write: nothing was acknowledged
            log.error("store write failed: %s", e)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"store write failed: {e}")

    def _count_refusal(self, request_code: int, answer: int) -> None:
        kind = "pulls" if request_code == BrokerRequestCode.PULL_MESSAGE else "sends"
        if kind == "pulls" or request_code in SEND_CODES:
            try:
                self.stats[(kind, ResponseCode(answer).name)] += 1
            except ValueError:
                self.stats[(kind, str(answer))] += 1

    @staticmethod
    def _header(model: type[Header], cmd: RemotingRequest) -> Any:
        """The header the ACL authorised (parsed once, kept on the request), or parsed here."""
        return request_header(cmd, model)

    # ------------------------------------------------------------------ send (both paths)
    def _topic_for_send(self, topic: str, default_topic: str, default_queue_nums: int, queue_id: int) -> Any:
        """The topic's config, auto-created when allowed; a bad queue id answers SYSTEM_ERROR, as
        RocketMQ 4.9's broker does (5.x says INVALID_PARAMETER, which 4.x clients do not retry)."""
        if not is_writeable(self.config.broker_permission):
            raise BrokerError(ResponseCode.NO_PERMISSION,
                              f"the broker[{self.identity.broker_addr}] sending message is forbidden")
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        tc = self.topics.topic_config_table.get(topic)
        if tc is None:
            default = self.topics.topic_config_table.get(default_topic)
            cap = min(default_queue_nums, default.write_queue_nums) if default else default_queue_nums
            if queue_id >= cap:
                raise BrokerError(ResponseCode.SYSTEM_ERROR,
                                  f"request queueId[{queue_id}] is illegal, topic[{topic}] would get {cap} queues")
            tc = self.topics.create_topic_in_send_message_method(topic, default_topic, default_queue_nums)
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_topic_in_send_message_back_method(topic, 1)
            if tc is None:
                raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
            self.on_topic_created(topic)
        if not is_writeable(tc.perm):
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            raise BrokerError(ResponseCode.SYSTEM_ERROR,
                              f"request queueId[{queue_id}] is illegal, {tc} Producer: {self.identity.broker_addr}")
        return tc

    def _check_body(self, body: bytes | None) -> bytes:
        if not body:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "message body is empty")
        if len(body) > self.config.max_message_size:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                              f"the message body size {len(body)} exceeds the limit {self.config.max_message_size}")
        return body

    def _check_stored(self, message: MessageInner) -> None:
        """A message the store would refuse (properties over 32,767 bytes, a topic over 127, ...)
        is MESSAGE_ILLEGAL with the reason, as RocketMQ's PROPERTIES_SIZE_EXCEEDED."""
        try:
            self.store.check(message)
        except MessageIllegal as e:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, str(e)) from None

    async def send(self, messages: list[MessageInner], default_topic: str, default_queue_nums: int) -> SendOutcome:
        """Store messages of one topic and queue (a batch shares both); raises BrokerError."""
        if self.closed:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE,
                              f"broker {self.identity.broker_addr} is shutting down")
        self.role.check_send()
        for m in messages:  # every one, before anything changes (a topic created, a record written)
            self._check_body(m.body)
            m.properties.setdefault("CLUSTER", self.identity.cluster_name)
            self._check_stored(m)
        first = messages[0]
        tc = self._topic_for_send(first.topic, default_topic, default_queue_nums, max(first.queue_id, 0))
        if first.queue_id < 0:  # "any queue": the broker picks one, as RocketMQ does
            queue_id = self.clock() % max(1, tc.write_queue_nums)
            for m in messages:
                m.queue_id = queue_id
        self.sends_waiting += len(messages)
        try:
            results = list(await asyncio.gather(*(self.store.put(m) for m in messages)))
        finally:
            self.sends_waiting -= len(messages)
        self.hold.notify(first.topic, messages[0].queue_id)
        code = await self.role.replicated(max(r.commit_log_offset + r.store_size for r in results))
        self.stats[("sends", ResponseCode(code).name)] += len(messages)
        return SendOutcome(results, [offset_msg_id(self.identity.broker_addr, r.commit_log_offset) for r in results],
                           code)

    def _send_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h: SendMessageRequestHeader = self._header(SendMessageRequestHeader, cmd)
        base = string_to_properties(h.properties)
        born_host = client.remote if client.transport == "tcp" else self.identity.broker_addr  # Ray: no socket
        if cmd.code == BrokerRequestCode.SEND_BATCH_MESSAGE:
            entries = [(e.flag, e.body, base | e.properties) for e in decode_batch(self._check_body(cmd.body))]
        else:
            entries = [(h.flag, self._check_body(cmd.body), base)]
        messages = [MessageInner(h.topic, h.queue_id, body, props, props.get("UNIQ_KEY", ""), flag, h.sys_flag,
                                 h.born_timestamp or self.clock(), born_host, h.reconsume_times)
                    for flag, body, props in entries]
        return self._send_answer(cmd, messages, h)

    async def _send_answer(self, cmd: RemotingRequest, messages: list[MessageInner],
                           h: SendMessageRequestHeader) -> RemotingResponse:
        outcome = await self.send(messages, h.default_topic, h.default_topic_queue_nums)
        first = outcome.results[0]
        ext = {"msgId": ",".join(outcome.msg_ids), "queueId": str(first.queue_id),
               "queueOffset": str(first.queue_offset), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        tx = messages[0].properties.get("__transactionId__")
        if tx:
            ext["transactionId"] = tx
        return cmd.response(outcome.code, None if outcome.code == ResponseCode.SUCCESS else FLUSH_SLAVE_TIMEOUT_REMARK,
                            ext)

    # ------------------------------------------------------------------ pull (both paths)
    def read(self, topic: str, queue_id: int, offset: int, max_nums: int, sub: SubscriptionData | None) -> PullOutcome:
        """DefaultMessageStore.getMessage + PullMessageProcessor's code mapping (blocking: pread),
        within the broker's transfer caps (see namesrv.broker.transfer_caps)."""
        max_offset = self.store.max_offset(topic, queue_id)
        min_offset = self.store.min_offset(topic, queue_id)
        if max_offset == 0:  # NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
            return PullOutcome(code, "NO_MESSAGE_IN_QUEUE", [], 0, min_offset, max_offset)
        if offset < min_offset:  # OFFSET_TOO_SMALL
            return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", [], min_offset, min_offset,
                               max_offset)
        if offset == max_offset:  # OFFSET_OVERFLOW_ONE
            return PullOutcome(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", [], offset, min_offset, max_offset)
        if offset > max_offset:  # OFFSET_OVERFLOW_BADLY
            return PullOutcome(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", [], max_offset, min_offset,
                               max_offset)
        matches = None if sub is None else (lambda m: sub.accepts(m.properties))
        result = self.store.read_messages(topic, queue_id, offset, max_nums, self.config.transfer_caps(), matches)
        if result.records == 0:  # the records there were lost to corruption: skip past them
            return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, "OFFSET_FOUND_NULL", [],
                               result.next_offset, min_offset, max_offset)
        if result.messages:
            return PullOutcome(ResponseCode.SUCCESS, "FOUND", result.messages, result.next_offset, min_offset,
                               max_offset)
        return PullOutcome(ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", [], result.next_offset,
                           min_offset, max_offset)

    def _pull_message(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h: PullMessageRequestHeader = self._header(PullMessageRequestHeader, cmd)
        self.role.check_pull()
        if not is_readable(self.config.broker_permission):
            raise BrokerError(ResponseCode.NO_PERMISSION,
                              f"the broker[{self.identity.broker_addr}] pulling message is forbidden")
        tc = self.topics.topic_config_table.get(h.topic)
        if tc is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not is_readable(tc.perm):
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < tc.read_queue_nums:
            raise BrokerError(ResponseCode.SYSTEM_ERROR,
                              f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                              f"[{tc.read_queue_nums}] consumer:[{client.remote}]")
        sub = pull_subscription(h.topic, h.subscription, h.expression_type, self.consumers.subscription(
            h.consumer_group, h.topic), self.config.enable_property_filter)
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0:
            self.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return self._pull_answer(cmd, h, sub)

    async def _pull_answer(self, cmd: RemotingRequest, h: PullMessageRequestHeader,
                           sub: SubscriptionData | None) -> RemotingResponse:
        outcome = await asyncio.to_thread(self.read, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, sub)
        code, suggest = self._advice(outcome)
        if (code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & FLAG_SUSPEND
                and h.suspend_timeout_millis > 0 and not self.closed):
            # As PullMessageProcessor: held for the pull's suspend timeout with long polling, for
            # shortPollingTimeMills without; re-checked as PullRequestHoldService (see pull_hold).
            short_s = self.config.short_polling_time_mills / 1000
            long_polling = self.config.long_polling_enable
            await self.hold.wait(h.topic, h.queue_id, h.suspend_timeout_millis / 1000 if long_polling else short_s,
                                 lambda: self.closed or self.store.max_offset(h.topic, h.queue_id) > h.queue_offset,
                                 LONG_POLLING_CHECK_INTERVAL_S if long_polling else short_s)
            outcome = await asyncio.to_thread(self.read, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, sub)
            code, suggest = self._advice(outcome)
        self.stats[("pulls", outcome.status)] += 1
        self.stats[("pulled_messages", "")] += len(outcome.messages)
        ext = {"nextBeginOffset": str(outcome.next_begin_offset), "minOffset": str(outcome.min_offset),
               "maxOffset": str(outcome.max_offset), "suggestWhichBrokerId": str(suggest)}
        # the messages travel as they are over Ray; namesrv.broker.wire encodes them for TCP
        return cmd.response(code, outcome.status, ext, None, outcome)

    def _advice(self, outcome: PullOutcome) -> tuple[int, int]:
        """The role's say on a pull's answer: (code, suggestWhichBrokerId); see namesrv.broker.role."""
        last = outcome.messages[-1].commit_log_offset if outcome.messages else self.store.size_bytes()
        return self.role.pull_advice(outcome.code, bool(outcome.messages), self.store.size_bytes() - last,
                                     self.config.transfer_caps().in_memory_window())

    # ------------------------------------------------------------------ clients
    def _heart_beat(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        data = _json_body(cmd.body, "heartbeat")
        client_id = str(data.get("clientID") or "")
        if not client_id:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, "heartbeat without clientID")
        now = self.clock()
        for producer in data.get("producerDataSet") or []:
            if isinstance(producer, dict) and producer.get("groupName"):
                self.producers.setdefault(str(producer["groupName"]), {})[client.channel] = now
        for consumer in data.get("consumerDataSet") or []:
            if not isinstance(consumer, dict) or not consumer.get("groupName"):
                continue
            group = str(consumer["groupName"])
            retry = f"{RETRY_GROUP_TOPIC_PREFIX}{group}"
            if retry not in self.topics.topic_config_table and self.topics.create_topic_in_send_message_back_method(
                    retry, 1) is not None:
                self.on_topic_created(retry)
            subs = [SubscriptionData.from_wire(s) for s in consumer.get("subscriptionDataSet") or []
                    if isinstance(s, dict)]
            note_unservable(self.consumers, group, subs, self.config.enable_property_filter)
            changed = self.consumers.register_consumer(
                group, ClientChannel(client_id, client.channel, cmd.language, cmd.version, now),
                str(consumer.get("consumeType") or "CONSUME_PASSIVELY"),
                str(consumer.get("messageModel") or "CLUSTERING"),
                str(consumer.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"), subs)
            if changed:
                log.info("consumer group %s: %s joined", group, client_id)
                self.on_group_changed(group, self.consumers.channels_of(group))
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister_client(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: UnregisterClientRequestHeader = self._header(UnregisterClientRequestHeader, cmd)
        if h.producer_group:
            self.producers.get(h.producer_group, {}).pop(client.channel, None)
        if h.consumer_group and self.consumers.unregister_consumer(h.consumer_group, client.channel):
            self.on_group_changed(h.consumer_group, self.consumers.channels_of(h.consumer_group))
        return cmd.response(ResponseCode.SUCCESS)

    def channel_closed(self, channel: str) -> None:
        for members in self.producers.values():
            members.pop(channel, None)
        for group in self.consumers.do_channel_close(channel):
            self.on_group_changed(group, self.consumers.channels_of(group))

    def scan_not_active_clients(self) -> None:
        for group in self.consumers.scan_not_active():
            self.on_group_changed(group, self.consumers.channels_of(group))

    def _get_consumer_list_by_group(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: GetConsumerListByGroupRequestHeader = self._header(GetConsumerListByGroupRequestHeader, cmd)
        ids = self.consumers.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"consumerIdList": ids}))

    # ------------------------------------------------------------------ offsets
    def _query_consumer_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: ConsumerQueueHeader = self._header(ConsumerQueueHeader, cmd)
        offset = self.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if self.store.min_offset(h.topic, h.queue_id) <= 0:  # nothing ever dropped: start at the beginning
            return cmd.response(ResponseCode.SUCCESS, None, {"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, QUERY_OFFSET_NOT_FOUND)

    def _update_consumer_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: UpdateConsumerOffsetRequestHeader = self._header(UpdateConsumerOffsetRequestHeader, cmd)
        self.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(ResponseCode.SUCCESS)

    def _get_max_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: TopicQueueHeader = self._header(TopicQueueHeader, cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(self.store.max_offset(h.topic, h.queue_id))})

    def _get_min_offset(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: TopicQueueHeader = self._header(TopicQueueHeader, cmd)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(self.store.min_offset(h.topic, h.queue_id))})

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (see namesrv.broker.broker_stats)."""
        return self.broker_stats.runtime_info(
            broker_active=self.identity.broker_id == MASTER_ID, store_dir=self.store.dir,
            commit_log_max_offset=self.store.size_bytes(), earliest_message_ms=self.store.earliest_store_time(),
            sends_waiting=self.sends_waiting, pulls_held=self.hold.held)

    def _get_broker_runtime_info(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"table": self.runtime_info()}))

    def _get_earliest_msg_storetime(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h: TopicQueueHeader = self._header(TopicQueueHeader, cmd)

        async def answer() -> RemotingResponse:
            first = await asyncio.to_thread(self.store.get_message, h.topic, h.queue_id, 0, 1)
            return cmd.response(ResponseCode.SUCCESS, None,
                                {"timestamp": str(first[0].store_timestamp if first else 0)})
        return answer()

    def _search_offset_by_timestamp(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        h: SearchOffsetRequestHeader = self._header(SearchOffsetRequestHeader, cmd)
        offset = self.store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    # ------------------------------------------------------------------ retries
    def _consumer_send_msg_back(self, cmd: RemotingRequest, client: RequestContext) -> Awaitable[RemotingResponse]:
        h: ConsumerSendMsgBackRequestHeader = self._header(ConsumerSendMsgBackRequestHeader, cmd)
        return self._send_back(cmd, client, h)

    async def _send_back(self, cmd: RemotingRequest, client: RequestContext,
                         h: ConsumerSendMsgBackRequestHeader) -> RemotingResponse:
        """Put a message a consumer failed to process into its group's retry topic (or, past the
        retry limit, its dead-letter topic). Beyond RocketMQ's delay levels: redelivered at once.
        Only a message of the group's own retry topic or of a topic the group subscribes to, and
        (ACL) that the caller may read, is sent back: RocketMQ checks only the group, which lets a
        caller copy any message into a retry topic it reads."""
        original = await asyncio.to_thread(self.store.get_by_commit_offset, h.offset)
        if original is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        if (original.topic != f"{RETRY_GROUP_TOPIC_PREFIX}{h.group}"
                and self.consumers.subscription(h.group, original.topic) is None):
            return cmd.response(ResponseCode.NO_PERMISSION, f"the message at offset {h.offset} is not of a topic "
                                                            f"consumer group {h.group} subscribes to")
        denied = self.may_read(cmd, client, original.topic)
        if denied is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, denied)
        times = original.reconsume_times + 1
        limit = h.max_reconsume_times if h.max_reconsume_times is not None else MAX_RECONSUME_TIMES
        props = dict(original.properties)
        props.setdefault("RETRY_TOPIC", original.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", h.origin_msg_id or original.msg_id)
        if times > limit or h.delay_level < 0:
            topic = f"{DLQ_GROUP_TOPIC_PREFIX}{h.group}"
            if self.topics.create_topic_in_send_message_back_method(topic, 1) is not None:
                self.on_topic_created(topic)
        else:
            topic = f"{RETRY_GROUP_TOPIC_PREFIX}{h.group}"
        message = MessageInner(topic, 0, original.body, props, original.msg_id, original.flag, original.sys_flag,
                               original.born_timestamp, original.born_host, times)
        await self.send([message], topic, 1)
        return cmd.response(ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ orderly consumers
    def _lock_batch_mq(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        data = _json_body(cmd.body, "lock request")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        now = self.clock()
        locked = []
        for mq in data.get("mqSet") or []:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            holder = self.locks.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > 60_000:
                self.locks[key] = (client_id, now)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, None, None, fastjson.dumps({"lockOKMQSet": locked}))

    def _unlock_batch_mq(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        data = _json_body(cmd.body, "unlock request")
        group, client_id = str(data.get("consumerGroup") or ""), str(data.get("clientId") or "")
        for mq in data.get("mqSet") or []:
            key = (group, str(mq.get("topic")), int(mq.get("queueId", -1)))
            if self.locks.get(key, ("",))[0] == client_id:
                del self.locks[key]
        return cmd.response(ResponseCode.SUCCESS)


def _anyone_may_read(request: RemotingRequest, client: RequestContext, topic: str) -> str | None:
    return None


def _json_body(body: bytes | None, what: str) -> dict[str, Any]:
    if not body:
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"{what} body is missing")
    try:
        data = fastjson.loads(body)
    except fastjson.JsonError as e:
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"{what} body: {e}") from None
    if not isinstance(data, dict):
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"{what} body must be a JSON object")
    return data


