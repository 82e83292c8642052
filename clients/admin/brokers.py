"""The admin client's broker queries (DefaultMQAdminExt's per-broker calls: runtime stats, topic and
consume stats, consumer connections and running info, broker config, stats data, the epoch cache),
a mixin of `clients.admin.client.DefaultMQAdminExt`, and the error every admin call raises.

Each asks one broker by address over the client's transport and raises `MQAdminError` with one
line for the user when the broker cannot be reached, answers an error code, or answers a body of
another type than the one asked for.
"""

from __future__ import annotations

from typing import Any, TypeVar

from clients.admin.messages import MessageQueries
from clients.admin.transport import AdminTransport, ServerUnreachable, describe
from namesrv.controller.codes import ControllerRequestCode
from namesrv.protocol.admin_bodies import ConsumerConnection, ConsumeStats, GroupList, TopicStatsTable
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.protocol.models import ConfigProperties, KVTable, TopicConfig
from namesrv.protocol.running_info import ConsumerRunningInfo
from namesrv.remoting.command import RemotingResponse

T = TypeVar("T")


class MQAdminError(RuntimeError):
    """An admin operation failed; the message is one line for the user."""


def checked(who: str, resp: RemotingResponse, what: str) -> RemotingResponse:
    """`resp` when it succeeded, else MQAdminError naming `what` and `who`."""
    if not resp.ok:
        raise MQAdminError(f"{what} on {who} failed: {describe(resp)}")
    return resp


class BrokerQueries(MessageQueries):
    """The per-broker calls; `_broker` is the plumbing each goes through."""

    transport: AdminTransport

    def _broker(self, broker_addr: str, code: int, ext: dict[str, Any] | None, what: str,
                props: dict[str, str] | None = None, body: bytes | None = None) -> RemotingResponse:
        try:
            resp = self.transport.call_broker(broker_addr, code, ext, props, body)
        except ServerUnreachable as e:
            raise MQAdminError(f"broker {broker_addr}: {e}") from None
        return checked(broker_addr, resp, what)

    def fetch_broker_runtime_stats(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (what mqadmin clusterList and brokerStatus show)."""
        resp = self._broker(broker_addr, BrokerRequestCode.GET_BROKER_RUNTIME_INFO, None, "get runtime info")
        if not isinstance(resp.payload, KVTable):
            raise MQAdminError(f"broker {broker_addr}: runtime info is not a KVTable")
        return {str(k): str(v) for k, v in resp.payload.table.items()}

    def _broker_model(self, broker_addr: str, code: int, ext: dict[str, Any] | None, what: str, model: type[T]) -> T:
        payload = self._broker(broker_addr, code, ext, what).payload
        if not isinstance(payload, model):
            raise MQAdminError(f"broker {broker_addr}: {what} answered no {model.__name__}")
        return payload

    def examine_topic_stats(self, broker_addr: str, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO of one broker (mqadmin topicStatus asks every broker of the route)."""
        return self._broker_model(broker_addr, BrokerRequestCode.GET_TOPIC_STATS_INFO, {"topic": topic},
                                  "topic stats", TopicStatsTable)

    def examine_consume_stats(self, broker_addr: str, group: str, topic: str | None = None) -> ConsumeStats:
        ext = {"consumerGroup": group} | ({"topic": topic} if topic else {})
        return self._broker_model(broker_addr, BrokerRequestCode.GET_CONSUME_STATS, ext, "consume stats",
                                  ConsumeStats)

    def examine_consumer_connection_info(self, broker_addr: str, group: str) -> ConsumerConnection:
        return self._broker_model(broker_addr, BrokerRequestCode.GET_CONSUMER_CONNECTION_LIST,
                                  {"consumerGroup": group}, "consumer connections", ConsumerConnection)

    def get_consumer_running_info(self, broker_addr: str, group: str, client_id: str,
                                  jstack: bool = False) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO through a broker the client is a member on (it asks the client)."""
        return self._broker_model(broker_addr, BrokerRequestCode.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": group, "clientId": client_id, "jstackEnable": jstack}, "consumer running info",
            ConsumerRunningInfo)

    def examine_topic_config(self, broker_addr: str, topic: str) -> TopicConfig:
        """GET_TOPIC_CONFIG (351): the topic's config on that broker (MQAdminError when it has none)."""
        return self._broker_model(broker_addr, BrokerRequestCode.GET_TOPIC_CONFIG, {"topic": topic}, "topic config",
                                  TopicConfig)

    def query_topic_consume_by_who(self, broker_addr: str, topic: str) -> GroupList:
        return self._broker_model(broker_addr, BrokerRequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic},
                                  "consumer groups", GroupList)

    def get_broker_config(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: every setting under RocketMQ's names."""
        config = self._broker_model(broker_addr, BrokerRequestCode.GET_BROKER_CONFIG, None, "broker config",
                                    ConfigProperties)
        return dict(config.properties)

    def update_broker_config(self, broker_addr: str, props: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: set RocketMQ config keys on a running broker (raises with its reason)."""
        self._broker(broker_addr, BrokerRequestCode.UPDATE_BROKER_CONFIG, None, "update broker config", props)

    def view_broker_stats_data(self, broker_addr: str, stats_name: str, stats_key: str) -> dict[str, Any] | None:
        """VIEW_BROKER_STATS_DATA: {statsMinute, statsHour, statsDay} of one key, None when never counted."""
        resp = self.transport_call(broker_addr, BrokerRequestCode.VIEW_BROKER_STATS_DATA,
                                   {"statsName": stats_name, "statsKey": stats_key})
        return resp.payload if resp.ok and isinstance(resp.payload, dict) else None
    def get_broker_epoch_cache(self, broker_addr: str) -> dict[str, Any]:
        """GET_BROKER_EPOCH_CACHE (1007) of one broker: its EpochEntryCache (clusterName, brokerName,
        brokerId, epochList with the last entry ending at maxOffset, maxOffset)."""
        return self._broker_model(broker_addr, ControllerRequestCode.GET_BROKER_EPOCH_CACHE, None, "epoch cache",
                                  dict)
