"""The proxy's AckMessage (actors.proxy.consumer) over two real brokers' request processing (store,
pop state, manual clock; requests through the wire codec): with `batch_ack` each AckMessage entry
gets exactly the status, message included, that the one-by-one path gives it, the brokers are left
in the same state, and fewer requests are sent; a broker refusing the batch gets the entries one by
one. Hypothesis draws the entries: live handles, the same twice, acked already, changed since,
expired, forged, without commit-log offset, past the queue, on
no queue of the topic, unparseable."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import actors.proxy.consumer as consumer_module
from actors.proxy.consumer import ConsumerRpcs
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.properties import properties_to_string
from namesrv.proxy.answers import Answers
from namesrv.proxy.descriptors import load
from namesrv.proxy.settings import ProxyConfig
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingResponse, to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand, SerializeType
from tests.support.broker import CLIENT, Broker, decode_messages

P = load()
NAMES = ("broker-a", "broker-b")
INVISIBLE = 30_000


class NamedBroker(Broker):
    def __init__(self, root: Path, name: str, addr: str) -> None:
        super().__init__(root)
        self.name, self.addr = name, addr
        self.wire = BrokerWireEncoder(addr)
        self.processor = BrokerProcessor(BrokerIdentity("DefaultCluster", name, 0, addr), BrokerConfig(),
                                         self.topics, self.store, self.offsets, self.clock, self.created.append,
                                         pop_journal=root / "pop.journal")

    async def invoke(self, code: int, ext: dict[str, Any], body: bytes | None) -> RemotingCommand:
        request = RemotingCommand(code, 7, 0, 1, 63, None, {k: str(v) for k, v in ext.items()} or None, body,
                                  SerializeType.JSON)
        [decoded] = FrameDecoder().feed(encode_command(request))
        answer = self.processor.process(to_request(decoded), CLIENT)
        if not isinstance(answer, RemotingResponse):
            answer = await answer
        [wire] = FrameDecoder().feed(encode_command(self.wire.encode(decoded, answer)))
        return wire

    def in_flight(self) -> list[Any]:
        return sorted((k, e.pop_time) for k, e in self.processor.pop_state.index.entries.items())


class Links:
    """BrokerLinks' invoke, onto the brokers by address, counting requests by code."""

    def __init__(self, brokers: dict[str, NamedBroker], refuse_batch: bool = False) -> None:
        self.brokers = brokers
        self.refuse_batch = refuse_batch
        self.sent: list[int] = []

    async def invoke(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None,
                     extra_s: float = 0.0) -> RemotingCommand:
        self.sent.append(code)
        if self.refuse_batch and code == Code.BATCH_ACK_MESSAGE:  # a broker without the code
            return RemotingCommand(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="not supported")
        return await self.brokers[addr].invoke(code, ext, body)


class Routes:
    def __init__(self, brokers: dict[str, NamedBroker]) -> None:
        self.route = SimpleNamespace(broker_datas=[
            SimpleNamespace(broker_name=b.name, broker_addrs={0: addr})
            for addr, b in brokers.items()])

    async def get(self, topic: str) -> Any:
        return self.route


def cluster(root: Path) -> dict[str, NamedBroker]:
    out = {}
    for i, name in enumerate(NAMES):
        (root / name).mkdir(parents=True)
        out[f"127.0.0.1:{10911 + i}"] = NamedBroker(root / name, name, f"127.0.0.1:{10911 + i}")
    return out


def rpcs(brokers: dict[str, NamedBroker], links: Links, batch: bool) -> ConsumerRpcs:
    return ConsumerRpcs(P, ProxyConfig(batch_ack=batch), Routes(brokers), links,  # type: ignore[arg-type]
                        None, Answers(P, "127.0.0.1", 8081))  # type: ignore[arg-type]


async def setup(root: Path) -> tuple[dict[str, NamedBroker], list[str]]:
    """Two brokers, 12 messages popped in four pops each: the handles, in pop order. Deterministic:
    built twice, the same."""
    brokers = cluster(root)
    handles: list[str] = []
    for b in brokers.values():
        for i in range(12):
            sent = await b.invoke(Code.SEND_MESSAGE, {
                "producerGroup": "PG", "topic": "T", "queueId": i % 2, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
                "properties": properties_to_string({"UNIQ_KEY": f"U{i}"})}, f"m{i}".encode())
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        for queue, nums in ((0, 4), (1, 4), (0, 2), (1, 2)):  # a queue each: a pop of -1 starts at random
            answer = await b.invoke(Code.POP_MESSAGE, {"consumerGroup": "CG", "topic": "T", "queueId": queue,
                                                       "maxMsgNums": nums, "invisibleTime": INVISIBLE, "pollTime": 0,
                                                       "bornTime": b.clock(), "initMode": 0}, None)
            assert answer.code == ResponseCode.SUCCESS
            handles += [f"{m['props']['POP_CK']} {m['phys']}" for m in decode_messages(answer.body or b"")]
            b.clock.advance(7)
    return brokers, handles


def close(brokers: dict[str, NamedBroker]) -> None:
    for b in brokers.values():
        b.store.close()
        b.processor.pop_state.close()


def variant(handles: list[str], kind: str, n: int) -> str:
    """An entry's handle: a live one, or one of the bad kinds."""
    h = handles[n % len(handles)]
    parts = h.split(" ")
    match kind:
        case "live":
            return h
        case "expired":
            return " ".join([parts[0], "1000", *parts[2:]])
        case "forged":
            return " ".join([*parts[:5], "broker-z", *parts[6:]])
        case "short":  # no commit-log offset (the broker's extraInfo alone)
            return " ".join(parts[:8])
        case "past":  # an offset past the queue's end: the broker refuses the whole batch
            return " ".join([*parts[:7], str(int(parts[0]) + 100), parts[8]])
        case "queue":  # a queue the topic does not have
            return " ".join([*parts[:6], "5", *parts[7:]])
    return "not a handle"


async def ack(c: ConsumerRpcs, entries: list[str]) -> list[tuple[str, str]]:
    request = P.new("AckMessageRequest", group={"name": "CG"}, topic={"name": "T"},
                    entries=[{"message_id": f"id{i}", "receipt_handle": h} for i, h in enumerate(entries)])
    answer = await c.ack_message(request, None)
    out = [(P.enum_name("Code", e.status.code), e.status.message) for e in answer.entries]
    out.append((P.enum_name("Code", answer.status.code), answer.status.message))
    return out


def run(root: Path, entries: list[tuple[str, int]], pre_acked: list[int], batch: bool,
        refuse: bool = False) -> tuple[list[tuple[str, str]], list[Any], list[int]]:
    """An AckMessage of `entries` after one of `pre_acked`, on a fresh pair of brokers: the entries'
    and the response's statuses, what each broker still has in flight, the requests sent for it."""

    async def scenario() -> tuple[list[tuple[str, str]], list[Any], list[int]]:
        brokers, handles = await setup(root)
        consumer_module.system_clock = next(iter(brokers.values())).clock  # type: ignore[assignment]
        links = Links(brokers, refuse)
        c = rpcs(brokers, links, batch)
        try:
            if pre_acked:
                await ack(c, [handles[n % len(handles)] for n in pre_acked])
            links.sent.clear()
            got = await ack(c, [variant(handles, k, n) for k, n in entries])
            return got, [b.in_flight() for b in brokers.values()], links.sent
        finally:
            close(brokers)

    return asyncio.run(scenario())


kinds = st.sampled_from(["live"] * 6 + ["expired", "forged", "short", "past", "queue", "junk"])
entry_lists = st.lists(st.tuples(kinds, st.integers(0, 23)), min_size=1, max_size=30)


@pytest.fixture(autouse=True)
def _restore_clock() -> Any:
    saved = consumer_module.system_clock
    yield
    consumer_module.system_clock = saved


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry_lists, st.lists(st.integers(0, 23), max_size=3), st.booleans())
def test_batched_acks_answer_each_entry_as_one_by_one_acks_do(entries: list[tuple[str, int]], pre_acked: list[int],
                                                             refuse: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one_by_one, state_before, sent_before = run(Path(tmp) / "old", entries, pre_acked, batch=False)
        batched, state_after, sent_after = run(Path(tmp) / "new", entries, pre_acked, batch=True, refuse=refuse)
    assert batched == one_by_one
    assert state_after == state_before
    assert set(sent_before) <= {Code.ACK_MESSAGE}
    refused = refuse or any(k in ("past", "queue") for k, _ in entries)  # a refused batch: one request more
    assert len(sent_after) <= len(sent_before) + (len(NAMES) if refused else 0)


def test_a_received_batch_is_acked_in_one_request_per_broker(tmp_path: Path) -> None:
    entries = [("live", n) for n in range(24)]  # every message of both brokers' four pops
    old, _, sent_old = run(tmp_path / "old", entries, [], batch=False)
    new, in_flight, sent_new = run(tmp_path / "new", entries, [], batch=True)
    assert new == old == [("OK", "OK")] * 25
    assert in_flight == [[], []]
    assert sent_old == [Code.ACK_MESSAGE] * 24 and sent_new == [Code.BATCH_ACK_MESSAGE] * 2


def test_a_mixed_batch_answers_each_entry_and_acks_the_rest(tmp_path: Path) -> None:
    entries = [("live", 0), ("junk", 0), ("live", 1), ("expired", 2), ("live", 0), ("live", 3), ("forged", 5),
               ("live", 13)]
    got, in_flight, sent = run(tmp_path / "new", entries, [3], batch=True)
    codes = [c for c, _ in got]
    assert codes == ["OK", "INVALID_RECEIPT_HANDLE", "OK", "INVALID_RECEIPT_HANDLE", "INVALID_RECEIPT_HANDLE",
                     "INVALID_RECEIPT_HANDLE", "INVALID_RECEIPT_HANDLE", "OK", "MULTIPLE_RESULTS"]
    assert got[3][1] == "receipt handle is expired" and got[6][1] == "cannot find broker broker-z"
    assert got[4][1].startswith("no message in flight"), "the same message twice: the second is refused"
    assert got[5][1].startswith("no message in flight"), "acked before"
    # broker-a: one batch (0, 1, 3), then the repeat of 0 alone; broker-b: its one message alone
    assert sorted(sent) == sorted([Code.BATCH_ACK_MESSAGE, Code.ACK_MESSAGE, Code.ACK_MESSAGE])
    assert len(in_flight[0]) == 12 - 3 and len(in_flight[1]) == 12 - 1


def test_a_refused_batch_goes_one_by_one(tmp_path: Path) -> None:
    entries = [("live", 0), ("live", 1), ("past", 2), ("live", 2)]
    got, in_flight, sent = run(tmp_path / "new", entries, [], batch=True)
    assert [c for c, _ in got] == ["OK", "OK", "INVALID_RECEIPT_HANDLE", "OK", "MULTIPLE_RESULTS"]
    assert got[2][1].startswith("offset is illegal")
    assert sent == [Code.BATCH_ACK_MESSAGE] + [Code.ACK_MESSAGE] * 4
    assert len(in_flight[0]) == 12 - 3
