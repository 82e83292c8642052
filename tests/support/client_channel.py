"""A consumer on its own TCP connection to a real broker-side RemotingServer, answering what the
broker asks it (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY): `ask_through_client` makes
the connection, registers it with a heartbeat, and has an admin's request handed on to it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from namesrv.broker.processor.consumer_calls import ConsumerCalls
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import Connection
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.pipeline import RequestContext, RequestPipeline
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RESPONSE_FLAG, RemotingCommand
from tests.support.broker import ADDR, Broker, heartbeat

Answerer = Callable[[RemotingCommand], bytes | None]
"""What the client writes back to a request (an encoded frame), or None to stay silent."""


class Client:
    """A consumer on its own TCP connection that answers the broker's requests with `answer`."""

    def __init__(self, answer: Answerer) -> None:
        self.answer = answer
        self.asked: list[RemotingCommand] = []

    async def run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for cmd in decoder.feed(data):
                self.asked.append(cmd)
                out = self.answer(cmd)
                if out is not None:
                    writer.write(out)


def answering(code: int, body: bytes | None, remark: str | None = None) -> Answerer:
    """A client that answers every request with `code`, `remark` and `body`."""
    return lambda cmd: encode_command(RemotingCommand(code, cmd.opaque, RESPONSE_FLAG, remark=remark, body=body))


async def ask_through_client(code: int, answer: Answerer, broker: Broker,
                             **ext: str) -> tuple[RemotingCommand, Client]:
    """An admin's request `code` with `ext`, answered by the broker's admin queries, which hand it on
    to the client (heartbeat as "c1" of group CG) over its connection: the admin's answer and the client."""
    server = RemotingServer("b", lambda conn, cmd: None, lambda conn, why: None, 0, asyncio.ensure_future)
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = Client(answer)
    task = asyncio.ensure_future(client.run(reader, writer))
    try:
        while not server.by_token:
            await asyncio.sleep(0)
        conn: Connection = next(iter(server.by_token.values()))
        assert broker.call(Code.HEART_BEAT, body=heartbeat("c1"),
                           client=RequestContext(conn.token, conn.peer)).code == ResponseCode.SUCCESS
        calls = ConsumerCalls(broker.processor.context.identity, broker.topics, broker.store,
                              broker.processor.context.fence, lambda: broker.processor.consumers,
                              call_client=server.invoke)
        pipeline = RequestPipeline("b", BrokerWireEncoder(ADDR).encode)
        pipeline.register(calls.handlers)
        [request] = FrameDecoder().feed(encode_command(RemotingCommand(code, 9, ext_fields=ext)))
        answer = pipeline.handle_command(request, RequestContext("tcp:admin#1", "127.0.0.1:1"))
        if not isinstance(answer, RemotingCommand):
            answer = await answer
        assert answer is not None and answer.opaque == 9
        return answer, client
    finally:
        writer.close()
        task.cancel()
        await server.stop()
