"""TopicConfigManager: the broker's topic table, its DataVersion, persistence, TBW102 auto-create,
and the permission override in the register body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_ALL, SELF_TEST_TOPIC, Perm
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.protocol.types import InvalidInput

RW = int(Perm.READ | Perm.WRITE)
R = int(Perm.READ)
W = int(Perm.WRITE)
TBW = AUTO_CREATE_TOPIC_KEY_TOPIC


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "topics.json"


def tc(topic: str, queues: int = 8, perm: int = RW, **extra: object) -> TopicConfig:
    return TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm, **extra)


def manager(path: Path | None, clock: ManualClock, auto_create: bool = True, queues: int = 8) -> TopicConfigManager:
    return TopicConfigManager(path, clock, auto_create, queues)


# ============================================================================ start and persistence
def test_fresh_broker_has_the_system_topics_and_version_one(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    assert m.topic_config_table[SELF_TEST_TOPIC] == tc(SELF_TEST_TOPIC, queues=1)
    assert m.topic_config_table[TBW] == tc(TBW, queues=8, perm=PERM_ALL)
    assert set(m.topic_config_table) == {SELF_TEST_TOPIC, TBW}
    assert m.data_version == DataVersion(clock.now_ms, 1)
    assert path.exists()


def test_tbw102_only_with_auto_create_and_with_the_configured_queue_count(path: Path, clock: ManualClock) -> None:
    assert TBW not in manager(None, clock, auto_create=False).topic_config_table
    m = manager(None, clock, queues=3)
    assert (m.topic_config_table[TBW].read_queue_nums, m.topic_config_table[TBW].write_queue_nums) == (3, 3)


def test_restart_loads_table_and_version_without_bumping(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    clock.advance(10)
    m.update_topic_config(tc("TopicA", queues=4, order=True))
    table, version = dict(m.topic_config_table), m.data_version

    clock.advance(1_000)
    again = manager(path, clock)
    assert again.topic_config_table == table
    assert again.data_version == version  # nothing changed, so no new version
    clock.advance(5)
    again.update_topic_config(tc("TopicB"))
    assert again.data_version == DataVersion(clock.now_ms, version.counter + 1)  # counter continues


def test_enabling_auto_create_on_an_existing_broker_adds_tbw102_and_bumps(path: Path, clock: ManualClock) -> None:
    before = manager(path, clock, auto_create=False).data_version
    clock.advance(7)
    m = manager(path, clock, auto_create=True)
    assert TBW in m.topic_config_table
    assert m.data_version == DataVersion(clock.now_ms, before.counter + 1)
    assert manager(path, clock).data_version == m.data_version  # and persisted


def test_a_new_master_epoch_is_the_state_version_and_survives_a_restart(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    before = m.data_version
    clock.advance(10)
    assert m.next_version(state_version=3) == DataVersion(clock.now_ms, before.counter + 1, 3)
    m.update_topic_config(tc("TopicA"))  # later changes keep the epoch
    assert m.data_version.state_version == 3
    again = manager(path, clock)
    assert again.data_version == m.data_version
    assert json.loads(path.read_text())["dataVersion"]["stateVersion"] == 3


def test_file_format_is_camel_case_json_with_the_version(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    m.update_topic_config(tc("TopicA", queues=2, perm=R))
    data = json.loads(path.read_text())
    assert data["dataVersion"] == {"timestamp": m.data_version.timestamp, "counter": m.data_version.counter,
                                   "stateVersion": 0}
    assert data["topicConfigTable"]["TopicA"] == {
        "topicName": "TopicA",
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": R,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    assert [p.name for p in path.parent.iterdir()] == ["topics.json"]  # no temp files left


def test_in_memory_manager_never_touches_disk(tmp_path: Path, clock: ManualClock) -> None:
    m = manager(None, clock)
    m.update_topic_config(tc("TopicA"))
    assert list(tmp_path.iterdir()) == []


# ============================================================================ changes and versions
def test_update_bumps_version_only_on_a_real_change(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    v0 = m.data_version

    clock.advance(1)
    assert m.update_topic_config(tc("TopicA")) is True
    v1 = m.data_version
    assert v1 == DataVersion(clock.now_ms, v0.counter + 1)

    clock.advance(1)
    assert m.update_topic_config(tc("TopicA")) is False  # identical: no bump, no write
    assert m.data_version == v1

    clock.advance(1)
    assert m.update_topic_config(tc("TopicA", perm=R)) is True
    assert m.data_version == DataVersion(clock.now_ms, v1.counter + 1)
    assert manager(path, clock).topic_config_table["TopicA"].perm == R


def test_delete_bumps_and_persists_and_missing_topic_changes_nothing(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    m.update_topic_config(tc("TopicA"))
    v = m.data_version
    clock.advance(3)
    assert m.delete_topic_config("Missing") is False and m.data_version == v
    assert m.delete_topic_config("TopicA") is True
    assert m.data_version == DataVersion(clock.now_ms, v.counter + 1)
    assert "TopicA" not in manager(path, clock).topic_config_table


def test_next_version_bumps_without_a_topic_change(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    table, v = dict(m.topic_config_table), m.data_version
    clock.advance(2)
    assert m.next_version() == DataVersion(clock.now_ms, v.counter + 1)
    assert m.topic_config_table == table
    assert manager(path, clock).data_version == m.data_version


def test_same_millisecond_changes_still_differ(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    versions = {m.data_version}
    for i in range(5):  # the clock does not move: the counter alone tells the versions apart
        m.update_topic_config(tc(f"T{i}"))
        versions.add(m.data_version)
    assert len(versions) == 6


# ============================================================================ TBW102 auto-create
def test_auto_create_from_tbw102(path: Path, clock: ManualClock) -> None:
    m = manager(path, clock)
    v = m.data_version
    created = m.create_topic_in_send_message_method("NewTopic", TBW, 4)
    assert created == tc("NewTopic", queues=4, perm=RW)  # min(4, 8) queues, INHERIT dropped
    assert m.topic_config_table["NewTopic"] == created
    assert m.data_version.counter == v.counter + 1
    assert manager(path, clock).topic_config_table["NewTopic"] == created
    # Existing topic: returned as is, nothing changes.
    v = m.data_version
    assert m.create_topic_in_send_message_method("NewTopic", TBW, 2) == created
    assert m.data_version == v


def test_auto_create_caps_queues_at_the_default_topics_write_queues(clock: ManualClock) -> None:
    m = manager(None, clock)
    assert m.create_topic_in_send_message_method("Big", TBW, 16).write_queue_nums == 8
    m.update_topic_config(TopicConfig(topic_name=TBW, read_queue_nums=8, write_queue_nums=2, perm=PERM_ALL))
    created = m.create_topic_in_send_message_method("Small", TBW, 4)
    assert (created.read_queue_nums, created.write_queue_nums) == (2, 2)


def test_auto_created_perm_is_the_default_topics_without_inherit(clock: ManualClock) -> None:
    m = manager(None, clock)
    m.update_topic_config(tc(TBW, perm=int(Perm.READ | Perm.INHERIT)))
    assert m.create_topic_in_send_message_method("ReadOnly", TBW, 4).perm == R


@pytest.mark.parametrize(
    ("setup", "default_topic"),
    [
        (lambda m: m.update_topic_config(tc(TBW, perm=RW)), TBW),  # not inheritable
        (lambda m: None, "NoSuchDefault"),
        (lambda m: m.delete_topic_config(TBW), TBW),
    ],
    ids=["no-inherit", "unknown-default", "tbw102-deleted"],
)
def test_auto_create_refused(clock: ManualClock, setup, default_topic: str) -> None:
    m = manager(None, clock)
    setup(m)
    table, v = dict(m.topic_config_table), m.data_version
    assert m.create_topic_in_send_message_method("NewTopic", default_topic, 4) is None
    assert m.topic_config_table == table and m.data_version == v


def test_auto_create_disabled_refuses_even_with_an_inheritable_default(clock: ManualClock) -> None:
    m = manager(None, clock, auto_create=False)
    m.update_topic_config(tc(TBW, perm=PERM_ALL))
    v = m.data_version
    assert m.create_topic_in_send_message_method("NewTopic", TBW, 4) is None
    assert "NewTopic" not in m.topic_config_table and m.data_version == v


@pytest.mark.parametrize(("topic", "queues"), [("bad topic", 4), ("", 4), ("x" * 128, 4), ("Fine", 0), ("Fine", -1)])
def test_auto_create_bad_input_raises_and_changes_nothing(clock: ManualClock, topic: str, queues: int) -> None:
    m = manager(None, clock)
    table, v = dict(m.topic_config_table), m.data_version
    with pytest.raises(InvalidInput):
        m.create_topic_in_send_message_method(topic, TBW, queues)
    assert m.topic_config_table == table and m.data_version == v


# ============================================================================ register body
def test_serialize_wrapper_of_a_read_write_broker_is_the_table(clock: ManualClock) -> None:
    m = manager(None, clock)
    m.update_topic_config(tc("TopicA", perm=R))
    for broker_perm in (RW, PERM_ALL):
        w = m.build_serialize_wrapper(broker_perm)
        assert isinstance(w, TopicConfigSerializeWrapper)
        assert w.topic_config_table == m.topic_config_table and w.data_version == m.data_version
        assert w.topic_config_table[TBW].perm == PERM_ALL and w.topic_config_table["TopicA"].perm == R


@pytest.mark.parametrize("broker_perm", [R, W, 0, int(Perm.READ | Perm.INHERIT)])
def test_serialize_wrapper_masks_every_topics_perm_with_the_brokers(clock: ManualClock, broker_perm: int) -> None:
    """RocketMQ 5 (BrokerController.registerBrokerAll): topic perm & broker perm; 4.x sent the broker's."""
    m = manager(None, clock)
    m.update_topic_config(tc("TopicA", queues=4))
    m.update_topic_config(tc("TopicR", queues=4, perm=R))
    table = dict(m.topic_config_table)
    w = m.build_serialize_wrapper(broker_perm)
    assert {n: t.perm for n, t in w.topic_config_table.items()} == {n: t.perm & broker_perm for n, t in table.items()}
    assert w.topic_config_table["TopicA"].perm == broker_perm & RW
    # Only perm is overridden, the version is the table's, and the table itself is untouched.
    assert {n: t.model_copy(update={"perm": table[n].perm}) for n, t in w.topic_config_table.items()} == table
    assert w.data_version == m.data_version
    assert m.topic_config_table == table


def test_serialize_wrapper_is_a_snapshot(clock: ManualClock) -> None:
    m = manager(None, clock)
    w = m.build_serialize_wrapper(RW)
    m.update_topic_config(tc("Later"))
    assert "Later" not in w.topic_config_table
    w.topic_config_table.pop(TBW)
    assert TBW in m.topic_config_table
