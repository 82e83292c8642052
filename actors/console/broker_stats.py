"""Each broker's own account, once per stats tick: its runtime info, role and replication status,
and runtime KV (TPS, disk, version), read from every broker the deployment started (its registry),
so a dead one shows as unreachable rather than vanishing."""

from __future__ import annotations

import asyncio
import logging

from actors.console.calls import ServerCalls
from actors.console.decode import runtime_kv
from actors.console.model import BrokerView, ConsoleState
from actors.deployment.registry import DeploymentRecord
from namesrv.common.clock import system_clock
from namesrv.protocol.codes import BrokerRequestCode

log = logging.getLogger(__name__)


class BrokerStats:
    def __init__(self, namespace: str, state: ConsoleState, calls: ServerCalls) -> None:
        self.namespace = namespace
        self.state = state
        self.calls = calls
        self._record = DeploymentRecord(namespace)

    async def _broker_names(self) -> list[str]:
        """Every broker the deployment started (actors.deployment.registry), dead ones included."""
        record = await asyncio.to_thread(self._record.get)
        return sorted(record["brokers"])

    async def refresh(self) -> None:
        """Every broker's view, anew; the TPS chart gets a sample per broker."""
        try:
            names = await self._broker_names()
        except Exception as e:  # the GCS not answering
            log.info("deployment record of %s unreadable: %s", self.namespace, type(e).__name__)
            names = []
        names = names or self.calls.known_brokers()
        results = await asyncio.gather(*(self._refresh_one(n) for n in names))
        self.state.brokers = {v.addr: v for v in results if v is not None}
        for view in self.state.brokers.values():
            self.state.record(self.state.tps_history, view.addr, round(view.put_tps, 2))

    async def _refresh_one(self, actor_name: str) -> BrokerView | None:
        old = next((v for v in self.state.brokers.values() if v.actor_name == actor_name), None)
        try:
            handle = await self.calls.broker(actor_name)
            self.calls.count("broker", 2)
            info, status = await asyncio.gather(self.calls.ask(handle.get_runtime_info.remote()),
                                                self.calls.ask(handle.status.remote()))
            self.calls.count("broker")
            kv = runtime_kv(await self.calls.ask(handle.process.remote(self.calls.request(
                BrokerRequestCode.GET_BROKER_RUNTIME_INFO))))
        except Exception as e:
            self.calls.forget_broker(actor_name)
            if old is None:
                return None  # never seen alive (a dead broker from an earlier run of the registry)
            if old.error is None:
                self.state.note(f"broker {actor_name} ({old.addr}) unreachable: {type(e).__name__}", system_clock())
            old.error = f"{type(e).__name__}"
            old.put_tps = old.get_tps = 0.0
            return old
        if old is not None and old.error is not None:
            self.state.note(f"broker {actor_name} answers again", system_clock())
        ha = status.get("ha") or {}
        if ha.get("role") == "SLAVE":
            replication = f"lag {ha.get('lag_bytes', 0)} B"
        elif ha.get("slave_lag_bytes"):
            replication = ", ".join(f"{s}: {b} B" for s, b in sorted(ha["slave_lag_bytes"].items()))
        else:
            replication = "-"
        return BrokerView(
            addr=info["broker_addr"], actor_name=actor_name, cluster=info["cluster"], broker_name=info["broker_name"],
            broker_id=int(info["broker_id"]), role=str(status.get("role", "")),
            epoch=status.get("masterEpoch") if status.get("controller_mode") else None,
            version=kv.get("brokerVersionDesc", ""), put_tps=_first_float(kv.get("putTps")),
            get_tps=_first_float(kv.get("getTransferredTps")), disk_ratio=_first_float(kv.get("commitLogDiskRatio")),
            disk=kv.get("commitLogDirCapacity", ""), topics=int(info.get("topics", 0)),
            messages=int(info.get("recovered_messages", 0)), replication=replication,
            queues={(k.rpartition(":")[0], int(k.rpartition(":")[2])): int(n)
                    for k, n in info.get("queues", {}).items()},
            consumer_groups={g: list(ids) for g, ids in info.get("consumer_groups", {}).items()},
            sync_state_set=sorted(int(i) for i in ha.get("sync_state_set") or []),
            role_log=[(int(e.get("atMs", 0)), str(e.get("role", "")), int(e.get("epoch", 0)))
                      for e in status.get("role_log") or []],
            controller_id=(status.get("controller") or {}).get("controller_broker_id"),
            lease=(status.get("controller") or {}).get("lease"),
            seen_ms=system_clock())


def _first_float(text: str | None) -> float:
    """RocketMQ's TPS strings carry several figures ('12.3 10.1 9.8'): the first."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0
