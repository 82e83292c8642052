"""DefaultRequestProcessor: every request code end to end, response codes, and bad input.

Requests are built the way a client sends them: RemotingRequest with camelCase ext fields and a
msgpack body. Every bad request must get an error response and leave all state byte-for-byte as
it was.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest

from namesrv.clock import ManualClock
from namesrv.codec import RemotingRequest, RemotingResponse, encode_body
from namesrv.config import NamesrvConfig
from namesrv.constants import ORDER_TOPIC_CONFIG_NAMESPACE, Perm, RequestCode, ResponseCode
from namesrv.kvconfig import KVConfigManager
from namesrv.models import ClusterInfo, DataVersion, TopicRouteData
from namesrv.processor import DefaultRequestProcessor
from namesrv.route_info_manager import RouteInfoManager

CLUSTER = "DefaultCluster"
BROKER_A = "broker-a"
MASTER_A = "10.0.0.1:10911"
SLAVE_A = "10.0.0.2:10911"
HA_A = "10.0.0.1:10912"
RW = int(Perm.READ | Perm.WRITE)


def ident(addr: str = MASTER_A, broker_id: int = 0, name: str = BROKER_A, cluster: str = CLUSTER) -> dict:
    return {"clusterName": cluster, "brokerAddr": addr, "brokerName": name, "brokerId": broker_id}


def topic_config(topic: str, queues: int = 8, perm: int = RW, **extra: Any) -> dict[str, Any]:
    return {"topicName": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm, **extra}


def register_payload(
    *topics: str, version: tuple[int, int] = (1, 1), queues: int = 8, filters: list[str] | None = None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {t: topic_config(t, queues) for t in topics},
            "dataVersion": {"timestamp": version[0], "counter": version[1]},
        }
    }
    if filters is not None:
        payload["filterServerList"] = filters
    return payload


def register_request(
    *topics: str,
    version: tuple[int, int] = (1, 1),
    queues: int = 8,
    filters: list[str] | None = None,
    **ext: Any,
) -> RemotingRequest:
    fields = ident() | {"haServerAddr": HA_A} | ext
    return RemotingRequest(
        RequestCode.REGISTER_BROKER,
        fields,
        encode_body(register_payload(*topics, version=version, queues=queues, filters=filters)),
    )


def call(
    processor: DefaultRequestProcessor,
    code: int,
    ext: dict | None = None,
    body: Any = None,
    raw: bytes | None = None,
    channel: object = None,
) -> RemotingResponse:
    payload = raw if raw is not None else (encode_body(body) if body is not None else None)
    response = processor.process_request(RemotingRequest(code, ext or {}, payload), channel)
    assert isinstance(response, RemotingResponse)
    return response


def ok(response: RemotingResponse) -> RemotingResponse:
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response


def state(processor: DefaultRequestProcessor, *, drop_heartbeat_times: bool = False) -> bytes:
    """Everything a request may change, as canonical bytes (the fuzz test reuses this)."""
    tables = processor.rim.dump_tables()
    if drop_heartbeat_times:
        for live in tables["brokerLiveTable"].values():  # type: ignore[union-attr]
            live.pop("lastUpdateTimestamp")
    return json.dumps(
        {
            "tables": tables,
            "index": {k: sorted(v) for k, v in sorted(processor.rim._broker_topics.items())},
            "kv": processor.kv.table,
            "config": processor.config.model_dump(),
            "route_seq": processor.rim.route_seq,
        },
        sort_keys=True,
        default=repr,
    ).encode()


@pytest.fixture
def populated(processor: DefaultRequestProcessor) -> DefaultRequestProcessor:
    """A master + slave hosting two topics, a filter server and a KV entry."""
    ok(processor.process_request(register_request("TopicA", "TopicB", filters=["10.0.0.9:1"])))
    slave = ident(SLAVE_A, 1) | {"haServerAddr": "10.0.0.2:10912"}
    ok(call(processor, RequestCode.REGISTER_BROKER, slave, register_payload("TopicA")))
    ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}))
    return processor


# ---------------------------------------------------------------------------- KV codes 100-102, 219


def test_put_then_get_kv_config(processor: DefaultRequestProcessor) -> None:
    response = ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}))
    assert response.remark is None
    assert processor.kv.get_kv_config("ns", "k") == "v"

    response = ok(call(processor, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}))
    assert response.ext_fields == {"value": "v"}


def test_get_missing_kv_is_query_not_found(processor: DefaultRequestProcessor) -> None:
    response = call(processor, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert response.code == ResponseCode.QUERY_NOT_FOUND == 22
    assert response.remark == "No config item, Namespace: ns Key: k"
    assert "value" not in response.ext_fields


def test_delete_kv_config_then_get_is_not_found(processor: DefaultRequestProcessor) -> None:
    ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}))
    ok(call(processor, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}))
    assert processor.kv.get_kv_config("ns", "k") is None
    assert call(processor, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).code == 22
    # Deleting what is not there is still a success (RocketMQ answers the same).
    ok(call(processor, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}))


def test_get_kv_list_by_namespace(processor: DefaultRequestProcessor) -> None:
    assert call(processor, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}).code == 22
    ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k1", "value": "v1"}))
    ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k2", "value": "v2"}))
    response = ok(call(processor, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}))
    assert response.decode_body() == {"table": {"k1": "v1", "k2": "v2"}}


# ---------------------------------------------------------------------------- broker codes 103, 104, 322, 904


def test_register_broker_fills_tables_and_returns_order_topic_kv(processor: DefaultRequestProcessor) -> None:
    processor.kv.put_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA", "broker-a:4")

    response = ok(processor.process_request(register_request("TopicA", filters=["10.0.0.9:1"])))

    assert response.ext_fields == {"haServerAddr": None, "masterAddr": None}
    assert response.decode_body() == {"table": {"TopicA": "broker-a:4"}}
    rim = processor.rim
    assert rim.broker_addr_table[BROKER_A].broker_addrs == {0: MASTER_A}
    assert rim.topic_queue_table["TopicA"][BROKER_A].write_queue_nums == 8
    assert rim.filter_server_table == {MASTER_A: ["10.0.0.9:1"]}
    assert rim.broker_live_table[MASTER_A].ha_server_addr == HA_A


def test_register_slave_gets_master_and_ha_addr_in_ext_fields(processor: DefaultRequestProcessor) -> None:
    ok(processor.process_request(register_request("TopicA")))
    slave = ident(SLAVE_A, 1) | {"haServerAddr": "10.0.0.2:10912"}
    response = ok(call(processor, RequestCode.REGISTER_BROKER, slave, register_payload("TopicA")))
    assert response.ext_fields == {"haServerAddr": HA_A, "masterAddr": MASTER_A}
    assert response.decode_body() == {"table": {}}


def test_register_with_matching_crc32_and_per_broker_timeout(
    processor: DefaultRequestProcessor, clock: ManualClock
) -> None:
    body = encode_body(register_payload("TopicA"))
    ext = ident() | {"bodyCrc32": zlib.crc32(body), "heartbeatTimeoutMillis": 10_000}
    ok(call(processor, RequestCode.REGISTER_BROKER, ext, raw=body))
    assert processor.rim.broker_live_table[MASTER_A].heartbeat_timeout_millis == 10_000
    clock.advance(10_001)
    assert processor.rim.scan_not_active_broker() == 1


def test_register_without_body_records_the_broker_only(processor: DefaultRequestProcessor) -> None:
    ok(call(processor, RequestCode.REGISTER_BROKER, ident()))
    assert processor.rim.broker_addr_table[BROKER_A].broker_addrs == {0: MASTER_A}
    assert processor.rim.topic_queue_table == {}


def test_register_accepts_snake_case_header_names(processor: DefaultRequestProcessor) -> None:
    ext = {"cluster_name": CLUSTER, "broker_addr": MASTER_A, "broker_name": BROKER_A, "broker_id": 0}
    ok(call(processor, RequestCode.REGISTER_BROKER, ext, register_payload("TopicA")))
    assert "TopicA" in processor.rim.topic_queue_table


def test_register_passes_the_channel_through_for_fencing(processor: DefaultRequestProcessor) -> None:
    old, new = object(), object()
    ok(processor.process_request(register_request("TopicA"), old))
    ok(processor.process_request(register_request("TopicA"), new))
    response = ok(call(processor, RequestCode.UNREGISTER_BROKER, ident(), channel=old))
    assert response.ext_fields == {"removed": False}
    assert "TopicA" in processor.rim.topic_queue_table


def test_unregister_broker_cascades(populated: DefaultRequestProcessor) -> None:
    ok(call(populated, RequestCode.UNREGISTER_BROKER, ident(SLAVE_A, 1)))
    response = ok(call(populated, RequestCode.UNREGISTER_BROKER, ident()))
    assert response.ext_fields == {"removed": True}
    rim = populated.rim
    assert rim.topic_queue_table == rim.broker_addr_table == rim.cluster_addr_table == {}
    assert rim.broker_live_table == rim.filter_server_table == {}
    assert call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 17


def test_unregister_unknown_broker_succeeds_and_removes_nothing(processor: DefaultRequestProcessor) -> None:
    response = ok(call(processor, RequestCode.UNREGISTER_BROKER, ident()))
    assert response.ext_fields == {"removed": False}


def test_query_data_version_unchanged_refreshes_liveness(
    populated: DefaultRequestProcessor, clock: ManualClock
) -> None:
    clock.advance(100_000)
    response = ok(call(populated, RequestCode.QUERY_DATA_VERSION, ident(), {"timestamp": 1, "counter": 1}))
    assert response.ext_fields == {"changed": False}
    assert response.decode_body() == {"timestamp": 1, "counter": 1}
    assert populated.rim.broker_live_table[MASTER_A].last_update_timestamp == clock()
    clock.advance(100_000)
    assert populated.rim.scan_not_active_broker() == 1  # only the slave, which never asked
    assert set(populated.rim.broker_live_table) == {MASTER_A}


def test_query_data_version_changed_returns_stored_version(populated: DefaultRequestProcessor) -> None:
    before = populated.rim.dump_tables()["topicQueueTable"]
    response = ok(call(populated, RequestCode.QUERY_DATA_VERSION, ident(), {"timestamp": 1, "counter": 2}))
    assert response.ext_fields == {"changed": True}
    assert response.decode_body() == {"timestamp": 1, "counter": 1}
    assert DataVersion.from_wire(response.decode_body()) == DataVersion(1, 1)
    assert populated.rim.dump_tables()["topicQueueTable"] == before, "a query never writes routes"


def test_query_data_version_of_unknown_broker_creates_nothing(processor: DefaultRequestProcessor) -> None:
    before = state(processor)
    response = ok(call(processor, RequestCode.QUERY_DATA_VERSION, ident(), {"timestamp": 1, "counter": 1}))
    assert response.ext_fields == {"changed": True}
    assert response.body is None
    assert state(processor) == before


def test_broker_heartbeat_touches_liveness_only(populated: DefaultRequestProcessor, clock: ManualClock) -> None:
    def without_timestamps() -> dict:
        dump = populated.rim.dump_tables()
        for live in dump["brokerLiveTable"].values():  # type: ignore[union-attr]
            live.pop("lastUpdateTimestamp")
        return dump

    before, seq = without_timestamps(), populated.rim.route_seq
    clock.advance(90_000)
    response = ok(call(populated, RequestCode.BROKER_HEARTBEAT, ident()))
    assert response.ext_fields == {"known": True}
    assert without_timestamps() == before
    assert populated.rim.route_seq == seq
    live = populated.rim.broker_live_table
    assert live[MASTER_A].last_update_timestamp == clock()
    assert live[SLAVE_A].last_update_timestamp == clock() - 90_000


def test_broker_heartbeat_from_unknown_broker_is_answered_but_creates_nothing(
    processor: DefaultRequestProcessor,
) -> None:
    before = state(processor)
    response = ok(call(processor, RequestCode.BROKER_HEARTBEAT, ident()))
    assert response.ext_fields == {"known": False}
    assert state(processor) == before


# ---------------------------------------------------------------------------- routes 105, 106, 206, 216, 224, 304


def test_get_route_info_by_topic(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    route = TopicRouteData.from_wire(response.decode_body())
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        (BROKER_A, 8, 8, RW)
    ]
    assert [b.broker_addrs for b in route.broker_datas] == [{0: MASTER_A, 1: SLAVE_A}]
    assert route.filter_server_table == {MASTER_A: ["10.0.0.9:1"]}
    assert route.order_topic_conf is None
    assert response.ext_fields == {"routeVersion": populated.rim.route_version("TopicA")}


def test_missing_route_is_topic_not_exist(processor: DefaultRequestProcessor) -> None:
    response = call(processor, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert "Nope" in (response.remark or "")


def test_order_topic_conf_comes_from_kv_only_when_order_messages_enabled(
    populated: DefaultRequestProcessor,
) -> None:
    ok(
        call(
            populated,
            RequestCode.PUT_KV_CONFIG,
            {"namespace": ORDER_TOPIC_CONFIG_NAMESPACE, "key": "TopicA", "value": "broker-a:8"},
        )
    )

    disabled = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    assert disabled.decode_body()["orderTopicConf"] is None

    populated.config.order_message_enable = True
    enabled = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    assert enabled.decode_body()["orderTopicConf"] == "broker-a:8"
    other = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicB"}))
    assert other.decode_body()["orderTopicConf"] is None


def test_get_broker_cluster_info(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_BROKER_CLUSTER_INFO))
    info = ClusterInfo.from_wire(response.decode_body())
    assert info.cluster_addr_table == {CLUSTER: {BROKER_A}}
    assert info.broker_addr_table[BROKER_A].broker_addrs == {0: MASTER_A, 1: SLAVE_A}


def test_get_all_topic_list_and_its_switch(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert sorted(response.decode_body()["topicList"]) == ["TopicA", "TopicB"]
    populated.config.enable_all_topic_list = False
    response = call(populated, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "disable"


def test_get_topics_by_cluster_and_its_switch(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}))
    assert response.decode_body() == {"topicList": ["TopicA", "TopicB"]}
    response = ok(call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"}))
    assert response.decode_body() == {"topicList": []}
    populated.config.enable_topic_list = False
    assert call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}).code == 1


def test_get_system_topic_list(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert response.decode_body() == {"topicList": [CLUSTER, BROKER_A], "brokerAddr": MASTER_A}


def test_delete_topic_in_namesrv_whole_and_per_cluster(populated: DefaultRequestProcessor) -> None:
    ext_b = ident("10.0.0.3:10911", 0, "broker-b", "Other")
    ok(call(populated, RequestCode.REGISTER_BROKER, ext_b, register_payload("TopicA")))

    response = ok(call(populated, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA", "clusterName": CLUSTER}))
    assert response.ext_fields == {"deleted": True}
    assert set(populated.rim.topic_queue_table["TopicA"]) == {"broker-b"}

    response = ok(call(populated, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"}))
    assert response.ext_fields == {"deleted": True}
    assert "TopicA" not in populated.rim.topic_queue_table
    assert call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 17

    response = ok(call(populated, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"}))
    assert response.ext_fields == {"deleted": False}


# ---------------------------------------------------------------------------- perms 205, 327


def test_wipe_and_add_write_perm_of_broker(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": BROKER_A}))
    assert response.ext_fields == {"wipeTopicCount": 2}
    route = TopicRouteData.from_wire(
        ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})).decode_body()
    )
    assert route.queue_datas[0].perm == int(Perm.READ)

    response = ok(call(populated, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": BROKER_A}))
    assert response.ext_fields == {"addTopicCount": 2}
    assert populated.rim.topic_queue_table["TopicB"][BROKER_A].perm == RW

    response = ok(call(populated, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}))
    assert response.ext_fields == {"wipeTopicCount": 0}


# ---------------------------------------------------------------------------- config 318, 319


def test_update_namesrv_config_accepts_camel_and_snake_keys(processor: DefaultRequestProcessor) -> None:
    seen: list[NamesrvConfig] = []
    processor.on_config_update = seen.append
    ok(
        call(
            processor,
            RequestCode.UPDATE_NAMESRV_CONFIG,
            body={"orderMessageEnable": "true", "broker_channel_expired_time_ms": "5000"},
        )
    )
    assert processor.config.order_message_enable is True
    assert processor.config.broker_channel_expired_time_ms == 5000
    assert seen == [processor.config]
    assert processor.rim.config is processor.config


@pytest.mark.parametrize("key", ["kvConfigPath", "configStorePath", "configBlackList", "kv_config_path"])
def test_update_of_blacklisted_key_is_no_permission(processor: DefaultRequestProcessor, key: str) -> None:
    before = state(processor)
    response = call(processor, RequestCode.UPDATE_NAMESRV_CONFIG, body={key: "/tmp/evil", "orderMessageEnable": "true"})
    assert response.code == ResponseCode.NO_PERMISSION == 16
    assert "black list" in (response.remark or "")
    assert state(processor) == before


def test_config_update_is_all_or_nothing(processor: DefaultRequestProcessor) -> None:
    before = state(processor)
    response = call(
        processor,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        body={"orderMessageEnable": "true", "scanNotActiveBrokerIntervalMs": "-5"},
    )
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert state(processor) == before
    response = call(processor, RequestCode.UPDATE_NAMESRV_CONFIG, body={"orderMessageEnable": "true", "noSuchKey": "1"})
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "no_such_key" in (response.remark or "")
    assert state(processor) == before


def test_get_namesrv_config_lists_camel_case_strings(processor: DefaultRequestProcessor) -> None:
    props = ok(call(processor, RequestCode.GET_NAMESRV_CONFIG)).decode_body()
    assert props["brokerChannelExpiredTimeMs"] == "120000"
    assert props["orderMessageEnable"] == "False"
    assert all(isinstance(v, str) for v in props.values())
    assert set(props) == {
        "".join(w.title() if i else w for i, w in enumerate(k.split("_"))) for k in NamesrvConfig.model_fields
    }


# ---------------------------------------------------------------------------- dispatch


def test_every_named_request_code_has_a_handler(processor: DefaultRequestProcessor) -> None:
    expected = {100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 219, 224, 304, 318, 319, 322, 327, 904}
    assert {int(c) for c in RequestCode} == expected
    assert set(processor.handlers) == expected


@pytest.mark.parametrize("code", [0, 1, 107, 999, -1, 2**40])
def test_unknown_request_code_is_not_supported(processor: DefaultRequestProcessor, code: int) -> None:
    before = state(processor)
    response = call(processor, code, {"topic": "TopicA"})
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert str(code) in (response.remark or "")
    assert state(processor) == before


def test_handler_bug_becomes_system_error_not_exception(processor: DefaultRequestProcessor) -> None:
    def broken(request: RemotingRequest, channel: object) -> RemotingResponse:
        raise KeyError("boom")

    processor.handlers[RequestCode.GET_BROKER_CLUSTER_INFO] = broken
    response = call(processor, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "internal error" in (response.remark or "")


# ---------------------------------------------------------------------------- bad input

GOOD_BODY = encode_body(register_payload("TopicA", "TopicC", version=(7, 7), queues=4))


def _reg(body: Any = None, raw: bytes | None = None, **ext: Any) -> tuple[int, dict, bytes | None]:
    payload = raw if raw is not None else (encode_body(body) if body is not None else GOOD_BODY)
    return RequestCode.REGISTER_BROKER, ident() | ext, payload


def _table(**tc: Any) -> dict:
    return register_payload() | {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {tc.get("topicName", "TopicC"): topic_config("TopicC") | tc},
            "dataVersion": {"timestamp": 9, "counter": 9},
        }
    }


BAD_REQUESTS: dict[str, tuple[tuple[int, dict, bytes | None], str]] = {
    "malformed msgpack": (_reg(raw=b"\xc1\xc1"), "not valid msgpack"),
    "truncated msgpack": (_reg(raw=GOOD_BODY[:-5]), "not valid msgpack"),
    "trailing garbage": (_reg(raw=GOOD_BODY + b"\x00"), "trailing"),
    "body not a map": (_reg(body=[1, 2, 3]), "invalid request"),
    "unknown body field": (_reg(body=register_payload("TopicC") | {"extra": 1}), "extra"),
    "brokerId as string": (_reg(brokerId="0"), "brokerId"),
    "negative brokerId": (_reg(brokerId=-1), "brokerId"),
    "huge brokerId": (_reg(brokerId=2**40), "brokerId"),
    "empty broker name": (_reg(brokerName=""), "blank"),
    "invalid broker name": (_reg(brokerName="broker a/1"), "brokerName"),
    "broker name with trailing newline": (_reg(brokerName=BROKER_A + "\n"), "brokerName"),
    "topic with trailing newline": (_reg(body=_table(topicName="TopicC\n")), "topic"),
    "empty cluster name": (_reg(clusterName=""), "clusterName"),
    "cluster name as int": (_reg(clusterName=7), "clusterName"),
    "missing broker addr": (
        (RequestCode.REGISTER_BROKER, {"clusterName": CLUSTER, "brokerName": BROKER_A}, GOOD_BODY),
        "brokerAddr",
    ),
    "invalid ha addr": (_reg(haServerAddr="no spaces allowed"), "haServerAddr"),
    "zero heartbeat timeout": (_reg(heartbeatTimeoutMillis=0), "heartbeatTimeoutMillis"),
    "string heartbeat timeout": (_reg(heartbeatTimeoutMillis="5000"), "heartbeatTimeoutMillis"),
    "bad crc32": (_reg(bodyCrc32=(zlib.crc32(GOOD_BODY) + 1) % 2**32), "crc32"),
    "negative queue count": (_reg(body=_table(readQueueNums=-1)), "queue nums"),
    "huge queue count": (_reg(body=_table(writeQueueNums=2**40)), "queue nums"),
    "queue count as string": (_reg(body=_table(writeQueueNums="8")), "writeQueueNums"),
    "unknown perm bits": (_reg(body=_table(perm=8)), "perm"),
    "negative perm": (_reg(body=_table(perm=-1)), "perm"),
    "bad topicSysFlag": (_reg(body=_table(topicSysFlag=9)), "topicSysFlag"),
    "bad topicFilterType": (_reg(body=_table(topicFilterType="REGEX")), "topicFilterType"),
    "empty topic name": (_reg(body=_table(topicName="")), "topic"),
    "invalid topic name": (_reg(body=_table(topicName="bad topic!")), "topic"),
    "topic name too long": (_reg(body=_table(topicName="T" * 128)), "127"),
    "topic as int": (_reg(body=_table(topicName=5)), "topic"),
    "table key differs from topicName": (
        _reg(body={"topicConfigSerializeWrapper": {"topicConfigTable": {"TopicX": topic_config("TopicY")}}}),
        "differs",
    ),
    "dataVersion missing counter": (
        _reg(body={"topicConfigSerializeWrapper": {"dataVersion": {"timestamp": 1}}}),
        "dataVersion",
    ),
    "dataVersion negative": (
        _reg(body={"topicConfigSerializeWrapper": {"dataVersion": {"timestamp": -1, "counter": 1}}}),
        "dataVersion",
    ),
    "blank filter server": (_reg(body=register_payload("TopicC", filters=[""])), "filterServerList"),
    "filter server as int": (_reg(body=register_payload("TopicC") | {"filterServerList": [5]}), "filterServerList"),
    "route query topic as int": ((RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": 5}, None), "topic"),
    "route query blank topic": ((RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": ""}, None), "blank"),
    "delete topic invalid": ((RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "a b"}, None), "topic"),
    "delete topic missing": ((RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, None), "topic"),
    "unregister brokerId string": ((RequestCode.UNREGISTER_BROKER, ident() | {"brokerId": "0"}, None), "brokerId"),
    "wipe perm blank broker": ((RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": ""}, None), "brokerName"),
    "add perm broker as list": ((RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": ["x"]}, None), "brokerName"),
    "heartbeat missing cluster": (
        (RequestCode.BROKER_HEARTBEAT, {"brokerAddr": MASTER_A, "brokerName": BROKER_A}, None),
        "clusterName",
    ),
    "query version without body": ((RequestCode.QUERY_DATA_VERSION, ident(), None), "body is missing"),
    "query version body not a map": ((RequestCode.QUERY_DATA_VERSION, ident(), encode_body([1, 1])), "dataVersion"),
    "query version string counter": (
        (RequestCode.QUERY_DATA_VERSION, ident(), encode_body({"timestamp": 1, "counter": "1"})),
        "dataVersion.counter",
    ),
    "query version truncated": (
        (RequestCode.QUERY_DATA_VERSION, ident(), encode_body({"timestamp": 1, "counter": 1})[:-1]),
        "msgpack",
    ),
    "put kv without value": ((RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k2"}, None), "value"),
    "put kv blank namespace": (
        (RequestCode.PUT_KV_CONFIG, {"namespace": "", "key": "k", "value": "v"}, None),
        "namespace",
    ),
    "put kv blank key": ((RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "", "value": "v"}, None), "key"),
    "put kv value as int": ((RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": 5}, None), "value"),
    "delete kv namespace as int": ((RequestCode.DELETE_KV_CONFIG, {"namespace": 1, "key": "k"}, None), "namespace"),
    "kv list invalid namespace": ((RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "a b"}, None), "namespace"),
    "config body not a map": ((RequestCode.UPDATE_NAMESRV_CONFIG, {}, encode_body(["x"])), "map"),
    "config value not a string": (
        (RequestCode.UPDATE_NAMESRV_CONFIG, {}, encode_body({"orderMessageEnable": True})),
        "string",
    ),
    "config without body": ((RequestCode.UPDATE_NAMESRV_CONFIG, {}, None), "body is missing"),
    "config bad value": (
        (RequestCode.UPDATE_NAMESRV_CONFIG, {}, encode_body({"maxBodySize": "lots"})),
        "max_body_size",
    ),
    "ext fields not a map": ((RequestCode.REGISTER_BROKER, ["clusterName"], GOOD_BODY), "extFields"),  # type: ignore[dict-item]
    "body as str": ((RequestCode.REGISTER_BROKER, ident(), "body"), "body must be bytes"),  # type: ignore[dict-item]
    "body as list": ((RequestCode.REGISTER_BROKER, ident(), [1]), "body must be bytes"),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_gets_clear_error_and_changes_nothing(populated: DefaultRequestProcessor, case: str) -> None:
    (code, ext, body), expected_words = BAD_REQUESTS[case]
    before = state(populated)

    response = populated.process_request(RemotingRequest(code, ext, body))

    assert isinstance(response, RemotingResponse)
    assert response.code != ResponseCode.SUCCESS
    assert response.code in {int(c) for c in ResponseCode}
    assert response.remark and expected_words.lower() in response.remark.lower(), response.remark
    assert "internal error" not in response.remark, "bad input must be reported as bad input, not as a bug"
    assert state(populated) == before


@pytest.mark.parametrize(
    "request_object",
    [None, 103, "register", {"code": 103}, (103, {}, None), b"\x93\x67\x80\xc0"],
    ids=["none", "int", "str", "dict", "tuple", "frame-bytes"],
)
def test_non_request_objects_get_an_error(populated: DefaultRequestProcessor, request_object: object) -> None:
    before = state(populated)
    response = populated.process_request(request_object)  # type: ignore[arg-type]
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "RemotingRequest" in (response.remark or "")
    assert state(populated) == before


@pytest.mark.parametrize("code", ["103", None, 103.0, True], ids=["str", "none", "float", "bool"])
def test_non_integer_request_code_is_rejected(populated: DefaultRequestProcessor, code: object) -> None:
    before = state(populated)
    response = populated.process_request(RemotingRequest(code, ident(), GOOD_BODY))  # type: ignore[arg-type]
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "integer" in (response.remark or "")
    assert state(populated) == before


def test_oversized_body_is_refused_before_decoding(clock: ManualClock) -> None:
    rim = RouteInfoManager(NamesrvConfig(max_body_size=4096), clock)
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    big = encode_body(register_payload(*[f"Topic{i:04d}" for i in range(400)]))
    assert len(big) > 4096
    before = state(processor)

    response = processor.process_request(RemotingRequest(RequestCode.REGISTER_BROKER, ident(), big))

    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "exceeds the 4096-byte limit" in (response.remark or "")
    assert state(processor) == before
    exact = RemotingRequest(RequestCode.UPDATE_NAMESRV_CONFIG, {}, encode_body({"orderMessageEnable": "x" * 4000}))
    assert len(exact.body or b"") <= 4096
    assert "exceeds" not in (processor.process_request(exact).remark or "")


def test_bytearray_body_is_accepted(processor: DefaultRequestProcessor) -> None:
    request = RemotingRequest(RequestCode.REGISTER_BROKER, ident(), bytearray(GOOD_BODY))
    ok(processor.process_request(request))
    assert "TopicC" in processor.rim.topic_queue_table


def test_heartbeat_of_a_slave_carries_its_live_master(rim, processor):
    """Lite heartbeats must keep a slave following its master (a changed master address included)."""
    from namesrv.codec import RemotingRequest
    from namesrv.constants import RequestCode

    for broker_id, addr in ((0, "m:1"), (1, "s:1")):
        rim.register_broker("c", addr, "b", broker_id, f"{addr}-ha", None, None)
    ident = {"clusterName": "c", "brokerName": "b", "brokerAddr": "s:1", "brokerId": 1}
    resp = processor.process_request(RemotingRequest(RequestCode.BROKER_HEARTBEAT, ident))
    assert resp.ext_fields == {"known": True, "masterAddr": "m:1", "haServerAddr": "m:1-ha"}
    rim.unregister_broker("c", "m:1", "b", 0)
    rim.register_broker("c", "m:2", "b", 0, "m:2-ha", None, None)
    resp = processor.process_request(RemotingRequest(RequestCode.BROKER_HEARTBEAT, ident))
    assert resp.ext_fields["masterAddr"] == "m:2"
    master_ident = ident | {"brokerAddr": "m:2", "brokerId": 0}
    master = processor.process_request(RemotingRequest(RequestCode.BROKER_HEARTBEAT, master_ident))
    assert master.ext_fields == {"known": True}
