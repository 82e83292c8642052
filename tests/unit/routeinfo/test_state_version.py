"""RocketMQ 5's higher-epoch rule (DataVersion.stateVersion) in the NameServer: in the route tables,
through the processor (the Ray path's msgpack bodies) and over the wire (JSON and compressed
bodies, as a RocketMQ 5 broker sends them). Injected clock throughout."""

from __future__ import annotations

import json

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import encode_compressed_register_body
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.models import DataVersion, RegisterBrokerResult, TopicConfig, TopicConfigSerializeWrapper
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from tests.support.namesrv import Wire, broker_body, register_ext, state

CLUSTER, NAME = "DefaultCluster", "broker-a"
OLD, NEW = "10.0.0.1:10911", "10.0.0.2:10911"
TIMEOUT = 10_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def rim(clock: ManualClock) -> RouteInfoManager:
    return RouteInfoManager(NamesrvConfig(), clock)


def register(rim: RouteInfoManager, addr: str, epoch: int, *topics: str, broker_id: int = 0,
             counter: int = 1) -> RegisterBrokerResult:
    table = {t: TopicConfig(topic_name=t, read_queue_nums=4, write_queue_nums=4) for t in topics}
    wrapper = TopicConfigSerializeWrapper(topic_config_table=table,
                                          data_version=DataVersion(rim.clock(), counter, epoch))
    return rim.register_broker(CLUSTER, addr, NAME, broker_id, addr.replace("10911", "10912"), wrapper, [],
                               None, TIMEOUT)


def addrs(rim: RouteInfoManager) -> dict[int, str]:
    return dict(rim.broker_addr_table[NAME].broker_addrs)


# ---------------------------------------------------------------------------- route tables
def test_a_lower_state_version_cannot_take_the_master_id_from_a_live_higher_one(rim: RouteInfoManager) -> None:
    assert register(rim, OLD, 2, "TopicA").refused is None
    result = register(rim, NEW, 1, "TopicA", "TopicB")
    assert result.refused is not None and OLD in result.refused and "2 > 1" in result.refused
    assert result.master_addr is None and result.ha_server_addr is None  # RocketMQ's empty result
    assert addrs(rim) == {0: OLD}
    assert NEW not in rim.broker_live_table, "as RocketMQ, the refused address is not live here"
    assert "TopicB" not in rim.topic_queue_table, "nothing of the refused body is written"
    assert rim.pickup_topic_route_data("TopicA").broker_datas[0].broker_addrs == {0: OLD}  # type: ignore[union-attr]


@pytest.mark.parametrize("epoch", [2, 3], ids=["equal", "higher"])
def test_an_equal_or_higher_state_version_replaces_the_master_at_once(rim: RouteInfoManager, epoch: int) -> None:
    register(rim, OLD, 2, "TopicA")
    rim.drain_changes()
    assert register(rim, NEW, epoch, "TopicA").refused is None
    assert addrs(rim) == {0: NEW}
    assert rim.pickup_topic_route_data("TopicA").broker_datas[0].broker_addrs == {0: NEW}  # type: ignore[union-attr]
    assert NAME in rim.drain_changes().broker_names  # route long-polls wake at once
    assert OLD in rim.broker_live_table, "the old address stays live until it expires, named by no route"


def test_the_returning_old_master_is_refused_then_registers_as_a_slave(rim: RouteInfoManager,
                                                                       clock: ManualClock) -> None:
    register(rim, OLD, 1, "TopicA")
    register(rim, NEW, 1, "TopicA", broker_id=1)
    clock.advance(500)
    register(rim, NEW, 2, "TopicA")  # the slave was elected: epoch 2, brokerId 0 at its own address
    assert addrs(rim) == {0: NEW}
    # the old master's live entry expired meanwhile, it returns still believing it is master of epoch 1
    clock.advance(TIMEOUT + 1)
    register(rim, NEW, 2, "TopicA", counter=2)  # the new master keeps heartbeating
    assert rim.scan_not_active_broker() == 1 and OLD not in rim.broker_live_table
    rim.drain_changes()
    assert register(rim, OLD, 1, "TopicA").refused is not None
    assert addrs(rim) == {0: NEW}
    assert rim.drain_changes().removed == [], "it was not live: nothing to remove"
    result = register(rim, OLD, 2, "TopicA", broker_id=1)  # told by the controller: a slave now
    assert result.refused is None and result.master_addr == NEW
    assert addrs(rim) == {0: NEW, 1: OLD}


def test_a_refused_address_loses_a_liveness_no_route_uses(rim: RouteInfoManager) -> None:
    register(rim, OLD, 1, "TopicA")
    register(rim, NEW, 2, "TopicA")  # replaces OLD at once; OLD still live, unlisted
    assert OLD in rim.broker_live_table
    rim.drain_changes()
    assert register(rim, OLD, 1, "TopicA").refused is not None
    assert OLD not in rim.broker_live_table
    assert [(a, cause) for a, cause, _ in rim.drain_changes().removed] == [(OLD, "refused")]
    assert rim.update_broker_info_update_timestamp(OLD) is False, "its lite heartbeats now say 'not known'"


def test_a_refused_address_listed_as_a_slave_keeps_that_entry(rim: RouteInfoManager) -> None:
    """Where this differs from RocketMQ: RocketMQ first removes the address from its other ids and
    its live entry, so a slave that wrongly claims the master id loses its slave route too."""
    register(rim, OLD, 2, "TopicA")
    register(rim, NEW, 2, "TopicA", broker_id=1)
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    before = state(processor)
    assert register(rim, NEW, 1, "TopicA").refused is not None
    assert state(processor) == before
    assert addrs(rim) == {0: OLD, 1: NEW}


def test_once_the_higher_holder_expires_a_lower_state_version_is_taken(rim: RouteInfoManager,
                                                                      clock: ManualClock) -> None:
    """The rule only protects a live holder (RocketMQ looks it up in brokerLiveTable)."""
    register(rim, OLD, 5, "TopicA")
    clock.advance(TIMEOUT + 1)
    assert rim.scan_not_active_broker() == 1
    assert register(rim, NEW, 1, "TopicA").refused is None
    assert addrs(rim) == {0: NEW}


def test_the_rule_holds_for_every_broker_id_as_in_rocketmq(rim: RouteInfoManager) -> None:
    register(rim, OLD, 0, "TopicA")
    register(rim, "10.0.0.3:10911", 3, "TopicA", broker_id=2)
    assert register(rim, NEW, 2, "TopicA", broker_id=2).refused is not None
    assert addrs(rim) == {0: OLD, 2: "10.0.0.3:10911"}


def test_4x_brokers_without_state_version_behave_as_before(rim: RouteInfoManager) -> None:
    register(rim, OLD, 0, "TopicA")
    assert register(rim, NEW, 0, "TopicA").refused is None  # 0 vs 0: the newer registration wins
    assert addrs(rim) == {0: NEW}


def test_a_state_version_change_alone_is_a_topic_config_change(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, OLD, 1, "TopicA")
    same = DataVersion(clock(), 1, 1)
    assert rim.is_broker_topic_config_changed(OLD, same) is False
    assert rim.is_broker_topic_config_changed(OLD, DataVersion(clock(), 1, 2)) is True


# ---------------------------------------------------------------------------- the processor (Ray path)
def _request(addr: str, epoch: int, broker_id: int = 0) -> RemotingRequest:
    body = {"topicConfigSerializeWrapper": {
        "topicConfigTable": {"TopicA": {"topicName": "TopicA", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
        "dataVersion": {"timestamp": 1, "counter": 1, "stateVersion": epoch}}}
    ext = {"clusterName": CLUSTER, "brokerAddr": addr, "brokerName": NAME, "brokerId": broker_id,
           "haServerAddr": addr}
    return RemotingRequest(RequestCode.REGISTER_BROKER, ext, encode_body(body))


def test_the_processor_answers_a_refusal_as_rocketmq_does_success_and_no_master(rim: RouteInfoManager) -> None:
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    assert processor.process_request(_request(OLD, 4), None).code == ResponseCode.SUCCESS
    assert rim.broker_live_table[OLD].data_version.state_version == 4
    before = state(processor)
    answer = processor.process_request(_request(NEW, 3), None)
    assert answer.code == ResponseCode.SUCCESS
    assert answer.ext_fields == {"haServerAddr": None, "masterAddr": None}
    assert answer.remark is not None and "stateVersion 4 > 3" in answer.remark
    assert state(processor) == before
    answer = processor.process_request(_request(NEW, 5), None)
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    assert addrs(rim) == {0: NEW}


def test_a_bad_state_version_is_refused_with_a_clear_error_and_changes_nothing(rim: RouteInfoManager) -> None:
    processor = DefaultRequestProcessor(rim, KVConfigManager(None))
    before = state(processor)
    answer = processor.process_request(_request(OLD, -1), None)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "stateVersion" in (answer.remark or "")
    assert state(processor) == before


# ---------------------------------------------------------------------------- the wire (TCP frames)
def _wire_body(epoch: int, compressed: bool) -> bytes:
    raw = broker_body({"TopicA": 4})
    raw["topicConfigSerializeWrapper"]["dataVersion"]["stateVersion"] = epoch
    return encode_compressed_register_body(raw) if compressed else json.dumps(raw).encode()


@pytest.mark.parametrize("compressed", [False, True], ids=["json", "compressed"])
def test_over_the_wire_the_higher_epoch_keeps_the_route(compressed: bool) -> None:
    w = Wire()
    flag = {"compressed": "true" if compressed else "false"}
    body = _wire_body(7, compressed)
    assert w.call(RequestCode.REGISTER_BROKER, register_ext(body, addr=OLD) | flag, body, version=479
                  ).code == ResponseCode.SUCCESS
    assert w.rim.broker_live_table[OLD].data_version.state_version == 7
    low = _wire_body(6, compressed)
    answer = w.call(RequestCode.REGISTER_BROKER, register_ext(low, addr=NEW) | flag, low, version=479)
    assert answer.code == ResponseCode.SUCCESS and "refused" in (answer.remark or "")
    assert answer.ext_fields in (None, {}), "no masterAddr/haServerAddr, as RocketMQ's empty result"
    assert w.rim.broker_addr_table[NAME].broker_addrs == {0: OLD}
    high = _wire_body(8, compressed)
    answer = w.call(RequestCode.REGISTER_BROKER, register_ext(high, addr=NEW) | flag, high, version=479)
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    assert w.rim.broker_addr_table[NAME].broker_addrs == {0: NEW}


def test_query_data_version_answers_the_stored_state_version() -> None:
    w = Wire()
    body = _wire_body(3, False)
    w.call(RequestCode.REGISTER_BROKER, register_ext(body, addr=OLD), body, version=479)
    ident = {"brokerAddr": OLD, "brokerId": "0", "brokerName": NAME, "clusterName": CLUSTER}
    other_epoch = json.dumps({"counter": 1, "stateVersion": 4, "timestamp": 1_700_000_000_000}).encode()
    answer = w.call(RequestCode.QUERY_DATA_VERSION, ident, other_epoch)
    assert answer.ext_fields == {"changed": "true"}
    assert json.loads(answer.body or b"") == {"counter": 1, "stateVersion": 3, "timestamp": 1_700_000_000_000}
