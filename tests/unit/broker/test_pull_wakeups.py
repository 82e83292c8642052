"""Held pulls never miss a message (issue 22, point 7): one stored between the pull's read and its
hold is noticed at once (by the check made when the hold is registered, before any periodic
re-check), and one stored by a path that notifies nobody is found by the periodic re-check (every
5 s with long polling), not at the end of the pull's suspend timeout."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from namesrv.broker.processor.pull import PullMessageProcessor
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import RemotingResponse, to_request
from namesrv.remoting.wire_command import RemotingCommand
from tests.support.broker import CLIENT, WIRE, Broker, decode_messages

SUSPEND_MS = 120_000
"""Far beyond what either test waits for: an answer at the timeout would fail them."""
ANSWER_BOUND_S = 30


class AfterTheRead(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor (a real one), running `then` in the worker right after the
    first job that is the pull's store read (other jobs, such as the group commit's write of the
    auto-created group, run as they come), so `then` runs between that read and the hold."""

    def __init__(self, then: Callable[[], object]) -> None:
        super().__init__(max_workers=2)
        self.then: Callable[[], object] | None = then

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        then = self.then
        if then is None or not _is_the_read(fn):
            return super().submit(fn, *args, **kwargs)
        self.then = None

        def job() -> Any:
            result = fn(*args, **kwargs)
            then()
            return result
        return super().submit(job)


def _is_the_read(fn: Callable[..., Any]) -> bool:
    """asyncio.to_thread submits functools.partial(context.run, func, *args)."""
    func = fn.args[0] if isinstance(fn, functools.partial) and fn.args else fn
    return getattr(func, "__func__", None) is PullMessageProcessor.read


def held_pull(broker: Broker, offset: int = 0) -> Any:
    ext = {"consumerGroup": "CG", "topic": "T", "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
           "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": str(SUSPEND_MS), "subVersion": "0"}
    cmd = RemotingCommand(Code.PULL_MESSAGE, 1, 0, ext_fields=ext)
    pending = broker.processor.process(to_request(cmd), CLIENT)
    assert not isinstance(pending, RemotingResponse)

    async def on_the_wire() -> RemotingCommand:
        return WIRE.encode(cmd, await pending)
    return on_the_wire()


def test_a_message_stored_between_the_read_and_the_hold_is_delivered_at_once(tmp_path: Path) -> None:
    broker = Broker(tmp_path)

    async def scenario() -> RemotingCommand:
        # Stored (and notified to nobody: no hold exists yet) right after the pull read the empty queue.
        asyncio.get_running_loop().set_default_executor(
            AfterTheRead(lambda: broker.store.append(MessageInner("T", 0, b"in the gap"))))
        answer: RemotingCommand = await asyncio.wait_for(held_pull(broker), ANSWER_BOUND_S)
        return answer

    answer = asyncio.run(scenario())
    assert answer.code == ResponseCode.SUCCESS
    assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"in the gap"]
    assert broker.processor.hold.rechecks == 0, "found by the periodic re-check, not at once"


def test_a_message_nobody_notified_is_found_by_the_periodic_recheck(tmp_path: Path) -> None:
    broker = Broker(tmp_path)

    async def scenario() -> RemotingCommand:
        task = asyncio.ensure_future(held_pull(broker))
        while broker.processor.hold.held == 0:  # wait for the hold itself, not for time
            await asyncio.sleep(0)
        await asyncio.to_thread(broker.store.append, MessageInner("T", 0, b"unannounced"))
        answer: RemotingCommand = await asyncio.wait_for(task, ANSWER_BOUND_S)
        return answer

    answer = asyncio.run(scenario())
    assert answer.code == ResponseCode.SUCCESS
    assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"unannounced"]
    assert broker.processor.hold.rechecks >= 1, "nothing notified the hold: only a re-check can have found it"


def test_a_held_pull_for_a_later_offset_stays_held_until_its_message(tmp_path: Path) -> None:
    """A notify for the queue wakes the hold; it answers only once its own offset holds a message."""
    broker = Broker(tmp_path)
    broker.store.append(MessageInner("T", 0, b"first"))

    async def scenario() -> RemotingCommand:
        task = asyncio.ensure_future(held_pull(broker, offset=1))
        while broker.processor.hold.held == 0:
            await asyncio.sleep(0)
        broker.processor.hold.notify("T", 0)  # a wake-up with nothing new for this pull
        for _ in range(100):
            await asyncio.sleep(0)
        assert not task.done() and broker.processor.hold.held == 1, "answered with nothing to give"
        await broker.processor.send([MessageInner("T", 0, b"second")], "TBW102", 4)
        answer: RemotingCommand = await asyncio.wait_for(task, ANSWER_BOUND_S)
        return answer

    answer = asyncio.run(scenario())
    assert [m["body"] for m in decode_messages(answer.body or b"")] == [b"second"]


def test_short_polling_holds_for_short_polling_time_mills(tmp_path: Path) -> None:
    """long_polling_enable false: held for shortPollingTimeMills, not the pull's suspend timeout."""
    broker = Broker(tmp_path, long_polling_enable=False, short_polling_time_mills=50)

    async def scenario() -> RemotingCommand:
        answer: RemotingCommand = await asyncio.wait_for(held_pull(broker), ANSWER_BOUND_S)
        return answer

    assert asyncio.run(scenario()).code == ResponseCode.PULL_NOT_FOUND
