"""The admin client's consumer- and producer-group calls (DefaultMQAdminExt's
createAndUpdateSubscriptionGroupConfig, deleteSubscriptionGroup, examineProducerConnectionInfo,
resetOffsetByTimestamp, cloneGroupOffset), a mixin of `clients.admin.client.DefaultMQAdminExt`:
each asks one broker by address over the client's transport (TCP or Ray alike) and raises
`MQAdminError` with one line when the broker refuses.
"""

from __future__ import annotations

from typing import Any

from clients.admin.brokers import BrokerQueries, MQAdminError
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import ProducerConnection, ResetOffsetBody
from namesrv.protocol.codes import BrokerRequestCode


class GroupOperations(BrokerQueries):
    def create_and_update_subscription_group_config(self, broker_addr: str,
                                                    config: SubscriptionGroupConfig) -> dict[str, Any]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on one broker (answered once it is on disk)."""
        resp = self._broker(broker_addr, BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None,
                            f"update subscription group {config.group_name}", body=fastjson.dumps(config.to_wire()))
        return dict(resp.payload) if isinstance(resp.payload, dict) else {}

    def get_all_subscription_group(self, broker_addr: str) -> dict[str, SubscriptionGroupConfig]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every group's config on one broker."""
        wrapper = self._broker_model(broker_addr, BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None,
                                     "subscription groups", dict)
        table = wrapper.get("subscriptionGroupTable")
        if not isinstance(table, dict):
            raise MQAdminError(f"broker {broker_addr}: subscription groups answered no subscriptionGroupTable")
        return {str(g): SubscriptionGroupConfig.model_validate(c) for g, c in table.items()}

    def delete_subscription_group(self, broker_addr: str, group: str, clean_offset: bool = False) -> None:
        """DELETE_SUBSCRIPTIONGROUP on one broker (with `clean_offset`, its committed offsets too)."""
        self._broker(broker_addr, BrokerRequestCode.DELETE_SUBSCRIPTIONGROUP,
                     {"groupName": group, "cleanOffset": str(clean_offset).lower()},
                     f"delete subscription group {group}")

    def examine_producer_connection_info(self, broker_addr: str, group: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST: the producer group's clients on one broker."""
        return self._broker_model(broker_addr, BrokerRequestCode.GET_PRODUCER_CONNECTION_LIST,
                                  {"producerGroup": group}, "producer connections", ProducerConnection)

    def reset_offset_by_timestamp(self, broker_addr: str, topic: str, group: str, timestamp: int,
                                  force: bool = True) -> ResetOffsetBody:
        """INVOKE_BROKER_TO_RESET_OFFSET on one broker: each of its queues of `topic` for `timestamp`
        (ms; -1: the max offset); the offsets the group was reset to."""
        return self._broker_model(broker_addr, BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()},
            f"reset offset of {group} on {topic}", ResetOffsetBody)

    def reset_offset_of_queue(self, broker_addr: str, topic: str, group: str, queue_id: int, offset: int | None,
                              timestamp: int) -> ResetOffsetBody:
        """INVOKE_BROKER_TO_RESET_OFFSET of one queue (RocketMQ 5's queueId and offset): to `offset`,
        or to the offset at `timestamp` when None; the broker commits it and tells live members."""
        ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true",
               "queueId": str(queue_id)} | ({"offset": str(offset)} if offset is not None else {})
        return self._broker_model(broker_addr, BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext,
                                  f"reset offset of {group} on {topic} queue {queue_id}", ResetOffsetBody)

    def clone_group_offset(self, broker_addr: str, src_group: str, dest_group: str, topic: str | None,
                           offline: bool) -> None:
        """CLONE_GROUP_OFFSET on one broker."""
        ext = {"srcGroup": src_group, "destGroup": dest_group, "offline": str(offline).lower()}
        self._broker(broker_addr, BrokerRequestCode.CLONE_GROUP_OFFSET, ext | ({"topic": topic} if topic else {}),
                     f"clone offsets of {src_group} to {dest_group}")
