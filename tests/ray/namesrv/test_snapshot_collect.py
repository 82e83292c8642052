"""Route snapshots recorded by real NameServer actors and collected into the Parquet dataset."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest
import ray

from actors.deployment.spec import BrokerSpec
from clients.cli.main import main
from clients.snapshots.collect import collect_once
from clients.snapshots.dataset import list_data_files, read_snapshots_arrow
from namesrv.common.waiting import wait_until
from tests.support.ray_cluster import broker_names, wait_for_route_everywhere

TOPIC = "SnapTopic"


def _addrs_at_last_snapshot(table, namesrv: str) -> set[str]:
    rows = table.filter(pc.equal(table["namesrv"], namesrv))
    last = pc.max(rows["snapshot_ms"]).as_py()
    return set(rows.filter(pc.equal(rows["snapshot_ms"], last))["broker_addr"].to_pylist())


def test_snapshots_follow_a_broker_death_and_append_only(deployments, tmp_path):
    dep = deployments.deploy(
        [BrokerSpec("broker-a"), BrokerSpec("broker-b")],
        namesrv_overrides={"snapshot_interval_ms": 200},
    )
    for addr in dep.brokers:
        assert ray.get(dep.brokers[addr].create_topic.remote(TOPIC, 2, 2), timeout=60).ok
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"}, 20)
    out = tmp_path / "snapshots"
    first = collect_once(dep.namesrvs, out)
    assert all(n > 0 for n in first.values()), first

    dep.kill_broker("broker-b-0")
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a"}, 20)
    files_before = set(list_data_files(out))
    second = collect_once(dep.namesrvs, out)
    assert all(n > 0 for n in second.values()), second
    assert files_before < set(list_data_files(out)), "a collection only adds files"

    table = read_snapshots_arrow(out)
    for name in dep.namesrvs:
        rows = table.filter(pc.equal(table["namesrv"], name))
        assert "broker-b-0" in set(rows["broker_addr"].to_pylist()), f"{name} never showed broker-b"
        assert _addrs_at_last_snapshot(table, name) == {"broker-a-0"}
        topics = set(rows.filter(pc.equal(rows["broker_addr"], "broker-a-0"))["topic"].to_pylist())
        assert TOPIC in topics


def test_no_snapshot_is_taken_until_a_collector_asks(deployments, tmp_path):
    """Snapshots cost O(brokers x topics) each: a NameServer nobody collects from takes none, neither
    on its interval nor after route changes; the first drain starts them."""
    dep = deployments.deploy([BrokerSpec("broker-a")], namesrv_overrides={"snapshot_interval_ms": 50})
    assert ray.get(dep.brokers["broker-a-0"].create_topic.remote(TOPIC, 2, 2), timeout=30).ok
    wait_for_route_everywhere(dep, TOPIC, lambda r: broker_names(r) == {"broker-a"}, 20)  # changes, ticks
    statuses = ray.get([ns.get_status.remote() for ns in dep.namesrvs.values()], timeout=30)
    assert [s["snapshots_taken"] for s in statuses] == [0] * len(statuses)

    rows = collect_once(dep.namesrvs, tmp_path / "snapshots")
    assert all(n > 0 for n in rows.values()), rows
    # The lease now held keeps the periodic snapshots coming.
    for ns in dep.namesrvs.values():
        wait_until(lambda ns=ns: ray.get(ns.get_status.remote(), timeout=10)["snapshots_taken"] >= 3, 20,
                   "periodic snapshots under a collector's lease")


def test_snapshot_cli_collects_from_a_running_system(deployments, tmp_path, capsys):
    dep = deployments.deploy([BrokerSpec("broker-a")], namesrv_overrides={"snapshot_interval_ms": 200})
    wait_for_route_everywhere(dep, "TBW102", lambda r: broker_names(r) == {"broker-a"}, 20)
    out = tmp_path / "cli-snapshots"
    assert main(["snapshot", str(out), "--namespace", dep.spec.namespace]) == 0
    printed = capsys.readouterr().out
    for name in dep.namesrvs:
        assert f"{name}: " in printed
    table = read_snapshots_arrow(out)
    assert set(table["namesrv"].to_pylist()) == set(dep.namesrvs)


def test_snapshot_cli_without_namesrvs_fails_clearly(ray_local, tmp_path, capsys):
    assert main(["snapshot", str(tmp_path / "x"), "--namespace", "no-such-namespace"]) == 1
    assert "no NameServer found" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [{"snapshot_interval_ms": -1}, {"snapshot_max_buffered_rows": 0}])
def test_snapshot_settings_are_validated(bad):
    from namesrv.routeinfo.config import NamesrvConfig

    with pytest.raises(ValueError):
        NamesrvConfig(**bad)
