"""RouteInfoManager behaviour: registration, removal cascades, expiry, admin operations, versions.

Scenarios follow RocketMQ's namesrv route tests, re-expressed here; every removal is checked
against all five tables, not only against a return value.
"""

from __future__ import annotations

import dataclasses

import pytest

from namesrv.common.clock import ManualClock
from namesrv.protocol.constants import Perm
from namesrv.protocol.models import DataVersion, RegisterBrokerResult
from namesrv.routeinfo.config import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS, NamesrvConfig
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from tests.support.namesrv import (
    BROKER_A,
    BROKER_B,
    CLUSTER,
    HA_MASTER_A,
    HA_SLAVE_A,
    MASTER_A,
    MASTER_B,
    RW,
    SLAVE_A,
    register,
    wrapper,
)


def register_slave_a(rim: RouteInfoManager, *topics: str, **kw: object) -> RegisterBrokerResult:
    return register(rim, *topics, addr=SLAVE_A, broker_id=1, ha=HA_SLAVE_A, **kw)  # type: ignore[arg-type]


def assert_all_tables_empty(rim: RouteInfoManager) -> None:
    assert rim.topic_queue_table == {}
    assert rim.broker_addr_table == {}
    assert rim.cluster_addr_table == {}
    assert rim.broker_live_table == {}
    assert rim.filter_server_table == {}
    assert rim.topics_of_broker(BROKER_A) == set()
    assert rim.topics_of_broker(BROKER_B) == set()


def route_addrs(rim: RouteInfoManager, topic: str, broker: str = BROKER_A) -> dict[int, str]:
    route = rim.pickup_topic_route_data(topic)
    assert route is not None, f"no route for {topic}"
    (bd,) = [b for b in route.broker_datas if b.broker_name == broker]
    return bd.broker_addrs


def queue_of(rim: RouteInfoManager, topic: str, broker: str = BROKER_A):
    return rim.topic_queue_table[topic][broker]


# ---------------------------------------------------------------------------- registration


def test_first_master_registration_fills_every_table(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA", "TopicB", filters=["10.0.0.9:1"])

    assert rim.cluster_addr_table == {CLUSTER: {BROKER_A}}
    bd = rim.broker_addr_table[BROKER_A]
    assert (bd.cluster, bd.broker_name, bd.broker_addrs) == (CLUSTER, BROKER_A, {0: MASTER_A})
    live = rim.broker_live_table[MASTER_A]
    assert live.last_update_timestamp == clock()
    assert live.heartbeat_timeout_millis == DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS == 120_000
    assert live.data_version == DataVersion(1, 1)
    assert live.ha_server_addr == HA_MASTER_A
    assert rim.filter_server_table == {MASTER_A: ["10.0.0.9:1"]}
    assert set(rim.topic_queue_table) == {"TopicA", "TopicB"}
    qd = queue_of(rim, "TopicA")
    assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm) == (BROKER_A, 8, 8, RW)
    assert rim.topics_of_broker(BROKER_A) == {"TopicA", "TopicB"}


def test_master_registration_returns_no_master_info(rim: RouteInfoManager) -> None:
    result = register(rim, "TopicA")
    assert result.master_addr is None
    assert result.ha_server_addr is None


def test_slave_learns_master_addr_and_master_ha_addr_when_master_is_live(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    result = register_slave_a(rim, "TopicA")

    assert result.master_addr == MASTER_A
    assert result.ha_server_addr == HA_MASTER_A, "the master's HA address, not the slave's own"
    assert route_addrs(rim, "TopicA") == {0: MASTER_A, 1: SLAVE_A}


def test_slave_without_registered_master_gets_no_master_info(rim: RouteInfoManager) -> None:
    result = register_slave_a(rim, "TopicA")
    assert result.master_addr is None
    assert result.ha_server_addr is None


def test_slave_gets_no_master_info_once_master_has_gone(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)

    result = register_slave_a(rim, "TopicA")
    assert result.master_addr is None
    assert result.ha_server_addr is None


def test_slave_only_group_writes_no_queue_data(rim: RouteInfoManager) -> None:
    register_slave_a(rim, "TopicA")

    assert rim.broker_addr_table[BROKER_A].broker_addrs == {1: SLAVE_A}
    assert rim.topic_queue_table == {}
    assert rim.pickup_topic_route_data("TopicA") is None


def test_slave_registration_never_changes_the_masters_queue_data(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", queues=8)
    register_slave_a(rim, "TopicA", "TopicOnlyOnSlave", queues=2, version=(9, 9))

    assert queue_of(rim, "TopicA").write_queue_nums == 8
    assert "TopicOnlyOnSlave" not in rim.topic_queue_table


def test_new_topic_on_master_is_routed_to_master_and_slave(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")
    register(rim, "TopicA", "TopicNew", version=(2, 2))

    assert route_addrs(rim, "TopicNew") == {0: MASTER_A, 1: SLAVE_A}


def test_slave_to_master_switch_at_one_address_keeps_one_entry_per_address(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")

    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)  # master down
    assert route_addrs(rim, "TopicA") == {1: SLAVE_A}

    register(rim, "TopicA", addr=SLAVE_A, broker_id=0, version=(1, 2))  # slave promoted
    assert route_addrs(rim, "TopicA") == {0: SLAVE_A}

    register(rim, "TopicA", addr=MASTER_A, broker_id=1, version=(1, 2))  # old master back as slave
    assert route_addrs(rim, "TopicA") == {0: SLAVE_A, 1: MASTER_A}
    assert sorted(rim.broker_live_table) == sorted([MASTER_A, SLAVE_A])


def test_slave_takes_over_id_zero_while_old_master_still_listed(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")

    register(rim, "TopicA", addr=SLAVE_A, broker_id=0, version=(1, 2))
    assert rim.broker_addr_table[BROKER_A].broker_addrs == {0: SLAVE_A}

    # The replaced master's live entry lingers until it expires; expiry must not touch the new master.
    clock.advance(60_000)
    register(rim, "TopicA", addr=SLAVE_A, broker_id=0, version=(1, 2))
    clock.advance(60_001)
    assert rim.scan_not_active_broker() == 1
    assert MASTER_A not in rim.broker_live_table
    assert route_addrs(rim, "TopicA") == {0: SLAVE_A}


def test_master_moving_to_new_address_gets_its_topics_rewritten(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", queues=8)
    register(rim, "TopicA", addr="10.0.0.7:10911", queues=16)  # same DataVersion, new address

    assert route_addrs(rim, "TopicA") == {0: "10.0.0.7:10911"}
    assert queue_of(rim, "TopicA").write_queue_nums == 16


def test_registration_without_topic_wrapper_records_liveness_only(rim: RouteInfoManager) -> None:
    rim.register_broker(CLUSTER, MASTER_A, BROKER_A, 0, "", None, None)

    assert rim.broker_addr_table[BROKER_A].broker_addrs == {0: MASTER_A}
    assert rim.broker_live_table[MASTER_A].data_version == DataVersion()
    assert rim.topic_queue_table == {}


def test_empty_filter_list_removes_filter_servers_and_none_keeps_them(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", filters=["10.0.0.9:1"])
    register(rim, "TopicA", filters=None)
    assert rim.filter_server_table == {MASTER_A: ["10.0.0.9:1"]}
    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None and route.filter_server_table == {MASTER_A: ("10.0.0.9:1",)}

    register(rim, "TopicA", filters=[])
    assert rim.filter_server_table == {}


# ---------------------------------------------------------------------------- DataVersion


def test_heartbeat_with_same_data_version_does_not_rewrite_queue_data(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", queues=8, version=(100, 10))
    seq = rim.route_seq

    register(rim, "TopicA", "TopicB", queues=16, version=(100, 10))

    assert queue_of(rim, "TopicA").write_queue_nums == 8
    assert "TopicB" not in rim.topic_queue_table
    assert rim.route_seq == seq


@pytest.mark.parametrize("new_version", [(100, 11), (101, 10)], ids=["counter", "timestamp"])
def test_changed_data_version_rewrites_queue_data(rim: RouteInfoManager, new_version: tuple[int, int]) -> None:
    register(rim, "TopicA", queues=8, version=(100, 10))

    register(rim, "TopicA", "TopicB", queues=16, version=new_version)

    assert queue_of(rim, "TopicA").write_queue_nums == 16
    assert queue_of(rim, "TopicB").write_queue_nums == 16
    assert rim.query_broker_topic_config(MASTER_A) == DataVersion(*new_version)


def test_first_registration_at_master_id_writes_even_if_address_version_is_known(rim: RouteInfoManager) -> None:
    # SLAVE_A is live with version (5, 5) as a slave; when it becomes the master of an empty id 0,
    # that is a first registration at the id and must write its topics despite the equal version.
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA", "TopicB", version=(5, 5))
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)

    register(rim, "TopicA", "TopicB", addr=SLAVE_A, broker_id=0, version=(5, 5), queues=4)

    assert queue_of(rim, "TopicB").write_queue_nums == 4
    assert queue_of(rim, "TopicA").write_queue_nums == 4


def test_brand_new_group_writes_its_topics_with_default_version(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", version=(0, 0))
    assert "TopicA" in rim.topic_queue_table


def test_is_broker_topic_config_changed_compares_both_version_fields(rim: RouteInfoManager) -> None:
    assert rim.is_broker_topic_config_changed(MASTER_A, DataVersion(1, 1)), "unknown broker: changed"
    assert rim.query_broker_topic_config(MASTER_A) is None

    register(rim, "TopicA", version=(100, 10))

    assert rim.query_broker_topic_config(MASTER_A) == DataVersion(100, 10)
    assert not rim.is_broker_topic_config_changed(MASTER_A, DataVersion(100, 10))
    assert rim.is_broker_topic_config_changed(MASTER_A, DataVersion(101, 10))
    assert rim.is_broker_topic_config_changed(MASTER_A, DataVersion(100, 11))


def test_update_timestamp_refreshes_only_known_brokers(rim: RouteInfoManager, clock: ManualClock) -> None:
    assert rim.update_broker_info_update_timestamp(MASTER_A) is False
    assert rim.broker_live_table == {}

    register(rim, "TopicA")
    clock.advance(5_000)
    assert rim.update_broker_info_update_timestamp(MASTER_A) is True
    assert rim.broker_live_table[MASTER_A].last_update_timestamp == clock()


# ---------------------------------------------------------------------------- unregister cascade


def test_unregister_last_broker_cascades_through_every_table(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB", "TopicC", filters=["10.0.0.9:1"])

    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0) is True

    for topic in ("TopicA", "TopicB", "TopicC"):
        assert rim.pickup_topic_route_data(topic) is None
    assert rim.get_all_topic_list() == []
    assert_all_tables_empty(rim)


def test_unregister_twice_reports_nothing_removed_the_second_time(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0) is True
    seq = rim.route_seq
    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0) is False
    assert rim.route_seq == seq


def test_unregister_slave_keeps_master_and_its_routes(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")

    assert rim.unregister_broker(CLUSTER, SLAVE_A, BROKER_A, 1) is True

    assert route_addrs(rim, "TopicA") == {0: MASTER_A}
    assert SLAVE_A not in rim.broker_live_table
    assert MASTER_A in rim.broker_live_table


def test_unregister_master_keeps_group_and_queue_data_while_slave_remains(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")

    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)

    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None
    assert [b.broker_addrs for b in route.broker_datas] == [{1: SLAVE_A}]
    assert [q.perm for q in route.queue_datas] == [RW]
    assert rim.cluster_addr_table == {CLUSTER: {BROKER_A}}


def test_unregister_one_group_keeps_shared_topics_and_cluster_for_the_other(rim: RouteInfoManager) -> None:
    register(rim, "Shared", "OnlyA")
    register(rim, "Shared", "OnlyB", name=BROKER_B, addr=MASTER_B)

    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)

    assert rim.pickup_topic_route_data("OnlyA") is None
    assert "OnlyA" not in rim.topic_queue_table
    shared = rim.pickup_topic_route_data("Shared")
    assert shared is not None
    assert [q.broker_name for q in shared.queue_datas] == [BROKER_B]
    assert [b.broker_name for b in shared.broker_datas] == [BROKER_B]
    assert rim.cluster_addr_table == {CLUSTER: {BROKER_B}}
    assert set(rim.broker_addr_table) == {BROKER_B}


def test_empty_cluster_is_removed_and_other_clusters_stay(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", cluster="ClusterOne")
    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B, cluster="ClusterTwo")

    rim.unregister_broker("ClusterOne", MASTER_A, BROKER_A, 0)

    assert rim.cluster_addr_table == {"ClusterTwo": {BROKER_B}}


def test_stale_unregister_naming_old_address_keeps_newer_registration_at_that_id(rim: RouteInfoManager) -> None:
    old_addr, new_addr = MASTER_A, "10.0.0.8:10911"
    register(rim, "TopicA", addr=old_addr)
    register(rim, "TopicA", addr=new_addr)  # the master came back elsewhere

    assert rim.unregister_broker(CLUSTER, old_addr, BROKER_A, 0) is True  # old live entry dropped

    assert route_addrs(rim, "TopicA") == {0: new_addr}
    assert new_addr in rim.broker_live_table
    assert old_addr not in rim.broker_live_table
    assert rim.cluster_addr_table == {CLUSTER: {BROKER_A}}


def test_stale_unregister_through_old_channel_is_ignored(rim: RouteInfoManager) -> None:
    old_channel, new_channel = object(), object()
    register(rim, "TopicA", channel=old_channel)
    register(rim, "TopicA", channel=new_channel)  # same address, new incarnation
    before = rim.dump_tables()

    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0, channel=old_channel) is False
    assert rim.dump_tables() == before

    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0, channel=new_channel) is True
    assert_all_tables_empty(rim)


def test_unregister_with_wrong_broker_id_leaves_route_and_liveness(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")
    before = rim.dump_tables()

    assert rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 5) is False

    assert rim.dump_tables() == before
    # ... so the address can still expire and take its route with it.
    clock.advance(120_001)
    assert rim.scan_not_active_broker() == 1
    assert_all_tables_empty(rim)


def test_unregister_naming_wrong_cluster_still_removes_group_from_its_own_cluster(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", cluster="ClusterOne")
    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B, cluster="ClusterTwo")

    assert rim.unregister_broker("ClusterTwo", MASTER_A, BROKER_A, 0) is True

    assert rim.cluster_addr_table == {"ClusterTwo": {BROKER_B}}
    assert set(rim.broker_addr_table) == {BROKER_B}


def test_group_listed_under_two_cluster_names_leaves_both_when_removed(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", cluster="ClusterOne")
    register(rim, "TopicA", cluster="ClusterTwo")
    assert rim.cluster_addr_table == {"ClusterOne": {BROKER_A}, "ClusterTwo": {BROKER_A}}

    rim.unregister_broker("ClusterOne", MASTER_A, BROKER_A, 0)

    assert_all_tables_empty(rim)


def test_address_listed_by_two_groups_stays_live_until_both_let_go(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")
    register(rim, "TopicB", name=BROKER_B)  # same address, second group name

    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_B, 0)

    assert MASTER_A in rim.broker_live_table, "broker-a still lists the address"
    assert route_addrs(rim, "TopicA") == {0: MASTER_A}
    assert "TopicB" not in rim.topic_queue_table
    clock.advance(120_001)
    assert rim.scan_not_active_broker() == 1
    assert_all_tables_empty(rim)


# ---------------------------------------------------------------------------- expiry


def test_broker_alive_exactly_at_timeout_and_dead_one_ms_later(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")

    clock.advance(120_000)  # lastUpdate + timeout == now: still alive
    assert rim.scan_not_active_broker() == 0
    assert rim.pickup_topic_route_data("TopicA") is not None

    clock.advance(1)
    assert rim.scan_not_active_broker() == 1
    assert rim.pickup_topic_route_data("TopicA") is None
    assert_all_tables_empty(rim)


def test_per_broker_heartbeat_timeout_overrides_default(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA", timeout=30_000)
    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B)

    clock.advance(30_000)
    assert rim.scan_not_active_broker() == 0
    clock.advance(1)
    assert rim.scan_not_active_broker() == 1

    assert rim.pickup_topic_route_data("TopicA") is None
    assert rim.pickup_topic_route_data("TopicB") is not None
    assert set(rim.broker_live_table) == {MASTER_B}
    assert rim.cluster_addr_table == {CLUSTER: {BROKER_B}}


def test_configured_expiry_is_the_default_timeout(clock: ManualClock) -> None:
    rim = RouteInfoManager(NamesrvConfig(broker_channel_expired_time_ms=10_000), clock)
    register(rim, "TopicA")
    clock.advance(10_000)
    assert rim.scan_not_active_broker() == 0
    clock.advance(1)
    assert rim.scan_not_active_broker() == 1
    assert_all_tables_empty(rim)


def test_heartbeats_keep_a_broker_alive_past_the_timeout(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")
    for _ in range(10):
        clock.advance(30_000)
        register(rim, "TopicA")  # unchanged-version heartbeat
        assert rim.scan_not_active_broker() == 0
    clock.advance(60_000)
    assert rim.update_broker_info_update_timestamp(MASTER_A)
    clock.advance(120_000)
    assert rim.scan_not_active_broker() == 0
    assert rim.pickup_topic_route_data("TopicA") is not None


def test_scan_removes_only_the_silent_slave_and_counts_it(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA")
    register_slave_a(rim, "TopicA")
    clock.advance(100_000)
    register(rim, "TopicA")  # master heartbeats, slave does not
    clock.advance(20_001)

    assert rim.scan_not_active_broker() == 1

    assert route_addrs(rim, "TopicA") == {0: MASTER_A}
    assert set(rim.broker_live_table) == {MASTER_A}


def test_scan_with_several_expired_groups_counts_all_and_empties_tables(
    rim: RouteInfoManager, clock: ManualClock
) -> None:
    register(rim, "TopicA", filters=["10.0.0.9:1"])
    register_slave_a(rim, "TopicA")
    register(rim, "TopicA", "TopicB", name=BROKER_B, addr=MASTER_B, cluster="Other")
    clock.advance(120_001)

    assert rim.scan_not_active_broker() == 3
    assert_all_tables_empty(rim)
    assert rim.scan_not_active_broker() == 0


# ---------------------------------------------------------------------------- channel destroy


def test_channel_destroy_of_master_then_slave(rim: RouteInfoManager) -> None:
    master_channel, slave_channel = object(), object()
    register(rim, "TopicA", channel=master_channel)
    register_slave_a(rim, "TopicA", channel=slave_channel)
    assert route_addrs(rim, "TopicA") == {0: MASTER_A, 1: SLAVE_A}

    assert rim.on_channel_destroy(MASTER_A, master_channel) is True
    assert route_addrs(rim, "TopicA") == {1: SLAVE_A}
    assert set(rim.broker_live_table) == {SLAVE_A}

    assert rim.on_channel_destroy(SLAVE_A, slave_channel) is True
    assert rim.pickup_topic_route_data("TopicA") is None
    assert_all_tables_empty(rim)


def test_channel_destroy_without_waiting_for_expiry(rim: RouteInfoManager, clock: ManualClock) -> None:
    register(rim, "TopicA", "TopicB")
    assert rim.on_channel_destroy(MASTER_A) is True
    assert clock() == clock.now_ms  # no time passed at all
    assert_all_tables_empty(rim)


def test_stale_channel_close_is_ignored(rim: RouteInfoManager) -> None:
    old_channel, new_channel = object(), object()
    register(rim, "TopicA", channel=old_channel)
    register(rim, "TopicA", channel=new_channel)
    before, seq = rim.dump_tables(), rim.route_seq

    assert rim.on_channel_destroy(MASTER_A, old_channel) is False
    assert rim.dump_tables() == before
    assert rim.route_seq == seq

    assert rim.on_channel_destroy(MASTER_A, new_channel) is True
    assert_all_tables_empty(rim)


def test_channel_destroy_of_unknown_address_changes_nothing(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    before, seq = rim.dump_tables(), rim.route_seq
    assert rim.on_channel_destroy("10.9.9.9:1") is False
    assert rim.dump_tables() == before
    assert rim.route_seq == seq


# ---------------------------------------------------------------------------- admin


def test_delete_topic_everywhere(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB")
    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B, cluster="Other")

    assert rim.delete_topic("TopicA") is True

    assert rim.pickup_topic_route_data("TopicA") is None
    assert "TopicA" not in rim.topic_queue_table
    assert rim.topics_of_broker(BROKER_A) == {"TopicB"}
    assert rim.topics_of_broker(BROKER_B) == set()
    assert rim.delete_topic("TopicA") is False
    # Brokers themselves stay.
    assert set(rim.broker_addr_table) == {BROKER_A, BROKER_B}


def test_delete_topic_in_one_cluster_keeps_the_other_clusters_queues(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B, cluster="Other")
    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None and len(route.broker_datas) == 2

    assert rim.delete_topic("TopicA", CLUSTER) is True

    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None
    assert [b.broker_name for b in route.broker_datas] == [BROKER_B]
    assert [q.broker_name for q in route.queue_datas] == [BROKER_B]


def test_delete_topic_in_unknown_cluster_or_unknown_topic_changes_nothing(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    before, seq = rim.dump_tables(), rim.route_seq
    assert rim.delete_topic("TopicA", "NoSuchCluster") is False
    assert rim.delete_topic("NoSuchTopic") is False
    assert rim.dump_tables() == before
    assert rim.route_seq == seq


def test_topic_deleted_on_the_namesrv_comes_back_when_the_master_still_reports_it(rim: RouteInfoManager) -> None:
    """RocketMQ 5 `isTopicConfigChanged`: with an unchanged DataVersion a reported topic that is
    missing for the broker is written again."""
    register(rim, "TopicA", "TopicB", version=(1, 1))
    rim.delete_topic("TopicA")
    assert rim.pickup_topic_route_data("TopicA") is None
    assert rim.has_missing_topics(BROKER_A)
    version = rim.route_version("TopicA")

    register(rim, "TopicA", "TopicB", version=(1, 1))

    assert queue_of(rim, "TopicA") == queue_of(rim, "TopicB")
    assert rim.topics_of_broker(BROKER_A) == {"TopicA", "TopicB"}
    assert rim.route_version("TopicA") > version, "waiters on the topic learn it is back"
    assert not rim.has_missing_topics(BROKER_A)


def test_topic_deleted_on_the_namesrv_and_on_the_broker_stays_deleted(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB", version=(1, 1))
    register(rim, "TopicB", version=(1, 2))  # the broker deleted TopicA: new version, TopicA kept here
    rim.delete_topic("TopicA")

    register(rim, "TopicB", version=(1, 2))
    register(rim, "TopicB", version=(1, 2))

    assert rim.pickup_topic_route_data("TopicA") is None
    assert not rim.has_missing_topics(BROKER_A), "one full registration settles it"


def test_deleted_topic_does_not_come_back_from_a_slave_or_a_bodiless_registration(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", version=(1, 1))
    register_slave_a(rim, "TopicA", version=(1, 1))
    rim.delete_topic("TopicA")

    register_slave_a(rim, "TopicA", version=(1, 1))
    rim.register_broker(CLUSTER, MASTER_A, BROKER_A, 0, HA_MASTER_A, None, None)

    assert rim.pickup_topic_route_data("TopicA") is None
    assert rim.has_missing_topics(BROKER_A)


def test_topic_deleted_in_one_cluster_comes_back_only_on_that_clusters_broker(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B, cluster="OtherCluster")
    rim.delete_topic("TopicA", "OtherCluster")
    assert not rim.has_missing_topics(BROKER_A)
    assert rim.has_missing_topics(BROKER_B)

    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B, cluster="OtherCluster")

    assert set(rim.topic_queue_table["TopicA"]) == {BROKER_A, BROKER_B}


def test_missing_topics_are_forgotten_with_their_broker_group(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB")
    rim.delete_topic("TopicA")
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)
    assert not rim.has_missing_topics(BROKER_A)
    assert rim.tables.missing_topics == {}


def test_unchanged_registration_looks_up_only_the_deleted_topics(rim: RouteInfoManager) -> None:
    """The cost stays flat: a registration with an unchanged version never iterates over the
    broker's reported table (a table that refuses iteration proves it)."""

    class NoIteration(dict):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise AssertionError("iterated the topic table")

        def items(self):  # type: ignore[no-untyped-def]
            raise AssertionError("iterated the topic table")

        keys = values = items

    topics = [f"Topic{i:04d}" for i in range(1000)]
    register(rim, *topics, version=(1, 1))
    rim.delete_topic("Topic0500")
    heartbeat = wrapper(*topics, version=(1, 1))
    heartbeat.topic_config_table = NoIteration(heartbeat.topic_config_table)

    rim.register_broker(CLUSTER, MASTER_A, BROKER_A, 0, HA_MASTER_A, heartbeat, None)
    rim.register_broker(CLUSTER, MASTER_A, BROKER_A, 0, HA_MASTER_A, heartbeat, None)

    assert "Topic0500" in rim.topic_queue_table


def test_wipe_and_add_write_perm_return_topic_counts_and_flip_only_the_write_bit(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB", perm=int(Perm.READ | Perm.WRITE | Perm.INHERIT))
    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B)

    assert rim.wipe_write_perm_of_broker(BROKER_A) == 2
    assert queue_of(rim, "TopicA").perm == int(Perm.READ | Perm.INHERIT)
    assert queue_of(rim, "TopicB").perm == int(Perm.READ | Perm.INHERIT)
    assert queue_of(rim, "TopicA", BROKER_B).perm == RW, "other brokers untouched"

    assert rim.add_write_perm_of_broker(BROKER_A) == 2
    assert queue_of(rim, "TopicA").perm == RW, "RocketMQ sets exactly READ|WRITE, INHERIT included"


@pytest.mark.parametrize("perm", [0, 1, 2, 3, 4, 5, 6, 7])
def test_add_write_perm_sets_exactly_read_write(rim: RouteInfoManager, perm: int) -> None:
    """RocketMQ's operateWritePermOfBroker: ADD_WRITE_PERM_OF_BROKER sets perm = READ|WRITE (6)."""
    register(rim, "TopicA", perm=perm)
    assert rim.add_write_perm_of_broker(BROKER_A) == 1
    assert queue_of(rim, "TopicA").perm == 6


def test_add_write_perm_to_read_only_topic(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", perm=int(Perm.READ))
    assert rim.add_write_perm_of_broker(BROKER_A) == 1
    assert queue_of(rim, "TopicA").perm == RW
    assert isinstance(queue_of(rim, "TopicA").perm, int)


def test_wipe_twice_counts_again_but_changes_nothing_more(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    rim.wipe_write_perm_of_broker(BROKER_A)
    version = rim.route_version("TopicA")
    assert rim.wipe_write_perm_of_broker(BROKER_A) == 1
    assert queue_of(rim, "TopicA").perm == int(Perm.READ)
    assert rim.route_version("TopicA") == version


def test_perm_operations_on_unknown_broker_count_zero(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    before = rim.dump_tables()
    assert rim.wipe_write_perm_of_broker("no-such-broker") == 0
    assert rim.add_write_perm_of_broker("no-such-broker") == 0
    assert rim.dump_tables() == before


def test_delete_topic_with_broker_registration_drops_omitted_topics(clock: ManualClock) -> None:
    rim = RouteInfoManager(NamesrvConfig(delete_topic_with_broker_registration=True), clock)
    register(rim, "TopicA", "TopicB", version=(1, 1))
    register(rim, "TopicA", "TopicB", name=BROKER_B, addr=MASTER_B, version=(1, 1))

    register(rim, "TopicB", version=(1, 2))
    route_a = rim.pickup_topic_route_data("TopicA")
    assert route_a is not None and [b.broker_name for b in route_a.broker_datas] == [BROKER_B]

    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B, version=(1, 2))
    assert rim.pickup_topic_route_data("TopicA") is None
    assert "TopicA" not in rim.topic_queue_table


def test_replacing_all_topics_on_registration_keeps_the_new_ones_removable(clock: ManualClock) -> None:
    # Dropping a broker's last old topic must not lose track of the topics it registers instead.
    rim = RouteInfoManager(NamesrvConfig(delete_topic_with_broker_registration=True), clock)
    register(rim, "TopicOld", version=(1, 1))
    register(rim, "TopicNew", version=(1, 2))

    assert rim.topics_of_broker(BROKER_A) == {"TopicNew"}
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)
    assert rim.get_all_topic_list() == []
    assert_all_tables_empty(rim)


def test_topics_omitted_from_registration_are_kept_by_default(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB", version=(1, 1))
    register(rim, "TopicB", version=(1, 2))
    assert rim.pickup_topic_route_data("TopicA") is not None
    assert rim.pickup_topic_route_data("TopicB") is not None


# ---------------------------------------------------------------------------- queries


def test_pickup_route_for_topic_on_two_brokers(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register(rim, "TopicA", name=BROKER_B, addr=MASTER_B, queues=4)

    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None
    assert {q.broker_name: q.write_queue_nums for q in route.queue_datas} == {BROKER_A: 8, BROKER_B: 4}
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
        BROKER_A: {0: MASTER_A},
        BROKER_B: {0: MASTER_B},
    }
    assert route.order_topic_conf is None
    assert route.filter_server_table == {}


def test_pickup_returns_copies_that_cannot_change_the_tables(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    before = rim.dump_tables()

    route = rim.pickup_topic_route_data("TopicA")
    assert route is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        route.queue_datas[0].perm = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        route.broker_datas[0].broker_addrs[7] = "evil:1"
    info = rim.get_all_cluster_info()
    info.broker_addr_table[BROKER_A].broker_addrs.clear()
    info.cluster_addr_table[CLUSTER].add("ghost")

    assert rim.dump_tables() == before


def test_a_route_handed_out_cannot_be_changed_so_the_next_caller_gets_the_same(rim: RouteInfoManager) -> None:
    """One route object per version is shared by every in-process caller (RocketMQ hands out
    copies): whatever one caller tries on it raises, and the next caller gets the route unchanged."""
    register(rim, "TopicA", filters=["10.0.0.9:1"])
    register_slave_a(rim, "TopicA")
    first = rim.pickup_topic_route_data("TopicA")
    assert first is not None
    wire = first.to_wire()
    bd = first.broker_datas[0]
    attempts = [
        lambda: bd.broker_addrs.clear(),
        lambda: bd.broker_addrs.pop(0),
        lambda: bd.broker_addrs.update({9: "evil:1"}),
        lambda: bd.broker_addrs.__setitem__(0, "evil:1"),
        lambda: bd.broker_addrs.__delitem__(0),
        lambda: bd.broker_addrs.setdefault(9, "evil:1"),
        lambda: bd.broker_addrs.popitem(),
        lambda: setattr(bd, "broker_addrs", {}),
        lambda: setattr(bd, "cluster", "Evil"),
        lambda: first.queue_datas.append(first.queue_datas[0]),  # type: ignore[attr-defined]
        lambda: first.broker_datas.clear(),  # type: ignore[attr-defined]
        lambda: setattr(first, "queue_datas", []),
        lambda: setattr(first, "order_topic_conf", "broker-a:8"),
        lambda: setattr(first.queue_datas[0], "write_queue_nums", 0),
        lambda: first.filter_server_table.clear(),  # type: ignore[attr-defined]
        lambda: first.filter_server_table[MASTER_A].append("evil:1"),  # type: ignore[attr-defined]
    ]
    for attempt in attempts:
        with pytest.raises((TypeError, AttributeError, dataclasses.FrozenInstanceError)):
            attempt()
    again = rim.pickup_topic_route_data("TopicA")
    assert again is first and again.to_wire() == wire
    assert again.broker_datas[0].broker_addrs == {0: MASTER_A, 1: SLAVE_A}
    assert again.filter_server_table == {MASTER_A: ("10.0.0.9:1",)}
    copied = dict(again.broker_datas[0].broker_addrs)  # a caller that wants to change it copies it
    copied.clear()
    assert rim.pickup_topic_route_data("TopicA").broker_datas[0].broker_addrs == {0: MASTER_A, 1: SLAVE_A}  # type: ignore[union-attr]


def test_routes_share_one_copy_per_group_version_and_a_change_makes_a_new_one(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB")
    a, b = rim.pickup_topic_route_data("TopicA"), rim.pickup_topic_route_data("TopicB")
    assert a is not None and b is not None
    assert a.broker_datas[0] is b.broker_datas[0]  # one copy per group, not one per route
    assert a.broker_datas[0] is not rim.broker_addr_table[BROKER_A]

    register_slave_a(rim, "TopicA", "TopicB")
    a2 = rim.pickup_topic_route_data("TopicA")
    assert a2 is not None and a2.broker_datas[0] is not a.broker_datas[0]
    assert a2.broker_datas[0].broker_addrs == {0: MASTER_A, 1: SLAVE_A}
    assert a.broker_datas[0].broker_addrs == {0: MASTER_A}  # a route handed out earlier never changes


def test_cached_route_survives_changes_elsewhere_and_is_rebuilt_when_its_groups_change(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B)
    route, version = rim.pickup_route_and_version("TopicA")
    assert rim.pickup_route_and_version("TopicA") == (route, version)

    register(rim, "TopicB", "TopicC", name=BROKER_B, addr=MASTER_B, version=(2, 2))  # another group, another topic
    rim.unregister_broker(CLUSTER, MASTER_B, BROKER_B, 0)  # touches broker-b only
    again, same = rim.pickup_route_and_version("TopicA")
    assert again is route and same == version

    register_slave_a(rim, "TopicA")  # the hosting group changes: a new route at a newer version
    changed, newer = rim.pickup_route_and_version("TopicA")
    assert newer > version and changed is not route and changed is not None
    assert changed.broker_datas[0].broker_addrs == {0: MASTER_A, 1: SLAVE_A}
    register(rim, "TopicA", queues=2, version=(3, 3))  # the topic's own queues change
    latest, _ = rim.pickup_route_and_version("TopicA")
    assert latest is not None and latest.queue_datas[0].write_queue_nums == 2


def test_pickup_unknown_topic_is_none(rim: RouteInfoManager) -> None:
    assert rim.pickup_topic_route_data("Nothing") is None
    register(rim, "TopicA")
    assert rim.pickup_topic_route_data("Nothing") is None


def test_cluster_topic_and_system_lists(rim: RouteInfoManager) -> None:
    register(rim, "TopicA", "TopicB")
    register(rim, "TopicB", "TopicC", name=BROKER_B, addr=MASTER_B, cluster="Other")

    assert sorted(rim.get_all_topic_list()) == ["TopicA", "TopicB", "TopicC"]
    assert rim.get_topics_by_cluster(CLUSTER) == ["TopicA", "TopicB"]
    assert rim.get_topics_by_cluster("Other") == ["TopicB", "TopicC"]
    assert rim.get_topics_by_cluster("Nope") == []
    names, addr = rim.get_system_topic_list()
    assert sorted(names) == sorted([CLUSTER, BROKER_A, "Other", BROKER_B])
    assert addr in (MASTER_A, MASTER_B)
    info = rim.get_all_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: {BROKER_A}, "Other": {BROKER_B}}
    assert {k: v.broker_addrs for k, v in info.broker_addr_table.items()} == {
        BROKER_A: {0: MASTER_A},
        BROKER_B: {0: MASTER_B},
    }


def test_system_topic_list_has_no_broker_addr_without_a_master(rim: RouteInfoManager) -> None:
    register_slave_a(rim)
    names, addr = rim.get_system_topic_list()
    assert names == [CLUSTER, BROKER_A]
    assert addr is None


# ---------------------------------------------------------------------------- route versions


def test_route_version_moves_on_route_changes_and_not_on_heartbeats(rim: RouteInfoManager, clock: ManualClock) -> None:
    assert rim.route_version("TopicA") == 0
    register(rim, "TopicA", "TopicB")
    v1 = rim.route_version("TopicA")
    assert v1 > 0

    # Plain heartbeats: same version, time passes, liveness refreshed.
    for _ in range(3):
        clock.advance(30_000)
        register(rim, "TopicA", "TopicB")
        rim.update_broker_info_update_timestamp(MASTER_A)
    assert rim.route_version("TopicA") == v1

    # A changed DataVersion whose topics are identical is no route change either.
    register(rim, "TopicA", "TopicB", version=(2, 2))
    assert rim.route_version("TopicA") == v1

    steps = [
        ("queue count changed", lambda: register(rim, "TopicA", "TopicB", version=(3, 3), queues=4)),
        ("slave joined", lambda: register_slave_a(rim, "TopicA")),
        (
            "filter servers changed",
            lambda: register(rim, "TopicA", "TopicB", version=(3, 3), queues=4, filters=["10.0.0.9:1"]),
        ),
        ("write perm wiped", lambda: rim.wipe_write_perm_of_broker(BROKER_A)),
        ("write perm added", lambda: rim.add_write_perm_of_broker(BROKER_A)),
        ("slave left", lambda: rim.on_channel_destroy(SLAVE_A)),
        ("topic deleted", lambda: rim.delete_topic("TopicA")),
    ]
    previous = rim.route_version("TopicA")
    for what, step in steps:
        before = rim.pickup_topic_route_data("TopicA")
        step()
        after = rim.pickup_topic_route_data("TopicA")
        assert before != after, f"{what}: the step should have changed the route"
        assert rim.route_version("TopicA") > previous, what
        previous = rim.route_version("TopicA")


def test_route_version_of_unrelated_topic_is_untouched(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    register(rim, "TopicB", name=BROKER_B, addr=MASTER_B)
    vb = rim.route_version("TopicB")

    register(rim, "TopicA", version=(2, 2), queues=2)
    register_slave_a(rim, "TopicA")
    rim.wipe_write_perm_of_broker(BROKER_A)
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)

    assert rim.route_version("TopicB") == vb


def test_route_version_changes_when_a_topic_disappears_and_returns(rim: RouteInfoManager) -> None:
    register(rim, "TopicA")
    v1 = rim.route_version("TopicA")
    rim.unregister_broker(CLUSTER, MASTER_A, BROKER_A, 0)
    v2 = rim.route_version("TopicA")
    register(rim, "TopicA")
    v3 = rim.route_version("TopicA")
    assert v1 < v2 < v3


def test_dump_tables_is_plain_deterministic_data(rim: RouteInfoManager) -> None:
    register(rim, "TopicB", "TopicA", filters=["10.0.0.9:1"])
    register_slave_a(rim)
    dump = rim.dump_tables()
    assert list(dump) == [
        "topicQueueTable",
        "brokerAddrTable",
        "clusterAddrTable",
        "brokerLiveTable",
        "filterServerTable",
    ]
    assert list(dump["topicQueueTable"]) == ["TopicA", "TopicB"]  # type: ignore[call-overload]
    assert dump["clusterAddrTable"] == {CLUSTER: [BROKER_A]}
    assert dump["brokerLiveTable"][SLAVE_A]["haServerAddr"] == HA_SLAVE_A  # type: ignore[index]
    assert dump == rim.dump_tables()
