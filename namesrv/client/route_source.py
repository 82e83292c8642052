"""Where a client gets routes from: the one seam between the client core and any transport.

`clients.impl.namesrv_client.NameServerClient` serves routes from NameServer actors over Ray; tests pass
their own. The client core (route cache, TBW102 fallback, send engine) only sees this protocol.
"""

from __future__ import annotations

from typing import Protocol

from namesrv.protocol.models import TopicRouteData


class RouteSource(Protocol):
    def get_topic_route(self, topic: str) -> tuple[TopicRouteData, int]:
        """The topic's route and its route version (-1 when the source has none).

        Raises `TopicNotFound` when no NameServer has a route for the topic, `NoNameServerAvailable`
        when none answered."""
        ...
