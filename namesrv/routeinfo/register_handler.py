"""REGISTER_BROKER, the NameServer's one handler that runs in slices (see
`namesrv.routeinfo.registration`): read the body, validate the topics the tables need, then write
them, yielding between slices so the event loop answers other requests. Bad input is found before
anything is written; an invalid topic config is left out (and named in the remark) while the
broker's other topics register, as RocketMQ takes every topic as it comes."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from pydantic import ValidationError

from namesrv.common.slices import Steps
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.constants import ORDER_TOPIC_CONFIG_NAMESPACE
from namesrv.protocol.headers import RegisterBrokerRequestHeader
from namesrv.protocol.models import KVTable, TopicConfig
from namesrv.protocol.register_body import open_register_body
from namesrv.protocol.register_body_base import SLICE, BodyEncoding, RegisterBody
from namesrv.protocol.types import InvalidInput, describe_errors
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.registration import ALL, NONE, Refused, TopicEntry, TopicsWanted, covers, topic_entry
from namesrv.routeinfo.route_info_manager import RouteInfoManager

log = logging.getLogger(__name__)


class RegisterBrokerHandler:
    def __init__(self, route_info_manager: RouteInfoManager, kv_config_manager: KVConfigManager) -> None:
        self.rim = route_info_manager
        self.kv = kv_config_manager

    def register_broker(self, request: RemotingRequest, channel: Any) -> Steps[RemotingResponse]:
        """REGISTER_BROKER in slices (see `namesrv.routeinfo.registration`): read the body, validate
        the topics the tables need, then write them; bad input is found before anything is written."""
        h = RegisterBrokerRequestHeader.from_ext(request.ext_fields, wire=request.wire)
        seq = self.rim.next_registration_seq()
        if h.body_crc32 and request.body is not None:  # 0 means "not computed", as in RocketMQ
            crc = body_crc32(request.body)
            if crc != h.body_crc32:
                raise InvalidInput(f"body crc32 {crc} does not match header bodyCrc32 {h.body_crc32}")
        encoding: BodyEncoding = ("compressed" if h.compressed else "json") if request.wire else "msgpack"
        body = yield from open_register_body(request.body, encoding, request.version)
        ident = (h.broker_addr, h.broker_name, h.broker_id, body.data_version)
        validated: TopicsWanted = NONE
        configs: list[TopicEntry] = []
        rejected: dict[str, str] = {}
        while True:  # validated against what the tables need at `begin` (re-checked in that turn)
            wanted = self.rim.topics_wanted(*ident) if request.body else NONE
            if covers(validated, wanted):
                break
            configs, rejected = yield from _validate_topics(body, wanted)
            validated = wanted
        registration = self.rim.begin_registration(
            h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, h.ha_server_addr, body.data_version,
            wanted, body.filter_server_list, channel, h.heartbeat_timeout_millis, seq,
        )
        if registration is None:
            return RemotingResponse(remark="superseded by a later registration of this broker")
        if isinstance(registration, Refused):  # RocketMQ: SUCCESS, no master/HA address, null remark
            kv_refused = self.kv.get_kv_list_by_namespace(ORDER_TOPIC_CONFIG_NAMESPACE) or {}
            return RemotingResponse(ext_fields={"haServerAddr": None, "masterAddr": None},
                                    remark=registration.remark, payload=KVTable(kv_refused))
        if registration.wanted != ALL:  # only the topics deleted here, if the broker still has them
            configs = [entry for entry in configs if entry[0] in registration.wanted]
        reported = [entry[0] for entry in configs]
        configs.reverse()  # written from the end of the list, in the body's order
        try:
            while configs:  # each written slice is dropped at once: no 10,000-entry free at the end
                batch = configs[-SLICE:]
                del configs[-SLICE:]
                if not registration.apply(reversed(batch)):
                    break
                del batch
                if configs:
                    yield
        except BaseException:  # the host gave up on the request (or a bug): nothing half-recorded
            registration.abandon()
            raise
        outcome = registration.outcome()
        result = registration.finish(reported)
        if outcome == "removed":
            return error(ResponseCode.SYSTEM_ERROR, f"broker {h.broker_addr} was removed during its registration")
        ext = {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        kv_table = self.kv.get_kv_list_by_namespace(ORDER_TOPIC_CONFIG_NAMESPACE) or {}
        remark = None
        if outcome == "superseded":
            remark = "superseded by a later registration of this broker"
        elif rejected:
            log.warning("register %s: %d invalid topics left out: %s", h.broker_addr, len(rejected), rejected)
            listed = "; ".join(f"{t}: {why}" for t, why in list(rejected.items())[:5])
            remark = f"{len(rejected)} invalid topics not registered: {listed}"[:1000]
        return RemotingResponse(ext_fields=ext, remark=remark, payload=KVTable(kv_table))


def _validate_topics(
    body: RegisterBody, wanted: TopicsWanted
) -> Generator[None, None, tuple[list[TopicEntry], dict[str, str]]]:
    """The wanted topics of a body, validated, as (name, shape) entries, and {topic: why} for each
    invalid one (left out, so one bad topic never stops its broker registering the others, as
    RocketMQ takes every topic as it comes). Yields between slices."""
    configs: list[TopicEntry] = []
    rejected: dict[str, str] = {}
    if not wanted:
        return configs, rejected
    validate = TopicConfig.model_validate
    for n, (key, raw) in enumerate(body.topics(), 1):
        if n % SLICE == 0:
            yield
        label = str(key)[:255]
        if not isinstance(key, str):
            rejected[label] = "topicConfigTable keys must be topic names"
            continue
        if wanted != ALL and key not in wanted:
            continue
        try:
            tc = validate(raw)
        except ValidationError as e:
            rejected[label] = describe_errors(e, "topicConfig")
            continue
        if key != tc.topic_name:
            rejected[label] = f"topicConfigTable key differs from topicName {tc.topic_name!r}"
            continue
        configs.append(topic_entry(tc))  # the model itself is dropped at once (see TopicEntry)
    return configs, rejected
