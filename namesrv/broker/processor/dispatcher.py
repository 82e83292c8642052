"""The broker's request dispatcher: the one handler table of RocketMQ's broker processors, and how a
refused request is answered.

Each processor serves its own codes from its own `handlers` table and shares the broker's state
through one `BrokerContext` (namesrv.broker.context):

    SendMessageProcessor     (send_processor)     send, send batch, consumer send-back
    PullMessageProcessor     (pull_processor)     pull, and the hold of a pull with nothing new
    ClientManageProcessor    (client_processor)   heartbeat, unregister, check client config
    ConsumerManageProcessor  (consumer_processor) consumer list, consumer offsets, queue offsets
    AdminRuntimeProcessor    (admin_processor)    queue locks of orderly consumers, runtime info
    EndTransactionProcessor  (transactions)       commit or roll back a prepared message
    PopMessageProcessor      (popper)             RocketMQ 5's pop (namesrv.broker.pop)
    AckMessageProcessor      (acker)              ack, batch ack, change invisible time of a popped message

Adding a broker request code means writing its handler in the right processor and adding one line
to that processor's `handlers`; `BrokerProcessor` picks it up. (The topic and config codes of
`AdminBrokerProcessor`, which persist and re-register, are registered on the pipeline by the
broker controller.)

A refused request is answered with a response code, the same way whether its handler refused at
once or later (`broker_refusal`, one mapping applied on both paths):

    MQServerError                          its own code and remark (the processors' refusals:
                                           NO_PERMISSION, TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, ...)
    MessageIllegal                         MESSAGE_ILLEGAL with the reason: a message the store
                                           cannot hold (RocketMQ's PutMessageStatus.MESSAGE_ILLEGAL
                                           and PROPERTIES_SIZE_EXCEEDED)
    a header or body failing validation    SYSTEM_ERROR "invalid request: ..." (RocketMQ answers the
    (ValidationError, InvalidInput, ...)   RemotingCommandException of a header that does not decode
                                           SYSTEM_ERROR with its description); `pipeline.refusal_of`
    OSError                                SYSTEM_ERROR "store write failed: ..." (the disk refused:
                                           nothing was acknowledged)
    anything else                          a bug: raised on to the pipeline, which logs it and
                                           answers SYSTEM_ERROR

Pure: no Ray, no sockets. It answers the neutral `RemotingRequest`s of the broker's request
pipeline (`namesrv.remoting.pipeline`), which TCP frames and Ray calls both become, so both pass
the same checks; `namesrv.broker.processor.wire` writes its answers in RocketMQ's wire format. Handlers that
wait (a send until its record is durable, a pull held for new messages) are coroutines on the
caller's event loop.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from namesrv.broker.client.consumer_manager import ConsumerManager, SubscriptionData
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.client.pull_hold import PullHoldService
from namesrv.broker.config import BrokerConfig
from namesrv.broker.context import BrokerContext, MayRead
from namesrv.broker.pop.ack import AckMessageProcessor
from namesrv.broker.pop.processor import PopMessageProcessor
from namesrv.broker.pop.revive import PopReviveService
from namesrv.broker.pop.state import PopState
from namesrv.broker.processor.admin import AdminRuntimeProcessor
from namesrv.broker.processor.client_manage import ClientManageProcessor
from namesrv.broker.processor.consumer_manage import ConsumerManageProcessor
from namesrv.broker.processor.end_transaction import EndTransactionProcessor
from namesrv.broker.processor.pull import PullMessageProcessor
from namesrv.broker.processor.recall import RecallMessageProcessor
from namesrv.broker.processor.send import SendMessageProcessor
from namesrv.broker.processor.types import BrokerIdentity, PullOutcome, SendOutcome
from namesrv.broker.role import RoleGuard
from namesrv.broker.schedule.delivery import parse_delay_levels
from namesrv.broker.stats import BrokerStats
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import Clock
from namesrv.protocol.codes import SEND_CODES, BrokerRequestCode, ResponseCode
from namesrv.protocol.message.properties import MessageIllegal
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Answer, Handler, RequestContext, refusal_of
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

log = logging.getLogger(__name__)


def broker_refusal(e: Exception) -> MQServerError | None:
    """The code and remark a broker answers a processor's exception with (see the module's
    docstring); None for a bug."""
    if isinstance(e, MessageIllegal):  # before InvalidInput, which it is
        return MQServerError(ResponseCode.MESSAGE_ILLEGAL, str(e))
    if isinstance(e, OSError):  # the disk refused: nothing was acknowledged
        return MQServerError(ResponseCode.SYSTEM_ERROR, f"store write failed: {e}")
    return refusal_of(e)


class BrokerProcessor:
    def __init__(
        self,
        identity: BrokerIdentity,
        config: BrokerConfig,
        topics: TopicConfigManager,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        clock: Clock,
        on_topic_created: Callable[[str], None] = lambda topic: None,
        on_group_changed: Callable[[str, list[str]], None] = lambda group, channels: None,
        role: RoleGuard | None = None,
        groups: SubscriptionGroupManager | None = None,
        pop_journal: str | Path | None = None,
    ) -> None:
        """`pop_journal`: the file the pop state persists to (None: in memory only); loaded by
        `open_pop` once the consumer offsets are."""
        self.context = BrokerContext(identity, config, topics, store, offsets, clock, on_topic_created,
                                     on_group_changed, delay_levels_ms=parse_delay_levels(config.message_delay_level),
                                     role=role if role is not None else RoleGuard(config, identity.broker_id, clock),
                                     groups=groups)
        self.sender = SendMessageProcessor(self.context)
        self.puller = PullMessageProcessor(self.context)
        self.clients = ClientManageProcessor(self.context)
        self.consumer_manager = ConsumerManageProcessor(self.context)
        self.admin = AdminRuntimeProcessor(self.context)
        self.transactions = EndTransactionProcessor(self.context)
        self.recaller = RecallMessageProcessor(self.context, self.sender)
        self.pop_state = PopState(clock, pop_journal, sync_acks=config.flush_disk_type is FlushDiskType.SYNC_FLUSH)
        self.pop_state.open(offsets)
        self.context.metadata.follow_pop_state(self.pop_state)  # in flight on the replicas too
        self.popper = PopMessageProcessor(self.context, self.pop_state)
        self.acker = AckMessageProcessor(self.context, self.pop_state)
        self.revive = PopReviveService(self.context, self.pop_state, self.sender.send)
        self.handlers: dict[int, Handler] = {}
        for processor in (self.sender, self.puller, self.clients, self.consumer_manager, self.admin, self.transactions,
                          self.recaller, self.popper, self.acker):
            for code, handler in processor.handlers.items():
                if code in self.handlers:
                    raise ValueError(f"broker request code {code} has two handlers")
                self.handlers[code] = handler

    # ------------------------------------------------------------------ entry point
    def process(self, cmd: RemotingRequest, client: RequestContext) -> Answer:
        """Answer one request of either transport: a refusal, at once or later, becomes its error
        answer (`broker_refusal`); only a bug is raised, on to the pipeline."""
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        try:
            answer = handler(cmd, client)
        except Exception as e:
            return self._refused(cmd, e)
        if isinstance(answer, RemotingResponse):
            return answer
        return self._guard(cmd, answer)

    async def _guard(self, cmd: RemotingRequest, pending: Awaitable[RemotingResponse]) -> RemotingResponse:
        try:
            return await pending
        except Exception as e:
            return self._refused(cmd, e)

    def _refused(self, cmd: RemotingRequest, e: Exception) -> RemotingResponse:
        """The answer to a handler that raised `e`, at once or later alike (called in its `except`);
        a bug is raised on to the pipeline."""
        refused = broker_refusal(e)
        if refused is None:
            raise e
        if isinstance(e, OSError):
            log.error("store write failed: %s", e)
        self._count_refusal(cmd.code, refused.code)
        return cmd.response(refused.code, refused.remark)

    def _count_refusal(self, request_code: int, answer: int) -> None:
        kind = "pulls" if request_code == BrokerRequestCode.PULL_MESSAGE else "sends"
        if kind == "pulls" or request_code in SEND_CODES:
            try:
                self.stats[(kind, ResponseCode(answer).name)] += 1
            except ValueError:
                self.stats[(kind, str(answer))] += 1

    # ------------------------------------------------------------------ what the broker and its callers use
    async def send(self, messages: list[MessageInner], default_topic: str, default_queue_nums: int) -> SendOutcome:
        """Store messages of one topic and queue (a batch shares both); raises MQServerError."""
        return await self.sender.send(messages, default_topic, default_queue_nums)

    def read(self, topic: str, queue_id: int, offset: int, max_nums: int, sub: SubscriptionData | None) -> PullOutcome:
        """One pull's read from the store (blocking: pread); see PullMessageProcessor.read."""
        return self.puller.read(topic, queue_id, offset, max_nums, sub)

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (see namesrv.broker.stats)."""
        return self.admin.runtime_info()

    def channel_closed(self, channel: str) -> None:
        self.clients.channel_closed(channel)

    def scan_not_active_clients(self) -> None:
        self.clients.scan_not_active_clients()

    # the shared state other code reads through the processor (BrokerProcessor.context has all of it)
    @property
    def store(self) -> MessageStore:
        return self.context.store

    @property
    def role(self) -> RoleGuard:
        return self.context.guard

    @property
    def consumers(self) -> ConsumerManager:
        return self.context.consumers

    @property
    def hold(self) -> PullHoldService:
        return self.context.hold

    @property
    def stats(self) -> collections.Counter[tuple[str, str]]:
        return self.context.stats

    @property
    def broker_stats(self) -> BrokerStats:
        return self.context.broker_stats

    @property
    def closed(self) -> bool:
        return self.context.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self.context.closed = value

    @property
    def may_read(self) -> MayRead:
        return self.context.may_read

    @may_read.setter
    def may_read(self, check: MayRead) -> None:
        self.context.may_read = check
