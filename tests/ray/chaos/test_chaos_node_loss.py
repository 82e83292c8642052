"""A seeded chaos run that loses a whole node (lose_master_node) on a multi-node Ray cluster on this
machine: two broker sets, each a SYNC_MASTER with one slave, in controller mode, every broker on a
node of its own (masters on workers), NameServers, controller and producers on the head. The run
removes the master's node through its node-removal hook while producers send: the slave on another
node takes over, nothing acknowledged is lost (every acknowledged message of the set is read back
from the new master: the old one is gone with its node), the set's sends resume, no two writable
masters at any instant, and the NameServers drop the lost broker within Ray's node-death bound: their
heartbeat expiry is 120 s, so it is their channel watch that drops it, once Ray declares the node dead."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.cluster_utils import Cluster

from clients.chaos.plan import ChaosConfig, plan_faults, plan_signature, timeline_signature
from clients.chaos.report import render_report
from clients.chaos.run import run_chaos
from clients.chaos.schema import BROKER_REVIVALS, LOSE_MASTER_NODE
from namesrv.common.waiting import wait_until
from tests.support.multinode import alive_node_ids, multinode_cluster, remove_node_now
from tests.support.ray_cluster import unique_namespace

log = logging.getLogger(__name__)

pytestmark = pytest.mark.timeout(180)

HA_FAST = {"ha_max_time_slave_not_catchup_ms": 1_500, "slave_timeout_ms": 1_000, "ha_poll_wait_ms": 300,
           "slave_sync_interval_ms": 500, "controller_first_elect_delay_ms": 500}
SETS = {"broker-a": ["broker-a-0", "broker-a-1"], "broker-b": ["broker-b-0", "broker-b-1"]}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with multinode_cluster(3, "chaos-node") as c:
        yield c


def test_losing_a_masters_node_promotes_its_slave_elsewhere_and_loses_nothing(cluster: Cluster, tmp_path: Path) -> None:
    cfg = ChaosConfig(duration_s=12, warmup_s=3, fault_interval_s=30, seed=3, rate=30, brokers=2, namesrvs=2, slaves=1,
                      broker_role="SYNC_MASTER", broker_overrides=HA_FAST, controller=True,
                      faults=((LOSE_MASTER_NODE, 1),), node_death_bound_ms=30_000,
                      namesrv_overrides={"broker_channel_expired_time_ms": 120_000},
                      namespace=unique_namespace("chaos-node"))
    plan = plan_faults(cfg, ["broker-a-0", "broker-b-0"], ["namesrv-0", "namesrv-1"], sets=SETS)
    assert [e.kind for e in plan] == [LOSE_MASTER_NODE], "one node loss, never revived"
    lost_nodes: list[str] = []

    def lose(node_id: str) -> None:
        lost_nodes.append(node_id)
        remove_node_now(cluster, node_id)

    report = run_chaos(cfg, str(tmp_path / "out"), lose_node=lose)
    text = render_report(report)
    assert not [i for i in report.invariants if not i.ok], text
    assert timeline_signature(report.timeline) == plan_signature(plan)
    (loss,) = [r for r in report.timeline if r.kind == LOSE_MASTER_NODE]
    # made on whichever member held the role then: under load the controller may have moved it before
    assert loss.ok and loss.target in SETS[str(loss.planned)] and "no revival" in loss.detail, loss
    assert not [r for r in report.timeline if r.kind in BROKER_REVIVALS]
    assert len(lost_nodes) == 1
    wait_until(lambda: lost_nodes[0] not in alive_node_ids(), 60, "Ray to declare the lost node dead")
    # SYNC_MASTER: nothing acknowledged lost, the lost set's messages read back from its new master
    acked = [s for s in report.sends if s["ok"]]
    assert report.figures["messages"]["lost"] == 0 and not any(s["lost"] for s in acked)
    mine = [s for s in acked if s["broker_name"] == loss.planned]
    assert any(s["t_ms"] < loss.t_ms for s in mine), "the set took sends before the loss"
    assert any(s["t_ms"] > loss.t_ms for s in mine), "the set's sends resumed on its new master"
    # roles: the lost master's term ends at the loss; its slave is master after it, at a higher epoch
    spans = [r for r in report.roles if r["broker_set"] == loss.planned]
    old_terms = [r for r in spans if r["broker"] == loss.target and r["role"] != "SLAVE"]
    assert old_terms and max(r["end_ms"] for r in old_terms) <= loss.t_ms
    new_terms = [r for r in spans if r["broker"] == f"{loss.planned}-1" and r["role"] == "SYNC_MASTER"]
    assert new_terms and min(r["start_ms"] for r in new_terms) >= loss.t_ms
    assert min(r["epoch"] for r in new_terms) > max(r["epoch"] for r in old_terms)
    # every NameServer dropped the lost broker on Ray's verdict on the node, within its bound
    drops = [d for d in report.detections if d.fault_id == loss.fault_id and d.observer_kind == "namesrv"]
    assert len(drops) == 2 and all(d.ok and d.cause == "channel" and d.bound_ms == 31_000 for d in drops), drops
    failed = [s for s in report.sends if not s["ok"]]
    log.warning("node loss: %s master %d ms after the loss; NameServers dropped it after %s ms; %d sends failed "
                "(all explained)\n%s", new_terms[0]["broker"], min(r["start_ms"] for r in new_terms) - loss.t_ms,
                [d.elapsed_ms for d in drops], len(failed), text)
