"""Who a group's members are at a rebalance (clients.consumer.members): RocketMQ's one broker, or the
union of every broker's list, a broker that fails or hangs not waited for past the grace after the
first answer."""

from __future__ import annotations

import threading
import time

import pytest

from clients.consumer import members as members_mod
from clients.consumer.members import GroupMembers

KNOWN = {"a:1": ["m1", "m2"], "b:1": ["m1"], "c:1": ["m2", "m3"]}


def query(addr: str) -> list[str]:
    if addr == "dead:1":
        raise ConnectionError("refused")
    return list(KNOWN[addr])


def test_the_union_takes_every_member_any_broker_knows() -> None:
    g = GroupMembers(query, union=True, timeout_s=3)
    try:
        assert g.of(["b:1", "a:1", "c:1", "dead:1"]) == ["m1", "m2", "m3"]
        assert g.of([]) == []
    finally:
        g.close()


def test_one_broker_as_rocketmq_asks_until_one_answers() -> None:
    g = GroupMembers(query, union=False, timeout_s=3)
    seen = {tuple(g.of(["a:1", "b:1", "dead:1"])) for _ in range(40)}
    assert seen <= {("m1", "m2"), ("m1",)} and len(seen) == 2, "a random broker each time, a dead one skipped"
    assert g.of(["dead:1"]) == []


def test_a_hung_broker_is_not_waited_for_past_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(members_mod, "GRACE_S", 0.2)
    release = threading.Event()

    def slow(addr: str) -> list[str]:
        if addr == "hung:1":
            release.wait(30)
            return ["ghost"]
        return query(addr)

    g = GroupMembers(slow, union=True, timeout_s=30)
    try:
        started = time.monotonic()
        assert g.of(["a:1", "hung:1"]) == ["m1", "m2"]
        assert time.monotonic() - started < 10, "the hung broker held the rebalance past the grace"
    finally:
        release.set()
        g.close()
