"""Requests and responses (RocketMQ's RemotingCommand), independent of how they travel.

A request is (code, extFields, body), as in RocketMQ. A response carries its code, remark and
extFields, and its body either as raw bytes or as `payload`, a typed wire model
(`TopicRouteData`, `ClusterInfo`, `TopicList`, `KVTable`, ...): over Ray the model itself travels
(pickled by Ray, nothing encoded twice); a TCP front end encodes it as RocketMQ's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.wire_command import LanguageCode, RemotingCommand, ext_value


@dataclass(slots=True)
class RemotingRequest:
    code: int
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None
    version: int = 0
    """The sender's RocketMQ version (MQVersion ordinal): decides body formats, as in RocketMQ."""
    wire: bool = False
    """True when it came over TCP in RocketMQ's serialization: extFields values are strings to be
    parsed as RocketMQ parses them, and bodies are JSON. False for the Ray path: typed values and
    msgpack bodies."""
    language: int = LanguageCode.OTHER
    """The sender's client language (LanguageCode), as its header said; OTHER over Ray."""
    header: Any = None
    """The typed header, once parsed (`broker_headers.request_header`): the ACL authorises the
    same object the processor then acts on."""

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, Any] | None = None,
                 body: bytes | None = None, payload: Any = None) -> RemotingResponse:
        """The answer to this request (what RemotingCommand.createResponseCommand gives in RocketMQ)."""
        return RemotingResponse(code, remark, ext_fields if ext_fields is not None else {}, body, payload)


@dataclass(slots=True)
class RemotingResponse:
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    ext_fields: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None
    payload: Any = None
    """The typed body (a wire model with `to_wire()`), when the handler answers with one."""
    not_ready: bool = False
    """The NameServer refused because it is still inside its 'not ready' window after a (re)start:
    ask another NameServer (or again later). On the wire this is SYSTEM_ERROR with its remark."""

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS

    def wire_body(self) -> Any:
        """The body as RocketMQ's JSON object model (camelCase keys), or None: what a TCP front end
        serializes, and what tests compare."""
        if self.payload is None:
            return None
        to_wire = getattr(self.payload, "to_wire", None)
        return to_wire() if to_wire is not None else self.payload


def error(code: int, remark: str) -> RemotingResponse:
    return RemotingResponse(code=code, remark=remark)


class MQServerError(Exception):
    """A refused request as an exception: the response code and remark the server answers it with
    (RocketMQ's MQBrokerException, which carries responseCode and errorMessage).

    The one error type of the servers' boundaries:

    - a processor raises it to refuse a request, and its dispatcher answers `response()` (the broker's
      `namesrv.broker.processor.dispatcher`, the request pipeline for every server);
    - a Ray method of a server actor (NameServerActor, BrokerActor, ControllerActor) that answers
      plain data (a dict, a list) rather than a response raises it when it refuses; a Ray caller
      catches it as `MQServerError` (Ray's RayTaskError is also an instance of its cause)
      and reads `code` and `remark`;
    - the clients' MQBrokerError (namesrv.client.errors) is one, naming the broker that answered.
    """

    code: int
    remark: str | None

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(code, remark)  # args: what pickling (Ray) rebuilds it from
        self.code = code
        self.remark = remark

    def __str__(self) -> str:
        return self.remark if self.remark is not None else f"response code {self.code}"

    def response(self) -> RemotingResponse:
        """The answer a server gives for this refusal."""
        return RemotingResponse(self.code, self.remark)

    @classmethod
    def of(cls, response: RemotingResponse) -> MQServerError:
        """A refusal answered as a response, raised."""
        return cls(response.code, response.remark)


def request_ext_strings(request: RemotingRequest) -> dict[str, str]:
    """A request's extFields as the strings a TCP client sent (and signed); Ray callers' typed
    values are written as RocketMQ writes them (True -> "true"). A TCP request's own map is
    returned as it is (the decoder made every value a string): read it, never change it."""
    if request.wire:
        return request.ext_fields
    return {k: ext_value(v) for k, v in request.ext_fields.items() if v is not None}


def to_request(cmd: RemotingCommand) -> RemotingRequest:
    """A decoded wire command as the neutral request every processor takes."""
    return RemotingRequest(cmd.code, dict(cmd.ext_fields or {}), cmd.body, cmd.version, True, cmd.language)
