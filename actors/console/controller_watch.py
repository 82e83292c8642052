"""The controller's account (controller mode, RIP-44), once per stats tick: its broker sets
(master, epochs, SyncStateSet, replicas), elections and the deaths it saw; an election shows as an
event. No controller in the namespace: nothing to show."""

from __future__ import annotations

from typing import Any

from actors.console.calls import ServerCalls
from actors.console.model import BrokerSetState, ConsoleState, ControllerView
from actors.controller.actor import CONTROLLER_NAME
from namesrv.common.clock import system_clock


class ControllerWatch:
    def __init__(self, state: ConsoleState, calls: ServerCalls) -> None:
        self.state = state
        self.calls = calls
        self._handle: Any = None

    async def refresh(self) -> None:
        old = self.state.controller
        try:
            if self._handle is None:
                try:
                    self._handle = await self.calls.lookup(CONTROLLER_NAME)
                except ValueError:  # none deployed
                    self.state.controller = None
                    return
            self.calls.count("controller")
            stats = await self.calls.ask(self._handle.stats.remote())
        except Exception as e:
            self._handle = None
            if old is not None and old.error is None:
                self.state.note(f"controller unreachable: {type(e).__name__}", system_clock())
                old.error = type(e).__name__
            return
        view = ControllerView(str(stats.get("name", CONTROLLER_NAME)), elections=int(stats.get("elections", 0)),
                              deaths=list(stats.get("deaths", [])),
                              live_brokers=[(str(n), int(i)) for n, i in stats.get("live_brokers", [])],
                              seen_ms=system_clock())
        view.sets = {name: BrokerSetState(
            name, s.get("master_broker_id"), s.get("master_address"), int(s.get("master_epoch", 0)),
            tuple(s.get("sync_state_set", ())), int(s.get("sync_state_set_epoch", 0)),
            tuple(sorted((int(i), str(a)) for i, a in (s.get("replicas") or {}).items())))
            for name, s in (stats.get("sets") or {}).items()}
        if old is not None:
            if old.error is not None:
                self.state.note("controller answers again", system_clock())
            for name, now in view.sets.items():
                before = old.sets.get(name)
                if before is not None and before.master_epoch != now.master_epoch:
                    self.state.note(f"controller: {name} master is now {now.master_broker_id} "
                                    f"({now.master_address or 'none'}), epoch {now.master_epoch}", system_clock())
        self.state.controller = view
