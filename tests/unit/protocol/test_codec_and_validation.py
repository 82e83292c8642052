"""The body codec, field validation, wire models, request headers and protocol constants."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from namesrv.protocol.broker_headers import SendMessageRequestHeader
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import MAX_FRAME_SIZE, PERM_ALL, Perm, is_readable, is_writeable, perm_to_string
from namesrv.protocol.headers import (
    BrokerIdentityHeader,
    DeleteTopicFromNamesrvRequestHeader,
    KVConfigHeader,
    RegisterBrokerRequestHeader,
    TopicHeader,
)
from namesrv.protocol.models import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    parse_data_version,
)
from namesrv.protocol.msgpack_codec import CodecError, decode_body, encode_body
from namesrv.protocol.register_body import read_register_body
from namesrv.protocol.types import (
    BrokerId,
    InvalidInput,
    PermValue,
    QueueNums,
    TopicSysFlag,
    check,
    check_name,
    check_topic,
)
from namesrv.remoting.command import RemotingResponse
from namesrv.routeinfo.config import NamesrvConfig

# ---------------------------------------------------------------------------- codec


@pytest.mark.parametrize(
    "obj",
    [None, 0, -1, 2**63, "τόπος", b"\x00\xff", [1, [2, [3]]], {"a": {"b": [None, True]}}, {1: "int key"}],
)
def test_body_round_trip(obj: object) -> None:
    assert decode_body(encode_body(obj)) == obj


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = encode_body({"k": "v"})
    assert decode_body(bytearray(data)) == {"k": "v"}
    assert decode_body(memoryview(data)) == {"k": "v"}


@pytest.mark.parametrize("data", ["text", None, 5, [1]], ids=["str", "none", "int", "list"])
def test_decode_refuses_non_bytes(data: object) -> None:
    with pytest.raises(CodecError, match="must be bytes"):
        decode_body(data)  # type: ignore[arg-type]


def test_decode_refuses_oversized_body_before_parsing() -> None:
    data = encode_body("x" * 100)
    assert decode_body(data, max_size=len(data)) == "x" * 100
    with pytest.raises(CodecError, match="exceeds"):
        decode_body(data, max_size=len(data) - 1)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # the one byte msgpack never uses
        encode_body({"key": "value"})[:-2],
        encode_body([1, 2, 3])[:-1],
        b"\xdb\xff\xff\xff\xff",  # str32 claiming 4 GiB
        b"\xdd\x7f\xff\xff\xff",  # array32 claiming 2^31 items
    ],
    ids=["empty", "reserved-byte", "truncated-map", "truncated-array", "huge-str-header", "huge-array-header"],
)
def test_decode_refuses_invalid_or_truncated_msgpack(data: bytes) -> None:
    with pytest.raises(CodecError, match="not valid msgpack"):
        decode_body(data)


def test_decode_refuses_trailing_bytes() -> None:
    with pytest.raises(CodecError, match="trailing"):
        decode_body(encode_body({"a": 1}) + encode_body(2))


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError)


def test_response_defaults_and_body_decoding() -> None:
    response = RemotingResponse()
    assert response.ok and response.code == ResponseCode.SUCCESS
    assert response.wire_body() is None
    route = TopicRouteData([QueueData("b", 1, 1, 6)], [BrokerData("C", "b", {0: "h:1"})])
    assert RemotingResponse(payload=route).wire_body() == route.to_wire()
    assert RemotingResponse(payload={"k": "v"}).wire_body() == {"k": "v"}
    assert not RemotingResponse(code=ResponseCode.TOPIC_NOT_EXIST).ok


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize("topic", ["T", "TopicA", "a-b_c", "%RETRY%group", "a|b", "9" * 127])
def test_valid_topics(topic: str) -> None:
    assert check_topic(topic) == topic


@pytest.mark.parametrize(
    "topic, message",
    [
        ("", "blank"),
        ("T" * 128, "longer than 127"),
        ("a b", "characters outside"),
        ("tópico", "characters outside"),
        ("a/b", "characters outside"),
        ("a\n", "characters outside"),
        (5, "must be a string"),
        (None, "must be a string"),
        (b"bytes", "must be a string"),
    ],
)
def test_invalid_topics(topic: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_topic(topic)


@pytest.mark.parametrize("name", ["broker-a", "10.0.0.1:10911", "Default_Cluster", "ns@1", "a.b%c|d", "x" * 255])
def test_valid_names(name: str) -> None:
    assert check_name(name, "brokerName") == name


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "blank"),
        ("x" * 256, "longer than 255"),
        ("a b", "characters"),
        ("a/b", "characters"),
        ("broker-a\n", "characters"),
        (3, "string"),
    ],
)
def test_invalid_names_mention_the_field(name: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        check_name(name, "clusterName")
    assert "clusterName" in str(info.value)


@pytest.mark.parametrize("good", [0, 1, 1024])
def test_queue_nums_bounds_accept(good: int) -> None:
    assert check(QueueNums, good, "readQueueNums") == good


@pytest.mark.parametrize("bad", [-1, 1025, 2**40, True, 8.0, "8", None])
def test_queue_nums_bounds_refuse(bad: object) -> None:
    with pytest.raises(InvalidInput):
        check(QueueNums, bad, "readQueueNums")


def test_perm_accepts_exactly_the_three_bits() -> None:
    for perm in range(PERM_ALL + 1):
        assert check(PermValue, perm, "perm") == perm
    for bad in (8, 9, 16, -1, -8, 2**31, True, "6", 6.0):
        with pytest.raises(InvalidInput):
            check(PermValue, bad, "perm")


def test_topic_sys_flag_bounds() -> None:
    for good in (0, 1, 2, 3):
        assert check(TopicSysFlag, good, "topicSysFlag") == good
    for bad in (-1, 4, False, "1"):
        with pytest.raises(InvalidInput):
            check(TopicSysFlag, bad, "topicSysFlag")


def test_broker_id_bounds() -> None:
    for good in (0, 1, 2**31):
        assert check(BrokerId, good, "brokerId") == good
    for bad in (-1, 2**31 + 1, False, "0", 0.0, None):
        with pytest.raises(InvalidInput):
            check(BrokerId, bad, "brokerId")


# ---------------------------------------------------------------------------- models


def test_topic_config_defaults_aliases_and_wire_form() -> None:
    tc = TopicConfig(topic_name="TopicA")
    assert tc.to_wire() == {
        "topicName": "TopicA",
        "readQueueNums": 16,
        "writeQueueNums": 16,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    assert TopicConfig.model_validate(tc.to_wire()) == tc


@pytest.mark.parametrize(
    "field, value",
    [
        ("readQueueNums", "8"),
        ("readQueueNums", 8.0),
        ("writeQueueNums", -1),
        ("perm", 8),
        ("order", "yes"),
        ("topicName", "bad topic"),
        ("topicFilterType", "SQL92"),
    ],
)
def test_topic_config_is_strict(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        TopicConfig.model_validate({"topicName": "TopicA", field: value})


def test_data_version_compares_both_fields_and_steps() -> None:
    v = DataVersion(100, 1)
    assert v == DataVersion(100, 1)
    assert v != DataVersion(100, 2) and v != DataVersion(101, 1)
    assert v.next_version(200) == DataVersion(200, 2)
    assert DataVersion.from_wire(v.to_wire()) == v


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [1, 2],
        {"timestamp": 1},
        {"timestamp": "1", "counter": 2},
        {"timestamp": 1, "counter": True},
        {"timestamp": -1, "counter": 2},
        {"timestamp": 1, "counter": 2**63},
        {"timestamp": 1.0, "counter": 2},
    ],
)
def test_parse_data_version_refuses_anything_but_two_small_ints(raw: object) -> None:
    with pytest.raises(InvalidInput, match="dataVersion"):
        parse_data_version(raw)


def test_parse_data_version_accepts_wire_dict_and_instance() -> None:
    assert parse_data_version({"timestamp": 5, "counter": 6}) == DataVersion(5, 6)
    v = DataVersion(1, 2)
    assert parse_data_version(v) is v


def test_register_body_validates_the_whole_topic_table() -> None:
    wrapper = TopicConfigSerializeWrapper.model_validate(
        {
            "topicConfigTable": {"TopicA": {"topicName": "TopicA", "perm": 4}},
            "dataVersion": {"timestamp": 10, "counter": 2},
        }
    )
    assert wrapper.data_version == DataVersion(10, 2)
    assert wrapper.topic_config_table["TopicA"].perm == 4
    body = read_register_body(encode_body({"filterServerList": ["10.0.0.9:1"]}), "msgpack")
    assert body["filterServerList"] == ["10.0.0.9:1"]
    empty = TopicConfigSerializeWrapper.model_validate({})
    assert empty.topic_config_table == {}
    assert empty.data_version == DataVersion()
    assert read_register_body(encode_body({}), "msgpack")["filterServerList"] == []


@pytest.mark.parametrize(
    "raw",
    [
        {"topicConfigTable": {"A": {"topicName": "B"}}},
        {"topicConfigTable": {5: {"topicName": "A"}}},
        {"dataVersion": [1, 2]},
        [],
    ],
)
def test_register_body_refuses_inconsistent_shapes(raw: dict) -> None:
    with pytest.raises(ValidationError):
        TopicConfigSerializeWrapper.model_validate(raw)


def test_register_body_refuses_a_filter_server_list_that_is_no_list() -> None:
    with pytest.raises(InvalidInput):
        read_register_body(encode_body({"filterServerList": "10.0.0.9:1"}), "msgpack")


def test_route_and_cluster_wire_round_trips() -> None:
    route = TopicRouteData(
        [QueueData("b", 4, 4, 6, 0)],
        [BrokerData("C", "b", {0: "h:1", 1: "h:2"})],
        {"h:1": ["f:1"]},
        "b:4",
    )
    wire = decode_body(encode_body(route.to_wire()))
    assert TopicRouteData.from_wire(wire) == route
    info = ClusterInfo({"b": BrokerData("C", "b", {0: "h:1"})}, {"C": {"b"}})
    assert ClusterInfo.from_wire(decode_body(encode_body(info.to_wire()))) == info


def test_broker_data_prefers_master_then_lowest_slave() -> None:
    assert BrokerData("C", "b", {2: "h:3", 0: "h:1", 1: "h:2"}).select_broker_addr() == "h:1"
    assert BrokerData("C", "b", {2: "h:3", 1: "h:2"}).select_broker_addr() == "h:2"
    assert BrokerData("C", "b", {}).select_broker_addr() is None


def test_copies_are_independent() -> None:
    bd = BrokerData("C", "b", {0: "h:1"})
    copy = bd.copy()
    copy.broker_addrs[1] = "h:2"
    assert bd.broker_addrs == {0: "h:1"}
    qd = QueueData("b", 1, 1, 6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        qd.perm = 4  # type: ignore[misc]
    changed = dataclasses.replace(qd, perm=4)
    assert qd.perm == 6 and changed == QueueData("b", 1, 1, 4)


# ---------------------------------------------------------------------------- headers


def test_headers_accept_camel_and_snake_names_and_ignore_extras() -> None:
    camel = BrokerIdentityHeader.model_validate(
        {"clusterName": "C", "brokerAddr": "h:1", "brokerName": "b", "brokerId": 1, "extra": "x"}
    )
    snake = BrokerIdentityHeader.model_validate(
        {"cluster_name": "C", "broker_addr": "h:1", "broker_name": "b", "broker_id": 1}
    )
    assert camel == snake
    assert (
        BrokerIdentityHeader.model_validate({"clusterName": "C", "brokerAddr": "h:1", "brokerName": "b"}).broker_id == 0
    )


def test_one_spelling_per_header_field() -> None:
    """From the wire only RocketMQ's name counts; on Ray either name, never both; V2 by its letters."""
    camel = {"clusterName": "C", "brokerAddr": "h:1", "brokerName": "b"}
    wire = BrokerIdentityHeader.from_ext(camel | {"broker_name": "other", "brokerId": "1"}, wire=True)
    assert wire.broker_name == "b" and wire.broker_id == 1, "snake_case is an unknown key over TCP"
    with pytest.raises(ValidationError):
        BrokerIdentityHeader.from_ext({"cluster_name": "C", "broker_addr": "h:1", "broker_name": "b"}, wire=True)
    with pytest.raises(InvalidInput, match="two names"):
        BrokerIdentityHeader.from_ext(camel | {"broker_name": "other"}, wire=False)
    assert BrokerIdentityHeader.from_ext({"cluster_name": "C", "broker_addr": "h:1", "brokerName": "b"},
                                         wire=False).broker_name == "b"
    with pytest.raises(InvalidInput, match="'topic'"):
        SendMessageRequestHeader.from_v2({"a": "PG", "b": "Allowed", "e": "0", "topic": "Denied"})


@pytest.mark.parametrize(
    "ext",
    [
        {"brokerId": "0"},
        {"brokerId": 0.0},
        {"brokerId": True},
        {"clusterName": 5},
        {"brokerAddr": ""},
        {"haServerAddr": None},
        {"heartbeatTimeoutMillis": -1},
        {"heartbeatTimeoutMillis": 24 * 3600 * 1000 + 1},
        {"bodyCrc32": 2**32},
        {"bodyCrc32": -1},
    ],
)
def test_register_header_is_strict(ext: dict) -> None:
    base = {"clusterName": "C", "brokerAddr": "h:1", "brokerName": "b", "brokerId": 0}
    with pytest.raises(ValidationError):
        RegisterBrokerRequestHeader.model_validate(base | ext)


def test_register_header_optional_fields() -> None:
    base = {"clusterName": "C", "brokerAddr": "h:1", "brokerName": "b"}
    header = RegisterBrokerRequestHeader.model_validate(base)
    assert (header.ha_server_addr, header.heartbeat_timeout_millis, header.body_crc32) == ("", None, None)
    header = RegisterBrokerRequestHeader.model_validate(base | {"haServerAddr": "h:2", "bodyCrc32": 0})
    assert header.ha_server_addr == "h:2" and header.body_crc32 == 0


def test_topic_and_kv_headers() -> None:
    assert TopicHeader.model_validate({"topic": "TopicA"}).topic == "TopicA"
    with pytest.raises(ValidationError):
        TopicHeader.model_validate({"topic": 5})
    delete = DeleteTopicFromNamesrvRequestHeader.model_validate({"topic": "TopicA", "clusterName": ""})
    assert delete.cluster_name is None, "a blank cluster means every cluster"
    kv = KVConfigHeader.model_validate({"namespace": "ns", "key": "k"})
    assert kv.value is None
    with pytest.raises(ValidationError):
        KVConfigHeader.model_validate({"namespace": "ns", "key": "k" * 4097})
    with pytest.raises(ValidationError):
        KVConfigHeader.model_validate({"namespace": "ns", "key": "k", "value": "v" * (1024 * 1024 + 1)})


# ---------------------------------------------------------------------------- constants and config


def test_request_and_response_codes_are_rocketmqs_numbers() -> None:
    assert {c.name: int(c) for c in RequestCode} == {
        "PUT_KV_CONFIG": 100,
        "GET_KV_CONFIG": 101,
        "DELETE_KV_CONFIG": 102,
        "REGISTER_BROKER": 103,
        "UNREGISTER_BROKER": 104,
        "GET_ROUTEINFO_BY_TOPIC": 105,
        "GET_BROKER_CLUSTER_INFO": 106,
        "WIPE_WRITE_PERM_OF_BROKER": 205,
        "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": 206,
        "DELETE_TOPIC_IN_NAMESRV": 216,
        "REGISTER_TOPIC_IN_NAMESRV": 217,
        "GET_KVLIST_BY_NAMESPACE": 219,
        "GET_TOPICS_BY_CLUSTER": 224,
        "GET_SYSTEM_TOPIC_LIST_FROM_NS": 304,
        "UPDATE_NAMESRV_CONFIG": 318,
        "GET_NAMESRV_CONFIG": 319,
        "QUERY_DATA_VERSION": 322,
        "ADD_WRITE_PERM_OF_BROKER": 327,
        "BROKER_HEARTBEAT": 904,
    }
    named = {
        "SUCCESS": 0,
        "SYSTEM_ERROR": 1,
        "REQUEST_CODE_NOT_SUPPORTED": 3,
        "NO_PERMISSION": 16,
        "TOPIC_NOT_EXIST": 17,
        "QUERY_NOT_FOUND": 22,
    }
    assert {name: int(ResponseCode[name]) for name in named} == named


def test_perm_bits_and_their_string_form() -> None:
    assert (int(Perm.READ), int(Perm.WRITE), int(Perm.INHERIT), PERM_ALL) == (4, 2, 1, 7)
    assert perm_to_string(6) == "RW-"
    assert perm_to_string(4) == "R--"
    assert perm_to_string(7) == "RWX"
    assert perm_to_string(0) == "---"
    assert is_readable(4) and not is_writeable(4)
    assert is_writeable(2) and not is_readable(2)


def test_config_defaults_blacklist_and_strictness() -> None:
    config = NamesrvConfig()
    assert config.broker_channel_expired_time_ms == 120_000
    assert config.scan_not_active_broker_interval_ms == 10_000
    assert config.scan_not_active_broker_initial_delay_ms == 5_000
    assert config.max_body_size == MAX_FRAME_SIZE == 16 * 1024 * 1024
    always = {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome", "aclEnable", "aclFile"}
    assert config.blacklisted_keys() == always
    assert NamesrvConfig(config_black_list=" a ; ;b;").blacklisted_keys() == {"a", "b"} | always
    with pytest.raises(ValidationError):
        NamesrvConfig(no_such_setting=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        config.scan_not_active_broker_interval_ms = 0


def test_unknown_fields_are_ignored_as_fastjson_ignores_them() -> None:
    """A RocketMQ 5.x broker's body carries fields this NameServer has no use for (topic attributes,
    static-topic queue mappings): accepted and ignored, as fastjson does; DataVersion.stateVersion
    is read (the higher-epoch rule)."""
    wrapper = TopicConfigSerializeWrapper.model_validate({
        "topicConfigTable": {"T": {"topicName": "T", "attributes": {}, "readQueueNums": 4, "writeQueueNums": 4,
                                   "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                   "order": False}},
        "dataVersion": {"counter": 2, "stateVersion": 0, "timestamp": 7},
        "topicQueueMappingInfoMap": {},
    })
    assert wrapper.data_version == DataVersion(7, 2)
    assert wrapper.topic_config_table["T"].read_queue_nums == 4
    assert parse_data_version({"timestamp": 1, "counter": 2, "stateVersion": 3}) == DataVersion(1, 2, 3)
    assert parse_data_version({"timestamp": 1, "counter": 2, "stateVersion": 3, "x": "y"}) == DataVersion(1, 2, 3)


@pytest.mark.parametrize("bad", [{"timestamp": 1, "counter": 2, "stateVersion": -1},
                                 {"timestamp": 1, "counter": 2, "stateVersion": "3"},
                                 {"timestamp": 1, "counter": 2, "stateVersion": 2**63}])
def test_a_bad_state_version_is_refused(bad: dict) -> None:
    with pytest.raises(InvalidInput, match="stateVersion"):
        parse_data_version(bad)


def test_data_version_wire_form_is_rocketmq_5s() -> None:
    dv = DataVersion(7, 2, 5)
    assert dv.to_wire() == {"counter": 2, "stateVersion": 5, "timestamp": 7}
    assert list(dv.to_wire()) == ["counter", "stateVersion", "timestamp"]  # fastjson's order
    assert DataVersion.from_wire(dv.to_wire()) == dv
    assert DataVersion.from_wire({"timestamp": 7, "counter": 2}) == DataVersion(7, 2, 0)  # a 4.x broker
    assert dv.next_version(9) == DataVersion(9, 3, 5)  # kept
    assert dv.next_version(9, state_version=6) == DataVersion(9, 3, 6)
    assert DataVersion(7, 2, 5) != DataVersion(7, 2, 6)  # any difference is a change, as RocketMQ's equals
