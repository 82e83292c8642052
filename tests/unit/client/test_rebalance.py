"""The allocation strategies (namesrv/client/rebalance): every queue of a topic has exactly one
owner among the group's members, and each member's share is RocketMQ's, queue for queue.

`java_*` below are RocketMQ's allocate loops step by step (index arithmetic as in the Java classes),
the reference every strategy is compared to over arbitrary sorted members and queues."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.client.rebalance.strategies import (
    STRATEGIES,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocationError,
    sorted_queues,
)
from namesrv.protocol.models import MessageQueue


def java_averagely(cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> list[MessageQueue]:
    if cid not in cid_all:
        return []
    index, q, c = cid_all.index(cid), len(mq_all), len(cid_all)
    mod = q % c
    average = 1 if q <= c else (q // c + 1 if mod > 0 and index < mod else q // c)
    start = index * average if mod > 0 and index < mod else index * average + mod
    return [mq_all[start + i] for i in range(min(average, q - start))]


def java_by_circle(cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> list[MessageQueue]:
    if cid not in cid_all:
        return []
    index = cid_all.index(cid)
    return [mq_all[i] for i in range(index, len(mq_all)) if i % len(cid_all) == index]


def java_machine_room(cid: str, mq_all: list[MessageQueue], cid_all: list[str], idcs: set[str]) -> list[MessageQueue]:
    if cid not in cid_all:
        return []
    index = cid_all.index(cid)
    pre = []
    for mq in mq_all:
        temp = mq.broker_name.split("@")
        while temp and temp[-1] == "":  # Java's split drops trailing empty strings
            temp.pop()
        if len(temp) == 2 and temp[0] in idcs:
            pre.append(mq)
    mod, rem = len(pre) // len(cid_all), len(pre) % len(cid_all)
    out = [pre[i] for i in range(mod * index, mod * index + mod)]
    if rem > index:
        out.append(pre[index + mod * len(cid_all)])
    return out


ROOMS = ["idc1", "idc2", "idc3"]
brokers = st.sampled_from(["broker-a", "broker-b", "idc1@broker-a", "idc2@broker-b", "idc3@c", "idc1@", "@x"])
queue_lists = st.lists(st.builds(MessageQueue, st.sampled_from(["T", "U"]), brokers, st.integers(0, 15)),
                       min_size=1, max_size=40, unique=True).map(sorted_queues)
member_lists = st.lists(st.text("abcdef0123456789@.", min_size=1, max_size=8), min_size=1, max_size=12,
                        unique=True).map(sorted)


def shares(strategy: object, mq_all: list[MessageQueue], cid_all: list[str]) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate("G", cid, mq_all, cid_all) for cid in cid_all}  # type: ignore[attr-defined]


def assert_one_owner_each(owned: dict[str, list[MessageQueue]], queues: list[MessageQueue]) -> None:
    counts = Counter(mq for share in owned.values() for mq in share)
    assert set(counts) == set(queues), "every queue has an owner, and only the group's queues are owned"
    assert max(counts.values()) == 1, f"a queue with two owners: {[mq for mq, n in counts.items() if n > 1]}"


@given(queue_lists, member_lists)
def test_averagely_is_rocketmqs_and_gives_each_queue_one_owner(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    owned = shares(AllocateMessageQueueAveragely(), mq_all, cid_all)
    assert owned == {cid: java_averagely(cid, mq_all, cid_all) for cid in cid_all}
    assert_one_owner_each(owned, mq_all)
    sizes = [len(s) for s in owned.values()]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True), "larger shares first"


@given(queue_lists, member_lists)
def test_by_circle_is_rocketmqs_and_gives_each_queue_one_owner(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    owned = shares(AllocateMessageQueueAveragelyByCircle(), mq_all, cid_all)
    assert owned == {cid: java_by_circle(cid, mq_all, cid_all) for cid in cid_all}
    assert_one_owner_each(owned, mq_all)


@given(queue_lists, member_lists, st.sets(st.sampled_from(ROOMS)))
def test_by_machine_room_is_rocketmqs_and_owns_exactly_the_rooms_queues(
        mq_all: list[MessageQueue], cid_all: list[str], idcs: set[str]) -> None:
    owned = shares(AllocateMessageQueueByMachineRoom(frozenset(idcs)), mq_all, cid_all)
    assert owned == {cid: java_machine_room(cid, mq_all, cid_all, idcs) for cid in cid_all}
    in_rooms = [mq for mq in mq_all if "@" in mq.broker_name and mq.broker_name.split("@")[0] in idcs
                and mq.broker_name.split("@")[1]]
    if in_rooms:
        assert_one_owner_each(owned, in_rooms)
    else:
        assert not any(owned.values())


@given(queue_lists, member_lists, st.text("xyz", min_size=1, max_size=5))
def test_a_member_missing_from_the_list_gets_nothing(mq_all: list[MessageQueue], cid_all: list[str], cid: str) -> None:
    assert cid not in cid_all  # members are drawn from another alphabet
    for strategy in (AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
                     AllocateMessageQueueByMachineRoom(frozenset(ROOMS))):
        assert strategy.allocate("G", cid, mq_all, cid_all) == []


def queues(n: int, broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue("T", broker, i) for i in range(n)]


def ids(share: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in share]


def test_known_shares() -> None:
    """RocketMQ's own examples: 8 queues over 3 members, 2 queues over 3, by circle."""
    avg, circle = AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()
    cids = ["c0", "c1", "c2"]
    assert [ids(avg.allocate("G", c, queues(8), cids)) for c in cids] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [ids(avg.allocate("G", c, queues(2), cids)) for c in cids] == [[0], [1], []]
    assert [ids(circle.allocate("G", c, queues(8), cids)) for c in cids] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    room = AllocateMessageQueueByMachineRoom(frozenset({"hz"}))
    mixed = sorted_queues(queues(3, "hz@broker-a") + queues(3, "sh@broker-b"))
    assert [ids(room.allocate("G", c, mixed, ["c0", "c1"])) for c in ["c0", "c1"]] == [[0, 2], [1]]


def test_by_config_gives_its_list_whatever_the_group() -> None:
    mine = (MessageQueue("T", "broker-b", 3), MessageQueue("T", "broker-a", 1))
    strategy = AllocateMessageQueueByConfig(mine)
    assert strategy.allocate("G", "c9", queues(4), ["c0"]) == list(mine)
    assert strategy.name == "CONFIG"


@pytest.mark.parametrize("cid, mq_all, cid_all, wording", [
    ("", queues(1), ["c0"], "currentCID is empty"),
    ("c0", [], ["c0"], "mqAll is null or mqAll empty"),
    ("c0", queues(1), [], "cidAll is null or cidAll empty"),
])
def test_empty_arguments_are_refused_with_rocketmqs_words(cid: str, mq_all: list[MessageQueue],
                                                          cid_all: list[str], wording: str) -> None:
    for strategy in (AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle(),
                     AllocateMessageQueueByMachineRoom(frozenset(ROOMS))):
        with pytest.raises(AllocationError, match=wording):
            strategy.allocate("G", cid, mq_all, cid_all)


def test_names_are_rocketmqs() -> None:
    assert {name: cls().name for name, cls in STRATEGIES.items()} == {"AVG": "AVG", "AVG_BY_CIRCLE": "AVG_BY_CIRCLE"}
    assert AllocateMessageQueueByMachineRoom().name == "MACHINE_ROOM"


def test_sorted_queues_orders_by_topic_broker_then_queue() -> None:
    mixed = [MessageQueue("U", "a", 0), MessageQueue("T", "b", 0), MessageQueue("T", "a", 10),
             MessageQueue("T", "a", 2)]
    assert sorted_queues(mixed) == [MessageQueue("T", "a", 2), MessageQueue("T", "a", 10), MessageQueue("T", "b", 0),
                                    MessageQueue("U", "a", 0)]
