"""actors.runtime.ray_info: an actor learns whether Ray restarted it, and no deprecation warning comes
out of asking (Ray's own property reads its deprecated `actor_id` inside itself)."""

from __future__ import annotations

import os
import warnings

import ray

from actors.runtime.ray_info import was_restarted
from namesrv.common.waiting import wait_until


@ray.remote(max_restarts=1)
class Asker:
    def __init__(self) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.restarted = was_restarted()
        self.warned = [f"{w.category.__name__}: {w.message}" for w in caught]

    def answer(self) -> tuple[bool, list[str], int]:
        return self.restarted, self.warned, os.getpid()


def test_an_actor_learns_it_was_restarted_without_a_deprecation_warning(ray_local: str) -> None:
    asker = Asker.remote()  # type: ignore[attr-defined]
    restarted, warned, pid = ray.get(asker.answer.remote(), timeout=60)
    assert (restarted, warned) == (False, [])
    ray.kill(asker, no_restart=False)
    restarted, warned, _ = wait_until(
        lambda: (a := ray.get(asker.answer.remote(), timeout=60))[2] != pid and a, 60, "the actor's restart")
    assert (restarted, warned) == (True, [])
    ray.kill(asker, no_restart=True)
