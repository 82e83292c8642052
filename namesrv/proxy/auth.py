"""Who a RocketMQ 5 client is, and what each of its calls needs, for the proxy's plain ACL.

A 5.x client signs every call with gRPC metadata (the official clients' `Signature.metadata`):
`x-mq-date-time` (a `yyyyMMddTHHmmssZ` stamp) and `authorization`, which reads
`MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>`, the
signature being HMAC-SHA1 of the date-time under the account's secret key, in hex. RocketMQ's proxy
(auth's DefaultAuthenticationContextBuilder) takes the account from the credential's first `/` part
and checks the signature of the date-time, not the time itself; so does this module (the Python
client stamps local time with a `Z`, so a clock-skew bound would refuse it in any other zone).

What a call needs is RocketMQ's DefaultAuthorizationContextBuilder for gRPC, in the plain ACL's
terms (a group is its retry topic `%RETRY%group`, as the remoting side keys it): PUB on the topic
to send, recall or end a transaction; SUB on the topic and the group to receive, ack, forward to
the DLQ or ask an assignment; SUB on the group to change an invisible time (and on its topic: the
broker's pop check asks it too), to end a consumer's session or for a consumer's heartbeat; PUB or
SUB on a topic to read its route; and the Telemetry Settings: PUB on each published topic, SUB on
the group and each subscribed topic. Both an unknown or badly signed caller and a refused resource
are UNAUTHORIZED, as RocketMQ's ResponseBuilder answers either.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from namesrv.acl.plain_acl import ANY, PUB, SUB, Denied, PlainAccessValidator
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.proxy.status import ProxyError

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SCHEME = "MQv2-HMAC-SHA1"
MAX_HEADER = 1024
"""An authorization header longer than this is refused before it is parsed."""
CONSUMER_CLIENT_TYPES = frozenset({"PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER", "LITE_PUSH_CONSUMER"})


@dataclass(frozen=True, slots=True)
class Credential:
    """What a call's metadata claims: the account, the signature (lower-case hex) and what it signs."""

    access_key: str
    signature: str
    date_time: str


def sign_date_time(secret_key: str, date_time: str) -> str:
    """The signature a 5.x client sends: HMAC-SHA1 of the date-time under the secret key, in hex."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest()


def authorization_header(access_key: str, secret_key: str, date_time: str) -> str:
    """The `authorization` value a 5.x client sends with `date_time` as its `x-mq-date-time`."""
    return (f"{SCHEME} Credential={access_key}, SignedHeaders={DATE_TIME}, "
            f"Signature={sign_date_time(secret_key, date_time)}")


def _unauthorized(message: str) -> ProxyError:
    return ProxyError("UNAUTHORIZED", message)


def parse_credential(metadata: Mapping[str, str]) -> Credential | None:
    """The credential a call's metadata carries, None when it carries none (no `authorization`);
    UNAUTHORIZED when the header is there but malformed."""
    header = metadata.get(AUTHORIZATION)
    if header is None:
        return None
    if len(header) > MAX_HEADER:
        raise _unauthorized(f"authentication header is longer than {MAX_HEADER} characters")
    scheme, sep, rest = header.partition(" ")
    if not sep or scheme != SCHEME:
        raise _unauthorized(f"authentication header is incorrect: expected the {SCHEME} scheme")
    items: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            raise _unauthorized("authentication header is incorrect: an item without '='")
        items[key] = value
    access_key = items.get("Credential", "").split("/", 1)[0]
    if not access_key:
        raise _unauthorized("authentication header names no Credential")
    signature = items.get("Signature", "")
    try:
        binascii.unhexlify(signature)
    except (binascii.Error, ValueError):
        raise _unauthorized("authentication header's Signature is not hex") from None
    date_time = metadata.get(DATE_TIME)
    if not date_time:
        raise _unauthorized(f"the call is signed but carries no {DATE_TIME}")
    return Credential(access_key, signature.lower(), date_time)


def authenticate(validator: PlainAccessValidator, metadata: Mapping[str, str], remote: str) -> str | None:
    """The access key of the account that signed the call, None for a white-listed address;
    UNAUTHORIZED for a call with no account, an unknown one or a signature that does not check.
    A white-listed caller's header is not read (the official clients send one, empty, unasked)."""
    if validator.white_listed(remote):
        return None
    credential = parse_credential(metadata)
    who = validator.authenticate(
        remote, credential.access_key if credential else None, credential.signature if credential else "",
        lambda secret: sign_date_time(secret, credential.date_time) if credential else "", "this call")
    if isinstance(who, Denied):
        raise _unauthorized(who.remark)
    return None if who is None else who.access_key


def _group(resource: Any) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + str(resource.name)


def _needs(pairs: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, perm in pairs:
        if name and name != RETRY_GROUP_TOPIC_PREFIX:  # a blank name needs nothing: the call's own check refuses it
            out[name] = out.get(name, 0) | perm
    return out


def needed(rpc: str, request: Any, client_type: str = "") -> dict[str, int]:
    """The resources (topics, groups as %RETRY%group) a call of `rpc` with `request` needs, and
    with which permission. `client_type` is a Heartbeat's ClientType name."""
    if rpc == "SendMessage":
        return _needs([(str(request.messages[0].topic.name), PUB)] if request.messages else [])
    if rpc in ("RecallMessage", "EndTransaction"):
        return _needs([(str(request.topic.name), PUB)])
    if rpc == "QueryRoute":
        return _needs([(str(request.topic.name), ANY)])
    if rpc == "ReceiveMessage":
        return _needs([(_group(request.group), SUB), (str(request.message_queue.topic.name), SUB)])
    if rpc in ("AckMessage", "ForwardMessageToDeadLetterQueue", "QueryAssignment", "ChangeInvisibleDuration"):
        return _needs([(_group(request.group), SUB), (str(request.topic.name), SUB)])
    if rpc == "NotifyClientTermination":
        return _needs([(_group(request.group), SUB)])
    if rpc == "Heartbeat":
        return _needs([(_group(request.group), SUB)] if client_type in CONSUMER_CLIENT_TYPES else [])
    return {}


def settings_needs(settings: Any) -> dict[str, int]:
    """What a Telemetry Settings command needs: PUB on each published topic, SUB on the group and
    each subscribed topic."""
    pairs = [(str(t.name), PUB) for t in settings.publishing.topics] if settings.HasField("publishing") else []
    if settings.HasField("subscription"):
        pairs.append((_group(settings.subscription.group), SUB))
        pairs.extend((str(e.topic.name), SUB) for e in settings.subscription.subscriptions)
    return _needs(pairs)


def authorize(validator: PlainAccessValidator, access_key: str | None, remote: str, needs: Mapping[str, int]) -> None:
    """UNAUTHORIZED unless the caller (None: a white-listed address) may do each of `needs`."""
    for resource, perm in needs.items():
        denied = validator.permits(access_key, remote, resource, perm)
        if denied is not None:
            raise _unauthorized(denied.remark)
