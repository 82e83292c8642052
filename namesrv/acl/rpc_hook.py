"""The plain ACL as an RPC hook of a server's request pipeline (RocketMQ's AclClientRPCHook on the
server side): it decides before any processor runs, on either transport, and a refused request
answers NO_PERMISSION and changes nothing. One hook per server, told how that server decides."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping

from namesrv.acl.broker_resources import wire_resources
from namesrv.acl.plain_acl import (
    ACCESS_KEY,
    AclManager,
    Denied,
    PlainAccessValidator,
    credentials_only,
    long_poll_content,
)
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse, error, request_ext_strings
from namesrv.remoting.pipeline import RequestContext, RPCHook

log = logging.getLogger(__name__)

Check = Callable[[PlainAccessValidator, RemotingRequest, Mapping[str, str], bytes | None, str], Denied | None]
"""How a server decides: (validator, request, its extFields as signed strings, body, remote)."""


def check_namesrv(validator: PlainAccessValidator, request: RemotingRequest, ext: Mapping[str, str],
                  body: bytes | None, remote: str) -> Denied | None:
    return validator.check_namesrv(request.code, ext, body, remote)


def check_broker(validator: PlainAccessValidator, request: RemotingRequest, ext: Mapping[str, str],
                 body: bytes | None, remote: str) -> Denied | None:
    """Signature first; only then is the header (or heartbeat) parsed, into the object the
    processor acts on."""
    return validator.check_broker(request.code, ext, body, remote, lambda: wire_resources(request))


class AclHook(RPCHook):
    def __init__(self, manager: AclManager, check: Check, on_refusal: Callable[[str], None] = lambda reason: None,
                 ) -> None:
        """`on_refusal(reason)` counts a refusal in the server's metrics."""
        self.manager = manager
        self.check = check
        self.on_refusal = on_refusal
        self.rejections: collections.Counter[str] = collections.Counter()

    def before(self, request: RemotingRequest, ctx: RequestContext) -> RemotingResponse | None:
        body = request.body
        if body is not None:
            body = bytes(body) if isinstance(body, (bytes, bytearray)) else None
        ext = request.ext_fields if request.wire else request_ext_strings(request)  # wire: strings already
        denied = self.check(self.manager.validator, request, ext, body, ctx.remote)
        if denied is None:
            return None
        self._refused(denied, request.code, ctx.remote)
        return error(ResponseCode.NO_PERMISSION, denied.remark)

    def _refused(self, denied: Denied, code: int, remote: str) -> None:
        self.rejections[denied.reason] += 1
        self.on_refusal(denied.reason)
        log.warning("ACL refused request %s from %s: %s", code, remote, denied.remark)

    def check_long_poll(self, topic_versions: Mapping[str, int], auth: Mapping[str, str]) -> None:
        """A NameServer's route long-poll passes as a route query for its topics would; raises
        MQServerError (NO_PERMISSION and why, the route query's answer) otherwise."""
        ext = long_poll_content(topic_versions) | credentials_only(auth)
        denied = self.check(self.manager.validator, RemotingRequest(RequestCode.GET_ROUTEINFO_BY_TOPIC, dict(ext)), ext,
                            None, "ray")
        if denied is not None:
            self._refused(denied, RequestCode.GET_ROUTEINFO_BY_TOPIC, "ray")
            raise MQServerError(ResponseCode.NO_PERMISSION, denied.remark)

    def may(self, request: RemotingRequest, ctx: RequestContext, resource: str, needed: int) -> str | None:
        """None when the request's (authenticated) account may do `needed` on `resource`; else why
        not (counted and logged as a refusal)."""
        denied = self.manager.validator.permits(request_ext_strings(request).get(ACCESS_KEY), ctx.remote, resource,
                                                needed)
        if denied is None:
            return None
        self._refused(denied, request.code, ctx.remote)
        return denied.remark

    async def reload(self) -> None:
        """Load the ACL file again if it changed (off the event loop); a broken edit keeps the rules
        in force and is logged."""
        await asyncio.to_thread(self.manager.try_reload)
