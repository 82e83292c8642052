"""Subscription groups (namesrv.broker.subscription): the table, its file and DataVersion, the admin
codes 200 / 201 / 207 as a wire client sends them, and what the broker enforces from a group's
config (consumeEnable, consumeBroadcastEnable, retryMaxTimes, retryQueueNums,
notifyConsumerIdsChangedEnable). Pure: real store files, a manual clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from namesrv.broker.processor.subscription_group import SubscriptionGroupProcessor
from namesrv.broker.subscription.config import (
    CID_SYS_RMQ_TRANS,
    TOOLS_CONSUMER_GROUP,
    SubscriptionGroupConfig,
    SubscriptionGroupError,
)
from namesrv.broker.subscription.manager import SubscriptionGroupManager
from namesrv.common.clock import ManualClock
from namesrv.common.persist import BackgroundWriter
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.pipeline import RequestPipeline
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import WIRE, Broker, heartbeat, through_pipeline


def cfg(group: str, **settings: Any) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(group_name=group, **settings)


# ============================================================================ the table and its file
def test_a_fresh_table_holds_rocketmqs_system_groups_and_changes_persist(tmp_path: Path) -> None:
    path, clock = tmp_path / "subscriptionGroup.json", ManualClock()
    m = SubscriptionGroupManager(path, clock)
    assert TOOLS_CONSUMER_GROUP in m.table and CID_SYS_RMQ_TRANS in m.table and not path.exists()
    clock.advance(5)
    assert m.update(cfg("G1", consume_enable=False, retry_max_times=3)) is True
    assert m.update(cfg("G1", consume_enable=False, retry_max_times=3)) is False, "unchanged: no new version"
    on_disk = json.loads(path.read_text())
    assert set(on_disk) == {"subscriptionGroupTable", "dataVersion"}
    assert on_disk["subscriptionGroupTable"]["G1"]["consumeEnable"] is False
    assert on_disk["subscriptionGroupTable"]["G1"]["retryMaxTimes"] == 3
    assert on_disk["dataVersion"]["counter"] == 1
    again = SubscriptionGroupManager(path, clock)
    assert again.get("G1") == cfg("G1", consume_enable=False, retry_max_times=3)
    assert again.data_version == m.data_version
    assert again.delete("G1") is True and again.delete("G1") is False
    assert "G1" not in SubscriptionGroupManager(path, clock).table


def test_first_use_creates_a_default_group_unless_auto_create_is_off(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path / "sg.json", ManualClock())
    assert m.find("CG") == cfg("CG") and m.get("CG") == cfg("CG")
    assert m.find("bad name") is None, "an invalid name is never created"
    off = SubscriptionGroupManager(tmp_path / "off.json", ManualClock(), auto_create=False)
    assert off.find("CG") is None and "CG" not in off.table


@pytest.mark.parametrize(("group", "why"), [
    ("", "The specified group is blank."),
    ("a b", "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ("g" * 256, "is longer than group max length: 255"),
])
def test_bad_group_names_are_refused_and_change_nothing(tmp_path: Path, group: str, why: str) -> None:
    m = SubscriptionGroupManager(tmp_path / "sg.json", ManualClock())
    before = (dict(m.table), m.data_version)
    with pytest.raises(SubscriptionGroupError, match=why.replace("^", r"\^").replace("[", r"\[").replace("|", r"\|")
                       .replace("$", r"\$").replace("+", r"\+")):
        m.update(SubscriptionGroupConfig.model_construct(group_name=group))
    with pytest.raises(SubscriptionGroupError):
        m.delete(group)
    assert (dict(m.table), m.data_version) == before


def test_system_groups_cannot_be_deleted(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path / "sg.json", ManualClock())
    for group in (TOOLS_CONSUMER_GROUP, CID_SYS_RMQ_TRANS, "CID_RMQ_SYS_OTHER"):
        with pytest.raises(SubscriptionGroupError, match="system group"):
            m.delete(group)
    assert TOOLS_CONSUMER_GROUP in m.table


def test_a_write_that_fails_rolls_the_change_back(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    m = SubscriptionGroupManager(blocker / "sg.json", ManualClock())
    with pytest.raises(OSError):
        m.update(cfg("G1"))
    assert "G1" not in m.table and m.data_version.counter == 0


def test_a_first_use_that_cannot_be_written_is_served_with_the_defaults_and_keeps_nothing(tmp_path: Path) -> None:
    """As RocketMQ (whose persist only logs): a pull of a new group on a full disk is not refused
    for the group's file; nothing is kept, so the next use tries the write again."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    m = SubscriptionGroupManager(blocker / "sg.json", ManualClock())
    told: list[str] = []
    m.listeners.append(lambda group, _config: told.append(group))
    config = m.find("NewGroup")
    assert config is not None and config.group_name == "NewGroup" and config.consume_enable
    assert "NewGroup" not in m.table and m.data_version.counter == 0 and told == []
    blocker.unlink()
    assert m.find("NewGroup") is not None and "NewGroup" in m.table and told == ["NewGroup"]


def test_a_slave_takes_its_masters_table(tmp_path: Path) -> None:
    master = SubscriptionGroupManager(tmp_path / "m.json", ManualClock())
    master.update(cfg("G1", retry_queue_nums=3))
    slave = SubscriptionGroupManager(tmp_path / "s.json", ManualClock())
    assert slave.sync_from_master(dict(master.table), master.data_version) is True
    assert slave.get("G1") == cfg("G1", retry_queue_nums=3)
    assert slave.sync_from_master(dict(master.table), master.data_version) is False
    assert SubscriptionGroupManager(tmp_path / "s.json", ManualClock()).get("G1") == cfg("G1", retry_queue_nums=3)


# ============================================================================ the admin codes on the wire
class GroupAdmin:
    def __init__(self, broker: Broker) -> None:
        self.writer = BackgroundWriter("test")
        self.groups = broker.processor.context.subscription_groups
        self.groups.path, self.groups.writer = broker.store.dir.parent / "sg.json", self.writer.write
        self.pipeline = RequestPipeline("broker-a", WIRE.encode)
        self.pipeline.register(SubscriptionGroupProcessor(self.groups, broker.offsets, self.writer).handlers)

    def call(self, code: int, body: bytes | None = None, **ext: str) -> RemotingCommand:
        return through_pipeline(self.pipeline, RemotingCommand(code, 3, ext_fields=ext or None, body=body))


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def test_update_list_and_delete_over_the_wire(broker: Broker) -> None:
    admin = GroupAdmin(broker)
    body = json.dumps({"groupName": "G1", "consumeEnable": False, "retryQueueNums": 2, "retryMaxTimes": 5}).encode()
    assert admin.call(Code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body).code == ResponseCode.SUCCESS
    assert json.loads((broker.store.dir.parent / "sg.json").read_text())["subscriptionGroupTable"]["G1"][
        "retryQueueNums"] == 2, "answered once on disk"
    listed = admin.call(Code.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    table = json.loads(listed.body or b"")["subscriptionGroupTable"]
    assert table["G1"]["consumeEnable"] is False and table["G1"]["retryMaxTimes"] == 5 and TOOLS_CONSUMER_GROUP in table
    broker.offsets.commit_offset("G1", "T", 0, 7)
    gone = admin.call(Code.DELETE_SUBSCRIPTIONGROUP, groupName="G1", cleanOffset="true")
    assert gone.code == ResponseCode.SUCCESS and admin.groups.get("G1") is None
    assert broker.offsets.query_offset("G1", "T", 0) == -1, "cleanOffset removes the group's offsets"


def test_one_groups_config_is_read_and_a_new_group_created_with_the_defaults(broker: Broker) -> None:
    admin = GroupAdmin(broker)
    body = json.dumps({"groupName": "Fifo", "consumeMessageOrderly": True, "retryMaxTimes": 3}).encode()
    assert admin.call(Code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body).code == ResponseCode.SUCCESS
    got = admin.call(Code.GET_SUBSCRIPTIONGROUP_CONFIG, group="Fifo")
    assert got.code == ResponseCode.SUCCESS
    config = json.loads(got.body or b"")
    assert (config["groupName"], config["consumeMessageOrderly"], config["retryMaxTimes"]) == ("Fifo", True, 3)
    fresh = admin.call(Code.GET_SUBSCRIPTIONGROUP_CONFIG, group="NewGroup")
    assert json.loads(fresh.body or b"")["retryMaxTimes"] == 16 and admin.groups.get("NewGroup") is not None
    for bad in ({"group": "bad group"}, {}):
        before = dict(admin.groups.table)
        assert admin.call(Code.GET_SUBSCRIPTIONGROUP_CONFIG, **bad).code == ResponseCode.INVALID_PARAMETER
        assert admin.groups.table == before


def test_without_auto_create_an_unknown_groups_config_does_not_exist(tmp_path: Path) -> None:
    admin = GroupAdmin(Broker(tmp_path, auto_create_subscription_group=False))
    answer = admin.call(Code.GET_SUBSCRIPTIONGROUP_CONFIG, group="Nobody")
    assert (answer.code, answer.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")


@pytest.mark.parametrize(("body", "why"), [
    ({"groupName": "bad group"}, "contains illegal characters"),
    ({"groupName": "G1", "retryQueueNums": -1}, "retryQueueNums"),
    ({"groupName": "G1", "consumeEnable": "maybe"}, "consumeEnable"),
    ({"consumeEnable": True}, "needs a groupName"),
])
def test_bad_configs_are_refused_with_a_reason_and_change_nothing(broker: Broker, body: dict[str, Any],
                                                                    why: str) -> None:
    admin = GroupAdmin(broker)
    before = (dict(admin.groups.table), admin.groups.data_version)
    answer = admin.call(Code.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, json.dumps(body).encode())
    assert answer.code == ResponseCode.INVALID_PARAMETER and why in (answer.remark or "")
    assert (dict(admin.groups.table), admin.groups.data_version) == before


def test_deleting_a_system_group_is_refused(broker: Broker) -> None:
    admin = GroupAdmin(broker)
    answer = admin.call(Code.DELETE_SUBSCRIPTIONGROUP, groupName=TOOLS_CONSUMER_GROUP)
    assert answer.code == ResponseCode.INVALID_PARAMETER and "system group" in (answer.remark or "")
    assert TOOLS_CONSUMER_GROUP in admin.groups.table


# ============================================================================ what the broker enforces
def test_a_group_with_consume_enable_off_cannot_pull(broker: Broker) -> None:
    broker.send(b"one")
    assert broker.pull(0).code == ResponseCode.SUCCESS
    broker.processor.context.subscription_groups.update(cfg("CG", consume_enable=False))
    refused = broker.pull(0)
    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, CG")


def test_without_auto_create_an_unknown_group_cannot_pull(tmp_path: Path) -> None:
    b = Broker(tmp_path, auto_create_subscription_group=False)
    b.send(b"one")
    refused = b.pull(0)
    assert refused.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "CG" in (refused.remark or "")


def test_a_broadcasting_member_of_a_group_without_broadcast_is_refused(broker: Broker) -> None:
    body = json.loads(heartbeat("c1"))
    body["consumerDataSet"][0]["messageModel"] = "BROADCASTING"
    broker.call(Code.HEART_BEAT, body=json.dumps(body).encode())
    broker.send(b"one")
    assert broker.pull(0).code == ResponseCode.SUCCESS
    broker.processor.context.subscription_groups.update(cfg("CG", consume_broadcast_enable=False))
    refused = broker.pull(0)
    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION,
                                              "the consumer group[CG] can not consume by broadcast way")


def test_retry_max_times_of_the_group_sends_to_the_dlq_when_the_request_does_not_say(broker: Broker) -> None:
    broker.processor.context.subscription_groups.update(cfg("CG", retry_max_times=0))
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    broker.send(b"poison")
    [m] = broker.store.get_message("T", 0, 0)
    back = {"offset": m.commit_log_offset, "group": "CG", "delayLevel": 0, "originMsgId": "ORIG"}
    assert broker.call(Code.CONSUMER_SEND_MSG_BACK, back).code == ResponseCode.SUCCESS
    [dead] = broker.store.get_message("%DLQ%CG", 0, 0)
    assert dead.body == b"poison" and dead.reconsume_times == 1


def test_retry_queue_nums_shapes_the_retry_topic_and_zero_drops_the_message(broker: Broker) -> None:
    groups = broker.processor.context.subscription_groups
    groups.update(cfg("CG", retry_queue_nums=3))
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    assert broker.topics.topic_config_table["%RETRY%CG"].write_queue_nums == 3
    groups.update(cfg("CG", retry_queue_nums=0))
    broker.send(b"poison")
    [m] = broker.store.get_message("T", 0, 0)
    before = broker.state()
    back = {"offset": m.commit_log_offset, "group": "CG", "delayLevel": 0}
    assert broker.call(Code.CONSUMER_SEND_MSG_BACK, back).code == ResponseCode.SUCCESS
    assert broker.state() == before, "a group keeping no retries drops the message, as RocketMQ"


def test_notify_consumer_ids_changed_enable_off_keeps_the_members_untold(broker: Broker) -> None:
    broker.processor.context.subscription_groups.update(cfg("CG", notify_consumer_ids_changed_enable=False))
    broker.call(Code.HEART_BEAT, body=heartbeat("c1"))
    assert broker.notified == []
    broker.call(Code.HEART_BEAT, body=heartbeat("c1", group="OTHER"))
    assert [g for g, _ in broker.notified] == ["OTHER"]
