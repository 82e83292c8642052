"""Dispatch by request code (RocketMQ's DefaultRequestProcessor): one handler per code.

Every handler parses and validates its whole request before touching a table, so a bad request
gets an error response and changes nothing. `process_request` never raises.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel, to_snake

from namesrv.codec import CodecError, RemotingRequest, RemotingResponse, decode_body, encode_body
from namesrv.config import NamesrvConfig
from namesrv.constants import MASTER_ID, ORDER_TOPIC_CONFIG_NAMESPACE, RequestCode, ResponseCode
from namesrv.headers import (
    BrokerHeartbeatRequestHeader,
    BrokerIdentityHeader,
    BrokerNameHeader,
    ClusterHeader,
    DeleteTopicFromNamesrvRequestHeader,
    Header,
    KVConfigHeader,
    NamespaceHeader,
    RegisterBrokerRequestHeader,
    TopicHeader,
)
from namesrv.kvconfig import KVConfigManager
from namesrv.models import RegisterBrokerBody, parse_data_version
from namesrv.ready_gate import ReadyGate
from namesrv.route_info_manager import RouteInfoManager
from namesrv.validation import InvalidInput

log = logging.getLogger(__name__)

Handler = Callable[[RemotingRequest, Any], RemotingResponse]


def error(code: int, remark: str) -> RemotingResponse:
    return RemotingResponse(code=code, remark=remark)


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "request"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class DefaultRequestProcessor:
    def __init__(
        self,
        route_info_manager: RouteInfoManager,
        kv_config_manager: KVConfigManager,
        ready_gate: ReadyGate | None = None,
        on_config_update: Callable[[NamesrvConfig], None] | None = None,
    ) -> None:
        self.rim = route_info_manager
        self.kv = kv_config_manager
        self.ready_gate = ready_gate
        self.on_config_update = on_config_update
        self.handlers: dict[int, Handler] = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_routeinfo_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list_from_nameserver,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kvlist_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list_from_ns,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_namesrv_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_namesrv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
        }

    @property
    def config(self) -> NamesrvConfig:
        return self.rim.config

    # ------------------------------------------------------------------ entry point
    def process_request(self, request: RemotingRequest, channel: Any = None) -> RemotingResponse:
        """Answer one request; bad input becomes an error response, never an exception."""
        try:
            if not isinstance(request, RemotingRequest):
                kind = type(request).__name__
                return error(ResponseCode.SYSTEM_ERROR, f"request must be a RemotingRequest, got {kind}")
            code = request.code
            if not isinstance(code, int) or isinstance(code, bool):
                return error(ResponseCode.SYSTEM_ERROR, f"request code must be an integer, got {code!r}")
            handler = self.handlers.get(code)
            if handler is None:
                return error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {code} not supported")
            if not isinstance(request.ext_fields, dict):
                return error(ResponseCode.SYSTEM_ERROR, "extFields must be a map")
            if request.body is not None and not isinstance(request.body, (bytes, bytearray)):
                return error(ResponseCode.SYSTEM_ERROR, "body must be bytes or None")
            if request.body is not None and len(request.body) > self.config.max_body_size:
                return error(
                    ResponseCode.SYSTEM_ERROR,
                    f"body of {len(request.body)} bytes exceeds the {self.config.max_body_size}-byte limit",
                )
            return handler(request, channel)
        except ValidationError as e:
            return error(ResponseCode.SYSTEM_ERROR, f"invalid request: {_validation_message(e)}")
        except (InvalidInput, CodecError) as e:
            return error(ResponseCode.SYSTEM_ERROR, f"invalid request: {e}")
        except Exception as e:  # a bug, not bad input: log it with the stack, answer anyway
            log.exception("failed to process request %r", getattr(request, "code", None))
            return error(ResponseCode.SYSTEM_ERROR, f"internal error: {type(e).__name__}: {e}")

    def _header(self, model: type[Header], request: RemotingRequest) -> Any:
        return model.model_validate(request.ext_fields)

    def _body(self, request: RemotingRequest, required: bool = True) -> Any:
        if request.body is None:
            if required:
                raise InvalidInput("request body is missing")
            return None
        return decode_body(request.body, self.config.max_body_size)

    # ------------------------------------------------------------------ KV config
    def put_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(KVConfigHeader, request)
        if h.value is None:
            raise InvalidInput("value is required")
        self.kv.put_kv_config(h.namespace, h.key, h.value)
        return RemotingResponse()

    def get_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(KVConfigHeader, request)
        value = self.kv.get_kv_config(h.namespace, h.key)
        if value is None:
            return error(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return RemotingResponse(ext_fields={"value": value})

    def delete_kv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(KVConfigHeader, request)
        self.kv.delete_kv_config(h.namespace, h.key)
        return RemotingResponse()

    def get_kvlist_by_namespace(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(NamespaceHeader, request)
        table = self.kv.get_kv_list_by_namespace(h.namespace)
        if table is None:
            return error(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}")
        return RemotingResponse(body=encode_body({"table": table}))

    # ------------------------------------------------------------------ brokers
    def register_broker(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(RegisterBrokerRequestHeader, request)
        if h.body_crc32 is not None and request.body is not None:
            crc = zlib.crc32(request.body)
            if crc != h.body_crc32:
                raise InvalidInput(f"body crc32 {crc} does not match header bodyCrc32 {h.body_crc32}")
        raw = self._body(request, required=False)
        body = RegisterBrokerBody.model_validate(raw) if raw is not None else RegisterBrokerBody()
        for addr in body.filter_server_list:
            if not isinstance(addr, str) or not addr:
                raise InvalidInput("filterServerList holds blank addresses")
        result = self.rim.register_broker(
            h.cluster_name,
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            h.ha_server_addr,
            body.topic_config_serialize_wrapper,
            body.filter_server_list,
            channel,
            h.heartbeat_timeout_millis,
        )
        ext = {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        kv_table = self.kv.get_kv_list_by_namespace(ORDER_TOPIC_CONFIG_NAMESPACE) or {}
        return RemotingResponse(ext_fields=ext, body=encode_body({"table": kv_table}))

    def unregister_broker(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerIdentityHeader, request)
        removed = self.rim.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, channel)
        return RemotingResponse(ext_fields={"removed": removed})

    def query_data_version(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerIdentityHeader, request)
        version = parse_data_version(self._body(request))
        changed = self.rim.is_broker_topic_config_changed(h.broker_addr, version)
        self.rim.update_broker_info_update_timestamp(h.broker_addr)
        stored = self.rim.query_broker_topic_config(h.broker_addr)
        body = encode_body(stored.to_wire()) if stored is not None else None
        return RemotingResponse(ext_fields={"changed": changed}, body=body)

    def broker_heartbeat(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerHeartbeatRequestHeader, request)
        known = self.rim.update_broker_info_update_timestamp(h.broker_addr)
        ext: dict[str, Any] = {"known": known}
        if known and h.broker_id != MASTER_ID:  # a slave on lite heartbeats still follows its master
            ext["masterAddr"], ext["haServerAddr"] = self.rim.live_master_of(h.broker_name)
        return RemotingResponse(ext_fields=ext)

    def wipe_write_perm_of_broker(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerNameHeader, request)
        count = self.rim.wipe_write_perm_of_broker(h.broker_name)
        log.info("wipe write perm of broker %s, topic count %d", h.broker_name, count)
        return RemotingResponse(ext_fields={"wipeTopicCount": count})

    def add_write_perm_of_broker(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerNameHeader, request)
        count = self.rim.add_write_perm_of_broker(h.broker_name)
        log.info("add write perm of broker %s, topic count %d", h.broker_name, count)
        return RemotingResponse(ext_fields={"addTopicCount": count})

    # ------------------------------------------------------------------ routes and topics
    def get_routeinfo_by_topic(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(TopicHeader, request)
        if self.ready_gate is not None:
            reason = self.ready_gate.not_ready_reason(self.rim.broker_live_table)
            if reason is not None:
                return error(ResponseCode.SYSTEM_ERROR, reason)
        route = self.rim.pickup_topic_route_data(h.topic)
        if route is None:
            return error(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}"
            )
        if self.config.order_message_enable:
            route.order_topic_conf = self.kv.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, h.topic)
        return RemotingResponse(
            ext_fields={"routeVersion": self.rim.route_version(h.topic)}, body=encode_body(route.to_wire())
        )

    def get_broker_cluster_info(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        return RemotingResponse(body=encode_body(self.rim.get_all_cluster_info().to_wire()))

    def get_all_topic_list_from_nameserver(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        if not self.config.enable_all_topic_list:
            return error(ResponseCode.SYSTEM_ERROR, "disable")
        return RemotingResponse(body=encode_body({"topicList": self.rim.get_all_topic_list()}))

    def get_topics_by_cluster(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        if not self.config.enable_topic_list:
            return error(ResponseCode.SYSTEM_ERROR, "disable")
        h = self._header(ClusterHeader, request)
        return RemotingResponse(body=encode_body({"topicList": self.rim.get_topics_by_cluster(h.cluster)}))

    def get_system_topic_list_from_ns(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        names, broker_addr = self.rim.get_system_topic_list()
        return RemotingResponse(body=encode_body({"topicList": names, "brokerAddr": broker_addr}))

    def delete_topic_in_namesrv(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(DeleteTopicFromNamesrvRequestHeader, request)
        deleted = self.rim.delete_topic(h.topic, h.cluster_name)
        return RemotingResponse(ext_fields={"deleted": deleted})

    # ------------------------------------------------------------------ NameServer config
    def update_namesrv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        """Body: a map of config keys (RocketMQ's camelCase or snake_case) to string values."""
        props = self._body(request)
        if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise InvalidInput("config body must be a map of string keys to string values")
        blacklist = {to_snake(k) for k in self.config.blacklisted_keys()}
        updates = {to_snake(k): v for k, v in props.items()}
        denied = sorted(k for k in props if to_snake(k) in blacklist)
        if denied:
            return error(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {', '.join(denied)}")
        unknown = sorted(k for k in updates if k not in NamesrvConfig.model_fields)
        if unknown:
            raise InvalidInput(f"unknown config keys: {', '.join(unknown)}")
        merged = self.config.model_dump() | updates
        new_config = NamesrvConfig.model_validate(merged)  # all or nothing
        for key in updates:
            setattr(self.config, key, getattr(new_config, key))
        log.info("namesrv config updated: %s", updates)
        if self.on_config_update is not None:
            self.on_config_update(self.config)
        return RemotingResponse()

    def get_namesrv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        props = {to_camel(k): str(v) for k, v in self.config.model_dump().items()}
        return RemotingResponse(body=encode_body(props))
