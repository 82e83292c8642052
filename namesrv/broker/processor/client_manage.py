"""RocketMQ's ClientManageProcessor: HEART_BEAT, UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG, and the
two ways a client leaves without saying so (its channel closed, its heartbeats stopped).

Pure: no Ray, no sockets. A change in a consumer group's members is handed to the broker's
`on_group_changed` (which tells the members to rebalance). Adding a client-side request code means
writing its handler here and adding one line to `handlers`.
"""

from __future__ import annotations

import logging

from namesrv.broker.client.consumer_manager import ClientChannel, SubscriptionData
from namesrv.broker.client.producer_manager import ProducerChannel
from namesrv.broker.client.subscription_filter import check_client_config, note_unservable
from namesrv.broker.context import BrokerContext, json_body
from namesrv.protocol.broker_headers import UnregisterClientRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.running_info import running_info_problem
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Handler, RequestContext

log = logging.getLogger(__name__)


class ClientManageProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[int, Handler] = {
            BrokerRequestCode.HEART_BEAT: self._heart_beat,
            BrokerRequestCode.UNREGISTER_CLIENT: self._unregister_client,
            BrokerRequestCode.CHECK_CLIENT_CONFIG: self._check_client_config,
        }

    def _heart_beat(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        ctx = self.ctx
        data = json_body(cmd.body, "heartbeat")
        client_id = str(data.get("clientID") or "")
        if not client_id:
            raise MQServerError(ResponseCode.SYSTEM_ERROR, "heartbeat without clientID")
        now = ctx.clock()
        running = _running_infos(data)  # checked before anything is recorded
        for producer in data.get("producerDataSet") or []:
            if isinstance(producer, dict) and producer.get("groupName"):
                ctx.producers.register_producer(str(producer["groupName"]), ProducerChannel(
                    client_id, client.channel, cmd.language, cmd.version, now))
        for consumer in data.get("consumerDataSet") or []:
            if not isinstance(consumer, dict) or not consumer.get("groupName"):
                continue
            group = str(consumer["groupName"])
            retry = f"{RETRY_GROUP_TOPIC_PREFIX}{group}"
            config = ctx.subscription_groups.find(group)  # auto-created with the defaults when allowed
            queues = config.retry_queue_nums if config is not None else 0  # no config: no retry topic (RocketMQ)
            if (queues > 0 and retry not in ctx.topics.topic_config_table
                    and ctx.topics.create_topic_in_send_message_back_method(retry, queues) is not None):
                ctx.on_topic_created(retry)
            subs = [SubscriptionData.from_wire(s) for s in consumer.get("subscriptionDataSet") or []
                    if isinstance(s, dict)]
            note_unservable(ctx.consumers, group, subs, ctx.config.enable_property_filter)
            changed = ctx.consumers.register_consumer(
                group, ClientChannel(client_id, client.channel, cmd.language, cmd.version, now, running.get(group)),
                str(consumer.get("consumeType") or "CONSUME_PASSIVELY"),
                str(consumer.get("messageModel") or "CLUSTERING"),
                str(consumer.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"), subs)
            if changed:
                log.info("consumer group %s: %s joined", group, client_id)
                ctx.group_changed(group)
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister_client(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        ctx = self.ctx
        h = request_header(cmd, UnregisterClientRequestHeader)
        if h.producer_group:
            ctx.producers.unregister_producer(h.producer_group, client.channel)
        if h.consumer_group and ctx.consumers.unregister_consumer(h.consumer_group, client.channel):
            ctx.group_changed(h.consumer_group)
        return cmd.response(ResponseCode.SUCCESS)

    def _check_client_config(self, cmd: RemotingRequest, client: RequestContext) -> RemotingResponse:
        return cmd.response(*check_client_config(cmd.body, self.ctx.config.enable_property_filter))

    def channel_closed(self, channel: str) -> None:
        ctx = self.ctx
        ctx.producers.do_channel_close(channel)
        for group in ctx.consumers.do_channel_close(channel):
            ctx.group_changed(group)

    def scan_not_active_clients(self) -> None:
        ctx = self.ctx
        expired_ms = ctx.config.channel_expired_timeout_ms
        ctx.producers.scan_not_active(expired_ms)
        for group in ctx.consumers.scan_not_active(expired_ms):
            ctx.group_changed(group)


def _running_infos(heartbeat: dict[str, object]) -> dict[str, bytes]:
    """The ConsumerRunningInfo a Ray-native consumer attaches to each of its groups' consumer data
    (`runningInfo`, the body's JSON text: it has no connection for the broker to ask it over); not
    a RocketMQ field. One that is not a ConsumerRunningInfo refuses the whole heartbeat."""
    out: dict[str, bytes] = {}
    for consumer in heartbeat.get("consumerDataSet") or []:  # type: ignore[attr-defined]
        if not isinstance(consumer, dict) or consumer.get("runningInfo") is None:
            continue
        text = consumer["runningInfo"]
        body = text.encode() if isinstance(text, str) else b""
        problem = running_info_problem(body) if body else "runningInfo is not a JSON text"
        if problem is not None:
            raise MQServerError(ResponseCode.SYSTEM_ERROR, f"heartbeat: runningInfo of {consumer.get('groupName')} "
                                                           f"is not a ConsumerRunningInfo: {problem}")
        out[str(consumer.get("groupName"))] = body
    return out
