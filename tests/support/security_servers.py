"""A broker and a NameServer with ACL on, served on 127.0.0.1 from the test's own event loop (their
controllers, real files, real sockets; no Ray), and a raw remoting client to attack them with."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from actors.broker.lifecycle import BrokerController
from actors.namesrv.housekeeping import BrokerChannel
from actors.namesrv.lifecycle import NamesrvController
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.broker.config import BrokerConfig
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.codec import encode_command
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import RemotingCommand, SerializeType
from namesrv.routeinfo.config import NamesrvConfig

ACL_YAML = """
accounts:
  - accessKey: admin
    secretKey: admin-secret
    admin: true
  - accessKey: brokers
    secretKey: broker-secret
    broker: true
  - accessKey: app
    secretKey: app-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Allowed=PUB|SUB
      - ReadOnly=SUB
    groupPerms:
      - DeniedGroup=DENY
"""
APP = SessionCredentials(access_key="app", secret_key="app-secret-1")
BROKER = SessionCredentials(access_key="brokers", secret_key="broker-secret")


@asynccontextmanager
async def broker_server(root: Path, **remoting: Any) -> AsyncIterator[BrokerController]:
    acl = root / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    bc = BrokerController("C", "b", 0, root / "broker", BrokerConfig(acl_enable=True, acl_file=str(acl)), [], "",
                          RemotingServerConfig(listen_port=0, **remoting), lambda p: f"127.0.0.1:{p}",
                          lambda t: BrokerChannel(None, t), "b-0")
    for topic in ("Allowed", "Denied", "ReadOnly"):
        bc.topics.update_topic_config(TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1))
    await bc.remoting.serve()
    try:
        yield bc
    finally:
        await bc.remoting.stop()
        await bc.durable()
        bc.store.close()


@asynccontextmanager
async def namesrv_server(root: Path, **remoting: Any) -> AsyncIterator[NamesrvController]:
    acl = root / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    config = NamesrvConfig(kv_config_path=str(root / "kv.json"), acl_enable=True, acl_file=str(acl))
    ns = NamesrvController("ns", config, root, remoting=RemotingServerConfig(listen_port=0, **remoting),
                           restarted=False)
    await ns.remoting.serve()
    try:
        yield ns
    finally:
        await ns.remoting.stop()
        await ns.durable()


class Client:
    """One raw connection: frames out, answers in (matched by opaque)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.opaque = 0

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def invoke(self, code: int, ext: dict[str, Any], body: bytes | None = None,
                     creds: SessionCredentials | None = None,
                     kind: SerializeType = SerializeType.JSON) -> RemotingCommand:
        self.opaque += 1
        fields = {k: str(v) for k, v in signed(ext, body, creds).items()}
        self.writer.write(encode_command(RemotingCommand(code, self.opaque, ext_fields=fields, body=body,
                                                         serialize_type=kind)))
        await self.writer.drain()
        return await self.answer()

    async def answer(self) -> RemotingCommand:
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                raise ConnectionError("closed by the server")
            answers = self.decoder.feed(data)
            if answers:
                return answers[0]

    async def closed_by_server(self) -> bool:
        """Waits until the server closes the connection (True) or sends something (False)."""
        try:
            return await self.reader.read(1 << 16) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()
