"""A controller-mode broker's identity file (RocketMQ's BrokerMetadata and TempBrokerMetadata): the
brokerId the controller granted it and the registerCheckCode it applied with, so a restarted broker
applies the same pair again instead of asking for a new id.

One JSON file, written durably (write, fsync, rename; namesrv.common.persist). RocketMQ keeps two files
(the temp one until the controller confirmed the id); here the file is written only once the
controller granted the id, so there is nothing to confirm after a restart but the id itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from namesrv.common.persist import atomic_write


class BrokerMetadataError(ValueError):
    """An unreadable or inconsistent metadata file (the broker refuses to guess its id)."""


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    def to_json(self) -> bytes:
        return json.dumps({"clusterName": self.cluster_name, "brokerName": self.broker_name,
                           "brokerId": self.broker_id, "registerCheckCode": self.register_check_code}).encode()


def load_metadata(path: Path, cluster_name: str, broker_name: str) -> BrokerMetadata | None:
    """The metadata in `path`, None when there is none yet; refuses a file of another broker set."""
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_bytes())
        meta = BrokerMetadata(str(raw["clusterName"]), str(raw["brokerName"]), int(raw["brokerId"]),
                              str(raw["registerCheckCode"]))
    except (ValueError, KeyError, TypeError) as e:
        raise BrokerMetadataError(f"{path}: unreadable broker metadata: {e}") from None
    if (meta.cluster_name, meta.broker_name) != (cluster_name, broker_name):
        raise BrokerMetadataError(f"{path} belongs to {meta.cluster_name}/{meta.broker_name}, "
                                  f"not {cluster_name}/{broker_name}")
    if meta.broker_id < 1:
        raise BrokerMetadataError(f"{path}: controller brokerIds start at 1, found {meta.broker_id}")
    return meta


def save_metadata(path: Path, meta: BrokerMetadata) -> None:
    """Durable: the id is acted on only once this returned."""
    atomic_write(path, meta.to_json())
