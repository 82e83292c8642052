"""The controller's state changes as events (RocketMQ's EventMessage family).

A request is checked against the state and yields events; only applying an event changes the state.
So the state is exactly the fold of its events: the actor persists each event before applying it,
and a restarted controller rebuilds the state by replaying them (after the newest snapshot).
Each event serialises to a JSON object whose `type` is RocketMQ's EventType name.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar


class EventDecodeError(ValueError):
    """Bytes that are not a controller event: the log is damaged; never applied."""


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    TYPE: ClassVar[str] = "APPLY_BROKER_ID_EVENT"
    cluster_name: str
    broker_name: str
    broker_address: str
    new_broker_id: int
    register_check_code: str


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    TYPE: ClassVar[str] = "ELECT_MASTER_EVENT"
    broker_name: str
    new_master_broker_id: int | None
    """None: the master is gone and nobody could be elected (the set keeps its SyncStateSet)."""

    @property
    def new_master_elected(self) -> bool:
        return self.new_master_broker_id is not None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    TYPE: ClassVar[str] = "ALTER_SYNC_STATE_SET_EVENT"
    broker_name: str
    new_sync_state_set: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    TYPE: ClassVar[str] = "UPDATE_BROKER_ADDRESS"
    cluster_name: str
    broker_name: str
    broker_address: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    TYPE: ClassVar[str] = "CLEAN_BROKER_DATA_EVENT"
    broker_name: str
    broker_ids_to_clean: tuple[int, ...]
    """Empty: the whole broker set."""


Event = ApplyBrokerIdEvent | ElectMasterEvent | AlterSyncStateSetEvent | UpdateBrokerAddressEvent | CleanBrokerDataEvent

_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (ApplyBrokerIdEvent, ElectMasterEvent, AlterSyncStateSetEvent, UpdateBrokerAddressEvent,
                CleanBrokerDataEvent)
}
_TUPLE_FIELDS = {"new_sync_state_set", "broker_ids_to_clean"}


def event_to_dict(event: Event) -> dict[str, Any]:
    data = asdict(event)
    for name in _TUPLE_FIELDS & data.keys():
        data[name] = list(data[name])
    return {"type": event.TYPE, **data}


def event_from_dict(data: dict[str, Any]) -> Event:
    if not isinstance(data, dict):
        raise EventDecodeError(f"an event is a JSON object, got {type(data).__name__}")
    fields = dict(data)
    cls = _TYPES.get(str(fields.pop("type", "")))
    if cls is None:
        raise EventDecodeError(f"unknown event type {data.get('type')!r}")
    for name in _TUPLE_FIELDS & fields.keys():
        fields[name] = tuple(int(x) for x in fields[name])
    try:
        event: Event = cls(**fields)
    except TypeError as e:
        raise EventDecodeError(f"bad {cls.TYPE}: {e}") from None
    return event


def encode_event(event: Event) -> bytes:
    return json.dumps(event_to_dict(event), separators=(",", ":"), sort_keys=True).encode()


def decode_event(data: bytes) -> Event:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EventDecodeError(f"not JSON: {e}") from None
    return event_from_dict(obj)
