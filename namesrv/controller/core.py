"""The controller without Ray: state machine + heartbeats + election triggers + durable history.

Every request is split the way RocketMQ's controller splits it: `ReplicasInfoManager` checks it and
proposes events; `commit` persists them in the event log and only then applies them, so an answer
that reports a change is given only for a change that is durable. The actor runs the same three
steps but persists off its event loop (the `check_*` methods, `persist`, `apply`:
actors.controller.scheduler).

Liveness is a broker's heartbeat within its timeout, minus the brokers the Ray layer reported dead
(until they heartbeat again). After a (re)start, elections triggered by missing heartbeats wait a
grace period (one heartbeat timeout) so that every live broker has been heard; a definite death
is acted on at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from namesrv.common.clock import Clock
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.config import ControllerConfig
from namesrv.controller.event_log import EventLog
from namesrv.controller.events import Event
from namesrv.controller.heartbeat import BrokerHeartbeatManager, BrokerIdentity, BrokerLiveInfo
from namesrv.controller.replicas_info_manager import ControllerResult, ReplicasInfoManager

log = logging.getLogger(__name__)


class ControllerCore:
    def __init__(self, config: ControllerConfig, clock: Clock, event_log: EventLog | None = None) -> None:
        self.config = config
        self.clock = clock
        self.event_log = event_log
        self.manager = ReplicasInfoManager()
        self.heartbeats = BrokerHeartbeatManager(config, clock)
        self.reported_dead: set[BrokerIdentity] = set()
        self.started_ms = clock()
        self.applied_events = 0
        if event_log is not None:
            self.restore()

    # ------------------------------------------------------------------ durability
    def restore(self) -> int:
        """Rebuild the state from the log's snapshot and events; returns how many events replayed."""
        assert self.event_log is not None
        history = self.event_log.load()
        manager = ReplicasInfoManager()
        if history.snapshot_state is not None:
            manager.restore(history.snapshot_state)
        for _, event in history.events:
            manager.apply_event(event)
        self.manager = manager
        self.applied_events = self.event_log.last_index
        return len(history.events)

    def persist(self, events: Iterable[Event]) -> None:
        """Write events to the log (raises if the store fails or this writer is stale)."""
        if self.event_log is None:
            return
        for event in events:
            self.event_log.append(event)

    def apply(self, result: ControllerResult) -> ControllerResult:
        for event in result.events:
            self.manager.apply_event(event)
            self.applied_events += 1
        return result

    def commit(self, result: ControllerResult) -> ControllerResult:
        """Persist then apply `result`'s events; if persisting fails, nothing changes and the answer
        says so (SYSTEM_ERROR)."""
        if not result.events:
            return result
        try:
            self.persist(result.events)
        except Exception as e:
            log.exception("controller: could not persist %s", result.events)
            return ControllerResult(Code.SYSTEM_ERROR, f"controller state not persisted: {type(e).__name__}: {e}")
        return self.apply(result)

    def compaction_due(self) -> bool:
        """Whether enough events accumulated since the last snapshot to take another."""
        return self.event_log is not None and self.event_log.events_since_snapshot >= self.config.snapshot_every_events

    def maybe_compact(self) -> bool:
        """Snapshot the state once enough events accumulated (call after `apply`)."""
        if self.event_log is None or not self.compaction_due():
            return False
        self.event_log.compact(self.manager.snapshot())
        return True

    # ------------------------------------------------------------------ liveness
    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        if BrokerIdentity(broker_name, broker_id) in self.reported_dead:
            return False
        return self.heartbeats.is_broker_active(broker_name, broker_id)

    def live_info(self, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.heartbeats.get_live_info(broker_name, broker_id)

    def heartbeat(self, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int | None, *,
                  heartbeat_timeout_ms: int | None = None, epoch: int | None = None, max_offset: int | None = None,
                  confirm_offset: int | None = None, election_priority: int | None = None) -> ControllerResult:
        """BROKER_HEARTBEAT. Beyond RocketMQ, the answer carries the set's master and epochs, so a
        broker that was deposed while it was silent learns it on its next heartbeat."""
        if not broker_name or broker_id is None or broker_id < 0:
            return ControllerResult(Code.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        try:
            self.heartbeats.on_broker_heartbeat(
                cluster_name, broker_name, broker_addr, broker_id, heartbeat_timeout_ms=heartbeat_timeout_ms,
                epoch=epoch, max_offset=max_offset, confirm_offset=confirm_offset, election_priority=election_priority)
        except ValueError as e:
            return ControllerResult(Code.CONTROLLER_INVALID_REQUEST, str(e))
        self.reported_dead.discard(BrokerIdentity(broker_name, broker_id))
        header: dict[str, Any] = {}
        sync = self.manager.sync_state_info.get(broker_name)
        if sync is not None:
            info = self.manager.replica_info.get(broker_name)
            header = {"masterBrokerId": sync.master_broker_id, "masterEpoch": sync.master_epoch,
                      "masterAddress": info.address_of(sync.master_broker_id) if info else None,
                      "syncStateSetEpoch": sync.sync_state_set_epoch}
        return ControllerResult(remark="Heart beat success", header=header)

    def report_broker_dead(self, broker_name: str, broker_id: int) -> bool:
        """A definite death seen by the Ray layer; True when the broker was this set's live master
        (the caller should then elect at once)."""
        self.heartbeats.on_broker_dead(broker_name, broker_id)
        self.reported_dead.add(BrokerIdentity(broker_name, broker_id))
        sync = self.manager.sync_state_info.get(broker_name)
        return sync is not None and sync.master_broker_id == broker_id

    def scan_not_active_brokers(self) -> list[BrokerIdentity]:
        expired = self.heartbeats.scan_not_active()
        for ident in expired:
            log.warning("controller: broker %s/%d expired (no heartbeat)", ident.broker_name, ident.broker_id)
        return expired

    def in_grace(self) -> bool:
        return self.clock() - self.started_ms < self.config.effective_election_grace_ms()

    def broker_sets_to_reelect(self) -> list[str]:
        """Broker sets that need an election now (scanNeedReelectBrokerSets, minus the grace rule)."""
        names = self.manager.scan_need_reelect_broker_sets(self.is_alive, self.config.enable_elect_unclean_master)
        if not self.in_grace():
            return names
        return [n for n in names if self._master_reported_dead(n)]

    def _master_reported_dead(self, broker_name: str) -> bool:
        master = self.manager.sync_state_info[broker_name].master_broker_id
        return master is not None and BrokerIdentity(broker_name, master) in self.reported_dead

    # ------------------------------------------------------------------ requests (checked, not yet committed)
    def check_elect_master(self, broker_name: str, broker_id: int | None = None,
                           designate_elect: bool = False) -> ControllerResult:
        return self.manager.elect_master(broker_name, broker_id, designate_elect, is_alive=self.is_alive,
                                         live_info=self.live_info,
                                         enable_elect_unclean_master=self.config.enable_elect_unclean_master)

    def check_alter_sync_state_set(self, broker_name: str, master_broker_id: int, master_epoch: int,
                                   new_sync_state_set: Iterable[int], sync_state_set_epoch: int) -> ControllerResult:
        return self.manager.alter_sync_state_set(broker_name, master_broker_id, master_epoch, new_sync_state_set,
                                                 sync_state_set_epoch, self.is_alive)

    def check_register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              broker_address: str) -> ControllerResult:
        return self.manager.register_broker(cluster_name, broker_name, broker_id, broker_address, self.is_alive)

    def check_apply_broker_id(self, cluster_name: str, broker_name: str, applied_broker_id: int,
                              register_check_code: str) -> ControllerResult:
        return self.manager.apply_broker_id(cluster_name, broker_name, applied_broker_id, register_check_code)

    def check_clean_broker_data(self, broker_name: str, broker_ids: Iterable[int] | None = None,
                                clean_living_broker: bool = False) -> ControllerResult:
        return self.manager.clean_broker_data(broker_name, broker_ids, clean_living_broker, self.is_alive)

    # ------------------------------------------------------------------ requests, committed (no Ray)
    def elect_master(self, broker_name: str, broker_id: int | None = None,
                     designate_elect: bool = False) -> ControllerResult:
        return self.commit(self.check_elect_master(broker_name, broker_id, designate_elect))

    def alter_sync_state_set(self, broker_name: str, master_broker_id: int, master_epoch: int,
                             new_sync_state_set: Iterable[int], sync_state_set_epoch: int) -> ControllerResult:
        return self.commit(self.check_alter_sync_state_set(broker_name, master_broker_id, master_epoch,
                                                           new_sync_state_set, sync_state_set_epoch))

    def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                        broker_address: str) -> ControllerResult:
        return self.commit(self.check_register_broker(cluster_name, broker_name, broker_id, broker_address))

    def apply_broker_id(self, cluster_name: str, broker_name: str, applied_broker_id: int,
                        register_check_code: str) -> ControllerResult:
        return self.commit(self.check_apply_broker_id(cluster_name, broker_name, applied_broker_id,
                                                      register_check_code))

    # ------------------------------------------------------------------ queries
    def get_next_broker_id(self, cluster_name: str, broker_name: str) -> ControllerResult:
        return self.manager.get_next_broker_id(cluster_name, broker_name)

    def get_replica_info(self, broker_name: str) -> ControllerResult:
        return self.manager.get_replica_info(broker_name)

    def get_sync_state_data(self, broker_names: Iterable[str] | None = None) -> ControllerResult:
        names = self.manager.broker_names() if broker_names is None else list(broker_names)
        return self.manager.get_sync_state_data(names, self.is_alive)

    def epochs(self) -> dict[str, tuple[int, int]]:
        """(masterEpoch, syncStateSetEpoch) per broker set: what a role-change long-poll compares."""
        return {n: (s.master_epoch, s.sync_state_set_epoch) for n, s in self.manager.sync_state_info.items()}
