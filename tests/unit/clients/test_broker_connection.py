"""A producer's own connection to a broker (clients.impl.broker_connection.BrokerConnection) against a real
RemotingServer on 127.0.0.1, no Ray: answers reach the thread that asked for them however many
threads share the connection, a late answer is dropped, and a lost connection fails every waiter
at once and is never used again."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from clients.impl.broker_connection import BrokerConnection
from namesrv.client.errors import RemotingError
from namesrv.common.waiting import wait_until
from namesrv.remoting.codec import encode_command
from namesrv.remoting.config import host_port
from namesrv.remoting.connection import Connection
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand


class Server:
    """A remoting server on its own event loop thread: answers each request after `delayMs`,
    echoing the request's `who` in its remark; `close=1` closes the connection instead."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.connections: list[Connection] = []
        self.server = RemotingServer("t", self.handle, lambda conn, why: None, 0, self.loop.create_task)
        self.port = self.server.bind("127.0.0.1", 0)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.serve(), self.loop).result(10)

    def handle(self, conn: Connection, cmd: RemotingCommand) -> object:
        ext = cmd.ext_fields or {}
        if ext.get("close") == "1":
            conn.close("asked to")
            return None
        answer = cmd.response(0, ext.get("who"))
        delay = int(ext.get("delayMs", "0")) / 1000
        if not delay:
            return answer

        async def later() -> RemotingCommand:
            await asyncio.sleep(delay)
            return answer
        return later()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


def test_answers_reach_their_own_callers_on_a_shared_connection(server: Server) -> None:
    conn = BrokerConnection("127.0.0.1", server.port)
    rng = random.Random(7)
    plan = [(f"t{t}-{i}", rng.choice([0, 0, 1, 5, 20])) for t in range(16) for i in range(15)]

    def ask(who: str, delay_ms: int) -> str | None:
        return conn.invoke(10, {"who": who, "delayMs": str(delay_ms)}, b"body", 10).remark

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda p: ask(*p), plan))
    assert answers == [who for who, _ in plan]
    assert conn.broken is None
    conn.close()


def test_a_late_answer_is_dropped_and_the_connection_keeps_working(server: Server) -> None:
    conn = BrokerConnection("127.0.0.1", server.port)
    started = time.monotonic()
    with pytest.raises(RemotingError, match="did not answer in time"):
        conn.invoke(10, {"who": "slow", "delayMs": "300"}, b"x", 0.05)
    assert time.monotonic() - started < 0.25
    assert conn.invoke(10, {"who": "next", "delayMs": "400"}, b"x", 5).remark == "next"  # the late one came first
    assert conn._waiters == {}
    conn.close()


def test_a_lost_connection_fails_every_waiter_and_is_not_used_again(server: Server) -> None:
    conn = BrokerConnection("127.0.0.1", server.port)
    with ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(conn.invoke, 10, {"who": f"w{i}", "delayMs": "2000"}, b"x", 10) for i in range(3)]
        time.sleep(0.1)
        with pytest.raises(RemotingError):
            conn.invoke(10, {"close": "1"}, b"x", 10)
        for f in waiting:
            with pytest.raises(RemotingError, match=r"lost connection|closed"):
                f.result(5)
    assert conn.broken is not None
    with pytest.raises(RemotingError, match="is closed"):
        conn.invoke(10, {"who": "after"}, b"x", 1)


def test_a_broker_that_is_not_listening_is_a_remoting_error() -> None:
    s = Server()
    port = s.port
    s.stop()
    with pytest.raises(RemotingError, match="cannot connect"):
        BrokerConnection("127.0.0.1", port)


def test_only_host_port_addresses_are_sent_to_over_tcp() -> None:
    assert host_port("127.0.0.1:10911") == ("127.0.0.1", 10911)
    assert host_port("broker-a-0") is None  # a broker without a client port: sent to over Ray
    assert host_port("host:0") is None and host_port("host:99999") is None and host_port(":1") is None


# ---------------------------------------------------------------------------- async requests
class Answers:
    """Collects async completions: each request's (remark or error) by its `who`, once."""

    def __init__(self, expected: int) -> None:
        self.lock = threading.Lock()
        self.got: dict[str, list[str]] = {}
        self.threads: set[str] = set()
        self.all_in = threading.Event()
        self.expected = expected

    def handler(self, who: str) -> Callable[[RemotingCommand | None, BaseException | None], None]:
        def done(answer: RemotingCommand | None, error: BaseException | None) -> None:
            with self.lock:
                self.got.setdefault(who, []).append(answer.remark or "" if answer is not None else f"error: {error}")
                self.threads.add(threading.current_thread().name)
                if sum(map(len, self.got.values())) >= self.expected:
                    self.all_in.set()
        return done


def test_async_requests_are_answered_once_each_beside_sync_ones_on_one_connection(server: Server) -> None:
    """200 async requests (answered out of order, by random delays) and 60 sync ones from 6 threads
    on one connection: every async handler runs exactly once with its own answer, every sync caller
    gets its own, and the connection's reader thread ends once nothing is outstanding."""
    conn = BrokerConnection("127.0.0.1", server.port)
    rng = random.Random(11)
    answers = Answers(200)
    plan = [(f"a{i}", rng.choice([0, 0, 1, 5, 30])) for i in range(200)]

    def sync_caller(t: int) -> list[str | None]:
        return [conn.invoke(10, {"who": f"s{t}-{i}", "delayMs": str(rng.choice([0, 3]))}, b"b", 10).remark
                for i in range(10)]

    with ThreadPoolExecutor(6) as pool:
        syncs = [pool.submit(sync_caller, t) for t in range(6)]
        for who, delay in plan:
            conn.invoke_async(10, {"who": who, "delayMs": str(delay)}, b"body", 10, answers.handler(who))
        assert [f.result(30) for f in syncs] == [[f"s{t}-{i}" for i in range(10)] for t in range(6)]
    assert answers.all_in.wait(30)
    assert answers.got == {who: [who] for who, _ in plan}
    wait_until(lambda: not conn._pump_running, 5, "the reader thread to end", interval_s=0.01)
    assert conn._pending == {} and conn._waiters == {} and conn.broken is None
    conn.close()


def test_an_async_request_past_its_timeout_fails_once_and_its_late_answer_is_dropped(server: Server) -> None:
    conn = BrokerConnection("127.0.0.1", server.port)
    answers = Answers(2)
    started = time.monotonic()
    conn.invoke_async(10, {"who": "slow", "delayMs": "400"}, b"x", 0.1, answers.handler("slow"))
    conn.invoke_async(10, {"who": "quick"}, b"x", 5, answers.handler("quick"))
    assert answers.all_in.wait(5)
    assert time.monotonic() - started < 0.35  # failed at its deadline, not when the answer came
    assert answers.got["quick"] == ["quick"]
    assert answers.got["slow"] == [f"error: broker {conn.address} did not answer in time"]
    assert conn.invoke(10, {"who": "next", "delayMs": "500"}, b"x", 5).remark == "next"  # the late one came between
    assert answers.got["slow"] == [f"error: broker {conn.address} did not answer in time"]  # not handled again
    conn.close()


def test_a_lost_connection_fails_every_async_request_once_and_refuses_new_ones(server: Server) -> None:
    conn = BrokerConnection("127.0.0.1", server.port)
    answers = Answers(5)
    for i in range(5):
        conn.invoke_async(10, {"who": f"w{i}", "delayMs": "3000"}, b"x", 10, answers.handler(f"w{i}"))
    with pytest.raises(RemotingError):
        conn.invoke(10, {"close": "1"}, b"x", 10)
    assert answers.all_in.wait(5)
    assert all(len(v) == 1 and v[0].startswith("error: lost connection") for v in answers.got.values()), answers.got
    never = Answers(1)
    with pytest.raises(RemotingError, match="is closed"):
        conn.invoke_async(10, {"who": "after"}, b"x", 1, never.handler("after"))
    assert never.got == {}


def test_a_listening_connection_hands_on_the_brokers_own_requests_and_answers_them(server: Server) -> None:
    """With on_request, a connection reads while nothing is outstanding: a oneway request the server
    sends (NOTIFY_CONSUMER_IDS_CHANGED) reaches the handler, and a request awaiting an answer
    (GET_CONSUMER_RUNNING_INFO) is answered with `answer`; sync requests work beside it."""
    got: list[RemotingCommand] = []
    arrived = threading.Event()

    def on_request(conn: BrokerConnection, request: RemotingCommand) -> None:
        got.append(request)
        if not request.is_oneway:
            conn.answer(request, 0, "running", b"{}")
        arrived.set()

    conn = BrokerConnection("127.0.0.1", server.port, on_request=on_request)
    try:
        assert conn.invoke(10, {"who": "first"}, b"x", 5).remark == "first"  # the server knows it now
        [peer] = list(server.server.by_token.values())
        notice = RemotingCommand(40, 1, 2, ext_fields={"consumerGroup": "G"})
        assert peer.transport is not None
        server.loop.call_soon_threadsafe(peer.transport.write, encode_command(notice))
        assert arrived.wait(5), "the notice reached the handler with nothing outstanding"
        assert got[0].code == 40 and got[0].ext_fields == {"consumerGroup": "G"}
        asked = asyncio.run_coroutine_threadsafe(
            server.server.invoke(peer.token, RemotingCommand(307, 9, 0), 5), server.loop).result(10)
        assert asked.remark == "running" and asked.body == b"{}"
        assert conn.invoke(10, {"who": "after"}, b"x", 5).remark == "after"
    finally:
        conn.close()
