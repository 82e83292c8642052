"""What a gRPC call carries, as the proxy reads it: its request decoded or marked undecodable (never
an exception into gRPC, which would answer UNKNOWN with a Python exception's name), its metadata and
its caller's address."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

CLIENT_ID = "x-mq-client-id"


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes are not the RPC's message: answered BAD_REQUEST, never raised into gRPC
    (which would answer UNKNOWN with a Python exception's name)."""

    type_name: str
    error: str

    @property
    def message(self) -> str:
        return f"the request is not a valid {self.type_name}: {self.error}"


def decoder(req_cls: Any) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return req_cls.FromString(data)
        except DecodeError as e:
            return Undecodable(str(req_cls.DESCRIPTOR.name), str(e))
    return decode


def remote_address(context: Any) -> str:
    """The caller's `host:port` from gRPC's peer string (`ipv4:127.0.0.1:5000`, `ipv6:[::1]:5000`)."""
    peer = str(context.peer() or "")
    kind, _, address = peer.partition(":")
    return address if kind in ("ipv4", "ipv6") else peer


def metadata_of(context: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (context.invocation_metadata() or ())}


def client_id_of(context: Any) -> str:
    """The calling client's id (its `x-mq-client-id`; empty when it sent none)."""
    return metadata_of(context).get(CLIENT_ID, "")
