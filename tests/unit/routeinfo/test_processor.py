"""DefaultRequestProcessor: every request code end to end, response codes, and bad input.

Requests are built the way a client sends them: RemotingRequest with camelCase ext fields and a
msgpack body. Every bad request must get an error response and leave all state byte-for-byte as
it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import ORDER_TOPIC_CONFIG_NAMESPACE, Perm
from namesrv.protocol.models import ClusterInfo, DataVersion, TopicRouteData
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from tests.support.namesrv import state

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
    assert response.wire_body() == {"table": {"k1": "v1", "k2": "v2"}}


def test_kv_namespace_whose_last_key_was_deleted_lists_as_an_empty_table(processor: DefaultRequestProcessor) -> None:
    ok(call(processor, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}))
    ok(call(processor, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}))
    response = ok(call(processor, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}))
    assert response.wire_body() == {"table": {}}
    assert call(processor, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "never"}).code == 22


# ---------------------------------------------------------------------------- broker codes 103, 104, 322, 904


def test_register_broker_fills_tables_and_returns_order_topic_kv(processor: DefaultRequestProcessor) -> None:
    processor.kv.put_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA", "broker-a:4")

    response = ok(processor.process_request(register_request("TopicA", filters=["10.0.0.9:1"])))

    assert response.ext_fields == {"haServerAddr": None, "masterAddr": None}
    assert response.wire_body() == {"table": {"TopicA": "broker-a:4"}}
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
    assert response.wire_body() == {"table": {}}


def test_register_with_matching_crc32_and_per_broker_timeout(
    processor: DefaultRequestProcessor, clock: ManualClock
) -> None:
    body = encode_body(register_payload("TopicA"))
    ext = ident() | {"bodyCrc32": body_crc32(body), "heartbeatTimeoutMillis": 10_000}
    ok(call(processor, RequestCode.REGISTER_BROKER, ext, raw=body))
    assert processor.rim.broker_live_table[MASTER_A].heartbeat_timeout_millis == 10_000
    clock.advance(10_001)
    assert processor.rim.scan_not_active_broker() == 1


def test_body_crc32_zero_means_not_computed(processor: DefaultRequestProcessor) -> None:
    """RocketMQ checks the CRC only when the header's bodyCrc32 is non-zero; brokers that do not
    compute it send 0."""
    body = encode_body(register_payload("TopicA"))
    assert body_crc32(body) != 0
    ok(call(processor, RequestCode.REGISTER_BROKER, ident() | {"bodyCrc32": 0}, raw=body))
    assert "TopicA" in processor.rim.topic_queue_table


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
    assert response.wire_body() == {"timestamp": 1, "counter": 1, "stateVersion": 0}
    assert populated.rim.broker_live_table[MASTER_A].last_update_timestamp == clock()
    clock.advance(100_000)
    assert populated.rim.scan_not_active_broker() == 1  # only the slave, which never asked
    assert set(populated.rim.broker_live_table) == {MASTER_A}


def test_query_data_version_changed_returns_stored_version(populated: DefaultRequestProcessor) -> None:
    before = populated.rim.dump_tables()["topicQueueTable"]
    response = ok(call(populated, RequestCode.QUERY_DATA_VERSION, ident(), {"timestamp": 1, "counter": 2}))
    assert response.ext_fields == {"changed": True}
    assert response.wire_body() == {"timestamp": 1, "counter": 1, "stateVersion": 0}
    assert DataVersion.from_wire(response.wire_body()) == DataVersion(1, 1)
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


def test_lite_heartbeat_asks_for_a_full_registration_when_topics_were_deleted_here(
    populated: DefaultRequestProcessor,
) -> None:
    """A lite heartbeat carries no topics, so it cannot bring back a topic deleted on this
    NameServer: the answer asks the master for one full registration, which does (RocketMQ 5)."""
    ok(call(populated, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicB"}))
    master = ok(call(populated, RequestCode.BROKER_HEARTBEAT, ident()))
    assert master.ext_fields == {"known": True, "topicsMissing": True}
    slave = ok(call(populated, RequestCode.BROKER_HEARTBEAT, ident(SLAVE_A, 1)))
    assert "topicsMissing" not in slave.ext_fields, "only the master's registration writes topics"

    ok(populated.process_request(register_request("TopicA", "TopicB")))  # same DataVersion (1, 1)
    assert "TopicB" in populated.rim.topic_queue_table
    assert ok(call(populated, RequestCode.BROKER_HEARTBEAT, ident())).ext_fields == {"known": True}


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
    route = TopicRouteData.from_wire(response.wire_body())
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        (BROKER_A, 8, 8, RW)
    ]
    assert [b.broker_addrs for b in route.broker_datas] == [{0: MASTER_A, 1: SLAVE_A}]
    assert route.filter_server_table == {MASTER_A: ("10.0.0.9:1",)}
    assert route.order_topic_conf is None
    assert response.ext_fields == {"routeVersion": populated.rim.route_version("TopicA")}


def test_missing_route_is_topic_not_exist(processor: DefaultRequestProcessor) -> None:
    response = call(processor, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert "Nope" in (response.remark or "")


@pytest.mark.parametrize("topic", ["", "bad topic!", "T" * 300, "TopicA\n"], ids=["blank", "chars", "long", "newline"])
def test_route_query_for_an_invalid_topic_name_is_topic_not_exist(
    populated: DefaultRequestProcessor, topic: str
) -> None:
    """RocketMQ only requires the field: a name no topic can have simply has no route (17, not 1)."""
    before = state(populated)
    response = call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert "No topic route info" in (response.remark or "")
    assert state(populated) == before


def test_route_query_without_a_topic_is_still_an_error(populated: DefaultRequestProcessor) -> None:
    for ext in ({}, {"topic": None}):
        response = call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert "topic" in (response.remark or "")


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
    assert disabled.wire_body()["orderTopicConf"] is None

    populated.config.order_message_enable = True
    enabled = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    assert enabled.wire_body()["orderTopicConf"] == "broker-a:8"
    other = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicB"}))
    assert other.wire_body()["orderTopicConf"] is None


def test_an_order_conf_change_is_a_route_change_and_pushes_answer_as_polls(
    populated: DefaultRequestProcessor,
) -> None:
    """The long-poll answers with `route_answer` (what a poll gets), and a put / delete of a
    topic's orderTopicConf or a toggle of orderMessageEnable gives the route a new version."""
    rim = populated.rim
    ok(call(populated, RequestCode.UPDATE_NAMESRV_CONFIG, body={"orderMessageEnable": "true"}))
    v0 = rim.route_version("TopicA")
    put = {"namespace": ORDER_TOPIC_CONFIG_NAMESPACE, "key": "TopicA", "value": "broker-a:8"}
    ok(call(populated, RequestCode.PUT_KV_CONFIG, put))
    v1 = rim.route_version("TopicA")
    assert v1 > v0
    polled = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    pushed, version = populated.route_answer("TopicA")
    assert pushed is not None and pushed.order_topic_conf == "broker-a:8"
    assert (polled.wire_body(), polled.ext_fields["routeVersion"]) == (pushed.to_wire(), version)

    ok(call(populated, RequestCode.PUT_KV_CONFIG, put))  # the same value again: no change
    assert rim.route_version("TopicA") == v1
    ok(call(populated, RequestCode.UPDATE_NAMESRV_CONFIG, body={"orderMessageEnable": "false"}))
    v2 = rim.route_version("TopicA")
    assert v2 > v1 and populated.route_answer("TopicA")[0].order_topic_conf is None  # type: ignore[union-attr]
    ok(call(populated, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG_NAMESPACE, "key": "TopicA"}))
    assert rim.route_version("TopicA") > v2
    ok(call(populated, RequestCode.PUT_KV_CONFIG, {**put, "key": "NoSuchTopic"}))
    assert "NoSuchTopic" not in rim.topic_queue_table and rim.route_version("NoSuchTopic") == 0


def test_get_broker_cluster_info(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_BROKER_CLUSTER_INFO))
    info = ClusterInfo.from_wire(response.wire_body())
    assert info.cluster_addr_table == {CLUSTER: {BROKER_A}}
    assert info.broker_addr_table[BROKER_A].broker_addrs == {0: MASTER_A, 1: SLAVE_A}


def test_get_all_topic_list_and_its_switch(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert sorted(response.wire_body()["topicList"]) == ["TopicA", "TopicB"]
    populated.config.enable_all_topic_list = False
    response = call(populated, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "disable"


def test_get_topics_by_cluster_and_its_switch(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}))
    assert response.wire_body() == {"topicList": ["TopicA", "TopicB"]}
    response = ok(call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"}))
    assert response.wire_body() == {"topicList": []}
    populated.config.enable_topic_list = False
    assert call(populated, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}).code == 1


def test_get_system_topic_list(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert response.wire_body() == {"topicList": [CLUSTER, BROKER_A], "brokerAddr": MASTER_A}


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


# ---------------------------------------------------------------------------- single topic 217


def queue_data(broker: str = BROKER_A, queues: int = 4, perm: int = RW) -> dict[str, Any]:
    return {"brokerName": broker, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm, "topicSysFlag": 0}


def register_topic(processor: DefaultRequestProcessor, topic: str, *qds: dict[str, Any]) -> RemotingResponse:
    """As a RocketMQ 5 broker with enableSingleTopicRegister sends it: a TopicRouteData body."""
    body = {"brokerDatas": [], "filterServerTable": {}, "queueDatas": list(qds)}
    return call(processor, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body)


def test_register_topic_creates_a_route_and_updates_one_group_only(populated: DefaultRequestProcessor) -> None:
    ext_b = ident("10.0.0.3:10911", 0, "broker-b")
    ok(call(populated, RequestCode.REGISTER_BROKER, ext_b, register_payload("TopicA")))
    before = populated.rim.route_version("TopicNew")

    assert ok(register_topic(populated, "TopicNew", queue_data(queues=2))).remark is None
    answer = ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicNew"}))
    route = TopicRouteData.from_wire(answer.wire_body())
    assert [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas] == [(BROKER_A, 2, RW)]
    assert {b.broker_name for b in route.broker_datas} == {BROKER_A}
    assert populated.rim.route_version("TopicNew") > before
    assert "TopicNew" in populated.rim.topics_of_broker(BROKER_A)

    ok(register_topic(populated, "TopicA", queue_data("broker-b", queues=1, perm=int(Perm.READ))))
    table = populated.rim.topic_queue_table["TopicA"]
    assert (table[BROKER_A].read_queue_nums, table["broker-b"].read_queue_nums, table["broker-b"].perm) == (8, 1, 4)


def test_register_topic_brings_back_a_topic_deleted_here(populated: DefaultRequestProcessor) -> None:
    ok(call(populated, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicB"}))
    assert populated.rim.has_missing_topics(BROKER_A)
    ok(register_topic(populated, "TopicB", queue_data(queues=8)))
    assert "TopicB" in populated.rim.topic_queue_table
    assert not populated.rim.has_missing_topics(BROKER_A), "nothing left for a full registration to restore"


def test_register_topic_for_an_unregistered_group_changes_nothing(populated: DefaultRequestProcessor) -> None:
    before = state(populated)
    response = ok(register_topic(populated, "TopicNew", queue_data(), queue_data("broker-ghost")))
    assert response.remark == "broker broker-ghost is not registered, topic TopicNew unchanged"
    assert state(populated) == before, "all or nothing: the registered group's queues were not written either"
    assert ok(register_topic(populated, "TopicNew")).remark is None  # no queue datas: nothing to do
    ok(call(populated, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "TopicNew"}, {"queueDatas": None}))
    assert state(populated) == before


# ---------------------------------------------------------------------------- perms 205, 327


def test_wipe_and_add_write_perm_of_broker(populated: DefaultRequestProcessor) -> None:
    response = ok(call(populated, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": BROKER_A}))
    assert response.ext_fields == {"wipeTopicCount": 2}
    route = TopicRouteData.from_wire(
        ok(call(populated, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})).wire_body()
    )
    assert route.queue_datas[0].perm == int(Perm.READ)

    response = ok(call(populated, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": BROKER_A}))
    assert response.ext_fields == {"addTopicCount": 2}
    assert populated.rim.topic_queue_table["TopicB"][BROKER_A].perm == RW

    response = ok(call(populated, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}))
    assert response.ext_fields == {"wipeTopicCount": 0}


# ---------------------------------------------------------------------------- config 318, 319


def test_update_namesrv_config_accepts_camel_and_snake_keys(processor: DefaultRequestProcessor) -> None:
    ok(
        call(
            processor,
            RequestCode.UPDATE_NAMESRV_CONFIG,
            body={"orderMessageEnable": "true", "broker_channel_expired_time_ms": "5000"},
        )
    )
    assert processor.config.order_message_enable is True
    assert processor.config.broker_channel_expired_time_ms == 5000
    assert processor.rim.config is processor.config


@pytest.mark.parametrize(
    "key", ["kvConfigPath", "configStorePath", "configBlackList", "kv_config_path", "rocketmqHome", "rocketmq_home"]
)
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


def test_rocketmq_home_is_refused_even_when_the_configured_blacklist_leaves_it_out(
    processor: DefaultRequestProcessor,
) -> None:
    """RocketMQ's processor adds rocketmqHome (and the three defaults) to whatever is configured."""
    processor.config.config_black_list = "orderMessageEnable"
    before = state(processor)
    for key in ("rocketmqHome", "kvConfigPath", "orderMessageEnable"):
        response = call(processor, RequestCode.UPDATE_NAMESRV_CONFIG, body={key: "x"})
        assert response.code == ResponseCode.NO_PERMISSION, key
    assert state(processor) == before


def test_unknown_config_keys_are_ignored_and_known_ones_applied(processor: DefaultRequestProcessor) -> None:
    """RocketMQ sets the properties a config field takes and ignores the rest (no SYSTEM_ERROR)."""
    before = state(processor)
    response = ok(call(processor, RequestCode.UPDATE_NAMESRV_CONFIG, body={"noSuchKey": "1"}))
    assert "noSuchKey" in (response.remark or "")
    assert state(processor) == before

    response = ok(
        call(processor, RequestCode.UPDATE_NAMESRV_CONFIG, body={"orderMessageEnable": "true", "listenPort": "9876"})
    )
    assert processor.config.order_message_enable is True
    assert "listenPort" in (response.remark or "")


def test_get_namesrv_config_lists_camel_case_strings(processor: DefaultRequestProcessor) -> None:
    props = ok(call(processor, RequestCode.GET_NAMESRV_CONFIG)).wire_body()
    assert props["brokerChannelExpiredTimeMs"] == "120000"
    assert props["orderMessageEnable"] == "false"  # Java's spelling, as mqadmin prints it
    assert all(isinstance(v, str) for v in props.values())
    assert set(props) == {
        "".join(w.title() if i else w for i, w in enumerate(k.split("_"))) for k in NamesrvConfig.model_fields
    }


# ---------------------------------------------------------------------------- dispatch


def test_every_named_request_code_has_a_handler(processor: DefaultRequestProcessor) -> None:
    expected = {100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304, 318, 319, 322, 327, 904}
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


BAD_REQUESTS: dict[str, tuple[tuple[int, dict, bytes | None], str]] = {
    "malformed msgpack": (_reg(raw=b"\xc1\xc1"), "not valid msgpack"),
    "truncated msgpack": (_reg(raw=GOOD_BODY[:-5]), "not valid msgpack"),
    "trailing garbage": (_reg(raw=GOOD_BODY + b"\x00"), "trailing"),
    "body not a map": (_reg(body=[1, 2, 3]), "invalid request"),
    "brokerId as string": (_reg(brokerId="0"), "brokerId"),
    "negative brokerId": (_reg(brokerId=-1), "brokerId"),
    "huge brokerId": (_reg(brokerId=2**40), "brokerId"),
    "empty broker name": (_reg(brokerName=""), "blank"),
    "invalid broker name": (_reg(brokerName="broker a/1"), "brokerName"),
    "broker name with trailing newline": (_reg(brokerName=BROKER_A + "\n"), "brokerName"),
    "empty cluster name": (_reg(clusterName=""), "clusterName"),
    "cluster name as int": (_reg(clusterName=7), "clusterName"),
    "missing broker addr": (
        (RequestCode.REGISTER_BROKER, {"clusterName": CLUSTER, "brokerName": BROKER_A}, GOOD_BODY),
        "brokerAddr",
    ),
    "invalid ha addr": (_reg(haServerAddr="no spaces allowed"), "haServerAddr"),
    "zero heartbeat timeout": (_reg(heartbeatTimeoutMillis=0), "heartbeatTimeoutMillis"),
    "string heartbeat timeout": (_reg(heartbeatTimeoutMillis="5000"), "heartbeatTimeoutMillis"),
    "bad crc32": (_reg(bodyCrc32=(body_crc32(GOOD_BODY) + 1) % 2**31), "crc32"),
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
    "delete topic invalid": ((RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "a b"}, None), "topic"),
    "delete topic missing": ((RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, None), "topic"),
    "register topic without body": ((RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"}, None), "body is missing"),
    "register topic invalid name": (
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "a b"}, encode_body({"queueDatas": [queue_data()]})),
        "topic",
    ),
    "register topic perm 8": (
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"}, encode_body({"queueDatas": [queue_data(perm=8)]})),
        "perm",
    ),
    "register topic queue nums as string": (
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"},
         encode_body({"queueDatas": [queue_data() | {"readQueueNums": "4"}]})),
        "readQueueNums",
    ),
    "register topic without broker name": (
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"},
         encode_body({"queueDatas": [{"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}]})),
        "brokerName",
    ),
    "register topic queueDatas not a list": (
        (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"}, encode_body({"queueDatas": {"a": 1}})),
        "queueDatas",
    ),
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


BAD_TOPIC_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (table key, topic config, words the reason must hold)
    "topic with trailing newline": ("TopicC\n", topic_config("TopicC\n"), "topic"),
    "negative queue count": ("TopicC", topic_config("TopicC", readQueueNums=-1), "readQueueNums"),
    "huge queue count": ("TopicC", topic_config("TopicC", writeQueueNums=2**40), "writeQueueNums"),
    "queue count above the limit": ("TopicC", topic_config("TopicC", writeQueueNums=1025), "writeQueueNums"),
    "queue count as string": ("TopicC", topic_config("TopicC", writeQueueNums="8"), "writeQueueNums"),
    "unknown perm bits": ("TopicC", topic_config("TopicC", perm=8), "perm"),
    "negative perm": ("TopicC", topic_config("TopicC", perm=-1), "perm"),
    "bad topicSysFlag": ("TopicC", topic_config("TopicC", topicSysFlag=9), "topicSysFlag"),
    "bad topicFilterType": ("TopicC", topic_config("TopicC", topicFilterType="REGEX"), "topicFilterType"),
    "empty topic name": ("", topic_config(""), "topic"),
    "invalid topic name": ("bad topic!", topic_config("bad topic!"), "topic"),
    "topic name too long": ("T" * 128, topic_config("T" * 128), "127"),
    "topic as int": ("5", topic_config("TopicC") | {"topicName": 5}, "topic"),
    "table key differs from topicName": ("TopicX", topic_config("TopicY"), "differs"),
    "config not a map": ("TopicC", [1, 2], "topicConfig"),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("case", sorted(BAD_TOPIC_CONFIGS))
def test_one_bad_topic_never_stops_the_broker_registering_its_other_topics(
    populated: DefaultRequestProcessor, case: str
) -> None:
    """RocketMQ takes every topic as it comes; here a topic that fails validation is left out (and
    named in the remark) while the broker's other topics and its liveness register as usual."""
    key, bad, words = BAD_TOPIC_CONFIGS[case]
    body = register_payload("TopicA", "TopicD", version=(9, 9))
    body["topicConfigSerializeWrapper"]["topicConfigTable"][key] = bad
    response = ok(call(populated, RequestCode.REGISTER_BROKER, ident() | {"haServerAddr": HA_A}, body))

    rim = populated.rim
    assert response.remark is not None and "1 invalid topics not registered" in response.remark
    assert words.lower() in response.remark.lower(), response.remark
    assert "TopicD" in rim.topic_queue_table, "the good topics of the same registration are registered"
    assert rim.broker_live_table[MASTER_A].data_version == DataVersion(9, 9)
    assert set(rim.topic_queue_table) == {"TopicA", "TopicB", "TopicD"}, "the bad one is not"


def test_registration_names_at_most_five_rejected_topics_and_counts_them_all(
    processor: DefaultRequestProcessor,
) -> None:
    body = register_payload("TopicA")
    for i in range(8):
        body["topicConfigSerializeWrapper"]["topicConfigTable"][f"Big{i}"] = topic_config(f"Big{i}", queues=5000)
    response = ok(call(processor, RequestCode.REGISTER_BROKER, ident(), body))
    assert response.remark is not None and response.remark.startswith("8 invalid topics")
    assert response.remark.count("Big") == 5
    assert set(processor.rim.topic_queue_table) == {"TopicA"}


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
    from namesrv.protocol.codes import RequestCode
    from namesrv.remoting.command import RemotingRequest

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
