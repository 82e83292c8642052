"""Dispatch by request code (RocketMQ's DefaultRequestProcessor): one handler per code.

Every handler parses and validates its whole request before touching a table, so a bad request
gets an error response and changes nothing; the one exception is a registration's topic configs,
where an invalid one is left out (and named in the remark) and the broker's other topics register.
`process_request` never raises. REGISTER_BROKER is handled in `register_handler`, the KV config
codes in `kv_handlers`, both registered in the same handler table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import GeneratorType
from typing import Any

from pydantic.alias_generators import to_camel, to_snake

from namesrv.common.slices import Steps, run_to_end
from namesrv.protocol.bodies import json_object, parse_properties
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID, ORDER_TOPIC_CONFIG_NAMESPACE
from namesrv.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    BrokerIdentityHeader,
    BrokerNameHeader,
    ClusterHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    Header,
    RegisterTopicRequestHeader,
)
from namesrv.protocol.models import (
    ConfigProperties,
    RegisterTopicBody,
    TopicList,
    TopicRouteData,
    parse_data_version,
)
from namesrv.protocol.msgpack_codec import decode_body
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.pipeline import refusal_of
from namesrv.remoting.wire_command import ext_value
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kv_handlers import KVConfigHandlers
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.ready_gate import ReadyGate
from namesrv.routeinfo.register_handler import RegisterBrokerHandler
from namesrv.routeinfo.route_info_manager import RouteInfoManager

log = logging.getLogger(__name__)

Handler = Callable[[RemotingRequest, Any], RemotingResponse | Steps[RemotingResponse]]



def _error_of(e: Exception, request: object) -> RemotingResponse:
    """The answer to a request whose handler raised: bad input is the caller's error; anything else
    is a bug, logged with its stack and answered anyway."""
    refused = refusal_of(e)
    if refused is not None:
        return refused.response()
    log.exception("failed to process request %r", getattr(request, "code", None))
    return error(ResponseCode.SYSTEM_ERROR, f"internal error: {type(e).__name__}: {e}")


class DefaultRequestProcessor:
    def __init__(
        self,
        route_info_manager: RouteInfoManager,
        kv_config_manager: KVConfigManager,
        ready_gate: ReadyGate | None = None,
    ) -> None:
        self.rim = route_info_manager
        self.kv = kv_config_manager
        self.ready_gate = ready_gate
        self.registration = RegisterBrokerHandler(route_info_manager, kv_config_manager)
        self._pickup = route_info_manager.route_pickup
        self._gate_open = ready_gate is None
        """The 'not ready' gate was seen open (it never shuts again)."""
        self.updated_config_keys: set[str] = set()
        """Config keys UPDATE_NAMESRV_CONFIG has set (what the host persists; see config_store)."""
        self.handlers: dict[int, Handler] = {
            **KVConfigHandlers(kv_config_manager, self._order_conf_changed).table(),
            RequestCode.REGISTER_BROKER: self.registration.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_routeinfo_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list_from_nameserver,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self.register_topic_in_namesrv,
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
        """Answer one request at once; bad input becomes an error response, never an exception.
        A handler that answers at once runs without the generator `process_steps` wraps it in."""
        try:
            answer = self._start(request, channel)
            if isinstance(answer, GeneratorType):
                answer = run_to_end(answer)
            assert isinstance(answer, RemotingResponse)
            return answer
        except Exception as e:
            return _error_of(e, request)

    def process_checked(self, request: RemotingRequest, channel: Any = None) -> RemotingResponse:
        """`process_request` of a request a pipeline has checked already (`pipeline._malformed`: an
        int code, extFields a map, bytes or no body): the same answers, without asking again."""
        try:
            handler = self.handlers.get(request.code)
            if handler is None:
                return error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")
            body = request.body
            if body is not None and len(body) > self.rim.config.max_body_size:
                return error(ResponseCode.SYSTEM_ERROR,
                             f"body of {len(body)} bytes exceeds the {self.rim.config.max_body_size}-byte limit")
            answer = handler(request, channel)
            if type(answer) is GeneratorType:
                answer = run_to_end(answer)
            assert isinstance(answer, RemotingResponse)
            return answer
        except Exception as e:
            return _error_of(e, request)

    def process_steps(self, request: RemotingRequest, channel: Any = None) -> Steps[RemotingResponse]:
        """`process_request` as a generator that yields between slices of a long request (a big
        registration), so an event loop can answer others in between; returns the response."""
        try:
            answer = self._start(request, channel)
            if isinstance(answer, GeneratorType):
                answer = yield from answer
            assert isinstance(answer, RemotingResponse)
            return answer
        except GeneratorExit:
            raise
        except Exception as e:
            return _error_of(e, request)

    def _start(self, request: RemotingRequest, channel: Any) -> RemotingResponse | Steps[RemotingResponse]:
        """Check the request's shape and run its handler: its answer, or its steps (a generator)."""
        if not isinstance(request, RemotingRequest):
            return error(ResponseCode.SYSTEM_ERROR, f"request must be a RemotingRequest, got {type(request).__name__}")
        code = request.code
        if not isinstance(code, int) or isinstance(code, bool):
            return error(ResponseCode.SYSTEM_ERROR, f"request code must be an integer, got {code!r}")
        handler = self.handlers.get(code)
        if handler is None:
            return error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")
        if not isinstance(request.ext_fields, dict):
            return error(ResponseCode.SYSTEM_ERROR, "extFields must be a map")
        body = request.body
        if body is not None:
            if not isinstance(body, (bytes, bytearray)):
                return error(ResponseCode.SYSTEM_ERROR, "body must be bytes or None")
            if len(body) > self.config.max_body_size:
                return error(
                    ResponseCode.SYSTEM_ERROR,
                    f"body of {len(body)} bytes exceeds the {self.config.max_body_size}-byte limit",
                )
        return handler(request, channel)

    def _header(self, model: type[Header], request: RemotingRequest) -> Any:
        """Strict typed values on the Ray path; over TCP every value is a string, parsed as RocketMQ
        parses header fields."""
        return model.from_ext(request.ext_fields, wire=request.wire)

    def _body(self, request: RemotingRequest, required: bool = True) -> Any:
        """The decoded body: JSON from the TCP path, msgpack from the Ray path."""
        if request.body is None:
            if required:
                raise InvalidInput("request body is missing")
            return None
        if request.wire:
            return json_object(request.body, "body")
        return decode_body(request.body, self.config.max_body_size)

    # ------------------------------------------------------------------ brokers
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
        return RemotingResponse(ext_fields={"changed": changed}, payload=stored)

    def broker_heartbeat(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(BrokerHeartbeatRequestHeader, request)
        known = self.rim.update_broker_info_update_timestamp(h.broker_addr)
        ext: dict[str, Any] = {"known": known}
        if known and h.broker_id != MASTER_ID:  # a slave on lite heartbeats still follows its master
            ext["masterAddr"], ext["haServerAddr"] = self.rim.live_master_of(h.broker_name)
        if known and h.broker_id == MASTER_ID and self.rim.has_missing_topics(h.broker_name):
            ext["topicsMissing"] = True  # topics deleted here that the broker may still hold: send them
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
        # The header is one string field (same name on the wire and over Ray, other fields
        # ignored): a string is exactly what the model would give, so the hottest request builds
        # no model; anything else goes through it for its error.
        topic = request.ext_fields.get("topic")
        if type(topic) is not str:
            topic = self._header(GetRouteInfoRequestHeader, request).topic
        if not self._gate_open:
            reason = self._not_ready_reason()
            if reason is not None:
                return RemotingResponse(code=ResponseCode.SYSTEM_ERROR, remark=reason, not_ready=True)
        route, version = self._pickup(topic)  # route_answer, inlined for the hottest request
        if route is not None and self.rim.config.order_message_enable:
            route = self._with_order_conf(topic, route)
        if route is None:
            return error(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic[:255]}"
            )
        return RemotingResponse(ext_fields={"routeVersion": version}, payload=route)

    def route_answer(self, topic: str) -> tuple[TopicRouteData | None, int]:
        """The topic's route and version as every client gets them, polled or pushed (the long-poll
        answers with this too): with order messages on, it carries the topic's orderTopicConf."""
        route, version = self._pickup(topic)
        if route is not None and self.rim.config.order_message_enable:
            route = self._with_order_conf(topic, route)
        return route, version

    def _with_order_conf(self, topic: str, route: TopicRouteData) -> TopicRouteData:
        order_conf = self.kv.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, topic)
        if order_conf is None:
            return route
        return replace(route, order_topic_conf=order_conf)  # the route is shared: a copy carries the conf

    def _not_ready_reason(self) -> str | None:
        """Why route queries are refused (the 'not ready' gate), or None; once open, the gate never
        shuts again, so the hot path then reads one attribute."""
        if self.ready_gate is None:
            self._gate_open = True
            return None
        reason = self.ready_gate.not_ready_reason(self.rim.registered_addrs())
        if reason is None:
            self._gate_open = True
        return reason

    def _order_conf_changed(self, topics: Iterable[str]) -> None:
        """An orderTopicConf is part of the route: a change to one is a route change (new version,
        waiters woken), for the topics that have a route."""
        for topic in topics:
            if topic in self.rim.topic_queue_table:
                self.rim.touch_topic(topic)

    def get_broker_cluster_info(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        return RemotingResponse(payload=self.rim.get_all_cluster_info())

    def get_all_topic_list_from_nameserver(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        if not self.config.enable_all_topic_list:
            return error(ResponseCode.SYSTEM_ERROR, "disable")
        return RemotingResponse(payload=TopicList(self.rim.get_all_topic_list()))

    def get_topics_by_cluster(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        if not self.config.enable_topic_list:
            return error(ResponseCode.SYSTEM_ERROR, "disable")
        h = self._header(ClusterHeader, request)
        return RemotingResponse(payload=TopicList(self.rim.get_topics_by_cluster(h.cluster)))

    def get_system_topic_list_from_ns(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        names, broker_addr = self.rim.get_system_topic_list()
        return RemotingResponse(payload=TopicList(names, broker_addr))

    def register_topic_in_namesrv(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        """RocketMQ 5's single-topic registration: the body is a TopicRouteData whose queueDatas are
        put under the topic. As in RocketMQ it answers SUCCESS when nothing is to be done (no queue
        data) or a group is not registered here (then nothing changes; the remark says why)."""
        h = self._header(RegisterTopicRequestHeader, request)
        body = RegisterTopicBody.model_validate(self._body(request))
        if not body.queue_datas:
            return RemotingResponse()
        unknown = self.rim.register_topic(h.topic, [q.to_queue_data() for q in body.queue_datas])
        if unknown is not None:
            return RemotingResponse(remark=f"broker {unknown} is not registered, topic {h.topic} unchanged")
        return RemotingResponse()

    def delete_topic_in_namesrv(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        h = self._header(DeleteTopicFromNamesrvRequestHeader, request)
        deleted = self.rim.delete_topic(h.topic, h.cluster_name)
        return RemotingResponse(ext_fields={"deleted": deleted})

    # ------------------------------------------------------------------ NameServer config
    def update_namesrv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        """Body: a map of config keys (RocketMQ's camelCase or snake_case) to string values."""
        props = parse_properties(request.body or b"") if request.wire else self._body(request)
        if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise InvalidInput("config body must be a map of string keys to string values")
        blacklist = {to_snake(k) for k in self.config.blacklisted_keys()}
        denied = sorted(k for k in props if to_snake(k) in blacklist)
        if denied:
            return error(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {', '.join(denied)}")
        # Unknown keys are ignored, as RocketMQ ignores properties no config field takes; known keys
        # are validated all together (a bad value is an error and changes nothing).
        updates = {to_snake(k): v for k, v in props.items() if to_snake(k) in NamesrvConfig.model_fields}
        ignored = sorted(k for k in props if to_snake(k) not in NamesrvConfig.model_fields)
        if ignored:
            log.warning("namesrv config update ignores unknown keys: %s", ignored)
        merged = self.config.model_dump() | updates
        new_config = NamesrvConfig.model_validate(merged)  # all or nothing
        order_toggled = new_config.order_message_enable != self.config.order_message_enable
        for key in updates:
            setattr(self.config, key, getattr(new_config, key))
        self.updated_config_keys.update(updates)
        if order_toggled:  # every route with an orderTopicConf gains or loses it
            self._order_conf_changed(self.kv.get_kv_list_by_namespace(ORDER_TOPIC_CONFIG_NAMESPACE) or {})
        log.info("namesrv config updated: %s", updates)
        return RemotingResponse(remark=f"ignored unknown keys: {', '.join(ignored)}"[:1000] if ignored else None)

    def get_namesrv_config(self, request: RemotingRequest, channel: Any) -> RemotingResponse:
        props = {to_camel(k): ext_value(v) for k, v in self.config.model_dump().items() if v is not None}
        return RemotingResponse(payload=ConfigProperties(props))
