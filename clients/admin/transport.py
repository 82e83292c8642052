"""How the mqadmin verbs reach a cluster: one interface, two ways in.

- `TcpTransport` (clients.admin.tcp_admin): RocketMQ's remoting protocol to the NameServers of a
  namesrvAddr (`host:9876;host:9877`) and to the brokers' TCP addresses, as mqadmin does.
- `RayTransport` (here): the actor handles of a deployment found by its Ray namespace.

Both answer with a `Reply` whose body is RocketMQ's JSON object model (camelCase keys, what the TCP
body decodes to), so every verb is written once, in `clients.admin.mqadmin_ext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.codec import ext_value

UNREACHABLE = -1
"""The `Reply.code` of a server that could not be asked (refused, timed out, gone)."""


class ServerUnreachable(ConnectionError):
    """A NameServer or broker could not be reached or did not answer in time."""


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    """Response header fields, as strings (what the wire carries)."""
    body: Any = None
    """RocketMQ's JSON object model of the body; a dict of strings for a NameServer's config."""

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    def describe(self) -> str:
        """'code 17 TOPIC_NOT_EXIST: remark', or the reason it was unreachable."""
        if self.code == UNREACHABLE:
            return self.remark or "unreachable"
        try:
            name = ResponseCode(self.code).name
        except ValueError:
            name = "code"
        remark = " ".join((self.remark or "").split())[:300]
        return f"{name} ({self.code}){': ' + remark if remark else ''}"


def unreachable(e: Exception) -> Reply:
    return Reply(UNREACHABLE, str(e) or type(e).__name__)


class AdminTransport(Protocol):
    where: str
    """For messages: 'namesrvAddr 127.0.0.1:9876' or "Ray namespace 'namesrv'"."""

    def namesrvs(self) -> list[str]:
        """The NameServers, by address (TCP) or actor name (Ray), in the order given."""
        ...

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> Reply:
        """One request to one NameServer (`props`: UPDATE_NAMESRV_CONFIG's body). Raises
        ServerUnreachable when it cannot be asked."""
        ...

    def update_topic(self, broker_addr: str, tc: TopicConfig) -> Reply:
        """UPDATE_AND_CREATE_TOPIC on one broker. Raises ServerUnreachable."""
        ...

    def delete_topic_in_broker(self, broker_addr: str, topic: str) -> Reply:
        """DELETE_TOPIC_IN_BROKER on one broker. Raises ServerUnreachable."""
        ...

    def broker_runtime_info(self, broker_addr: str) -> Reply:
        """GET_BROKER_RUNTIME_INFO of one broker (body: a KVTable). Raises ServerUnreachable."""
        ...

    def close(self) -> None: ...


class RayTransport:
    """The actors of a deployment: NameServers by name, brokers by the address routes carry."""

    def __init__(self, deployment: Any, timeout_s: float = 5.0, credentials: Any = None) -> None:
        self.dep = deployment
        self.timeout_s = timeout_s
        self.credentials = credentials
        self.where = f"Ray namespace {deployment.spec.namespace!r}"

    def namesrvs(self) -> list[str]:
        return sorted(self.dep.namesrvs)

    def _get(self, ref: Any, who: str) -> Any:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(ref, timeout=self.timeout_s)
        except GetTimeoutError:
            raise ServerUnreachable(f"{who} did not answer in {self.timeout_s:g} s") from None
        except RayActorError as e:
            raise ServerUnreachable(f"{who} is gone ({type(e).__name__})") from None

    @staticmethod
    def _reply(resp: Any) -> Reply:
        ext = {k: ext_value(v) for k, v in (resp.ext_fields or {}).items()
               if v is not None and isinstance(v, (str, int, float, bool))}
        return Reply(int(resp.code), resp.remark, ext, resp.wire_body() if resp.ok else None)

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> Reply:
        from namesrv.acl.plain_acl import signed
        from namesrv.protocol.msgpack_codec import encode_body
        from namesrv.remoting.command import RemotingRequest

        handle = self.dep.namesrvs.get(namesrv)
        if handle is None:
            raise ServerUnreachable(f"no NameServer {namesrv!r} in {self.where}")
        body = encode_body(props) if props is not None else None
        request = RemotingRequest(code, signed(ext or {}, body, self.credentials), body)
        return self._reply(self._get(handle.process.remote(request), namesrv))

    def _broker(self, broker_addr: str) -> Any:
        handle = self.dep.brokers.get(broker_addr)
        if handle is None:
            raise ServerUnreachable(f"no broker actor serves {broker_addr} in {self.where}")
        return handle

    def call_broker(self, broker_addr: str, code: int, ext: dict[str, str] | None = None) -> Reply:
        """One request to a broker actor, through the same pipeline as a TCP frame."""
        from namesrv.acl.plain_acl import signed
        from namesrv.remoting.command import RemotingRequest

        request = RemotingRequest(code, signed(ext or {}, None, self.credentials))
        resp = self._get(self._broker(broker_addr).process.remote(request), broker_addr)
        body = fastjson.loads(resp.body) if resp.ok and resp.body else None
        return Reply(int(resp.code), resp.remark, {}, body)

    def update_topic(self, broker_addr: str, tc: TopicConfig) -> Reply:
        from namesrv.protocol.broker_headers import create_topic_ext

        return self.call_broker(broker_addr, BrokerRequestCode.UPDATE_AND_CREATE_TOPIC,
                                create_topic_ext(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                                                 tc.order))

    def delete_topic_in_broker(self, broker_addr: str, topic: str) -> Reply:
        return self.call_broker(broker_addr, BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})

    def broker_runtime_info(self, broker_addr: str) -> Reply:
        return self.call_broker(broker_addr, BrokerRequestCode.GET_BROKER_RUNTIME_INFO)

    def close(self) -> None:
        pass

