"""What the replicas manager (actors.broker_replicas) needs of its broker: the parts of
actors.broker_controller.BrokerController it reads and calls, as a Protocol (the two modules would
otherwise import each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from actors.broker_ha import HAClient
from actors.control_loop import ControlLoop
from namesrv.broker.commit_log import CommitLog
from namesrv.broker.config import BrokerConfig
from namesrv.broker.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.processor import BrokerProcessor
from namesrv.broker.processor_types import BrokerIdentity
from namesrv.broker.role import RoleGuard
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.clock import Clock


class ReplicaOwner(Protocol):
    """What the replicas manager needs of its broker (actors.broker_controller.BrokerController)."""

    identity: BrokerIdentity
    store_dir: Path
    store: CommitLog
    role: RoleGuard
    config: BrokerConfig
    processor: BrokerProcessor
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    clock: Clock
    loop: ControlLoop
    ha_client: HAClient | None

    def start_master_services(self) -> None: ...

    async def stop_master_services(self) -> None: ...

    async def reregister(self, broker_id: int, epoch: int) -> dict[str, str]: ...
