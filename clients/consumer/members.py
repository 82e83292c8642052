"""Who a consumer group's members are, as a rebalance sees them (GET_CONSUMER_LIST_BY_GROUP).

RocketMQ asks one broker of the topic, picked at random. Each broker knows the members that
heartbeat it; a broker that restarted, or that a member could not reach for a while, knows fewer
until their next heartbeats, and two members that asked two such brokers allocate from two member
lists: queues nobody or two members own until the next rebalance (measured in the multi-host chaos
run: a broker back from isolation left two queues of another broker unowned for 6 s).

Beyond RocketMQ (with the consumer's `route_union`, as its routes): every broker of the topic is
asked at once and the group is the union of the members they know, each broker answering within
`GRACE_S` of the first answer (a broker cut off or hung is not waited for past that). Members
heartbeat every broker of their topics, so in a steady state every list is the same one; the union
only masks a broker that forgot members. A member that left gracefully unregistered with every
broker; one that died stays listed until every broker has expired it (RocketMQ: until the one asked
has), so its queues wait as long as they do in RocketMQ at worst.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

log = logging.getLogger(__name__)

GRACE_S = 0.5
"""After the first broker's answer, how long the others may still take."""
WORKERS = 16
"""Calls in flight at once (a hung broker holds one for its call time-out, rebalance after rebalance)."""

MemberQuery = Callable[[str], list[str]]
"""A broker address -> the member client ids it knows (raises when it cannot answer)."""


class GroupMembers:
    def __init__(self, query: MemberQuery, union: bool, timeout_s: float) -> None:
        self.query = query
        self.union = union
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="group-members") if union else None

    def of(self, broker_addrs: Iterable[str]) -> list[str]:
        """The members, sorted (empty when no broker answered)."""
        addrs = sorted(broker_addrs)
        return sorted(self._union(addrs) if self._pool is not None else self._one(addrs))

    def _one(self, addrs: list[str]) -> list[str]:
        random.shuffle(addrs)
        for addr in addrs:
            try:
                return self.query(addr)
            except Exception as e:
                log.info("members from %s: %s", addr, e)
        return []

    def _union(self, addrs: list[str]) -> set[str]:
        assert self._pool is not None
        pending: set[Future[list[str]]] = set()
        where: dict[Future[list[str]], str] = {}
        for addr in addrs:
            f = self._pool.submit(self.query, addr)
            pending.add(f)
            where[f] = addr
        found: set[str] = set()
        deadline = time.monotonic() + self.timeout_s
        answered = False
        while pending:
            done, pending = wait(pending, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_COMPLETED)
            if not done:
                break
            for f in done:
                try:
                    found.update(f.result())
                except Exception as e:
                    log.info("members from %s: %s", where[f], e)
                    continue
                if not answered:
                    answered = True
                    deadline = min(deadline, time.monotonic() + GRACE_S)
        if pending:
            late = ", ".join(sorted(where[f] for f in pending))
            log.info("members: %s did not answer in time; taking the others'", late)
        return found

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
