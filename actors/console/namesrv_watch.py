"""The NameServers as the console sees them: every `namesrv_period_s`, each one's status (its
brokers, heartbeat ages) and topic list; and per NameServer, a route long-poll (`listen_for_change`)
over every topic it lists, so routes are pushed as they change, never asked for per page."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from actors.console.calls import CALL_TIMEOUT_S, ServerCalls
from actors.console.decode import route_view, topic_list
from actors.console.model import BrokerEntry, ConsoleState, broker_diff
from namesrv.acl.plain_acl import credentials_only, long_poll_content, signed
from namesrv.common.clock import system_clock
from namesrv.protocol.codes import RequestCode

log = logging.getLogger(__name__)


class NamesrvWatch:
    def __init__(self, names: list[str], state: ConsoleState, calls: ServerCalls, period_s: float,
                 long_poll_s: float, bump: Callable[[], None]) -> None:
        self.names = list(names)
        self.state = state
        self.calls = calls
        self.period_s = period_s
        self.long_poll_s = long_poll_s
        self.bump = bump
        self._route_changes: dict[str, int] = {}
        self._versions: dict[str, dict[str, int]] = {n: {} for n in names}
        """Per NameServer, the route version held per topic (a topic without a route included)."""
        self._topics_grew = {n: asyncio.Event() for n in names}
        """Set when a NameServer lists a topic its held long-poll does not hold: the long-poll starts
        again with it at once (it answers a new topic's route straight away), not when it times out."""

    def _event(self, what: str) -> None:
        self.state.note(what, system_clock())

    async def refresh(self) -> None:
        """Every NameServer's status and topics; the route changes pushed since the last refresh
        go to the chart."""
        await asyncio.gather(*(self._refresh_one(n) for n in self.names))
        for name in self.names:
            self.state.record(self.state.route_change_history, name, self._route_changes.pop(name, 0))

    async def _refresh_one(self, name: str) -> None:
        view = self.state.namesrvs[name]
        try:
            handle = await self.calls.namesrv(name)
            self.calls.count("namesrv")
            status = await self.calls.ask(handle.get_status.remote())
            listing = await self.calls.call_namesrv(name, self.calls.request(
                RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        except Exception as e:
            self.calls.forget_namesrv(name)
            if view.error is None:
                self._event(f"{name} unreachable: {type(e).__name__}")
            view.error = f"{type(e).__name__}: {e}"[:200]
            return
        entries = [BrokerEntry(b["cluster"], b["broker_name"], int(b["broker_id"]), b["broker_addr"],
                               b.get("last_heartbeat_age_ms"), int(b.get("topics", 0)), bool(b.get("watched")))
                   for b in status.get("brokers", [])]
        if view.error is None:
            came, left = broker_diff(view.brokers, entries)
            for key in sorted(came):
                self._event(f"{name}: broker {key} registered")
            for key in sorted(left):
                self._event(f"{name}: broker {key} removed (expired, unregistered or its channel closed)")
        elif view.seen_ms:
            self._event(f"{name} reachable again")
        view.error = None
        view.ready = bool(status.get("ready"))
        view.route_seq = int(status.get("route_seq", 0))
        view.remoting_address = status.get("remoting_address")
        view.long_poll_waiters = int(status.get("long_poll_waiters", 0))
        view.brokers = entries
        topics = topic_list(listing)
        if topics is not None:
            if topics - view.topics:
                self._topics_grew[name].set()
            view.topics = topics
            for gone in set(view.routes) - topics:
                del view.routes[gone]
        view.seen_ms = system_clock()

    async def route_loop(self, name: str) -> None:
        """Hold a long-poll on every topic this NameServer lists; apply what it pushes."""
        while True:
            view = self.state.namesrvs[name]
            versions = self._versions[name]
            held = {t: versions.get(t, -1) for t in sorted(view.topics)}
            if view.error is not None or not held:
                await asyncio.sleep(self.period_s)
                continue
            grew = self._topics_grew[name]
            grew.clear()
            try:
                creds = self.calls.credentials
                auth = credentials_only(signed(long_poll_content(held), None, creds)) if creds else None
                self.calls.count("namesrv")
                poll = asyncio.ensure_future(asyncio.wait_for(
                    (await self.calls.namesrv(name)).listen_for_change.remote(held, self.long_poll_s, auth),
                    self.long_poll_s + CALL_TIMEOUT_S))
                woken = asyncio.ensure_future(grew.wait())
                try:
                    await asyncio.wait({poll, woken}, return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:
                    poll.cancel()
                    raise
                finally:
                    woken.cancel()
                if not poll.done():  # a new topic: hold it too (the NameServer drops the old wait at its timeout)
                    poll.cancel()
                    continue
                changes = poll.result()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.info("route long-poll on %s failed: %s", name, type(e).__name__)
                await asyncio.sleep(self.period_s)
                continue
            for topic, change in changes.items():
                versions[topic] = change.version
                if change.route is None:
                    view.routes.pop(topic, None)
                else:
                    view.routes[topic] = route_view(change.version, change.route)
            self._route_changes[name] = self._route_changes.get(name, 0) + len(changes)
            if changes:
                self._event(f"{name}: route of {', '.join(sorted(changes)[:5])}"
                            f"{' ...' if len(changes) > 5 else ''} changed")
                self.bump()
