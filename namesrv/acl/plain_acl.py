"""RocketMQ 4.x plain ACL: accounts from a `plain_acl.yml`, signatures as RocketMQ's client RPC hook
computes them, and the rules that decide who may send which request.

A signed request carries `AccessKey` and `Signature` in its extFields; the signature is
base64(HmacSHA1(secretKey, values of every other extFields entry in key order, then the body)).

Rules (beyond RocketMQ 4.x, whose NameServer checks nothing): on a NameServer, route and cluster
queries need any valid account or a white-listed address; REGISTER_BROKER, UNREGISTER_BROKER,
BROKER_HEARTBEAT, QUERY_DATA_VERSION and REGISTER_TOPIC_IN_NAMESRV need a broker account (`broker:
true`, our extension of the file) or an admin; KV, topic deletion, write-permission and config
changes need an admin. On a broker, RocketMQ's
plain ACL: PUB on the topic to send, SUB on the topic and the group's retry topic to consume, an
admin to create or delete a topic (what each broker request needs: `namesrv.acl.broker_resources`).

Order of the checks: the signature first (HMAC over the raw extFields and body bytes, compared in
constant time), and only then anything that parses the request (its header, a heartbeat's JSON).
Errors in the ACL file are reported by line and column only: never a line of the file, which holds
the secret keys.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from namesrv.protocol.codes import BrokerRequestCode, RequestCode
from namesrv.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from namesrv.protocol.types import describe_errors
from namesrv.remoting.wire_command import ext_value

log = logging.getLogger(__name__)

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"

DENY, ANY, PUB, SUB = 1, 2, 4, 8
"""RocketMQ's Permission bits."""
_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}

NAMESRV_ADMIN_CODES = frozenset({
    RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.UPDATE_NAMESRV_CONFIG,
})
BROKER_ADMIN_CODES = frozenset({BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, BrokerRequestCode.DELETE_TOPIC_IN_BROKER,
                                BrokerRequestCode.UPDATE_BROKER_CONFIG,
                                BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                BrokerRequestCode.DELETE_SUBSCRIPTIONGROUP})
"""Broker requests only an admin account may send (RocketMQ's Permission.needAdminPerm)."""
BROKER_PEER_CODES = frozenset({BrokerRequestCode.HA_TRANSFER})
"""Broker requests only another broker (a broker or admin account) may send: a slave's replication
reads every topic's records."""
NAMESRV_BROKER_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
                                  RequestCode.BROKER_HEARTBEAT, RequestCode.QUERY_DATA_VERSION,
                                  RequestCode.REGISTER_TOPIC_IN_NAMESRV})


class AclError(ValueError):
    """The ACL file cannot be read or is malformed (the previous rules stay in force)."""


class Account(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    access_key: str = Field(alias="accessKey", min_length=1)
    secret_key: str = Field(alias="secretKey", min_length=6, repr=False)
    white_remote_address: str | None = Field(default=None, alias="whiteRemoteAddress")
    admin: bool = False
    broker: bool = False
    """Our extension: may register, unregister and heartbeat as a broker on the NameServers."""
    default_topic_perm: str = Field(default="DENY", alias="defaultTopicPerm")
    default_group_perm: str = Field(default="DENY", alias="defaultGroupPerm")
    topic_perms: list[str] = Field(default_factory=list, alias="topicPerms")
    group_perms: list[str] = Field(default_factory=list, alias="groupPerms")


class PlainAclConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    global_white_remote_addresses: list[str] = Field(default_factory=list, alias="globalWhiteRemoteAddresses")
    accounts: list[Account] = Field(default_factory=list)


def sign(ext_fields: Mapping[str, str], body: bytes | None, secret_key: str) -> str:
    """RocketMQ's request signature: base64 HmacSHA1 over the values of the extFields (but the
    signature itself) in key order, then the body."""
    content = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE).encode("utf-8") + (body or b"")
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode()


class SessionCredentials(BaseModel):
    """What a client signs its requests with (RocketMQ's SessionCredentials)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    access_key: str = Field(min_length=1)
    secret_key: str = Field(min_length=1, repr=False)
    """Left out of the repr, so a logged config or error never shows it."""


def signed(ext_fields: Mapping[str, Any], body: bytes | None, credentials: SessionCredentials | None) -> dict[str, Any]:
    """`ext_fields` with AccessKey and Signature added, as a client RPC hook sends them (unchanged
    without credentials). Typed Ray-path values are signed as the strings RocketMQ writes them."""
    fields = dict(ext_fields)
    if credentials is None:
        return fields
    fields[ACCESS_KEY] = credentials.access_key
    fields[SIGNATURE] = sign({k: ext_value(v) for k, v in fields.items() if v is not None}, body,
                             credentials.secret_key)
    return fields


def credentials_only(fields: Mapping[str, Any] | None) -> dict[str, str]:
    """The AccessKey and Signature of a request's fields: what a Ray caller passes as `auth` (the
    Ray method builds the rest of the request, exactly as the caller signed it)."""
    return {k: str(v) for k, v in (fields or {}).items() if k in (ACCESS_KEY, SIGNATURE)}


def signature(ext_fields: Mapping[str, Any], body: bytes | None,
              credentials: SessionCredentials | None) -> dict[str, str] | None:
    """AccessKey and Signature over `ext_fields` and `body` (None without credentials)."""
    if credentials is None:
        return None
    return credentials_only(signed(ext_fields, body, credentials))


def long_poll_content(topic_versions: Mapping[str, int]) -> dict[str, str]:
    """What a route long-poll over Ray signs (it carries no RocketMQ header of its own): the held
    topics, as a GET_ROUTEINFO_BY_TOPIC header would name one."""
    return {"topic": ",".join(sorted(topic_versions))}


# ---------------------------------------------------------------------------- addresses
def _segment_matches(pattern: str, value: int) -> bool:
    if pattern == "*":
        return True
    if "-" in pattern:
        lo, _, hi = pattern.partition("-")
        return lo.isdigit() and hi.isdigit() and int(lo) <= value <= int(hi)
    if pattern.startswith("{") and pattern.endswith("}"):
        return str(value) in {p.strip() for p in pattern[1:-1].split(",")}
    return pattern.isdigit() and int(pattern) == value


@functools.lru_cache(maxsize=16_384)
def address_matches(pattern: str | None, remote: str) -> bool:
    """RocketMQ's RemoteAddressStrategy for IPv4: '*', an exact address, per-segment '*',
    'a-b' ranges and '{x,y}' sets, or a comma-separated list of addresses. Pure, so remembered:
    a connection's address is checked against the same patterns on every request (parsing it cost
    a route query a fifth of its CPU)."""
    if not pattern:
        return False
    host = remote.rsplit(":", 1)[0] if remote.count(":") == 1 else remote
    if pattern.strip() == "*":
        return True
    try:
        octets = [int(x) for x in str(ipaddress.IPv4Address(host)).split(".")]
    except ValueError:
        return False
    if "," in pattern and "{" not in pattern:
        return any(address_matches(p.strip(), host) for p in pattern.split(","))
    parts = pattern.strip().split(".")
    if len(parts) != 4:
        return False
    return all(_segment_matches(p, o) for p, o in zip(parts, octets, strict=True))


# ---------------------------------------------------------------------------- decisions
WHITE_LIST_MEMO = 16_384
"""Remote addresses whose global white-list answer a validator remembers (then it starts over)."""


@dataclass(frozen=True, slots=True)
class Denied:
    """Why a request was refused: `reason` is the counter key, `remark` goes to the client."""

    reason: str
    remark: str


class PlainAccessValidator:
    def __init__(self, config: PlainAclConfig) -> None:
        self.config = config
        self.accounts = {a.access_key: a for a in config.accounts}
        self._white: dict[str, bool] = {}
        """remote -> whether the global white list takes it (asked on every request of a connection;
        the rules never change under a validator: a reload builds a new one)."""

    @classmethod
    def from_yaml(cls, text: str) -> PlainAccessValidator:
        """The rules of a plain_acl.yml; AclError says where the file is wrong, never what it holds."""
        try:
            raw = yaml.safe_load(text) or {}
            return cls(PlainAclConfig.model_validate(raw))
        except yaml.YAMLError as e:
            raise AclError(f"ACL file is not YAML: {_yaml_where(e)}") from None
        except ValidationError as e:
            raise AclError(f"ACL file is malformed: {_fields_wrong(e)}") from None

    def white_listed(self, remote: str) -> bool:
        """Whether the global white list takes `remote` (then no request of it needs an account)."""
        white = self._white.get(remote)
        if white is None:
            white = any(address_matches(p, remote) for p in self.config.global_white_remote_addresses)
            if len(self._white) >= WHITE_LIST_MEMO:  # connections come and go: a bounded memo
                self._white.clear()
            self._white[remote] = white
        return white

    def _authenticate(self, code: int, ext: Mapping[str, str], body: bytes | None,
                      remote: str) -> Account | Denied | None:
        """The signing account of a remoting request, a refusal, or None for a white-listed address."""
        return self.authenticate(remote, ext.get(ACCESS_KEY), ext.get(SIGNATURE) or "",
                                 lambda secret: sign(ext, body, secret), f"request code {code}")

    def authenticate(self, remote: str, access_key: str | None, given: str, expected: Callable[[str], str],
                     what: str) -> Account | Denied | None:
        """The account `access_key` names when `given` is the signature `expected(its secret key)`
        computes (compared in constant time), a refusal, or None for a white-listed address. An
        account's own white-listed address needs no signature. One check for every protocol: the
        remoting one signs its fields and body, RocketMQ 5's gRPC clients a date-time."""
        if self.white_listed(remote):
            return None
        if not access_key:
            return Denied("missing_access_key", f"No accessKey is configured for {what}")
        account = self.accounts.get(access_key)
        if account is None:
            return Denied("unknown_access_key", f"No acl config for {access_key}")
        if address_matches(account.white_remote_address, remote):
            return account
        want = expected(account.secret_key).encode("ascii")
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), want):
            return Denied("bad_signature", f"Check signature failed for accessKey={access_key}")
        return account

    def check_namesrv(self, code: int, ext: Mapping[str, str], body: bytes | None, remote: str) -> Denied | None:
        who = self._authenticate(code, ext, body, remote)
        if isinstance(who, Denied) or who is None:
            return who
        if code in NAMESRV_ADMIN_CODES and not who.admin:
            return Denied("not_admin", f"Need admin permission for request code={code}, but accessKey="
                                       f"{who.access_key} is not")
        if code in NAMESRV_BROKER_CODES and not (who.broker or who.admin):
            return Denied("not_broker", f"Need broker permission for request code={code}, but accessKey="
                                        f"{who.access_key} is not")
        return None

    def check_broker(self, code: int, ext: Mapping[str, str], body: bytes | None, remote: str,
                     resources: Callable[[], Mapping[str, int]]) -> Denied | None:
        """RocketMQ's broker-side plain ACL. `resources()` maps topics (groups as %RETRY%group) to
        the permission the request needs; it is called only once the caller is authenticated (it
        parses the request), and a ValueError from it (a header or body that does not parse)
        refuses the request."""
        who = self._authenticate(code, ext, body, remote)
        if isinstance(who, Denied) or who is None:
            return who
        if who.admin:
            return None
        if code in BROKER_PEER_CODES and not who.broker:
            return Denied("not_broker", f"Need broker permission for request code={code}, but accessKey="
                                        f"{who.access_key} is not")
        if code in BROKER_ADMIN_CODES:
            return Denied("not_admin", f"Need admin permission for request code={code}, but accessKey="
                                       f"{who.access_key} is not")
        try:
            needs = resources()
        except ValueError as e:  # pydantic's ValidationError and InvalidInput both are
            return Denied("invalid_request", f"invalid request: {_first_line(e)}")
        owned = self._owned(who)
        for resource, needed in needs.items():
            denied = self._denied(who, owned, resource, needed)
            if denied is not None:
                return denied
        return None

    def permits(self, access_key: str | None, remote: str, resource: str, needed: int) -> Denied | None:
        """Whether the account of an already authenticated request (or a white-listed address) may
        do `needed` on `resource` (a topic, or %RETRY%group for a group): for a resource the
        request names only inside what it points at (a message sent back by its offset)."""
        if self.white_listed(remote):
            return None
        who = self.accounts.get(access_key or "")
        if who is None:
            return Denied("unknown_access_key", f"No acl config for {access_key}")
        if who.admin:
            return None
        return self._denied(who, self._owned(who), resource, needed)

    @staticmethod
    def _denied(who: Account, owned: dict[str, int], resource: str, needed: int) -> Denied | None:
        is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
        have = owned.get(resource, _PERMS.get(who.default_group_perm if is_group else who.default_topic_perm, DENY))
        if _permits(needed, have):
            return None
        kind = "group" if is_group else "topic"
        name = resource[len(RETRY_GROUP_TOPIC_PREFIX):] if is_group else resource
        return Denied("no_permission", f"No permission for {kind} {name} (accessKey={who.access_key})")

    @staticmethod
    def _owned(account: Account) -> dict[str, int]:
        owned: dict[str, int] = {}
        for items, prefix in ((account.topic_perms, ""), (account.group_perms, RETRY_GROUP_TOPIC_PREFIX)):
            for item in items:
                name, _, perm = item.partition("=")
                owned[prefix + name.strip()] = _PERMS.get(perm.strip(), DENY)
        return owned


def _permits(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _first_line(e: ValueError) -> str:
    if isinstance(e, ValidationError):
        return describe_errors(e)
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _yaml_where(e: yaml.YAMLError) -> str:
    """Where a YAML error is: its kind, line and column (a YAML error's text quotes the file)."""
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return type(e).__name__
    return f"{type(e).__name__} at line {mark.line + 1}, column {mark.column + 1}"


def _fields_wrong(e: ValidationError) -> str:
    """Which fields are wrong and how, never their values (a secretKey among them)."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                     for err in e.errors(include_url=False, include_input=False, include_context=False))


class AclManager:
    """A validator loaded from a file, reloaded when the file changes (mtime or size); while the
    file is unreadable the previous rules stay in force (and the failure is logged)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._stamp: tuple[float, int] | None = None
        self.validator = PlainAccessValidator(PlainAclConfig())
        self.reloads = 0
        self.reload()

    def reload(self) -> bool:
        """Load the file if it changed; True when new rules took effect."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            raise AclError(f"ACL file {self.path} does not exist") from None
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return False
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AclError(f"ACL file {self.path} cannot be read: {type(e).__name__}") from None
        self.validator = PlainAccessValidator.from_yaml(text)
        self._stamp = stamp
        self.reloads += 1
        log.info("ACL rules loaded from %s: %d accounts", self.path, len(self.validator.accounts))
        return True

    def try_reload(self) -> bool:
        """`reload`, logging a failure (where the file is wrong, never its contents) instead of
        raising it: the previous rules stay in force. What the servers run every second."""
        try:
            return self.reload()
        except AclError as e:
            log.error("ACL file %s not reloaded, the previous rules stay in force: %s", self.path, e)
            return False
