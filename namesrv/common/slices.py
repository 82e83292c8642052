"""Work in slices: the one driver of the server's long computations (a registration of 10,000s of
topics, a snapshot of every table). Such work is a generator that yields between slices and
returns its result; run on an event loop it lets other requests in between slices, run anywhere
else it goes straight to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import TypeVar

T = TypeVar("T")

Steps = Generator[None, None, T]
"""Sliced work returning a T: `yield` between slices, `return` the result."""


def run_to_end(steps: Steps[T]) -> T:
    """Drive sliced work to its result without pausing between slices."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result


async def drive_steps(steps: Steps[T], between: Callable[[], None] | None = None) -> T:
    """Drive sliced work to its end, letting the event loop answer other requests between slices;
    `between` runs after each slice. Cancelled mid-way, the generator is closed, so it can abandon
    its work cleanly."""
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: T = done.value
                return result
            if between is not None:
                between()
            await asyncio.sleep(0)
    finally:
        steps.close()
