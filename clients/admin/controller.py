"""The admin client's way to the controller (RocketMQ's DefaultMQAdminExt controller calls): over
TCP to the controller's address (RocketMQ's remoting protocol, the codes of
`namesrv.controller.codes`), or to the controller actor of a Ray namespace (its methods, which the
TCP codes call too).

Either way an answer is a `ControllerAnswer`: code, remark, the response header's fields under
RocketMQ's names (numbers and booleans as such, though TCP carries them as strings) and the JSON
body. A refusal (any code but SUCCESS) raises `MQAdminError` naming the code and the remark.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from clients.admin.brokers import MQAdminError
from namesrv.controller.codes import ControllerRequestCode as Req
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.wire import encode_broker_names

NUMERIC_HEADERS = frozenset({"masterBrokerId", "masterEpoch", "syncStateSetEpoch", "newSyncStateSetEpoch"})
BOOLEAN_HEADERS = frozenset({"isLeader"})


@dataclass(frozen=True, slots=True)
class ControllerAnswer:
    code: int
    remark: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    body: Any = None


def _typed_header(ext: dict[str, Any]) -> dict[str, Any]:
    """TCP's string header values as the controller made them (numbers, booleans)."""
    out: dict[str, Any] = {}
    for k, v in ext.items():
        if isinstance(v, str) and k in NUMERIC_HEADERS and v.lstrip("-").isdigit():
            out[k] = int(v)
        elif isinstance(v, str) and k in BOOLEAN_HEADERS:
            out[k] = v.lower() == "true"
        else:
            out[k] = v
    return out


def code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return f"code {code}"


def require_ok(answer: ControllerAnswer, what: str, where: str) -> ControllerAnswer:
    if answer.code != Code.SUCCESS:
        remark = " ".join((answer.remark or "").split())[:300]
        raise MQAdminError(f"{what} on the controller at {where} failed: {code_name(answer.code)} ({answer.code})"
                           f"{': ' + remark if remark else ''}")
    return answer


class ControllerTransport(Protocol):
    where: str

    def call(self, code: int, ext: dict[str, str], body: bytes | None, method: str,
             kwargs: dict[str, Any]) -> ControllerAnswer:
        """One request: `code`/`ext`/`body` on the wire, or `method(**kwargs)` of the actor."""
        ...

    def close(self) -> None: ...


class TcpControllerTransport:
    def __init__(self, controller_addr: str, timeout_s: float = 3.0) -> None:
        """`controller_addr`: host:port (mqadmin's -a; of a `;` list, the first, as mqadmin does)."""
        from namesrv.remoting.client import parse_namesrv_addr

        host, port = parse_namesrv_addr(controller_addr)[0]  # ValueError when malformed
        self.where = f"{host}:{port}"
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._client: Any = None

    def call(self, code: int, ext: dict[str, str], body: bytes | None, method: str,
             kwargs: dict[str, Any]) -> ControllerAnswer:
        from namesrv.remoting.client import RemotingClient, RemotingConnectError, RemotingTimeoutError

        try:
            if self._client is None:
                self._client = RemotingClient(self.host, self.port, timeout_s=self.timeout_s)
            answer = self._client.invoke(code, ext, body)
        except (RemotingConnectError, RemotingTimeoutError, OSError) as e:
            self.close()
            raise MQAdminError(f"controller at {self.where}: {e}") from None
        try:
            payload = json.loads(answer.body) if answer.body else None
        except ValueError as e:
            raise MQAdminError(f"controller at {self.where} answered a body that is not JSON: {e}") from None
        return ControllerAnswer(answer.code, answer.remark, _typed_header(dict(answer.ext_fields or {})), payload)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RayControllerTransport:
    def __init__(self, namespace: str, timeout_s: float = 5.0) -> None:
        """The controller actor of Ray namespace `namespace` (this driver must be connected to Ray)."""
        import ray

        from actors.controller.actor import CONTROLLER_NAME

        self.where = f"Ray namespace {namespace!r}"
        self.timeout_s = timeout_s
        try:
            self.handle = ray.get_actor(CONTROLLER_NAME, namespace=namespace)
        except ValueError:
            raise MQAdminError(f"no controller in Ray namespace {namespace!r}: start one with `namesrv up --slaves 1`"
                               " (or pass -a with a controller's TCP address)") from None

    def call(self, code: int, ext: dict[str, str], body: bytes | None, method: str,
             kwargs: dict[str, Any]) -> ControllerAnswer:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            result = ray.get(getattr(self.handle, method).remote(**kwargs), timeout=self.timeout_s)
        except GetTimeoutError:
            raise MQAdminError(f"the controller of {self.where} did not answer in {self.timeout_s:g} s") from None
        except RayActorError as e:
            raise MQAdminError(f"the controller of {self.where} is gone ({type(e).__name__})") from None
        return ControllerAnswer(int(result.code), result.remark, dict(result.header), result.body)

    def close(self) -> None:
        pass


class ControllerAdmin:
    """DefaultMQAdminExt's controller calls: getInSyncStateData, getControllerMetaData, electMaster."""

    def __init__(self, transport: ControllerTransport) -> None:
        self.transport = transport

    @classmethod
    def over_tcp(cls, controller_addr: str, timeout_s: float = 3.0) -> ControllerAdmin:
        return cls(TcpControllerTransport(controller_addr, timeout_s))

    @classmethod
    def over_ray(cls, namespace: str, timeout_s: float = 5.0) -> ControllerAdmin:
        return cls(RayControllerTransport(namespace, timeout_s))

    def close(self) -> None:
        self.transport.close()

    def _ask(self, what: str, code: int, ext: dict[str, str], body: bytes | None, method: str,
             **kwargs: Any) -> ControllerAnswer:
        answer = self.transport.call(code, ext, body, method, kwargs)
        return require_ok(answer, what, self.transport.where)

    def get_in_sync_state_data(self, broker_names: list[str]) -> dict[str, Any]:
        """CONTROLLER_GET_SYNC_STATE_DATA (1006): brokerName -> its master, epochs, in- and
        not-in-sync replicas (BrokerReplicasInfo.replicasInfoTable). Names the controller does not
        know are left out, as RocketMQ's."""
        answer = self._ask("get sync state data", Req.CONTROLLER_GET_SYNC_STATE_DATA, {},
                           encode_broker_names(broker_names), "get_sync_state_data", broker_names=broker_names)
        body = answer.body or {}
        table = body.get("replicasInfoTable", {}) if isinstance(body, dict) else {}
        return dict(table)

    def get_controller_meta_data(self) -> dict[str, Any]:
        """CONTROLLER_GET_METADATA_INFO (1005): group, leader id and address, peers."""
        return self._ask("get metadata", Req.CONTROLLER_GET_METADATA_INFO, {}, None, "get_metadata").header

    def elect_master(self, cluster_name: str, broker_name: str, broker_id: int) -> ControllerAnswer:
        """CONTROLLER_ELECT_MASTER (1002) as an admin triggers it (ElectMasterRequestHeader.ofAdminTrigger:
        designateElect). The answer's header: the new master's id, address and epochs; its body:
        the new SyncStateSet and the broker member group."""
        ext = {"clusterName": cluster_name, "brokerName": broker_name, "brokerId": str(broker_id),
               "designateElect": "true", "invokeTime": str(int(time.time() * 1000))}
        return self._ask(f"elect master of {broker_name}", Req.CONTROLLER_ELECT_MASTER, ext, None, "elect_master",
                         broker_name=broker_name, broker_id=broker_id, designate_elect=True)
