"""The admin codes a broker answers by asking a consumer over its own TCP connection (RocketMQ's
AdminBrokerProcessor.callConsumer, through Broker2Client.callClient: `call_client`, the server's
invoke):

GET_CONSUMER_RUNNING_INFO (307, mqadmin consumerStatus): the broker finds the client's channel among
the group's members, sends it the same request and answers with the client's answer; not a member:
SYSTEM_ERROR "The Consumer <group> <clientId> not online"; a client older than V3_1_8_SNAPSHOT:
SYSTEM_ERROR (its version shown as the ordinal); no answer in CALL_CLIENT_TIMEOUT_S:
CONSUME_MSG_TIMEOUT; its connection closing meanwhile: SYSTEM_ERROR "invoke consumer ... Exception".

CONSUME_MESSAGE_DIRECTLY (309, mqadmin queryMsgById -g -d, the dashboard's resend) goes the same
way: the broker reads the message at the offset its offset message id names, adds its brokerName
(and the topic's sys flag) to the header and hands the client the request with the stored message
as its body; the client runs its listener on it once and answers a ConsumeMessageDirectlyResult.
A msgId that is missing, not an offset message id, or at no message here: SYSTEM_ERROR, nobody
asked (RocketMQ fails there with a null pointer); the caller may read the message's topic (ACL),
else NO_PERMISSION.

Where this differs from RocketMQ 5.3: a successful answer whose body is not a ConsumerRunningInfo
(ConsumeMessageDirectlyResult) is refused (SYSTEM_ERROR) rather than handed on; 309 to a Ray-native
consumer, which has no connection to be called on, is SYSTEM_ERROR; and a Ray-native consumer
attaches its running info to its heartbeats (`runningInfo`, see ClientManageProcessor), so the
broker answers 307 for it from the latest one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from namesrv.broker.client.consumer_manager import ClientChannel, ConsumerManager
from namesrv.broker.context import MayRead, anyone_may_read
from namesrv.broker.processor.admin_queries import readable_message
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.read_fence import ReadFence
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.protocol.broker_headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.consume_directly import direct_result_problem
from namesrv.protocol.message.codec import decode_offset_msg_id, encode_message_ext
from namesrv.protocol.running_info import running_info_problem
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.invoke import CallClient, ClientCallError, ClientCallTimeout
from namesrv.remoting.pipeline import Answer, Handler, RequestContext
from namesrv.remoting.wire_command import RemotingCommand, ext_value
from namesrv.store.message_store import MessageStore

CALL_CLIENT_TIMEOUT_S = 10.0
"""How long a call to a client waits for its answer (Broker2Client.callClient's 10 s)."""
V3_1_8_SNAPSHOT = 62
"""MQVersion.Version.V3_1_8_SNAPSHOT.ordinal(): older clients cannot answer a broker's call."""


class ConsumerCalls:
    def __init__(self, identity: BrokerIdentity, topics: TopicConfigManager, store: MessageStore, fence: ReadFence,
                 consumers: Callable[[], ConsumerManager], may_read: MayRead = anyone_may_read,
                 call_client: CallClient | None = None) -> None:
        """`consumers()` is the broker processor's live consumer table; `fence` bounds the messages
        309 hands on to what readers may see (namesrv.broker.read_fence); `may_read` the ACL's check
        of the found message's topic; `call_client` asks a client over its TCP connection (None: no
        TCP server)."""
        self.identity = identity
        self.topics = topics
        self.store = store
        self.fence = fence
        self.consumers = consumers
        self.may_read = may_read
        self.call_client = call_client
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
        }

    def _member(self, group: str, client_id: str | None) -> ClientChannel | RemotingResponse:
        """The client's channel among the group's members, or callConsumer's refusal."""
        info = self.consumers().groups.get(group)
        found = next((c for c in info.channels.values() if c.client_id == client_id), None) if info else None
        if found is None:
            return error(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if found.version < V3_1_8_SNAPSHOT:
            return error(ResponseCode.SYSTEM_ERROR, f"The Consumer <{client_id}> Version <{found.version}> too low to "
                                                    "finish, please upgrade it to V3_1_8_SNAPSHOT")
        return found

    def get_consumer_running_info(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        h = GetConsumerRunningInfoRequestHeader.from_ext(request.ext_fields, wire=request.wire)
        group, client_id = h.consumer_group, h.client_id
        found = self._member(group, client_id)
        if isinstance(found, RemotingResponse):
            return found
        if not str(found.channel).startswith("tcp:"):  # a Ray-native consumer: its latest heartbeat's
            if found.running_info is None:
                return error(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> sends no running "
                                                        "info with its heartbeats")
            return RemotingResponse(body=found.running_info)
        if self.call_client is None:
            return error(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: "
                                                    "this broker serves no TCP clients")
        ext = {k: ext_value(v) for k, v in request.ext_fields.items() if v is not None}
        forward = RemotingCommand(BrokerRequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=ext, body=request.body)
        return self._call_consumer(self.call_client, found.channel, forward, group, client_id)

    def consume_message_directly(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        """309: the stored message at the msgId's offset, handed to one client of the group."""
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext(request.ext_fields, wire=request.wire)
        group, client_id = h.consumer_group, h.client_id
        if not h.msg_id:
            return error(ResponseCode.SYSTEM_ERROR, "CONSUME_MESSAGE_DIRECTLY names no msgId")
        try:
            _host, offset = decode_offset_msg_id(h.msg_id)
        except InvalidInput as e:
            return error(ResponseCode.SYSTEM_ERROR, f"bad msgId: {e}")
        found = self._member(group, client_id)
        if isinstance(found, RemotingResponse):
            return found
        if not str(found.channel).startswith("tcp:"):
            return error(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> is a Ray-native "
                                                    "consumer: it has no connection to hand a message to")
        if self.call_client is None:
            return error(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: "
                                                    "this broker serves no TCP clients")
        ext = {k: ext_value(v) for k, v in request.ext_fields.items() if v is not None}
        ext["brokerName"] = self.identity.broker_name
        tc = self.topics.topic_config_table.get(h.topic) if h.topic else None
        if tc is not None:
            ext["topicSysFlag"] = str(tc.topic_sys_flag)
        return self._consume_directly(self.call_client, request, ctx, found.channel, offset, ext, group, str(client_id))

    async def _consume_directly(self, call: CallClient, request: RemotingRequest, ctx: RequestContext, channel: str,
                                offset: int, ext: dict[str, str], group: str, client_id: str) -> RemotingResponse:
        found = await readable_message(self.store, self.fence, self.may_read, request, ctx, offset)
        if isinstance(found, RemotingResponse):
            return found
        forward = RemotingCommand(BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY, ext_fields=ext,
                                  body=encode_message_ext(found, self.identity.broker_addr))
        return await self._call_consumer(call, channel, forward, group, client_id, direct_result_problem,
                                         "ConsumeMessageDirectlyResult")

    async def _call_consumer(self, call: CallClient, channel: str, forward: RemotingCommand, group: str,
                             client_id: str, problem_of: Callable[[bytes | None], str | None] = running_info_problem,
                             model: str = "ConsumerRunningInfo") -> RemotingResponse:
        try:
            answer = await call(channel, forward, CALL_CLIENT_TIMEOUT_S)
        except ClientCallTimeout as e:
            return error(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
        except ClientCallError as e:
            return error(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {e}")
        if answer.code == ResponseCode.SUCCESS:
            problem = await asyncio.to_thread(problem_of, answer.body)
            if problem is not None:
                return error(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: its "
                                                        f"answer is not a {model}: {problem}")
        return RemotingResponse(answer.code, answer.remark, dict(answer.ext_fields or {}), answer.body)
