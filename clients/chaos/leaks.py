"""Invariant 4 of a chaos run: nothing leaked (actors, submitted calls, threads, the temp store),
read from Ray's GCS after teardown, and the waits the run's teardown uses (ray.kill is
asynchronous: an actor keeps writing until the GCS says it is dead).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Collection
from typing import Any

import ray

from clients.chaos.checks import Invariant
from namesrv.common.waiting import WaitTimeout, wait_until


def alive_actor_ids(job_id: str | None = None, exclude: Collection[str] = ()) -> set[str]:
    """IDs of ALIVE actors in the cluster (of one job when given; those whose name or ID is in
    `exclude` left out), read from the GCS. The state API (ray.util.state) needs the dashboard,
    which local test clusters here run without."""
    from ray._private import state

    return {a["ActorID"] for a in state.actors().values()
            if a["State"] == "ALIVE" and (job_id is None or a["JobID"] == job_id)
            and a["Name"] not in exclude and a["ActorID"] not in exclude}


def alive_actors(job_id: str | None = None, exclude: Collection[str] = ()) -> int:
    return len(alive_actor_ids(job_id, exclude))


def wait_actors_gone(job_id: str, timeout_s: float = 30.0, exclude: Collection[str] = ()) -> bool:
    """After ray.kill (asynchronous): wait until no actor of this job (but those named or with an
    ID in `exclude`) is ALIVE, so none of them can still write into a directory about to be removed."""
    try:
        wait_until(lambda: alive_actors(job_id, exclude) == 0, timeout_s, f"no ALIVE actor of job {job_id}", 0.1)
    except WaitTimeout:
        return False
    return True


def remove_store(data_dir: str, timeout_s: float = 10.0) -> bool:
    """Remove a run's temp store dir, again while something still writes into it (the GCS may call an
    actor of a lost node dead while its process still runs for a moment: ray-project/ray #26405);
    whether it is gone within `timeout_s` (what is left, invariant 4 reports)."""
    def removed() -> bool:
        shutil.rmtree(data_dir, ignore_errors=True)
        return not os.path.exists(data_dir)

    try:
        wait_until(removed, timeout_s, f"{data_dir} removed", 0.2)
    except WaitTimeout:
        return False
    return True


def named_actors(namespace: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace)


def check_leaks(namespace: str, job_id: str, alive_before: int, refs: list[Any], data_dir: str | None,
                threads_stopped: bool, *, keep: Collection[str] = (), own_store: bool = True) -> Invariant:
    """Invariant 4, after teardown: no named actor left in the namespace but those in `keep` (an
    existing deployment's own actors, which stay: a broker the run restarted is this job's actor and
    lives on, detached), no other ALIVE actor of this job but those in `keep` by ID (the driver's
    own from before the run, e.g. a Spark session's), every submitted call finished, the temp
    store dir gone (`data_dir`, None when kept or not the run's own: `own_store` False), threads
    stopped. ray.kill is asynchronous, so the GCS gets a bounded moment to catch up."""
    keep = set(keep)

    def ours() -> list[str]:
        return [n for n in named_actors(namespace) if n not in keep]

    with contextlib.suppress(WaitTimeout):  # the GCS catching up after ray.kill; what is left is reported
        wait_until(lambda: not ours(), 30, f"no named actor of this run in {namespace}", 0.1)
    leftovers = ours()
    wait_actors_gone(job_id, exclude=keep)
    ours_alive, alive_after = alive_actors(job_id, keep), alive_actors()
    pending = len(ray.wait(refs, num_returns=len(refs), timeout=0)[1]) if refs else 0
    dir_left = data_dir is not None and os.path.exists(data_dir)
    return Invariant(
        "4 nothing leaked",
        not leftovers and ours_alive == 0 and pending == 0 and not dir_left and threads_stopped,
        f"{len(leftovers)} named actors, {ours_alive} ALIVE actors of this job, {pending} unfinished tasks",
        f"cluster ALIVE actors {alive_before} before, {alive_after} after; observer and collector threads "
        f"{'stopped' if threads_stopped else 'STILL RUNNING'}; "
        + ("the stores are the deployment's" if not own_store else "temp store dir "
           + ("kept" if data_dir is None else ("LEFT BEHIND" if dir_left else "removed")))
        + (f"; {len(keep)} actors of the deployment or from before the run stay" if keep else "")
        + (f"; leftover actors {leftovers}" if leftovers else ""),
    )
