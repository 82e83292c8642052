"""The kernel's faults in the seeded chaos plan and its invariants, on synthetic inputs: the plan
draws each partition's NameServer from the seed and heals every host fault; the config refuses host
faults off the test bed and a bed too small; a partition excuses only the NameServer it cuts (3a,
3d); a producer that drops a broker one NameServer lost breaks 3e, unless another NameServer
restarted meanwhile; sends to a partitioned-from-a-NameServer broker are never explained by it; a
consumer group's ownership gaps are judged wherever the group reaches the queue (invariant 7)."""

from __future__ import annotations

from typing import Any

import pytest

from clients.chaos.checks import check_kept_routes
from clients.chaos.invariants import (
    explain_failure,
    impaired_windows,
    measure_kept_routes,
    measure_namesrv_detection,
    must_remove,
    spurious_removals,
)
from clients.chaos.observe import RemovalLog
from clients.chaos.ownership import Defect, OwnershipSample, check_ownership, excused_windows, ownership_defects
from clients.chaos.plan import ChaosConfig, FaultRecord, parse_fault_mix, plan_faults, plan_signature
from clients.chaos.schema import (
    HEAL,
    HOST_FAULTS,
    ISOLATE_HOST,
    KILL_NAMESRV,
    PARTITION_BROKER_NAMESRV,
    PARTITION_CLIENT_BROKER,
    RESTART_BROKER,
    RESTART_NAMESRV,
)

BROKERS = ["10.77.0.4:10911", "10.77.0.5:10911"]
NAMES = {BROKERS[0]: "broker-a", BROKERS[1]: "broker-b"}
NAMESRVS = ["namesrv-0", "namesrv-1"]
MIX = "partition_broker_namesrv:2,partition_client_broker,isolate_host,delay_broker,kill_broker"


def bed_cfg(**kw: Any) -> ChaosConfig:
    return ChaosConfig(**{"duration_s": 40, "fault_interval_s": 3, "brokers": 2, "namesrvs": 2, "hosts": 4,
                          "broker_tcp": True, "faults": tuple(parse_fault_mix(MIX).items()), **kw})


def test_the_plan_draws_each_partitions_namesrv_and_heals_every_host_fault() -> None:
    cfg = bed_cfg(seed=3)
    plan = plan_faults(cfg, BROKERS, NAMESRVS, cfg.timing())
    assert plan_signature(plan) == plan_signature(plan_faults(cfg, BROKERS, NAMESRVS, cfg.timing()))
    host = [e for e in plan if e.kind in HOST_FAULTS]
    assert {e.kind for e in host} == HOST_FAULTS
    assert all(e.peer in NAMESRVS for e in host if e.kind == PARTITION_BROKER_NAMESRV)
    assert all(e.peer is None for e in plan if e.kind != PARTITION_BROKER_NAMESRV)
    for fault in host:  # healed after the expiry has caught it, before sending stops
        heal = next(e for e in plan if e.kind == HEAL and e.target == fault.target and e.at_s > fault.at_s)
        assert heal.at_s - fault.at_s == pytest.approx(cfg.stop_time(cfg.timing()), abs=1e-3)
        assert heal.at_s <= cfg.duration_s - 1.0
    others = {tuple(plan_signature(plan_faults(bed_cfg(seed=s), BROKERS, NAMESRVS))) for s in range(6)}
    assert len(others) > 1, "different seeds, different plans"


def test_host_faults_need_the_test_bed_big_enough_and_tcp_brokers() -> None:
    with pytest.raises(ValueError, match="need the multi-host test bed"):
        ChaosConfig(faults=((ISOLATE_HOST, 1),), brokers=2)
    with pytest.raises(ValueError, match="need 5 hosts, not 4"):
        bed_cfg(brokers=3)
    with pytest.raises(ValueError, match="--tcp-brokers"):
        bed_cfg(broker_tcp=False)
    with pytest.raises(ValueError, match="exclude each other"):
        bed_cfg(existing=True, namespace="ns")


def rec(fid: int, t: int, kind: str, target: str, peer: str | None = None, revives: int | None = None) -> FaultRecord:
    return FaultRecord(fid, t, kind, target, None if kind in (KILL_NAMESRV, RESTART_NAMESRV) else target,
                       revives=revives, peer=peer)


A, B = BROKERS
TIMELINE = [
    rec(0, 1_000, PARTITION_BROKER_NAMESRV, A, peer="namesrv-1"),
    rec(1, 5_000, HEAL, A, revives=0),
    rec(2, 7_000, PARTITION_CLIENT_BROKER, B),
    rec(3, 11_000, HEAL, B, revives=2),
    rec(4, 13_000, ISOLATE_HOST, A),
    rec(5, 17_000, HEAL, A, revives=4),
]


class Removals(RemovalLog):
    def __init__(self, events: dict[str, list[tuple[str, str, int]]]) -> None:
        super().__init__(dict.fromkeys(events))
        for name, evs in events.items():
            self._events[name].update(evs)


def test_a_partition_is_detected_by_and_excuses_only_the_namesrv_it_cuts() -> None:
    cfg = bed_cfg()
    timing = cfg.timing()
    assert must_remove(TIMELINE[0], NAMESRVS) == ["namesrv-1"]
    assert must_remove(TIMELINE[2], NAMESRVS) == [] and must_remove(TIMELINE[4], NAMESRVS) == NAMESRVS
    removals = Removals({"namesrv-0": [(A, "expired", 14_500)],
                         "namesrv-1": [(A, "expired", 3_500), (A, "expired", 14_600)]})
    rows = measure_namesrv_detection(TIMELINE, removals, NAMESRVS, timing)
    assert [(d.fault_id, d.observer, d.elapsed_ms, d.ok) for d in rows] == [
        (0, "namesrv-1", 2_500, True), (4, "namesrv-0", 1_500, True), (4, "namesrv-1", 1_600, True)]
    assert spurious_removals(removals, TIMELINE, timing) == []
    wrong = Removals({"namesrv-0": [(A, "expired", 3_000), (B, "expired", 9_000)], "namesrv-1": []})
    assert [(r["namesrv"], r["broker_addr"]) for r in spurious_removals(wrong, TIMELINE, timing)] == [
        ("namesrv-0", A), ("namesrv-0", B)], "neither the other NameServer nor a clients' cut may drop a broker"


def route_log(*entries: tuple[int, str]) -> list[tuple[str, int, str, list[str]]]:
    return [("T", t, "push", brokers.split(",")) for t, brokers in entries]


def test_a_producer_that_drops_a_broker_one_namesrv_lost_breaks_3e() -> None:
    timing = bed_cfg().timing()
    logs = {"kept": route_log((0, "broker-a,broker-b")),
            "dropped": route_log((0, "broker-a,broker-b"), (3_600, "broker-b"), (6_000, "broker-a,broker-b")),
            "following": route_log((0, "broker-b"), (1_200, "broker-a,broker-b")),
            "never": route_log((0, "broker-b"))}
    rows = measure_kept_routes(TIMELINE, logs, NAMES, ["T"], timing)
    assert [(r["producer"], r["lacking_ms"], r["judged"]) for r in rows] == [
        ("dropped", [3_600], True), ("following", [], True), ("kept", [], True), ("never", [1_000], True)]
    assert rows[0]["to_ms"] == 5_000 + timing.back_bound_ms(HEAL)
    assert measure_kept_routes(TIMELINE, logs, NAMES, ["T"], timing, {1: 4_000})[0]["to_ms"] == 5_000 + \
        timing.back_bound_ms(HEAL) + 4_000, "a heal's return bound counts the cut's length"
    assert measure_kept_routes(TIMELINE, logs, NAMES, ["T"], timing, {1: 40_000})[0]["to_ms"] == 13_000, \
        "judged until the broker's next fault (its isolation at 13 s) at the latest"
    verdict = check_kept_routes(rows)
    assert not verdict.ok and "dropped lacked it at +2600 ms" in verdict.detail
    assert check_kept_routes([r for r in rows if r["producer"] in ("kept", "following")]).ok
    restarted = [*TIMELINE, rec(6, 2_000, KILL_NAMESRV, "namesrv-0"), rec(7, 4_000, RESTART_NAMESRV, "namesrv-0",
                                                                            revives=6)]
    rows = measure_kept_routes(restarted, logs, NAMES, ["T"], timing)
    assert not any(r["judged"] for r in rows) and check_kept_routes(rows).ok


def test_only_the_clients_cut_and_isolation_explain_failed_sends() -> None:
    timing = bed_cfg().timing()
    windows = impaired_windows(TIMELINE, NAMES, timing, 30_000)
    margin = timing.margin_ms
    assert windows == {"broker-b": [(7_000, 11_000 + margin)], "broker-a": [(13_000, 17_000 + margin)]}
    failed = {"t_ms": 2_000, "latency_ms": 50, "brokers_tried": "broker-a", "error": "send failed"}
    assert explain_failure(failed, windows) is None, "broker-a was reachable: its partition was from a NameServer"
    assert explain_failure(failed | {"t_ms": 8_000, "brokers_tried": "broker-b"}, windows)
    assert explain_failure(failed | {"t_ms": 14_000}, windows)
    none_tried = failed | {"t_ms": 9_000, "brokers_tried": ""}
    assert explain_failure(none_tried, windows, brokers=["broker-b"]), "its only broker was cut from the clients"
    assert explain_failure(none_tried, windows, brokers=["broker-a", "broker-b"]) is None, "broker-a was up"
    stalled = impaired_windows(TIMELINE, NAMES, timing, 30_000, {3: 4_000})  # the clients' cut lasted 4 s
    assert stalled["broker-b"] == [(7_000, 11_000 + margin + 4_000)], "TCP's back-off doubled while it lasted"


def test_namesrv_chaos_refuses_host_faults_off_the_bed_before_starting_anything(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from clients.cli.main import main

    started: list[object] = []
    monkeypatch.setattr(ray, "init", lambda *a, **kw: started.append((a, kw)))
    assert main(["chaos", "--faults", "isolate_host,kill_broker", "--brokers", "2"]) == 2
    assert "need the multi-host test bed: --hosts N" in capsys.readouterr().out
    assert main(["chaos", "--hosts", "3", "--faults", "isolate_host", "--brokers", "2"]) == 2
    assert "need 4 hosts, not 3" in capsys.readouterr().out
    assert main(["chaos", "--hosts", "4", "--brokers", "2", "--address", "auto"]) == 2
    assert "leave --address out" in capsys.readouterr().out
    assert started == []


def sample(t: int, **owners: int) -> OwnershipSample:
    return OwnershipSample(t, {("T", q.split("_")[0], int(q.split("_")[1])): n for q, n in owners.items()})


def test_ownership_defects_are_runs_of_none_or_several_owners() -> None:
    samples = [sample(0, a_0=1, b_0=1), sample(100, a_0=0, b_0=1), sample(200, a_0=2, b_0=1),
               sample(300, a_0=1, b_0=0), sample(400, a_0=1, b_0=0)]
    assert ownership_defects(samples) == [Defect(("T", "a", 0), 2, 100, 300), Defect(("T", "b", 0), 0, 300, 400)]


def test_a_group_is_judged_where_it_reaches_the_queue() -> None:
    """A defect on a broker the clients were cut from (until its return and a rebalance) is excused;
    one during a partition from a NameServer is not (the group reaches that broker)."""
    timing = bed_cfg().timing()
    excused = excused_windows(TIMELINE, NAMES, NAMESRVS, timing, 1_000, 30_000)
    assert excused["broker-b"] == [(7_000, 11_000 + timing.producer_back_bound_ms(HEAL) + 1_000)]
    assert [a for a, _ in excused["broker-a"]] == [13_000], "the partition from a NameServer excuses nothing"
    during_cut = Defect(("T", "broker-b", 1), 0, 8_000, 12_000)
    during_partition = Defect(("T", "broker-a", 1), 0, 2_000, 4_500)
    short = Defect(("T", "broker-a", 2), 2, 2_000, 2_800)
    verdict = check_ownership([during_cut, during_partition, short], excused, 2_000, 300)
    assert not verdict.ok and "T/broker-a:1 unowned for 2500 ms" in verdict.detail
    assert "1 of 2 judged" in verdict.value and "1 excused" in verdict.value
    assert check_ownership([during_cut, short], excused, 2_000, 300).ok
    assert not check_ownership([], excused, 2_000, 0).ok, "no sample is no evidence"
    restarted = [*TIMELINE, rec(6, 2_000, KILL_NAMESRV, "namesrv-0"), rec(7, 4_000, RESTART_NAMESRV, "namesrv-0",
                                                                            revives=6)]
    both_gone = excused_windows(restarted, NAMES, NAMESRVS, timing, 1_000, 30_000)["broker-a"]
    assert both_gone[0] == (1_000, 5_000 + timing.producer_back_bound_ms(RESTART_BROKER, 0) + 1_000), \
        "partitioned from namesrv-1 while namesrv-0 restarted: no NameServer could list broker-a"


def test_without_the_union_client_i_is_given_namesrv_i_alone() -> None:
    from clients.chaos.plan import client_namesrvs

    assert client_namesrvs(NAMESRVS, 3, union=True) == NAMESRVS
    assert [client_namesrvs(NAMESRVS, i, union=False) for i in range(3)] == [["namesrv-0"], ["namesrv-1"],
                                                                               ["namesrv-0"]]
    assert not bed_cfg(route_union=False).route_union
