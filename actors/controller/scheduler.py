"""The controller's one writer (RocketMQ 5's DLedgerController.EventScheduler: its events are handled
one at a time): every change is checked against the state, its events written to the log (off the
event loop), applied, and only then answered, under one lock.

- A change whose write failed is neither applied nor answered as done (SYSTEM_ERROR).
- A write that finds the log moved on by another instance (`StaleWriterError`: a stale actor that
  outlived its replacement) refuses the change (CONTROLLER_NOT_LEADER) and reloads the state from
  the log, so the history never forks; `stale_reloads` counts these.
- The log is compacted into a snapshot every `snapshot_every_events` (the snapshot taken on the
  loop, written off it).
- Failpoints hold a change before or after its write, for good: fault-injection tests kill the
  actor there (`set_failpoint`, `wait_failpoint`).
- Every applied change (and every reload) wakes `wait_change`: the controller's long-polls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import StaleWriterError
from namesrv.controller.replicas_info_manager import ControllerResult
from namesrv.remoting.command import MQServerError

log = logging.getLogger(__name__)

FAILPOINTS = ("before-persist", "after-persist")


class EventScheduler:
    def __init__(self, name: str, core: ControllerCore) -> None:
        self.name = name
        self.core = core
        self.stale_reloads = 0
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._failpoints: dict[str, asyncio.Event] = {}

    async def mutate(self, check: Callable[[], ControllerResult]) -> ControllerResult:
        """Check, persist (off the event loop), apply, answer: one change at a time. `check` runs
        under the lock and says what would change (its events) or refuses (no events)."""
        async with self._lock:
            result = check()
            if not result.events:
                return result
            await self._failpoint("before-persist")
            try:
                await asyncio.to_thread(self.core.persist, list(result.events))
            except StaleWriterError as e:
                await self._reload_after_stale(e)
                return ControllerResult(Code.CONTROLLER_NOT_LEADER, f"{e}; state reloaded, ask again")
            except Exception as e:
                log.exception("%s: could not persist %s", self.name, result.events)
                return ControllerResult(Code.SYSTEM_ERROR, f"controller state not persisted: {type(e).__name__}: {e}")
            await self._failpoint("after-persist")
            self.core.apply(result)
            self._wake()
            await self._compact_if_due()
            return result

    async def wait_change(self, timeout_s: float) -> bool:
        """True once a change is applied (or the state reloaded) after this call, False after `timeout_s`."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _reload_after_stale(self, error: StaleWriterError) -> None:
        """Another writer moved the log on: adopt its history (called under the lock)."""
        self.stale_reloads += 1
        log.error("%s: %s; reloading the state from the log", self.name, error)
        try:
            replayed = await asyncio.to_thread(self.core.restore)
        except Exception:
            log.exception("%s: reload failed; the next change will try again", self.name)
            return
        log.warning("%s: reloaded, %d events replayed", self.name, replayed)
        self._wake()

    async def _compact_if_due(self) -> None:
        event_log = self.core.event_log
        if event_log is None or not self.core.compaction_due():
            return
        state = self.core.manager.snapshot()  # on the loop: no change is applied meanwhile
        try:
            await asyncio.to_thread(event_log.compact, state)
        except StaleWriterError as e:
            await self._reload_after_stale(e)
        except Exception:
            log.exception("%s: compaction failed; the log keeps its events and is retried later", self.name)

    # ------------------------------------------------------------------ failpoints (fault-injection tests)
    async def _failpoint(self, name: str) -> None:
        if name in self._failpoints:
            log.warning("%s: a change is held at failpoint %s", self.name, name)
            self._failpoints[name].set()
            await asyncio.Event().wait()  # held until the actor dies (what the test does next)

    def set_failpoint(self, name: str) -> None:
        """Hold the next change at `name` ("before-persist" or "after-persist") for good. An unknown
        name raises MQServerError (CONTROLLER_INVALID_REQUEST)."""
        if name not in FAILPOINTS:
            raise MQServerError(Code.CONTROLLER_INVALID_REQUEST,
                                f"unknown failpoint {name!r}; choose from {FAILPOINTS}")
        self._failpoints[name] = asyncio.Event()

    async def wait_failpoint(self, name: str, timeout_s: float) -> bool:
        """True once a change is held at `name`; MQServerError for a failpoint not set."""
        held = self._failpoints.get(name)
        if held is None:
            raise MQServerError(Code.CONTROLLER_INVALID_REQUEST, f"failpoint {name!r} is not set")
        try:
            await asyncio.wait_for(held.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
