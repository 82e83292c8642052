"""The proxy's plain ACL: it admits a RocketMQ 5 client's call (its signed metadata, then what the
call needs: namesrv.proxy.auth) against the deployment's `plain_acl.yml`, and then acts as that
client: what the call sends on to a broker is signed with the client's own account, so the broker
checks it again as it would check the client over remoting. The proxy's own requests (route reads,
the producer heartbeats that bring check-backs) sign with the proxy's account (`credentials`), as
RocketMQ's proxy signs its inner clients' requests.

The account a call acts as travels with the call's task (`ACTING_AS`, a context variable), so the
RPCs need no extra parameter and a request sent from another task (a heartbeat) never carries it."""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from actors.proxy.calls import metadata_of, remote_address
from namesrv.acl.plain_acl import AclManager, SessionCredentials
from namesrv.proxy import auth
from namesrv.proxy.status import ProxyError

ACTING_AS: ContextVar[SessionCredentials | None] = ContextVar("proxy_acting_as", default=None)
"""The account the current call acts as (None: the proxy's own, or no ACL)."""
RELOAD_EVERY_S = 1.0
"""How often the ACL file is looked at for changes (as the NameServers and brokers do)."""


class ProxyAcl:
    def __init__(self, acl_file: str, own: SessionCredentials | None) -> None:
        self.manager = AclManager(acl_file)
        self.own = own
        self._looked = time.monotonic()
        self.refused = 0

    def _validator(self) -> Any:
        now = time.monotonic()
        if now - self._looked >= RELOAD_EVERY_S:
            self._looked = now
            self.manager.try_reload()
        return self.manager.validator

    def authenticate(self, context: Any) -> str | None:
        """The access key that signed the call (None: a white-listed address); UNAUTHORIZED if none did."""
        try:
            return auth.authenticate(self._validator(), metadata_of(context), remote_address(context))
        except ProxyError:
            self.refused += 1
            raise

    def authorize(self, access_key: str | None, context: Any, needs: dict[str, int]) -> None:
        try:
            auth.authorize(self._validator(), access_key, remote_address(context), needs)
        except ProxyError:
            self.refused += 1
            raise

    def acting_as(self, access_key: str | None) -> SessionCredentials | None:
        """The account a call of `access_key` signs onward with: its own, or the proxy's for a
        white-listed caller."""
        account = self.manager.validator.accounts.get(access_key or "")
        if account is None:
            return self.own
        return SessionCredentials(access_key=account.access_key, secret_key=account.secret_key)

    def admit(self, rpc: str, request: Any, context: Any, client_type: str = "") -> SessionCredentials | None:
        """Authenticate and authorize one unary or server-streaming call; the account it acts as."""
        access_key = self.authenticate(context)
        self.authorize(access_key, context, auth.needed(rpc, request, client_type))
        return self.acting_as(access_key)
