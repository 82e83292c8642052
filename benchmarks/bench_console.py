"""What a console page costs to render from the collector's state, small cluster vs large: the
topic list, the consumer-group list and the NameServers page (its divergence check walks every
topic of every NameServer), each a full page (data, live part and document) as the console serves
it. In process, no Ray, no server asked: the state is built as the collector would hold it.

Side by side in one run: 100 topics x 10 groups against 10,000 topics x 1,000 groups (issue 37's
scale, where rocketmq-dashboard asks the brokers per topic and per group on every view).

    python benchmarks/bench_console.py [--topics 10000] [--groups 1000] [--quick]
"""

from __future__ import annotations

import argparse
import time

from _common import print_machine, ratio_table

from actors.console.collector import Collector
from actors.console.model import (
    BrokerEntry,
    BrokerView,
    ConsoleState,
    GroupView,
    NamesrvView,
    QueueOffset,
    QueueRoute,
    RouteView,
)
from actors.console.web import PAGES, ConsoleApp

BROKERS = ("broker-a", "broker-b", "broker-c")
PAGE_TEMPLATES = {"topics": "topics.j2", "groups": "groups.j2", "namesrvs": "namesrvs.j2"}


def build_state(topics: int, groups: int) -> ConsoleState:
    names = [f"Topic{i:06d}" for i in range(topics)]
    route = RouteView(1, tuple(QueueRoute(b, 8, 8, 6) for b in BROKERS),
                      tuple((b, ((0, f"127.0.0.1:{10911 + 10 * i}"),)) for i, b in enumerate(BROKERS)))
    entries = [BrokerEntry("DefaultCluster", b, 0, f"127.0.0.1:{10911 + 10 * i}", 100, topics, True)
               for i, b in enumerate(BROKERS)]
    state = ConsoleState()
    for ns in ("namesrv-0", "namesrv-1"):
        state.namesrvs[ns] = NamesrvView(ns, ready=True, brokers=list(entries), topics=set(names),
                                         routes=dict.fromkeys(names, route))
    for i, b in enumerate(BROKERS):
        addr = f"127.0.0.1:{10911 + 10 * i}"
        state.brokers[addr] = BrokerView(addr, f"{b}-0", "DefaultCluster", b, 0, role="ASYNC_MASTER",
                                         queues={(t, q): 100 for t in names for q in range(2)})
    for g in range(groups):
        topic = names[g % topics]
        offsets = [QueueOffset(topic, b, q, 100, 90, f"client-{g}") for b in BROKERS for q in range(4)]
        state.groups[f"Group{g:05d}"] = GroupView(f"Group{g:05d}", members=[f"client-{g}"], offsets=offsets)
        state.record(state.lag_history, f"Group{g:05d}", 120)
    return state


def render_ms(app: ConsoleApp, page: str, rounds: int) -> float:
    """The median time of one full page render (the page's data, its live part, the document)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        data = PAGES[page][1](app.collector.state, {})
        app.render(PAGE_TEMPLATES[page], data | {"page": page, "events_url": f"/events?page={page}",
                                                 "live_html": app.live(page, {}, data)})
        app.collector.state.derived.clear()  # as after a collector tick: nothing derived is reused
        times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2] * 1000


def measure(topics: int, groups: int, rounds: int) -> dict[str, float]:
    app = ConsoleApp(Collector("bench", ["namesrv-0", "namesrv-1"]))
    started = time.perf_counter()
    app.collector.state = build_state(topics, groups)
    built = time.perf_counter() - started
    out = {page: render_ms(app, page, rounds) for page in PAGE_TEMPLATES}
    out["state_build_s"] = built
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2,000 topics x 200 groups, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.groups, args.rounds = 2_000, 200, 3
    print_machine()
    small = measure(100, 10, args.rounds)
    large = measure(args.topics, args.groups, args.rounds)
    print(ratio_table([
        ("topic list page (ms)", small["topics"], large["topics"]),
        ("consumer-group list page (ms)", small["groups"], large["groups"]),
        ("NameServers page with divergence check (ms)", small["namesrvs"], large["namesrvs"]),
    ], "100 topics x 10 groups", f"{args.topics:,} topics x {args.groups:,} groups"))
    print(f"(the state itself, built once as the collector holds it: {large['state_build_s']:.2f} s; "
          "no server is asked per view)")


if __name__ == "__main__":
    main()
