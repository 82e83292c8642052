"""lose_master_node and the masterless windows on synthetic inputs: the plan never revives a lost
node's set nor faults it again, the config and placement refuse what cannot work, a lost master's
term ends at the loss, 3a allows Ray's node-death detection, and a failed send made while its set
(or every set) had no writable master is explained by the fault, a stopped master is
UNREACHABLE, not writable, until its SIGCONT, and the run's temp store is removed even while a
lost node's broker still writes into it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from actors.deployment.placement import shared_set_nodes, spread_sets_over_nodes
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.chaos import leaks
from clients.chaos.invariants import explain_failure, impaired_windows
from clients.chaos.leaks import remove_store
from clients.chaos.plan import ChaosConfig, FaultRecord, plan_faults
from clients.chaos.roles import (
    UNREACHABLE,
    Incarnation,
    masterless_windows,
    no_master_anywhere,
    role_spans,
    writable_master_overlaps,
)
from clients.chaos.schema import KILL_MASTER, LOSE_MASTER_NODE, REVIVAL_OF, SIGCONT_BROKER, SIGSTOP_BROKER

SETS = {"broker-a": ["broker-a-0", "broker-a-1"], "broker-b": ["broker-b-0", "broker-b-1"]}
NAMES = {a: n for n, members in SETS.items() for a in members}
END = 30_000


def inc(broker: str, log: list[tuple[int, str, int]]) -> Incarnation:
    entries = [{"atMs": t, "role": r, "epoch": e} for t, r, e in log]
    return Incarnation(NAMES[broker], broker, "i1", 0, END, entries, True)


def send(t: int, tried: str, latency: int = 100) -> dict[str, Any]:
    return {"t_ms": t, "latency_ms": latency, "brokers_tried": tried, "error": "send failed"}


def node_loss_cfg(**kw: Any) -> ChaosConfig:
    return ChaosConfig(**{"duration_s": 40, "fault_interval_s": 3, "slaves": 1, "controller": True,
                          "faults": ((LOSE_MASTER_NODE, 1), (KILL_MASTER, 1)), **kw})


def test_a_lost_node_is_never_revived_and_its_set_never_faulted_again() -> None:
    plan = plan_faults(node_loss_cfg(seed=7), ["broker-a-0", "broker-b-0"], ["namesrv-0"], sets=SETS)
    losses = [e for e in plan if e.kind == LOSE_MASTER_NODE]
    assert losses and LOSE_MASTER_NODE not in REVIVAL_OF
    for loss in losses:
        later = [e for e in plan if e.target == loss.target and e.at_s >= loss.at_s and e is not loss]
        assert later == [], f"{loss.target} faulted again after its node was lost: {later}"


def test_losing_a_node_needs_a_slave_and_the_controller() -> None:
    with pytest.raises(ValueError, match="lose_master_node needs a slave"):
        ChaosConfig(faults=((LOSE_MASTER_NODE, 1),), slaves=1)
    with pytest.raises(ValueError, match="lose_master_node needs a slave"):
        ChaosConfig(faults=((LOSE_MASTER_NODE, 1),), controller=True)
    lonely = {"broker-a": ["broker-a-0"], "broker-b": ["broker-b-0"]}
    assert plan_faults(node_loss_cfg(faults=((LOSE_MASTER_NODE, 1),)), ["broker-a-0", "broker-b-0"], [],
                       sets=lonely) == []


def test_sets_are_spread_so_master_and_slave_never_share_a_node() -> None:
    spec = ClusterSpec(brokers=[BrokerSpec(n, i) for n in ("broker-a", "broker-b") for i in (0, 1)])
    spread_sets_over_nodes(spec, ["w0", "w1", "w2", "head"])
    assert {b.actor_name: b.node_id for b in spec.brokers} == {
        "broker-a-0": "w0", "broker-b-0": "w1", "broker-a-1": "w2", "broker-b-1": "head"}
    assert shared_set_nodes(spec) == {}
    spread_sets_over_nodes(spec, ["w0", "w1"])  # two nodes, two sets: each set's members meet
    assert shared_set_nodes(spec) == {n: [f"{n}-0", f"{n}-1"] for n in ("broker-a", "broker-b")}
    unpinned = ClusterSpec(brokers=[BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)])
    assert shared_set_nodes(unpinned) == {"broker-a": ["broker-a-0", "broker-a-1"]}


def test_a_lost_masters_term_ends_at_the_loss_and_its_slave_takes_over() -> None:
    logs = [inc("broker-a-0", [(0, "SYNC_MASTER", 1)]), inc("broker-a-1", [(0, "SLAVE", 1), (7_500, "SYNC_MASTER", 2)])]
    loss = FaultRecord(0, 5_000, LOSE_MASTER_NODE, "broker-a-0", "broker-a-0")
    spans = role_spans(logs, [loss], END)
    assert writable_master_overlaps(spans) == []
    assert [(s.broker, s.role, s.start_ms, s.end_ms) for s in spans if s.role != "SLAVE"] == [
        ("broker-a-0", "SYNC_MASTER", 0, 5_000), ("broker-a-1", "SYNC_MASTER", 7_500, END)]
    assert masterless_windows(spans, ["broker-a"], 0, END, follow_ms=1_000) == {"broker-a": [(5_000, 8_500)]}


def test_node_loss_detection_allows_rays_node_death_verdict() -> None:
    cfg = node_loss_cfg(node_death_bound_ms=25_000, margin_ms=1_000)
    timing = cfg.timing()
    expiry = timing.expiry_ms + timing.scan_ms
    assert timing.detect_bound_ms(LOSE_MASTER_NODE) == min(25_000, expiry) + 1_000
    assert timing.detect_bound_ms(KILL_MASTER) == cfg.channel_bound_ms
    slow = node_loss_cfg(node_death_bound_ms=25_000, profile="default").timing()
    assert slow.detect_bound_ms(LOSE_MASTER_NODE) == min(25_000, slow.expiry_ms + slow.scan_ms) + slow.margin_ms
    watched = node_loss_cfg(namesrv_overrides={"broker_channel_expired_time_ms": 120_000}).timing()
    assert watched.expiry_ms == 120_000, "the bounds follow the NameServer settings of the deployment"
    assert watched.detect_bound_ms(LOSE_MASTER_NODE) == 30_000 + watched.margin_ms, "Ray's verdict, by default 30 s"
    with pytest.raises(ValueError, match="keeps its own NameServer config"):
        ChaosConfig(existing=True, namespace="ns", namesrv_overrides={"broker_channel_expired_time_ms": 1})


def test_failures_while_the_set_had_no_master_are_the_faults_and_later_ones_are_not() -> None:
    timing = node_loss_cfg().timing()
    loss = FaultRecord(0, 5_000, LOSE_MASTER_NODE, "broker-a-0", "broker-a-0")
    masterless = {"broker-a": [(5_000, 8_500)], "broker-b": []}
    windows = impaired_windows([loss], NAMES, timing, END, None, masterless)
    assert windows["broker-a"][0] == (5_000, 8_500), "a lost node's window ends when its set has a master again"
    assert explain_failure(send(6_000, "broker-a"), windows)
    assert explain_failure(send(12_000, "broker-a"), windows) is None
    assert explain_failure(send(6_000, "broker-a,broker-b"), windows) is None, "broker-b had its master"
    hung = send(6_000, "broker-a,broker-b", latency=3_095) | {"error": "SendFailedError: Send [2] times, send timeout"}
    assert "budget spent on faulted broker(s) broker-a" in (explain_failure(hung, windows) or "")
    assert explain_failure(hung | {"brokers_tried": "broker-b,broker-a"}, windows) is None, "broker-b went first"


def test_a_send_that_tried_no_broker_is_explained_only_while_no_set_had_a_master() -> None:
    masterless = {"broker-a": [(5_000, 8_000)], "broker-b": [(6_000, 9_000)]}
    nowhere = no_master_anywhere(masterless)
    assert nowhere == [(6_000, 8_000)]
    assert explain_failure(send(7_000, ""), {}, nowhere) == "no broker set had a writable master"
    assert explain_failure(send(5_500, "", latency=200), {}, nowhere) is None, "broker-b still had its master"
    assert explain_failure(send(7_000, ""), {}) is None


def test_no_master_anywhere_of_one_set_is_its_gaps() -> None:
    assert no_master_anywhere({"broker-a": [(1, 2), (4, 5)]}) == [(1, 2), (4, 5)]
    assert no_master_anywhere({}) == []


def test_a_stopped_master_is_unreachable_not_writable_until_its_sigcont() -> None:
    """SIGSTOP at 5 s, the slave elected at 6.5 s, SIGCONT at 9 s, the old master hears of its fence
    at 9.2 s: stopped, it was no writable master; resumed, it believed it was one for 200 ms."""
    logs = [inc("broker-a-0", [(0, "SYNC_MASTER", 1), (9_200, "SLAVE", 2)]),
            inc("broker-a-1", [(0, "SLAVE", 1), (6_500, "SYNC_MASTER", 2)])]
    stop = FaultRecord(0, 5_000, SIGSTOP_BROKER, "broker-a-0", "broker-a-0")
    cont = FaultRecord(1, 9_000, SIGCONT_BROKER, "broker-a-0", "broker-a-0", revives=0)
    spans = role_spans(logs, [stop, cont], END)
    assert [(s.role, s.start_ms, s.end_ms) for s in spans if s.broker == "broker-a-0"] == [
        ("SYNC_MASTER", 0, 5_000), (UNREACHABLE, 5_000, 9_000), ("SYNC_MASTER", 9_000, 9_200), ("SLAVE", 9_200, END)]
    [overlap] = writable_master_overlaps(spans)
    assert (overlap.from_ms, overlap.to_ms) == (9_000, 9_200)
    assert masterless_windows(spans, ["broker-a"], 0, END) == {"broker-a": [(5_000, 6_500)]}


def test_a_master_stopped_to_the_end_of_the_run_stays_unreachable() -> None:
    logs = [inc("broker-a-0", [(0, "SYNC_MASTER", 1)])]
    spans = role_spans(logs, [FaultRecord(0, 5_000, SIGSTOP_BROKER, "broker-a-0", "broker-a-0")], END)
    assert [(s.role, s.start_ms, s.end_ms) for s in spans] == [("SYNC_MASTER", 0, 5_000), (UNREACHABLE, 5_000, END)]


def test_namesrv_chaos_refuses_lose_master_node_before_starting_anything(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from clients.cli.main import main

    started: list[object] = []  # whatever Ray an earlier test of the session left up, this one starts none
    monkeypatch.setattr(ray, "init", lambda *a, **kw: started.append((a, kw)))
    assert main(["chaos", "--faults", "lose_master_node", "--slaves", "1", "--controller"]) == 2
    assert "node-removal hook" in capsys.readouterr().out
    assert started == []
    assert main(["chaos", "--faults", "lose_master_node"]) == 2  # the config's own refusal first
    assert "lose_master_node needs a slave to take over" in capsys.readouterr().out


def test_the_temp_store_is_removed_while_a_lost_nodes_broker_still_writes_into_it(tmp_path: Path) -> None:
    """A process the GCS already calls dead may still write for a moment, so one rmtree can leave
    files behind: the removal goes on until the dir is gone (and says so when it never is)."""
    store = tmp_path / "store"
    (store / "broker-a-0" / "commitlog").mkdir(parents=True)
    real_rmtree = shutil.rmtree
    calls: list[str] = []

    def rmtree_raced(path: str, ignore_errors: bool = False) -> None:
        real_rmtree(path, ignore_errors=ignore_errors)
        calls.append(path)
        if len(calls) <= 3:  # the zombie broker wrote a segment meanwhile, three times before it died
            (store / "broker-a-0" / "commitlog").mkdir(parents=True, exist_ok=True)
            (store / "broker-a-0" / "commitlog" / f"{len(calls):020d}").write_bytes(b"x")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(leaks.shutil, "rmtree", rmtree_raced)
        assert remove_store(str(store))
    assert not store.exists() and len(calls) == 4
    forever = tmp_path / "forever"
    forever.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(leaks.shutil, "rmtree", lambda path, ignore_errors=False: None)  # a dir that cannot go
        assert not remove_store(str(forever), timeout_s=0.3)
    assert forever.exists()
