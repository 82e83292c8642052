"""The controller's state machine driven by hand: a cluster's broker names and addresses, joins,
heartbeats, and a three-replica set; a core on an in-memory log, and a log store that can fail."""

from __future__ import annotations

from namesrv.common.clock import ManualClock
from namesrv.controller.config import ControllerConfig
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import EventLog, MemoryKV

BROKER = "broker-a"
CLUSTER = "DefaultCluster"
PREFIX = "ns/controller"
"""The event log's key prefix in these tests."""


def core_on(kv: MemoryKV, clock: ManualClock | None = None, **config: object) -> ControllerCore:
    """A controller core whose history is in `kv` (one made again on the same `kv` replays it)."""
    return ControllerCore(ControllerConfig.model_validate(config), clock or ManualClock(), EventLog(kv, PREFIX))


class FailingKV(MemoryKV):
    """A log store whose writes fail (OSError) while `failing` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def put_if_absent(self, key: str, value: bytes) -> bool:
        if self.failing:
            raise OSError("GCS unavailable")
        return super().put_if_absent(key, value)




def addr(i: int) -> str:
    return f"127.0.0.1:{10910 + i}"


def join(core: ControllerCore, check_code_suffix: str = "1") -> int:
    """A replica registers as RocketMQ 5.3's broker does: next id, apply it, register."""
    next_id = core.get_next_broker_id(CLUSTER, BROKER).header["nextBrokerId"]
    applied = core.apply_broker_id(CLUSTER, BROKER, next_id, f"{addr(next_id)};{check_code_suffix}")
    assert applied.ok, applied
    assert core.register_broker(CLUSTER, BROKER, next_id, addr(next_id)).ok
    return int(next_id)


def beat(core: ControllerCore, broker_id: int, epoch: int = 1, max_offset: int = 0,
         priority: int | None = None) -> None:
    assert core.heartbeat(CLUSTER, BROKER, addr(broker_id), broker_id, epoch=epoch, max_offset=max_offset,
                          election_priority=priority).ok


def three_replicas(core: ControllerCore) -> tuple[int, int, int]:
    """Broker 1 master (epoch 1) with 2 and 3 in its SyncStateSet (epoch 2)."""
    ids = (join(core), join(core), join(core))
    for b in ids:
        beat(core, b)
    first = core.elect_master(BROKER, 1)
    assert first.ok and first.header["masterEpoch"] == 1 and first.header["masterBrokerId"] == 1
    altered = core.alter_sync_state_set(BROKER, 1, 1, {1, 2, 3}, first.header["syncStateSetEpoch"])
    assert altered.ok, altered
    return ids
