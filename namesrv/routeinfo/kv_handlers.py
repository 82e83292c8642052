"""The NameServer's KV config codes (RocketMQ's DefaultRequestProcessor putKVConfig, getKVConfig,
deleteKVConfig and getKVListByNamespace), registered in the request processor's handler table.

A change to an orderTopicConf (the ORDER_TOPIC_CONFIG namespace) changes that topic's route: the
processor passes in what to call then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import ORDER_TOPIC_CONFIG_NAMESPACE
from namesrv.protocol.headers import KVConfigHeader, NamespaceHeader
from namesrv.protocol.models import KVTable
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.routeinfo.kvconfig import KVConfigManager

KVHandler = Callable[[RemotingRequest, Any], RemotingResponse]


class KVConfigHandlers:
    def __init__(self, kv: KVConfigManager, order_conf_changed: Callable[[Iterable[str]], None]) -> None:
        self.kv = kv
        self._order_conf_changed = order_conf_changed

    def table(self) -> dict[int, KVHandler]:
        """Request code -> handler, for the processor's handler table."""
        return {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kvlist_by_namespace,
        }

    def put_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = KVConfigHeader.from_ext(request.ext_fields, wire=request.wire)
        if h.value is None:
            raise InvalidInput("value is required")
        changed = self.kv.get_kv_config(h.namespace, h.key) != h.value
        self.kv.put_kv_config(h.namespace, h.key, h.value)
        if changed and h.namespace == ORDER_TOPIC_CONFIG_NAMESPACE:
            self._order_conf_changed([h.key])
        return RemotingResponse()

    def get_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = KVConfigHeader.from_ext(request.ext_fields, wire=request.wire)
        value = self.kv.get_kv_config(h.namespace, h.key)
        if value is None:
            return error(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return RemotingResponse(ext_fields={"value": value})

    def delete_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = KVConfigHeader.from_ext(request.ext_fields, wire=request.wire)
        if self.kv.delete_kv_config(h.namespace, h.key) and h.namespace == ORDER_TOPIC_CONFIG_NAMESPACE:
            self._order_conf_changed([h.key])
        return RemotingResponse()

    def get_kvlist_by_namespace(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = NamespaceHeader.from_ext(request.ext_fields, wire=request.wire)
        table = self.kv.get_kv_list_by_namespace(h.namespace)
        if table is None:
            return error(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}")
        return RemotingResponse(payload=KVTable(table))
