"""Status codes as RocketMQ's gRPC proxy returns them (its ResponseBuilder and the activities'
GrpcProxyException): the v2 `Code` by name, so the core needs no generated class."""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.protocol.codes import ResponseCode

OK = "OK"


class ProxyError(Exception):
    """A request the proxy answers with `code` (a v2 Code name) and `message`, sending nothing on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Status:
    code: str
    message: str


_REMOTING_TO_V2: dict[int, str] = {
    ResponseCode.SUCCESS: "OK",
    ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "NOT_IMPLEMENTED",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "CONSUMER_GROUP_NOT_FOUND",
    ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
}
"""ResponseBuilder.RESPONSE_CODE_MAPPING (plus a broker's TOPIC_NOT_EXIST, which the proxy's
TopicRouteHelper turns into TOPIC_NOT_FOUND); every other remoting code is INTERNAL_SERVER_ERROR."""

_SEND_STATUS: dict[int, tuple[str, str]] = {
    ResponseCode.FLUSH_DISK_TIMEOUT: ("MASTER_PERSISTENCE_TIMEOUT", "FLUSH_DISK_TIMEOUT"),
    ResponseCode.FLUSH_SLAVE_TIMEOUT: ("SLAVE_PERSISTENCE_TIMEOUT", "FLUSH_SLAVE_TIMEOUT"),
    ResponseCode.SLAVE_NOT_AVAILABLE: ("HA_NOT_AVAILABLE", "SLAVE_NOT_AVAILABLE"),
}
"""A send stored but not as durable as asked (SendMessageActivity.convertToSendMessageResponse)."""


def from_remoting(code: int, remark: str | None) -> Status:
    """The status of a broker's or NameServer's answer (ResponseBuilder.buildStatus(int, String))."""
    name = _REMOTING_TO_V2.get(code, "INTERNAL_SERVER_ERROR")
    return Status(name, name if code == ResponseCode.SUCCESS else (remark or str(code)))


def from_send_answer(code: int, remark: str | None) -> Status:
    """A SEND_MESSAGE answer's status: the durability codes by their send status, else as any answer."""
    if code in _SEND_STATUS:
        name, send_status = _SEND_STATUS[code]
        return Status(name, f"send message failed, sendStatus={send_status}")
    return from_remoting(code, remark)


def overall(codes: list[str]) -> Status:
    """A response's status over its entries': the one code, MULTIPLE_RESULTS, or none at all."""
    distinct = set(codes)
    if len(distinct) > 1:
        return Status("MULTIPLE_RESULTS", "MULTIPLE_RESULTS")
    if not distinct:
        return Status("INTERNAL_SERVER_ERROR", "send status is empty")
    code = distinct.pop()
    return Status(code, code)
