"""What the replicas manager (actors.broker.ha.replicas_manager) needs of its broker: the parts of
actors.broker.lifecycle.BrokerController it reads and calls, as a Protocol (the two modules would
otherwise import each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from actors.broker.ha.service import HAClient
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.role import RoleGuard
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import Clock
from namesrv.common.control_loop import ControlLoop
from namesrv.store.message_store import MessageStore


class ReplicaOwner(Protocol):
    """What the replicas manager needs of its broker (actors.broker.lifecycle.BrokerController)."""

    identity: BrokerIdentity
    store_dir: Path
    store: MessageStore
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
