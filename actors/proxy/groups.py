"""Consumer groups' FIFO flag and retry times as the proxy serves them (RocketMQ's proxy reads a
group's SubscriptionGroupConfig for its Settings, assignments and pops): GET_SUBSCRIPTIONGROUP_CONFIG
to a master of one of the group's topics (a local-mode proxy's own broker when it is one, as
LocalMetadataService reads it), kept for `ttl_s` as routes are. A group the broker does not
know is CONSUMER_GROUP_NOT_FOUND; a broker that cannot answer fails the call (nothing is guessed: a
FIFO group read as a normal one would lose its order)."""

from __future__ import annotations

import logging
import time

from actors.proxy.brokers import BrokerLinks
from actors.proxy.routes import RouteCache
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.types import InvalidInput
from namesrv.proxy import route as routing
from namesrv.proxy import status as st
from namesrv.proxy.consume import GroupPolicy, group_policy
from namesrv.proxy.status import ProxyError

log = logging.getLogger(__name__)


class GroupPolicies:
    def __init__(self, routes: RouteCache, brokers: BrokerLinks, ttl_s: float) -> None:
        self.routes = routes
        self.brokers = brokers
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[GroupPolicy, float]] = {}

    async def get(self, group: str, topic: str) -> GroupPolicy:
        """`group`'s policy, asked of a readable master of `topic` when not known or older than ttl_s."""
        cached = self._cache.get(group)
        if cached is not None and time.monotonic() - cached[1] < self.ttl_s:
            return cached[0]
        masters = routing.readable_masters(await self.routes.get(topic))
        if not masters:
            raise ProxyError("FORBIDDEN", "no readable queue")
        addr = next((a for _, a in masters if self.brokers.is_local(a)), masters[0][1])
        answer = await self.brokers.invoke(addr, BrokerRequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
                                           {"group": group})
        if answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            raise ProxyError("CONSUMER_GROUP_NOT_FOUND", answer.remark or f"consumer group {group} does not exist")
        if answer.code != ResponseCode.SUCCESS:
            s = st.from_remoting(answer.code, answer.remark)
            raise ProxyError(s.code, s.message)
        try:
            policy = group_policy(answer.body)
        except InvalidInput as e:
            raise ProxyError("INTERNAL_SERVER_ERROR", str(e)) from None
        self._cache[group] = (policy, time.monotonic())
        return policy
