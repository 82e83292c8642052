"""The controller's state machine (RocketMQ's ReplicasInfoManager).

Per broker set: the replicas (brokerId -> address, check code) and the sync state
(masterBrokerId, masterEpoch, syncStateSet, syncStateSetEpoch). Each request method only checks the
request against the state and returns a `ControllerResult` carrying the answer and the events to
apply; nothing changes until the caller applies those events (after persisting them) with
`apply_event`. Answers use RocketMQ's header and body field names (camelCase).

Where this differs from RocketMQ 5.3: a controller-triggered election that finds nobody records
"no master" only once (RocketMQ's scan never retries such a set either, but a set whose master is
already gone is also re-elected here as soon as a SyncStateSet member is alive again), and a
broker's first election must name a registered replica.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from namesrv.controller import elect_policy
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.config import FIRST_BROKER_CONTROLLER_ID
from namesrv.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from namesrv.controller.heartbeat import BrokerLiveInfo
from namesrv.controller.state import BrokerReplicaInfo, SyncStateInfo

IsAlive = Callable[[str, int], bool]
"""(brokerName, brokerId) -> alive?"""
LiveInfo = Callable[[str, int], BrokerLiveInfo | None]

SNAPSHOT_FORMAT = 1


@dataclass(slots=True)
class ControllerResult:
    code: int = Code.SUCCESS
    remark: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    """The response header's fields (RocketMQ's names): extFields on the wire."""
    body: Any = None
    """The response body as a JSON-ready object (RocketMQ's field names), or None."""
    events: list[Event] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


def _fail(code: int, remark: str, header: dict[str, Any] | None = None) -> ControllerResult:
    return ControllerResult(code, remark, header or {})


def _sync_state_body(sync_state_set: Iterable[int], epoch: int) -> dict[str, Any]:
    return {"syncStateSet": sorted(sync_state_set), "syncStateSetEpoch": epoch}


class ReplicasInfoManager:
    def __init__(self) -> None:
        self.replica_info: dict[str, BrokerReplicaInfo] = {}
        self.sync_state_info: dict[str, SyncStateInfo] = {}

    def contains(self, broker_name: str) -> bool:
        return broker_name in self.replica_info and broker_name in self.sync_state_info

    # ------------------------------------------------------------------ brokerId assignment
    def get_next_broker_id(self, cluster_name: str, broker_name: str) -> ControllerResult:
        info = self.replica_info.get(broker_name)
        next_id = FIRST_BROKER_CONTROLLER_ID if info is None else info.next_assign_broker_id
        return ControllerResult(header={"clusterName": cluster_name, "brokerName": broker_name,
                                        "nextBrokerId": next_id})

    def apply_broker_id(self, cluster_name: str, broker_name: str, applied_broker_id: int,
                        register_check_code: str) -> ControllerResult:
        """Claim `applied_broker_id` (from get_next_broker_id) for the replica whose check code is
        "address;timestamp". Granted when the id is free, or already this replica's (same code)."""
        header = {"clusterName": cluster_name, "brokerName": broker_name}
        if not broker_name or not register_check_code or applied_broker_id < FIRST_BROKER_CONTROLLER_ID:
            return _fail(Code.CONTROLLER_INVALID_REQUEST,
                         f"apply brokerId needs a brokerName, a registerCheckCode and an id >= "
                         f"{FIRST_BROKER_CONTROLLER_ID}", header)
        address = register_check_code.split(";")[0]
        event = ApplyBrokerIdEvent(cluster_name, broker_name, address, applied_broker_id, register_check_code)
        info = self.replica_info.get(broker_name)
        if info is None:
            if applied_broker_id == FIRST_BROKER_CONTROLLER_ID:
                return ControllerResult(header=header, events=[event])
            return _fail(Code.CONTROLLER_BROKER_ID_INVALID,
                         f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to "
                         f"apply brokerId: {applied_broker_id}", header)
        entry = info.replicas.get(applied_broker_id)
        if entry is None or entry.register_check_code == register_check_code:
            return ControllerResult(header=header, events=[event] if entry is None else [])
        return _fail(Code.CONTROLLER_BROKER_ID_INVALID,
                     f"Fail to apply brokerId: {applied_broker_id} in broker-set: {broker_name}", header)

    def register_broker(self, cluster_name: str, broker_name: str, broker_id: int, broker_address: str,
                        is_alive: IsAlive) -> ControllerResult:
        """A replica with an applied id (re)joins: learns the master if there is a live one, and its
        address is updated if it moved."""
        header: dict[str, Any] = {"clusterName": cluster_name, "brokerName": broker_name}
        if not self.contains(broker_name):
            return _fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                         f"Broker-set: {broker_name} hasn't been registered in controller", header)
        info, sync = self.replica_info[broker_name], self.sync_state_info[broker_name]
        if broker_id not in info.replicas:
            return _fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                         f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}", header)
        if sync.master_broker_id is not None and is_alive(broker_name, sync.master_broker_id):
            header.update(masterBrokerId=sync.master_broker_id, masterAddress=info.address_of(sync.master_broker_id),
                          masterEpoch=sync.master_epoch, syncStateSetEpoch=sync.sync_state_set_epoch)
        result = ControllerResult(header=header, body=_sync_state_body(sync.sync_state_set, sync.sync_state_set_epoch))
        if broker_address and info.address_of(broker_id) != broker_address:
            result.events.append(UpdateBrokerAddressEvent(cluster_name, broker_name, broker_address, broker_id))
        return result

    # ------------------------------------------------------------------ SyncStateSet
    def alter_sync_state_set(self, broker_name: str, master_broker_id: int, master_epoch: int,
                             new_sync_state_set: Iterable[int], sync_state_set_epoch: int,
                             is_alive: IsAlive) -> ControllerResult:
        """Only the current master, naming the current master and SyncStateSet epochs, may change its
        set; every member must be a live replica and the master must stay in it."""
        if not self.contains(broker_name):
            return _fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
        new_set = set(new_sync_state_set)
        sync, info = self.sync_state_info[broker_name], self.replica_info[broker_name]
        if new_set == sync.sync_state_set:
            return _fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                         "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if sync.master_broker_id is None or sync.master_broker_id != master_broker_id:
            return _fail(Code.CONTROLLER_INVALID_MASTER,
                         f"Rejecting alter syncStateSet request because the current leader is:"
                         f"{{{sync.master_broker_id}}}, not {{{master_broker_id}}}")
        if master_epoch != sync.master_epoch:
            return _fail(Code.CONTROLLER_FENCED_MASTER_EPOCH,
                         f"Rejecting alter syncStateSet request because the current master epoch is:"
                         f"{{{sync.master_epoch}}}, not {{{master_epoch}}}")
        if sync_state_set_epoch != sync.sync_state_set_epoch:
            return _fail(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                         f"Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                         f"{{{sync.sync_state_set_epoch}}}, not {{{sync_state_set_epoch}}}")
        for replica in sorted(new_set):
            if replica not in info.replicas:
                return _fail(Code.CONTROLLER_INVALID_REPLICAS,
                             f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist")
            if not is_alive(broker_name, replica):
                return _fail(Code.CONTROLLER_BROKER_NOT_ALIVE,
                             f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive")
        if sync.master_broker_id not in new_set:
            return _fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                         f"Rejecting alter syncStateSet request because the newSyncStateSet don't contains "
                         f"origin leader {{{sync.master_broker_id}}}")
        epoch = sync.sync_state_set_epoch + 1
        return ControllerResult(header={"newSyncStateSetEpoch": epoch}, body=_sync_state_body(new_set, epoch),
                                events=[AlterSyncStateSetEvent(broker_name, tuple(sorted(new_set)))])

    # ------------------------------------------------------------------ elections
    def elect_master(self, broker_name: str, broker_id: int | None, designate_elect: bool, *,
                     is_alive: IsAlive, live_info: LiveInfo, enable_elect_unclean_master: bool) -> ControllerResult:
        """`broker_id` None: the controller asks (a master died). A broker asks with its own id (the
        first master of a set is whoever asks first); an admin names the broker it wants with
        `designate_elect`."""
        if not self.contains(broker_name):
            return _fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        sync, info = self.sync_state_info[broker_name], self.replica_info[broker_name]
        if designate_elect and broker_id is None:
            return _fail(Code.CONTROLLER_INVALID_REQUEST, "a designated election needs a brokerId")
        if broker_id is not None and broker_id not in info.replicas:
            return _fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                         f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}")
        old_master = sync.master_broker_id
        new_master: int | None = broker_id if sync.is_first_time_for_elect else None
        if new_master is None:
            new_master = elect_policy.elect(
                sync.sync_state_set, set(info.replicas) if enable_elect_unclean_master else None, old_master,
                broker_id if designate_elect else None,
                lambda b: is_alive(broker_name, b), lambda b: live_info(broker_name, b),
            )
        if new_master is not None and new_master == old_master:
            return ControllerResult(
                Code.CONTROLLER_MASTER_STILL_EXIST,
                f"The old master {old_master} is still alive, not need to elect new master for broker {broker_name}",
                header={"masterBrokerId": old_master, "masterAddress": info.address_of(old_master),
                        "masterEpoch": sync.master_epoch, "syncStateSetEpoch": sync.sync_state_set_epoch},
                body={"syncStateSet": sorted(sync.sync_state_set)},
            )
        if new_master is not None:
            return ControllerResult(
                header={"masterBrokerId": new_master, "masterAddress": info.address_of(new_master),
                        "masterEpoch": sync.master_epoch + 1, "syncStateSetEpoch": sync.sync_state_set_epoch + 1},
                body={"syncStateSet": [new_master], "brokerMemberGroup": {
                    "cluster": info.cluster_name, "brokerName": broker_name,
                    "brokerAddrs": info.broker_id_table()}},
                events=[ElectMasterEvent(broker_name, new_master)],
            )
        if broker_id is None:
            # the master is gone and nobody may replace it: record "no master" (a new epoch) once
            events: list[Event] = [ElectMasterEvent(broker_name, None)] if old_master is not None else []
            return ControllerResult(Code.CONTROLLER_MASTER_NOT_AVAILABLE,
                                    "Old master has down and failed to elect a new broker master", events=events)
        return _fail(Code.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def scan_need_reelect_broker_sets(self, is_alive: IsAlive, enable_elect_unclean_master: bool) -> list[str]:
        """Broker sets whose master is not alive while some replica that could replace it is."""
        need: list[str] = []
        for name, sync in sorted(self.sync_state_info.items()):
            info = self.replica_info.get(name)
            if info is None or sync.is_first_time_for_elect:
                continue
            if sync.master_broker_id is not None:
                if not is_alive(name, sync.master_broker_id) and any(is_alive(name, b) for b in info.replicas):
                    need.append(name)
            else:
                pool = info.replicas if enable_elect_unclean_master else sync.sync_state_set
                if any(is_alive(name, b) for b in pool):
                    need.append(name)
        return need

    # ------------------------------------------------------------------ queries
    def get_replica_info(self, broker_name: str) -> ControllerResult:
        if not self.contains(broker_name):
            return _fail(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        sync, info = self.sync_state_info[broker_name], self.replica_info[broker_name]
        return ControllerResult(
            header={"masterBrokerId": sync.master_broker_id, "masterAddress": info.address_of(sync.master_broker_id),
                    "masterEpoch": sync.master_epoch},
            body=_sync_state_body(sync.sync_state_set, sync.sync_state_set_epoch),
        )

    def get_sync_state_data(self, broker_names: Iterable[str], is_alive: IsAlive) -> ControllerResult:
        """BrokerReplicasInfo: per broker set, its master and epochs and its replicas in and out of sync."""
        table: dict[str, Any] = {}
        for name in broker_names:
            if not self.contains(name):
                continue
            sync, info = self.sync_state_info[name], self.replica_info[name]
            in_sync: list[dict[str, Any]] = []
            not_in_sync: list[dict[str, Any]] = []
            for bid, addr in info.broker_id_table().items():
                replica = {"brokerName": name, "brokerId": bid, "brokerAddress": addr, "alive": is_alive(name, bid)}
                (in_sync if bid in sync.sync_state_set else not_in_sync).append(replica)
            table[name] = {"masterBrokerId": sync.master_broker_id,
                           "masterAddress": info.address_of(sync.master_broker_id),
                           "masterEpoch": sync.master_epoch, "syncStateSetEpoch": sync.sync_state_set_epoch,
                           "inSyncReplicas": in_sync, "notInSyncReplicas": not_in_sync}
        return ControllerResult(body={"replicasInfoTable": table})

    def broker_names(self) -> list[str]:
        return sorted(self.sync_state_info)

    # ------------------------------------------------------------------ admin
    def clean_broker_data(self, broker_name: str, broker_ids: Iterable[int] | None, clean_living_broker: bool,
                          is_alive: IsAlive) -> ControllerResult:
        ids = tuple(sorted(set(broker_ids or ())))
        if not clean_living_broker:
            sync = self.sync_state_info.get(broker_name)
            if not ids and sync is not None and sync.master_broker_id is not None:
                return _fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                             f"Broker {broker_name} is still alive, clean up failure")
            for bid in ids:
                if is_alive(broker_name, bid):
                    return _fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                 f"Broker [{broker_name},  {bid}] is still alive, clean up failure")
        if not self.contains(broker_name):
            return _fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                         f"Broker {broker_name} is not existed,clean broker data failure.")
        return ControllerResult(events=[CleanBrokerDataEvent(broker_name, ids)])

    # ------------------------------------------------------------------ applying events
    def apply_event(self, event: Event) -> None:
        if isinstance(event, AlterSyncStateSetEvent):
            if self.contains(event.broker_name):
                self.sync_state_info[event.broker_name].update_sync_state_set(set(event.new_sync_state_set))
        elif isinstance(event, ApplyBrokerIdEvent):
            self._apply_broker_id(event)
        elif isinstance(event, ElectMasterEvent):
            if self.contains(event.broker_name):
                sync = self.sync_state_info[event.broker_name]
                sync.update_master_info(event.new_master_broker_id)
                if event.new_master_broker_id is not None:
                    sync.update_sync_state_set({event.new_master_broker_id})
        elif isinstance(event, UpdateBrokerAddressEvent):
            info = self.replica_info.get(event.broker_name)
            entry = info.replicas.get(event.broker_id) if info is not None else None
            if entry is not None:
                entry.address = event.broker_address
        elif isinstance(event, CleanBrokerDataEvent):
            self._clean(event)

    def _apply_broker_id(self, event: ApplyBrokerIdEvent) -> None:
        info = self.replica_info.get(event.broker_name)
        if info is None:
            info = self.replica_info[event.broker_name] = BrokerReplicaInfo(event.cluster_name, event.broker_name)
            self.sync_state_info[event.broker_name] = SyncStateInfo(event.cluster_name, event.broker_name)
        if event.new_broker_id not in info.replicas:
            info.add_broker(event.new_broker_id, event.broker_address, event.register_check_code)

    def _clean(self, event: CleanBrokerDataEvent) -> None:
        if not event.broker_ids_to_clean:
            self.replica_info.pop(event.broker_name, None)
            self.sync_state_info.pop(event.broker_name, None)
            return
        if not self.contains(event.broker_name):
            return
        info, sync = self.replica_info[event.broker_name], self.sync_state_info[event.broker_name]
        for bid in event.broker_ids_to_clean:
            info.replicas.pop(bid, None)
            sync.sync_state_set.discard(bid)
        if not info.replicas:
            del self.replica_info[event.broker_name]
        if not sync.sync_state_set:
            del self.sync_state_info[event.broker_name]

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "replicaInfoTable": {n: i.to_dict() for n, i in sorted(self.replica_info.items())},
            "syncStateSetInfoTable": {n: s.to_dict() for n, s in sorted(self.sync_state_info.items())},
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the whole state with a snapshot's; a snapshot in an unknown format changes nothing."""
        if snapshot.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown controller snapshot format {snapshot.get('format')!r}")
        replica = {n: BrokerReplicaInfo.from_dict(d) for n, d in snapshot["replicaInfoTable"].items()}
        sync = {n: SyncStateInfo.from_dict(d) for n, d in snapshot["syncStateSetInfoTable"].items()}
        self.replica_info, self.sync_state_info = replica, sync
