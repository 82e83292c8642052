"""How the admin client (`clients.admin.client.DefaultMQAdminExt`) reaches a cluster: one
interface, two ways in.

- `TcpTransport` (clients.admin.tcp): RocketMQ's remoting protocol to the NameServers of a
  namesrvAddr (`host:9876;host:9877`) and to the brokers' TCP addresses, as mqadmin does.
- `RayTransport` (here): the actor handles of a deployment found by its Ray namespace; each request
  goes through the actor's `process`, the same pipeline (ACL, processors) as a TCP frame.

Both answer with the neutral `RemotingResponse` (`namesrv.remoting.command`), its `payload` the
typed model of the body (TopicRouteData, ClusterInfo, TopicList, ConfigProperties, KVTable): over
Ray the model as the server made it, over TCP decoded from RocketMQ's JSON (or properties) body.
Its `ext_fields` are strings, as the wire carries them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from namesrv.controller.codes import ControllerRequestCode
from namesrv.protocol import fastjson
from namesrv.protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    ProducerConnection,
    ResetOffsetBody,
    TopicStatsTable,
)
from namesrv.protocol.bodies import format_properties, parse_properties
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.protocol.consume_directly import ConsumeMessageDirectlyResult
from namesrv.protocol.keyed_json import loads_keyed
from namesrv.protocol.message.decoder import decode_messages
from namesrv.protocol.models import ClusterInfo, ConfigProperties, KVTable, TopicConfig, TopicList, TopicRouteData
from namesrv.protocol.running_info import ConsumerRunningInfo
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.wire_command import ext_value

UNREACHABLE = -1
"""The response code of a server that could not be asked (refused, timed out, gone)."""


class ServerUnreachable(ConnectionError):
    """A NameServer or broker could not be reached or did not answer in time."""


def unreachable(e: Exception) -> RemotingResponse:
    return RemotingResponse(UNREACHABLE, str(e) or type(e).__name__)


def describe(resp: RemotingResponse) -> str:
    """'TOPIC_NOT_EXIST (17): remark', or the reason it was unreachable."""
    if resp.code == UNREACHABLE:
        return resp.remark or "unreachable"
    try:
        name = ResponseCode(resp.code).name
    except ValueError:
        name = "code"
    remark = " ".join((resp.remark or "").split())[:300]
    return f"{name} ({resp.code}){': ' + remark if remark else ''}"


def _topic_list(body: bytes) -> TopicList:
    wire = fastjson.loads(body)
    return TopicList(list(wire.get("topicList", [])), wire.get("brokerAddr"))


BODY_MODELS: dict[int, Callable[[bytes], Any]] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: lambda b: TopicRouteData.from_wire(fastjson.loads(b)),
    RequestCode.GET_BROKER_CLUSTER_INFO: lambda b: ClusterInfo.from_wire(fastjson.loads(b)),
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _topic_list,
    RequestCode.GET_NAMESRV_CONFIG: lambda b: ConfigProperties(parse_properties(b)),
    BrokerRequestCode.GET_BROKER_RUNTIME_INFO: lambda b: KVTable(dict(fastjson.loads(b).get("table", {}))),
    BrokerRequestCode.GET_TOPIC_STATS_INFO: lambda b: TopicStatsTable.from_wire(loads_keyed(b)),
    BrokerRequestCode.GET_CONSUME_STATS: lambda b: ConsumeStats.from_wire(loads_keyed(b)),
    BrokerRequestCode.GET_CONSUMER_CONNECTION_LIST: lambda b: ConsumerConnection.from_wire(loads_keyed(b)),
    BrokerRequestCode.GET_PRODUCER_CONNECTION_LIST: lambda b: ProducerConnection.from_wire(loads_keyed(b)),
    BrokerRequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda b: dict(fastjson.loads(b)),
    BrokerRequestCode.INVOKE_BROKER_TO_RESET_OFFSET: lambda b: ResetOffsetBody.from_wire(loads_keyed(b)),
    BrokerRequestCode.QUERY_TOPIC_CONSUME_BY_WHO: lambda b: GroupList.from_wire(loads_keyed(b)),
    BrokerRequestCode.GET_CONSUMER_RUNNING_INFO: lambda b: ConsumerRunningInfo.from_wire(loads_keyed(b)),
    BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResult.decode,
    BrokerRequestCode.GET_BROKER_CONFIG: lambda b: ConfigProperties(parse_properties(b)),
    BrokerRequestCode.GET_TOPIC_CONFIG: lambda b: TopicConfig.from_wire(fastjson.loads(b)),
    BrokerRequestCode.VIEW_BROKER_STATS_DATA: fastjson.loads,
    BrokerRequestCode.QUERY_MESSAGE: decode_messages,
    BrokerRequestCode.VIEW_MESSAGE_BY_ID: decode_messages,
    ControllerRequestCode.GET_BROKER_EPOCH_CACHE: lambda b: dict(fastjson.loads(b)),
}
"""How a request code's answer body (bytes) becomes its typed model."""


def typed(code: int, resp: RemotingResponse) -> RemotingResponse:
    """`resp` with string ext_fields and, on success, `payload` the body's typed model (decoded
    from the bytes when the server sent bytes)."""
    ext = {k: ext_value(v) for k, v in (resp.ext_fields or {}).items()
           if v is not None and isinstance(v, (str, int, float, bool))}
    payload = resp.payload
    decode = BODY_MODELS.get(code)
    if payload is None and resp.ok and resp.body and decode is not None:
        payload = decode(resp.body)
    return RemotingResponse(resp.code, resp.remark, ext, resp.body, payload, resp.not_ready)


class AdminTransport(Protocol):
    where: str
    """For messages: 'namesrvAddr 127.0.0.1:9876' or "Ray namespace 'namesrv'"."""

    def namesrvs(self) -> list[str]:
        """The NameServers, by address (TCP) or actor name (Ray), in the order given."""
        ...

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> RemotingResponse:
        """One request to one NameServer (`props`: UPDATE_NAMESRV_CONFIG's body). Raises
        ServerUnreachable when it cannot be asked."""
        ...

    def call_broker(self, broker_addr: str, code: int, ext: dict[str, Any] | None = None,
                    props: dict[str, str] | None = None, body: bytes | None = None) -> RemotingResponse:
        """One request to one broker, by the address routes carry (`props`: UPDATE_BROKER_CONFIG's
        body, Java properties text either way; `body`: any other body, e.g. a JSON config). Raises
        ServerUnreachable."""
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

    def _process(self, handle: Any, who: str, code: int, ext: dict[str, Any] | None,
                 body: bytes | None) -> RemotingResponse:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        from namesrv.acl.plain_acl import signed
        from namesrv.remoting.command import RemotingRequest

        request = RemotingRequest(code, signed(ext or {}, body, self.credentials), body)
        try:
            return typed(code, ray.get(handle.process.remote(request), timeout=self.timeout_s))
        except GetTimeoutError:
            raise ServerUnreachable(f"{who} did not answer in {self.timeout_s:g} s") from None
        except RayActorError as e:
            raise ServerUnreachable(f"{who} is gone ({type(e).__name__})") from None

    def call_namesrv(self, namesrv: str, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> RemotingResponse:
        from namesrv.protocol.msgpack_codec import encode_body

        handle = self.dep.namesrvs.get(namesrv)
        if handle is None:
            raise ServerUnreachable(f"no NameServer {namesrv!r} in {self.where}")
        return self._process(handle, namesrv, code, ext, encode_body(props) if props is not None else None)

    def call_broker(self, broker_addr: str, code: int, ext: dict[str, Any] | None = None,
                    props: dict[str, str] | None = None, body: bytes | None = None) -> RemotingResponse:
        handle = self.dep.brokers.get(broker_addr)
        if handle is None:
            raise ServerUnreachable(f"no broker actor serves {broker_addr} in {self.where}")
        return self._process(handle, broker_addr, code, ext, format_properties(props) if props is not None else body)

    def close(self) -> None:
        pass
