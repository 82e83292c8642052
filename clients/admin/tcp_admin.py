"""The mqadmin verbs' way in over TCP: RocketMQ's remoting protocol to each NameServer of a
namesrvAddr (`127.0.0.1:9876;127.0.0.1:9877`) and to the brokers' addresses from the cluster info.

One connection per server, opened on first use with a short timeout, so a refused or silent address
is one clear `ServerUnreachable` in seconds, never a hang.
"""

from __future__ import annotations

from typing import Any

from clients.admin.transport import Reply, ServerUnreachable
from namesrv.acl.plain_acl import SessionCredentials, signed
from namesrv.protocol import fastjson
from namesrv.protocol.bodies import format_properties, parse_properties
from namesrv.protocol.codes import BrokerRequestCode, RequestCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.client import RemotingClient, RemotingConnectError, RemotingTimeoutError, parse_namesrv_addr
from namesrv.remoting.codec import RemotingCommand


class TcpTransport:
    def __init__(self, namesrv_addr: str, timeout_s: float = 3.0,
                 credentials: SessionCredentials | None = None) -> None:
        """`namesrv_addr`: RocketMQ's form; a malformed one raises ValueError before anything connects.
        `credentials`: requests are signed with this account (for servers with ACL on)."""
        self.credentials = credentials
        self._namesrvs = [f"{host}:{port}" for host, port in parse_namesrv_addr(namesrv_addr)]
        self.timeout_s = timeout_s
        self.where = f"namesrvAddr {';'.join(self._namesrvs)}"
        self._clients: dict[str, RemotingClient] = {}

    def namesrvs(self) -> list[str]:
        return list(self._namesrvs)

    def _client(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is None:
            try:
                host, port = parse_namesrv_addr(addr)[0]
            except ValueError:
                raise ServerUnreachable(f"{addr} is not a host:port address (a Ray-only broker?)") from None
            try:
                client = RemotingClient(host, port, timeout_s=self.timeout_s)
            except RemotingConnectError as e:
                raise ServerUnreachable(str(e)) from None
            self._clients[addr] = client
        return client

    def _invoke(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None) -> RemotingCommand:
        try:
            return self._client(addr).invoke(code, signed(ext, body, self.credentials), body)
        except (RemotingConnectError, RemotingTimeoutError) as e:
            self._drop(addr)
            raise ServerUnreachable(str(e)) from None

    def _drop(self, addr: str) -> None:
        client = self._clients.pop(addr, None)
        if client is not None:
            client.close()

    @staticmethod
    def _reply(code: int, answer: RemotingCommand) -> Reply:
        body: Any = None
        if answer.code == 0 and answer.body:
            if code == RequestCode.GET_NAMESRV_CONFIG:
                body = parse_properties(answer.body)
            else:
                body = fastjson.loads(answer.body)
        return Reply(answer.code, answer.remark, dict(answer.ext_fields or {}), body)

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> Reply:
        body = format_properties(props) if props is not None else None
        return self._reply(code, self._invoke(namesrv, code, ext or {}, body))

    def update_topic(self, broker_addr: str, tc: TopicConfig) -> Reply:
        ext = {"topic": tc.topic_name, "defaultTopic": AUTO_CREATE_TOPIC_KEY_TOPIC,
               "readQueueNums": tc.read_queue_nums, "writeQueueNums": tc.write_queue_nums, "perm": tc.perm,
               "topicFilterType": tc.topic_filter_type, "topicSysFlag": tc.topic_sys_flag, "order": tc.order}
        return self._reply(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC,
                           self._invoke(broker_addr, BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, ext))

    def delete_topic_in_broker(self, broker_addr: str, topic: str) -> Reply:
        return self._reply(BrokerRequestCode.DELETE_TOPIC_IN_BROKER,
                           self._invoke(broker_addr, BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))

    def broker_runtime_info(self, broker_addr: str) -> Reply:
        return self._reply(BrokerRequestCode.GET_BROKER_RUNTIME_INFO,
                           self._invoke(broker_addr, BrokerRequestCode.GET_BROKER_RUNTIME_INFO, {}))

    def close(self) -> None:
        for addr in list(self._clients):
            self._drop(addr)
