"""Every request code the processor serves, as a RocketMQ client or broker sends it over TCP:
extFields as strings, JSON (or compressed) bodies, answers encoded as RocketMQ's NameServer encodes
them. Pure core: the processor and the wire adapter, no sockets (tests/ray/namesrv/test_remoting.py adds TCP)."""

from __future__ import annotations

import json

import pytest

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import encode_compressed_register_body
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.command import to_request
from namesrv.remoting.wire_command import RemotingCommand, SerializeType
from tests.support.namesrv import Wire, broker_body, register_ext, state

CLUSTER, BROKER, ADDR = "DefaultCluster", "broker-a", "10.0.0.1:10911"








@pytest.fixture
def wire() -> Wire:
    w = Wire()
    body = json.dumps(broker_body({"TopicA": 4, "TopicB": 8})).encode()
    assert w.call(RequestCode.REGISTER_BROKER, register_ext(body), body, version=479).code == ResponseCode.SUCCESS
    return w


# ---------------------------------------------------------------------------- registration
@pytest.mark.parametrize("kind", list(SerializeType))
def test_a_brokers_registration_over_the_wire(kind: SerializeType) -> None:
    w = Wire()
    body = json.dumps(broker_body({"TopicA": 4})).encode()
    answer = w.call(RequestCode.REGISTER_BROKER, register_ext(body), body, version=479, kind=kind)
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    assert answer.ext_fields in (None, {}), "a master learns no masterAddr/haServerAddr: null fields are omitted"
    assert json.loads(answer.body or b"{}") == {"table": {}}
    assert w.rim.broker_addr_table[BROKER].broker_addrs == {0: ADDR}
    assert w.rim.topic_queue_table["TopicA"][BROKER].write_queue_nums == 4
    slave = json.dumps(broker_body({"TopicA": 4})).encode()
    answer = w.call(RequestCode.REGISTER_BROKER, register_ext(slave, 1, "10.0.0.2:10911"), slave, version=479,
                    kind=kind)
    assert answer.ext_fields == {"masterAddr": ADDR, "haServerAddr": "10.0.0.1:10912"}


def test_a_compressed_registration(wire: Wire) -> None:
    w = Wire()
    body = encode_compressed_register_body(broker_body({"TopicZ": 2}))
    answer = w.call(RequestCode.REGISTER_BROKER, register_ext(body, compressed="true"), body, version=479)
    assert answer.code == ResponseCode.SUCCESS
    assert w.rim.topic_queue_table["TopicZ"][BROKER].read_queue_nums == 2


def test_a_wrong_crc_or_a_missing_field_names_the_problem_and_changes_nothing(wire: Wire) -> None:
    body = json.dumps(broker_body({"TopicC": 4}, counter=2)).encode()
    before = state(wire.processor)
    answer = wire.call(RequestCode.REGISTER_BROKER, register_ext(body) | {"bodyCrc32": "12345"}, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "crc32" in (answer.remark or "")
    ext = register_ext(body)
    del ext["brokerName"]
    answer = wire.call(RequestCode.REGISTER_BROKER, ext, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerName" in (answer.remark or "")
    answer = wire.call(RequestCode.REGISTER_BROKER, register_ext(body) | {"brokerId": "zero"}, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "brokerId" in (answer.remark or "")
    answer = wire.call(RequestCode.REGISTER_BROKER, register_ext(b"{oops"), b"{oops")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "JSON" in (answer.remark or "")
    assert state(wire.processor) == before


def test_query_data_version_heartbeat_and_unregister(wire: Wire) -> None:
    ident = {"brokerAddr": ADDR, "brokerId": "0", "brokerName": BROKER, "clusterName": CLUSTER}
    same = fastjson.dumps({"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000})
    answer = wire.call(RequestCode.QUERY_DATA_VERSION, ident, same)
    assert answer.ext_fields == {"changed": "false"}
    assert json.loads(answer.body or b"") == {"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000}
    newer = fastjson.dumps({"counter": 2, "timestamp": 1_700_000_000_001})
    assert wire.call(RequestCode.QUERY_DATA_VERSION, ident, newer).ext_fields == {"changed": "true"}
    wire.clock.advance(50_000)
    assert wire.call(RequestCode.BROKER_HEARTBEAT, ident).code == ResponseCode.SUCCESS
    assert wire.rim.broker_live_table[ADDR].last_update_timestamp == wire.clock()
    answer = wire.call(RequestCode.UNREGISTER_BROKER, ident)
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields is None, "RocketMQ's answer has no header"
    assert ADDR not in wire.rim.broker_live_table


# ---------------------------------------------------------------------------- routes
def test_route_is_fastjson_for_old_clients_and_standard_for_new_ones(wire: Wire) -> None:
    old = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}, version=63)
    assert old.code == ResponseCode.SUCCESS and old.ext_fields is None
    assert b'"brokerAddrs":{0:"10.0.0.1:10911"}' in (old.body or b"")
    route = fastjson.loads(old.body or b"")
    assert route["queueDatas"] == [{"brokerName": BROKER, "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                    "writeQueueNums": 4}]
    assert "orderTopicConf" not in route, "nulls are omitted"
    for ext, version in (({"topic": "TopicA"}, 401), ({"topic": "TopicA", "acceptStandardJsonOnly": "true"}, 63)):
        new = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, version=version)
        assert b'"brokerAddrs":{"0":"10.0.0.1:10911"}' in (new.body or b"")
        assert json.loads(new.body or b"") == route


@pytest.mark.parametrize("kind", list(SerializeType))
@pytest.mark.parametrize("opaque", [0, 7, 123_456, 2**31 - 1, -5])
def test_a_route_answer_encoded_as_a_frame_is_the_answers_own_bytes(wire: Wire, kind: SerializeType,
                                                                    opaque: int) -> None:
    """The TCP path writes a route answer as a frame built without its command (only the opaque
    differs from one answer to the next): the bytes are the ones the general encoder writes."""
    answer = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}, kind=kind, opaque=opaque)
    assert answer.code == ResponseCode.SUCCESS and fastjson.loads(answer.body or b"")["queueDatas"]
    request = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque, 0, 1, 63, None, {"topic": "TopicA"},
                              None, kind)
    frame = wire.encoder.encode_frame(request, wire.processor.process_request(to_request(request)))
    assert isinstance(frame, tuple), "a route answer is written as its frame"


def test_route_json_is_encoded_once_per_route_version(wire: Wire) -> None:
    for _ in range(5):
        wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
    assert wire.encoder.route_encodings == 1
    body = json.dumps(broker_body({"TopicA": 2, "TopicB": 8}, counter=2)).encode()
    wire.call(RequestCode.REGISTER_BROKER, register_ext(body), body, version=479)
    answer = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
    assert wire.encoder.route_encodings == 2
    assert fastjson.loads(answer.body or b"")["queueDatas"][0]["writeQueueNums"] == 2


def test_encoded_routes_are_bounded_in_bytes_oldest_out_first(wire: Wire, monkeypatch: pytest.MonkeyPatch) -> None:
    from namesrv.routeinfo import wire_encoder

    topics = {f"Topic{i}": 4 for i in range(6)}
    body = json.dumps(broker_body(topics, counter=2)).encode()
    wire.call(RequestCode.REGISTER_BROKER, register_ext(body), body, version=479)
    one = len(wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Topic0"}).body or b"")
    monkeypatch.setattr(wire_encoder, "ROUTE_CACHE_MAX_BYTES", 3 * one)
    for i in range(1, 6):
        wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"Topic{i}"})
    assert wire.encoder.route_encodings == 6
    assert wire.encoder._route_bytes <= 3 * one
    wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Topic5"})  # the newest: still cached
    assert wire.encoder.route_encodings == 6
    answer = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Topic0"})  # the oldest: encoded again
    assert wire.encoder.route_encodings == 7 and len(answer.body or b"") == one


def test_missing_topic_and_unknown_code_are_worded_as_rocketmq_words_them(wire: Wire) -> None:
    answer = wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert answer.remark == "No topic route info in name server for the topic: Nope"
    answer = wire.call(999, {"topic": "TopicA"})
    assert (answer.code, answer.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 999 not supported")


# ---------------------------------------------------------------------------- admin codes
def test_cluster_info_and_topic_lists(wire: Wire) -> None:
    info = fastjson.loads(wire.call(RequestCode.GET_BROKER_CLUSTER_INFO).body or b"")
    assert info == {"brokerAddrTable": {BROKER: {"brokerAddrs": {"0": ADDR}, "brokerName": BROKER,
                                                 "cluster": CLUSTER}},
                    "clusterAddrTable": {CLUSTER: [BROKER]}}
    topics = json.loads(wire.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body or b"")
    assert sorted(topics["topicList"]) == ["TopicA", "TopicB"]
    by_cluster = json.loads(wire.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}).body or b"")
    assert by_cluster == {"topicList": ["TopicA", "TopicB"]}
    system = json.loads(wire.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body or b"")
    assert system == {"brokerAddr": ADDR, "topicList": [CLUSTER, BROKER]}


def test_kv_config_codes(wire: Wire) -> None:
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicA"}
    assert wire.call(RequestCode.PUT_KV_CONFIG, kv | {"value": "broker-a:4"}).code == ResponseCode.SUCCESS
    answer = wire.call(RequestCode.GET_KV_CONFIG, kv)
    assert answer.code == ResponseCode.SUCCESS and answer.ext_fields == {"value": "broker-a:4"}
    listed = json.loads(wire.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}).body or b"")
    assert listed == {"table": {"TopicA": "broker-a:4"}}
    assert wire.call(RequestCode.DELETE_KV_CONFIG, kv).code == ResponseCode.SUCCESS
    answer = wire.call(RequestCode.GET_KV_CONFIG, kv)
    assert answer.code == ResponseCode.QUERY_NOT_FOUND and answer.ext_fields is None
    assert answer.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: TopicA"


def test_write_permission_and_topic_deletion(wire: Wire) -> None:
    answer = wire.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": BROKER})
    assert answer.ext_fields == {"wipeTopicCount": "2"}
    assert wire.rim.topic_queue_table["TopicA"][BROKER].perm == 4
    answer = wire.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": BROKER})
    assert answer.ext_fields == {"addTopicCount": "2"}
    assert wire.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicB", "clusterName": ""}).code == 0
    assert "TopicB" not in wire.rim.topic_queue_table


def test_single_topic_registration_as_a_rocketmq_5_broker_sends_it(wire: Wire) -> None:
    """BrokerOuterAPI.registerSingleTopicAll: header `topic` (+ RpcRequestHeader fields), a
    TopicRouteData body with one queueData; answered SUCCESS without a body or extFields."""
    route = {"brokerDatas": [], "filterServerTable": {}, "queueDatas": [
        {"brokerName": BROKER, "perm": 6, "readQueueNums": 2, "topicSysFlag": 0, "writeQueueNums": 2}]}
    body = fastjson.dumps(route, standard=False)
    answer = wire.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "TopicC", "lo": "false"}, body, version=479)
    assert (answer.code, answer.remark, answer.ext_fields, answer.body) == (ResponseCode.SUCCESS, None, None, None)
    assert wire.rim.topic_queue_table["TopicC"][BROKER].write_queue_nums == 2
    got = json.loads(wire.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicC"}, version=479).body or b"")
    assert got["queueDatas"] == route["queueDatas"]

    before = state(wire.processor)
    bad = wire.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "TopicD"}, b'{"queueDatas": [{"perm": 6')
    assert bad.code == ResponseCode.SYSTEM_ERROR and "JSON" in (bad.remark or ""), bad.remark
    assert state(wire.processor) == before


def test_namesrv_config_travels_as_properties_text(wire: Wire) -> None:
    text = (wire.call(RequestCode.GET_NAMESRV_CONFIG).body or b"").decode()
    assert "orderMessageEnable=false\n" in text and "scanNotActiveBrokerIntervalMs=10000\n" in text
    answer = wire.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert answer.code == ResponseCode.SUCCESS
    assert wire.processor.config.order_message_enable is True
    answer = wire.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/evil\n")
    assert answer.code == ResponseCode.NO_PERMISSION
