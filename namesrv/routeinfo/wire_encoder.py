"""The NameServer's answers on the wire: the encoder its request pipeline writes TCP answers with.

A request arrives as a `RemotingCommand` (extFields as strings, JSON bodies) and becomes the same
`RemotingRequest` the Ray path builds (`namesrv.remoting.command.to_request`), so one pipeline
serves both. The answer goes back as RocketMQ words it: only the response-header fields RocketMQ's
NameServer sets for that code, bodies as fastjson writes them (standard JSON when the client asks
for it), remark and codes unchanged. A route's JSON is encoded once per route version, not once per
request, and from its parts' JSON, each part written once (`namesrv.routeinfo.route_json`).
"""

from __future__ import annotations

from collections import OrderedDict

from namesrv.protocol import fastjson
from namesrv.protocol.bodies import format_properties
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.models import ConfigProperties
from namesrv.remoting.codec import PLAIN_BODY_MAX, EncodedFrame, encode_plain_response
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.wire_command import CURRENT_VERSION, RESPONSE_FLAG, LanguageCode, RemotingCommand, ext_value
from namesrv.routeinfo.route_json import RouteJson

STANDARD_JSON_FROM_VERSION = 401
"""MQVersion.Version.V4_9_4.ordinal(): from this client version on, routes are standard JSON."""

WIRE_RESPONSE_FIELDS: dict[int, tuple[str, ...]] = {
    RequestCode.REGISTER_BROKER: ("haServerAddr", "masterAddr"),
    RequestCode.QUERY_DATA_VERSION: ("changed",),
    RequestCode.GET_KV_CONFIG: ("value",),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: ("wipeTopicCount",),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: ("addTopicCount",),
}
"""RocketMQ's response headers per code; codes not listed answer without extFields."""

ROUTE_CACHE_MAX_BYTES = 64 << 20
"""Encoded routes kept (per topic the last version in each JSON flavour), oldest encoded first out
beyond this many bytes: a route spanning 300 groups encodes to ~60 KB, and 10,000 of them cached
without a bound would hold more than every route table together."""


def wants_standard_json(cmd: RemotingCommand) -> bool:
    if cmd.version >= STANDARD_JSON_FROM_VERSION:
        return True
    ext = cmd.ext_fields
    return ext is not None and ext.get("acceptStandardJsonOnly", "").lower() == "true"


class WireEncoder:
    """Encodes processor answers for the wire, caching each topic's route JSON per version."""

    def __init__(self) -> None:
        self._routes: OrderedDict[tuple[str, bool], tuple[object, bytes]] = OrderedDict()
        self._route_bytes = 0
        self.route_json = RouteJson()
        """Writes a route's body from its parts' JSON, each part written once (see `route_json`)."""
        self.route_encodings = 0
        """How many route bodies were actually encoded (the rest came from the cache)."""

    def _route_body(self, cmd: RemotingCommand, response: RemotingResponse, standard: bool) -> bytes:
        topic = (cmd.ext_fields or {}).get("topic", "")
        route = response.payload
        key = (response.ext_fields.get("routeVersion"), route.order_topic_conf)
        cached = self._routes.get((topic, standard))
        if cached is not None and cached[0] == key and key[0] is not None:
            return cached[1]
        body = self.route_json.dumps(route, standard=standard)
        self.route_encodings += 1
        if cached is not None:
            self._route_bytes -= len(cached[1])
            del self._routes[(topic, standard)]
        self._routes[(topic, standard)] = (key, body)
        self._route_bytes += len(body)
        while self._route_bytes > ROUTE_CACHE_MAX_BYTES and len(self._routes) > 1:
            self._route_bytes -= len(self._routes.popitem(last=False)[1][1])
        return body

    def encode_frame(self, cmd: RemotingCommand, response: RemotingResponse) -> RemotingCommand | EncodedFrame:
        """What the TCP pipeline writes back: a route answer as its frame, header and all (the
        cached body and a header that differs from the last only in its opaque: no command built,
        no general header encoder run); any other answer as `encode` gives it."""
        if (cmd.code == _ROUTE_CODE and response.code == _SUCCESS and response.remark is None
                and response.payload is not None):
            standard = cmd.version >= STANDARD_JSON_FROM_VERSION or wants_standard_json(cmd)
            ext = cmd.ext_fields
            cached = self._routes.get((ext.get("topic", "") if ext else "", standard))
            key = (response.ext_fields.get("routeVersion"), response.payload.order_topic_conf)
            if cached is not None and cached[0] == key and key[0] is not None:  # `_route_body`'s hit, inlined
                body = cached[1]
            else:
                body = self._route_body(cmd, response, standard)
            if len(body) <= PLAIN_BODY_MAX:
                return encode_plain_response(_SUCCESS, cmd.opaque, CURRENT_VERSION, cmd.serialize_type, body)
        return self.encode(cmd, response)

    def encode(self, cmd: RemotingCommand, response: RemotingResponse) -> RemotingCommand:
        """The wire answer to request `cmd`."""
        body = response.body
        code = cmd.code
        if response.payload is not None and response.code == ResponseCode.SUCCESS:
            standard = wants_standard_json(cmd)
            if code == _ROUTE_CODE:
                body = self._route_body(cmd, response, standard)
            elif isinstance(response.payload, ConfigProperties):
                body = format_properties(response.payload.properties)
            else:
                body = fastjson.dumps(response.wire_body(), standard=standard)
        ext: dict[str, str] | None = None
        fields = WIRE_RESPONSE_FIELDS.get(code)
        if fields is not None and response.code == ResponseCode.SUCCESS:
            ext = {k: ext_value(response.ext_fields[k]) for k in fields if response.ext_fields.get(k) is not None}
        return RemotingCommand(int(response.code), cmd.opaque, RESPONSE_FLAG, LanguageCode.JAVA, CURRENT_VERSION,
                               response.remark, ext, body, cmd.serialize_type)


_ROUTE_CODE = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
_SUCCESS = int(ResponseCode.SUCCESS)
