"""Invariants of the controller under random histories (hypothesis): whatever brokers do, whatever
time does, however often the controller restarts from its log."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.common.clock import ManualClock
from namesrv.controller.config import ControllerConfig
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import EventLog, MemoryKV
from tests.support.controller import BROKER, CLUSTER, addr

REPLICAS = (1, 2, 3)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("beat"), st.sampled_from(REPLICAS), st.integers(0, 5), st.integers(0, 1000)),
        st.tuples(st.just("advance"), st.integers(0, 12_000)),
        st.tuples(st.just("dead"), st.sampled_from(REPLICAS)),
        st.tuples(st.just("scan_elect")),
        st.tuples(st.just("elect"), st.sampled_from(REPLICAS), st.booleans()),
        st.tuples(st.just("alter"), st.sets(st.sampled_from(REPLICAS), min_size=1), st.booleans()),
        st.tuples(st.just("restart")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans())
def test_no_epoch_ever_has_two_masters_and_the_log_always_rebuilds_the_state(history: list[tuple],
                                                                             unclean: bool) -> None:
    kv, clock = MemoryKV(), ManualClock()
    config = ControllerConfig(enable_elect_unclean_master=unclean)

    def fresh() -> ControllerCore:
        return ControllerCore(config, clock, EventLog(kv, "p/controller"))

    core = fresh()
    for bid in REPLICAS:
        assert core.apply_broker_id(CLUSTER, BROKER, bid, f"{addr(bid)};1").ok
    masters: dict[int, int | None] = {}  # masterEpoch -> master, every one ever seen
    last_epochs = (0, 0)
    for op in history:
        kind = op[0]
        if kind == "beat":
            core.heartbeat(CLUSTER, BROKER, addr(op[1]), op[1], epoch=op[2], max_offset=op[3])
        elif kind == "advance":
            clock.advance(op[1])
        elif kind == "dead":
            core.report_broker_dead(BROKER, op[1])
        elif kind == "scan_elect":
            for name in core.broker_sets_to_reelect():
                core.elect_master(name)
        elif kind == "elect":
            core.elect_master(BROKER, op[1], designate_elect=op[2])
        elif kind == "alter":
            sync = core.manager.sync_state_info[BROKER]
            if sync.master_broker_id is not None:
                stale = 1 if op[2] else 0  # sometimes with a stale SyncStateSet epoch: must be refused
                result = core.alter_sync_state_set(BROKER, sync.master_broker_id, sync.master_epoch, op[1],
                                                   sync.sync_state_set_epoch - stale)
                assert not (op[2] and result.ok)
        elif kind == "restart":
            core = fresh()
        sync = core.manager.sync_state_info[BROKER]
        assert masters.setdefault(sync.master_epoch, sync.master_broker_id) == sync.master_broker_id
        epochs = (sync.master_epoch, sync.sync_state_set_epoch)
        assert epochs >= last_epochs and epochs[1] >= last_epochs[1], "epochs never go back"
        last_epochs = epochs
        if sync.master_broker_id is not None:
            assert sync.master_broker_id in sync.sync_state_set
        assert sync.sync_state_set <= set(core.manager.replica_info[BROKER].replicas)
        assert fresh().manager.snapshot() == core.manager.snapshot()
