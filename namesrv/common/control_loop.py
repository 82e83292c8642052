"""One lifecycle owner per server actor: a control loop of periodic steps plus tracked background tasks.

The shape of Ray Serve's controller: one loop runs every due step, logs (and survives) any exception
a step raises, and `shutdown()` cancels everything it started. A step that is a coroutine runs as a
task of its own so a slow one (a registration waiting on a hung NameServer) never delays the others,
and never overlaps with its own previous run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

StepFn = Callable[[], Awaitable[Any] | Any]
T = TypeVar("T")


@dataclass(slots=True)
class _Step:
    name: str
    interval_s: float
    fn: StepFn
    next_at: float
    running: asyncio.Task[Any] | None = None
    failures: int = 0


class ControlLoop:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._steps: list[_Step] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.closed = False

    # ------------------------------------------------------------------ set-up
    def every(self, name: str, interval_s: float, fn: StepFn, initial_delay_s: float = 0.0) -> None:
        """Run `fn` every `interval_s` seconds, the first time after `initial_delay_s`."""
        if interval_s <= 0:
            raise ValueError(f"step {name}: interval must be positive, got {interval_s}")
        self._steps.append(_Step(name, interval_s, fn, time.monotonic() + initial_delay_s))
        self._wake.set()

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.get_event_loop().create_task(self._run(), name=f"{self.owner}-control-loop")

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A background task owned by this loop: its exception is logged, it is cancelled at shutdown,
        and it is forgotten once done (so the set never grows without bound)."""
        task = asyncio.get_event_loop().create_task(coro, name=f"{self.owner}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: task %s failed", self.owner, task.get_name(), exc_info=task.exception())

    @property
    def background_tasks(self) -> int:
        return len(self._tasks)

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        while not self.closed:
            now = time.monotonic()
            for step in self._steps:
                if step.next_at <= now:
                    step.next_at = now + step.interval_s
                    self._run_step(step)
            wait = min((s.next_at for s in self._steps), default=now + 3600) - time.monotonic()
            self._wake.clear()
            if wait > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    pass

    def _run_step(self, step: _Step) -> None:
        if step.running is not None and not step.running.done():
            return  # the previous run is still going: never overlap a step with itself
        try:
            result = step.fn()
        except Exception:
            step.failures += 1
            log.exception("%s: step %s failed", self.owner, step.name)
            return
        if inspect.isawaitable(result):
            step.running = self.spawn(step.name, _awaited(result))

    async def run_now(self, name: str) -> None:
        """Run one step at once (outside its schedule) and wait for it; for tests and admin calls."""
        step = next(s for s in self._steps if s.name == name)
        result = step.fn()
        if inspect.isawaitable(result):
            await result

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop the loop: let a step that is running finish (up to `grace_s`: a file being written
        is completed, not abandoned in a thread), then cancel every other task it owns and wait
        until they are all gone."""
        self.closed = True
        if self._runner is not None:
            self._runner.cancel()
        running = [s.running for s in self._steps if s.running is not None and not s.running.done()]
        if running:
            await asyncio.wait(running, timeout=grace_s)
        tasks = list(self._tasks)
        if self._runner is not None:
            tasks.append(self._runner)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
