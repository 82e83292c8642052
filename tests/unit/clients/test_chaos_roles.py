"""Issue 21's chaos invariants on synthetic inputs: one writable master per broker set from role logs
(with and without `role_log`), the loss count under ASYNC_MASTER, sends past a paused slave, and
the seeded plan of the HA fault kinds."""

from __future__ import annotations

from typing import Any

import pytest

from clients.chaos.checks import Invariant
from clients.chaos.plan import ChaosConfig, FaultRecord, plan_faults, plan_signature
from clients.chaos.roles import (
    Incarnation,
    check_loss_for_role,
    check_one_master,
    check_paused_slave_sends,
    current_role,
    role_log_of,
    role_spans,
    writable_master_overlaps,
)
from clients.chaos.schema import (
    KILL_MASTER,
    PAUSE_SLAVE,
    RESTART_BROKER,
    SIGCONT_BROKER,
    SIGKILL_MASTER,
)

A, B = "broker-a-0", "broker-a-1"
END = 20_000


def inc(broker: str, log: list[tuple[int, str, int]] | None, *, role: str = "SLAVE", seen: int = 0,
        incarnation: str = "i1") -> Incarnation:
    """An incarnation with a role log, or (log None) one that reported only its configured role."""
    entries = [{"atMs": t, "role": r, "epoch": e} for t, r, e in (log or [(seen, role, 0)])]
    return Incarnation("broker-a", broker, incarnation, seen, END, entries, log is not None)


def fault(fid: int, t: int, kind: str, target: str, revives: int | None = None) -> FaultRecord:
    return FaultRecord(fid, t, kind, target, target, revives=revives)


def test_a_clean_handover_is_one_master_at_every_instant() -> None:
    logs = [inc(A, [(0, "SYNC_MASTER", 1), (5_000, "SLAVE", 2)]), inc(B, [(0, "SLAVE", 1), (5_000, "SYNC_MASTER", 2)])]
    assert writable_master_overlaps(role_spans(logs, [], END)) == []
    assert check_one_master(logs, [], END).ok


def test_a_new_master_before_the_old_one_stepped_down_is_caught() -> None:
    logs = [inc(A, [(0, "SYNC_MASTER", 1), (5_000, "SLAVE", 2)]), inc(B, [(0, "SLAVE", 1), (4_000, "ASYNC_MASTER", 2)])]
    [overlap] = writable_master_overlaps(role_spans(logs, [], END))
    assert (overlap.from_ms, overlap.to_ms) == (4_000, 5_000)
    verdict = check_one_master(logs, [], END)
    assert not verdict.ok and "1 overlaps" in verdict.value and "4000 to 5000" in verdict.detail


@pytest.mark.parametrize(("killed_at", "overlap"), [(3_000, None), (4_000, (3_500, 4_000))])
def test_a_death_ends_the_dead_masters_term(killed_at: int, overlap: tuple[int, int] | None) -> None:
    logs = [inc(A, [(0, "SYNC_MASTER", 1)]), inc(B, [(0, "SLAVE", 1), (3_500, "SYNC_MASTER", 2)])]
    found = writable_master_overlaps(role_spans(logs, [fault(0, killed_at, SIGKILL_MASTER, A)], END))
    assert [(o.from_ms, o.to_ms) for o in found] == ([overlap] if overlap else [])


def test_without_role_logs_the_start_role_holds_from_each_start() -> None:
    """Brokers before the failover wiring: each incarnation its configured role, the restarted one
    from its restart; the killed one until its kill."""
    timeline = [fault(0, 3_000, KILL_MASTER, A), fault(1, 5_000, RESTART_BROKER, A, revives=0)]
    logs = [inc(A, None, role="SYNC_MASTER", seen=100), inc(A, None, role="SYNC_MASTER", seen=5_600, incarnation="i2"),
            inc(B, None, role="SLAVE", seen=100)]
    spans = role_spans(logs, timeline, END, run_start_ms=50)
    masters = [(s.incarnation, s.start_ms, s.end_ms) for s in spans if s.role == "SYNC_MASTER"]
    assert masters == [("i1", 50, 3_000), ("i2", 5_000, END)]
    verdict = check_one_master(logs, timeline, END, run_start_ms=50)
    assert verdict.ok and "start role assumed" in verdict.detail


def test_an_old_master_returning_as_master_beside_the_new_one_is_caught() -> None:
    timeline = [fault(0, 3_000, KILL_MASTER, A), fault(1, 5_000, RESTART_BROKER, A, revives=0)]
    logs = [inc(A, [(0, "SYNC_MASTER", 1)]), inc(A, [(5_100, "SYNC_MASTER", 1)], incarnation="i2"),
            inc(B, [(0, "SLAVE", 1), (3_400, "SYNC_MASTER", 2)])]
    [overlap] = writable_master_overlaps(role_spans(logs, timeline, END))
    assert {overlap.a.broker, overlap.b.broker} == {A, B} and overlap.from_ms == 5_100


def test_one_broker_changing_epochs_as_master_is_not_an_overlap() -> None:
    logs = [inc(A, [(0, "SYNC_MASTER", 1), (2_000, "SYNC_MASTER", 2), (3_000, "ASYNC_MASTER", 3)])]
    assert writable_master_overlaps(role_spans(logs, [], END)) == []


def test_status_without_a_role_log_reads_as_the_start_role() -> None:
    assert role_log_of({"broker_role": "SLAVE"}, 7) == [{"atMs": 7, "role": "SLAVE", "epoch": 0}]
    status = {"broker_role": "SLAVE", "role_log": [{"atMs": 1, "role": "SLAVE", "epoch": 1},
                                                   {"atMs": 9, "role": "SYNC_MASTER", "epoch": 2}]}
    assert current_role(status) == "SYNC_MASTER"


LOSS = Invariant("1 every acknowledged message is readable", False, "3 lost of 100")


def test_async_master_losses_are_counted_not_failed() -> None:
    timeline = [fault(0, 1_000, SIGKILL_MASTER, A)]
    counts = {"lost": 3, "acknowledged": 100}
    verdict, figures = check_loss_for_role(LOSS, counts, "ASYNC_MASTER", 1, timeline)
    assert verdict.ok and "3 acknowledged-but-lost of 100 across 1 master deaths" in verdict.value
    assert figures["acknowledged_lost"] == 3 and figures["master_deaths"] == 1
    strict, _ = check_loss_for_role(LOSS, counts, "SYNC_MASTER", 1, timeline)
    assert strict is LOSS and not strict.ok
    assert check_loss_for_role(LOSS, counts, None, 0, timeline)[0] is LOSS


def send(t: int, ok: bool, name: str = "broker-a") -> dict[str, Any]:
    return {"t_ms": t, "ok": ok, "broker_name": name, "error": None if ok else "FLUSH_SLAVE_TIMEOUT"}


def test_sends_must_go_on_once_the_sync_state_set_shrank() -> None:
    timeline = [fault(0, 1_000, PAUSE_SLAVE, B), fault(1, 9_000, SIGCONT_BROKER, B, revives=0)]
    names = {A: "broker-a", B: "broker-a"}
    good = [send(1_500, False), send(2_500, False), send(5_000, True), send(8_000, True), send(6_000, False, "b")]
    assert check_paused_slave_sends(good, timeline, names, 3_000, True).ok
    late = [*good, send(6_000, False)]
    verdict = check_paused_slave_sends(late, timeline, names, 3_000, True)
    assert not verdict.ok and "1 failures" in verdict.value
    stalled = [send(1_500, False)]
    assert "acknowledged nothing" in check_paused_slave_sends(stalled, timeline, names, 3_000, True).detail
    assert check_paused_slave_sends(late, timeline, names, 3_000, False).ok  # ASYNC_MASTER: not this check


SETS = {"broker-a": ["broker-a-0", "broker-a-1"], "broker-b": ["broker-b-0", "broker-b-1"]}


def test_the_ha_kinds_are_planned_on_broker_sets_one_fault_per_set_at_a_time() -> None:
    cfg = ChaosConfig(duration_s=40, fault_interval_s=2, seed=5, slaves=1,
                      faults=((KILL_MASTER, 1), (SIGKILL_MASTER, 1), (PAUSE_SLAVE, 1)))
    masters = ["broker-a-0", "broker-b-0"]
    plan = plan_faults(cfg, masters, ["namesrv-0"], sets=SETS)
    assert plan_signature(plan) == plan_signature(plan_faults(cfg, masters, ["namesrv-0"], sets=SETS))
    assert {e.kind for e in plan} >= {KILL_MASTER, SIGKILL_MASTER, PAUSE_SLAVE}
    assert {e.target for e in plan} <= set(SETS)
    down: dict[str, float] = {}
    for e in plan:  # a set is faulted again only after its revival
        if e.kind in (KILL_MASTER, SIGKILL_MASTER, PAUSE_SLAVE):
            assert down.get(e.target, -1.0) <= e.at_s
            down[e.target] = float("inf")
        else:
            down[e.target] = e.at_s
    masters_down = sorted((e.at_s, e.target) for e in plan if e.kind in (KILL_MASTER, SIGKILL_MASTER))
    assert masters_down, "master kills were planned"


def test_pause_slave_needs_slaves() -> None:
    with pytest.raises(ValueError, match="pause_slave needs slaves"):
        ChaosConfig(faults=((PAUSE_SLAVE, 1),))
    cfg = ChaosConfig(duration_s=30, slaves=1, faults=((PAUSE_SLAVE, 1),))
    lonely = {"broker-a": ["broker-a-0"], "broker-b": ["broker-b-0"]}
    assert plan_faults(cfg, ["broker-a-0", "broker-b-0"], [], sets=lonely) == []
