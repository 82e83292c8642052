"""What the controller knows of one broker set (RocketMQ's BrokerReplicaInfo and SyncStateInfo).

Plain mutable records, changed only by `ReplicasInfoManager.apply_event`; `to_dict`/`from_dict`
give the snapshot form (JSON-safe, brokerIds as strings where they are keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from namesrv.controller.config import FIRST_BROKER_CONTROLLER_ID


@dataclass(slots=True)
class ReplicaEntry:
    address: str
    register_check_code: str
    """"address;timestamp" from the broker's first apply: a restarted broker proves it is the same
    replica by presenting the same code (RocketMQ keeps it in the broker's temp metadata file)."""


@dataclass(slots=True)
class BrokerReplicaInfo:
    cluster_name: str
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    replicas: dict[int, ReplicaEntry] = field(default_factory=dict)

    def add_broker(self, broker_id: int, address: str, register_check_code: str) -> None:
        self.replicas[broker_id] = ReplicaEntry(address, register_check_code)
        # RocketMQ increments the counter; we also never hand out an id below one already taken
        self.next_assign_broker_id = max(self.next_assign_broker_id + 1, broker_id + 1)

    def address_of(self, broker_id: int | None) -> str | None:
        entry = self.replicas.get(broker_id) if broker_id is not None else None
        return entry.address if entry is not None else None

    def broker_id_table(self) -> dict[int, str]:
        return {bid: e.address for bid, e in sorted(self.replicas.items())}

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "nextAssignBrokerId": self.next_assign_broker_id,
            "replicas": {str(bid): [e.address, e.register_check_code] for bid, e in sorted(self.replicas.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerReplicaInfo:
        info = cls(str(data["clusterName"]), str(data["brokerName"]), int(data["nextAssignBrokerId"]))
        info.replicas = {int(bid): ReplicaEntry(str(v[0]), str(v[1])) for bid, v in data["replicas"].items()}
        return info


@dataclass(slots=True)
class SyncStateInfo:
    cluster_name: str
    broker_name: str
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    def update_master_info(self, master_broker_id: int | None) -> None:
        """Every master change, including 'no master', is a new master epoch (updateMasterInfo)."""
        self.master_broker_id = master_broker_id
        self.master_epoch += 1

    def update_sync_state_set(self, new_set: set[int]) -> None:
        self.sync_state_set = set(new_set)
        self.sync_state_set_epoch += 1

    @property
    def is_first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SyncStateInfo:
        master = data.get("masterBrokerId")
        return cls(
            str(data["clusterName"]), str(data["brokerName"]), None if master is None else int(master),
            int(data["masterEpoch"]), {int(x) for x in data["syncStateSet"]}, int(data["syncStateSetEpoch"]),
        )
