"""What open console pages cost the servers, and how fast a route change reaches them (a local Ray:
2 NameServers, 2 brokers, fast profile, the deployment's console).

    bash run.sh bench bench_console_live            # 10 s windows, 5 route changes
    bash run.sh bench bench_console_live --quick    # 3 s windows, 2 route changes (a smoke run)

1. Load, side by side in one run: the requests the console makes of the NameServers and brokers
   per second (its collector counts every one, by origin) over a window with no page open, then
   over the same window with --pages pages open (each loaded once, then its server-sent events
   stream held: topics, cluster, NameServers, groups and producers pages, round robin).
2. Time to first render of each page (a full GET, on the warm collector).
3. A route change reaching the open pages, twice per round: a topic is created (2 queues on each
   broker), then given 3; from the moment every NameServer answers the new route (polled every
   5 ms) to the moment each open topics page's event stream carries it (negative when a page saw it
   before the poll did). A new topic joins the collector's route long-poll with its next topic list
   (once a second); a changed route comes by the long-poll.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import aiohttp
import ray
from _common import local_ray_run, pct_ms, ratio_table

from actors.deployment.launcher import Deployment, deploy
from actors.deployment.spec import BrokerSpec, ClusterSpec
from clients.admin.client import AdminClient
from namesrv.protocol.codes import ResponseCode

PAGES = ("topics", "cluster", "namesrvs", "groups", "producers")
PREFIX = "LiveBench"


def console_calls(dep: Deployment) -> dict[str, int]:
    stats = ray.get(dep.console.stats.remote(), timeout=60)
    return {**stats["calls"], **{f"by {k}": v for k, v in stats["by_origin"].items()}}


async def calls_per_s(dep: Deployment, window_s: float) -> dict[str, float]:
    before = await asyncio.to_thread(console_calls, dep)
    t0 = time.monotonic()
    await asyncio.sleep(window_s)
    after = await asyncio.to_thread(console_calls, dep)
    wall = time.monotonic() - t0
    return {k: (after[k] - before[k]) / wall for k in after}


class Stream:
    """One open page: its event stream, each event's arrival time and text kept."""

    def __init__(self, session: aiohttp.ClientSession, url: str, page: str) -> None:
        self.session, self.url, self.page = session, url, page
        self.events: list[tuple[float, str]] = []
        self.task: asyncio.Task[None] | None = None

    def query(self) -> str:
        return f"events?page={self.page}" + (f"&q={PREFIX}" if self.page == "topics" else "")

    async def run(self) -> None:
        async with self.session.get(self.url + self.query(), timeout=aiohttp.ClientTimeout(total=None)) as resp:
            data: list[str] = []
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("data: "):
                    data.append(line[6:])
                elif not line and data:
                    self.events.append((time.monotonic(), "\n".join(data)))
                    data = []

    def seen_at(self, row: str) -> float | None:
        """When an event first carried `row` (the text of a topics-page row, as rendered)."""
        return next((t for t, text in self.events if row in text), None)


def route_everywhere(dep: Deployment, topic: str, queues: int) -> bool:
    """Whether every NameServer answers `topic`'s route with `queues` read and write queues on each broker."""
    for handle in dep.namesrvs.values():
        resp = ray.get(handle.get_routeinfo_by_topic.remote(topic=topic), timeout=60)
        if resp.code != ResponseCode.SUCCESS or any(
                (q.read_queue_nums, q.write_queue_nums) != (queues, queues) for q in resp.payload.queue_datas):
            return False
    return True


def row_text(topic: str, queues: int) -> str:
    """What the topics page shows of `topic` once its route has `queues` on both brokers."""
    return ", ".join(f"broker-{b} r{queues}/w{queues} perm 6" for b in "ab")


async def route_change(dep: Deployment, streams: list[Stream], admin: AdminClient, topic: str,
                       queues: int) -> list[float]:
    """Give `topic` `queues` queues on each broker (creating it); per open topics page, seconds from
    every NameServer answering the new route to the page's event stream carrying it."""
    await asyncio.to_thread(lambda: admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues))
    while not await asyncio.to_thread(route_everywhere, dep, topic, queues):
        await asyncio.sleep(0.005)
    applied = time.monotonic()
    watchers, row = [s for s in streams if s.page == "topics"], row_text(topic, queues)
    deadline = applied + 30
    while time.monotonic() < deadline and any(s.seen_at(row) is None for s in watchers):
        await asyncio.sleep(0.005)
    seen = [s.seen_at(row) for s in watchers]
    if any(t is None for t in seen):
        raise RuntimeError(f"{topic} with {queues} queues did not reach every open topics page in 30 s")
    return [t - applied for t in seen if t is not None]


async def measure(dep: Deployment, pages: int, window_s: float, changes: int) -> dict[str, Any]:
    url = dep.console_url or ""
    idle = await calls_per_s(dep, window_s)
    admin = AdminClient(dep)
    async with aiohttp.ClientSession() as session:
        first_render: dict[str, float] = {}
        for page in PAGES:
            t0 = time.monotonic()
            async with session.get(url + page) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{page}: HTTP {resp.status}")
            first_render[page] = time.monotonic() - t0
        streams = [Stream(session, url, PAGES[i % len(PAGES)]) for i in range(pages)]
        for s in streams:
            s.task = asyncio.create_task(s.run())
        try:
            while any(not s.events for s in streams):  # every page has its first live part
                await asyncio.sleep(0.01)
            open_ = await calls_per_s(dep, window_s)
            created: list[float] = []
            changed: list[float] = []
            for _ in range(changes):
                topic = f"{PREFIX}{uuid.uuid4().hex[:8]}"
                created.extend(await route_change(dep, streams, admin, topic, 2))
                changed.extend(await route_change(dep, streams, admin, topic, 3))
        finally:
            for s in streams:
                if s.task is not None:
                    s.task.cancel()
            await asyncio.gather(*(s.task for s in streams if s.task is not None), return_exceptions=True)
    return {"idle": idle, "open": open_, "first_render": first_render, "created": created, "changed": changed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 s windows and 2 route changes (a smoke run)")
    ap.add_argument("--pages", type=int, default=10, help="pages held open at once")
    ap.add_argument("--window", type=float, help="seconds each load window lasts (default 10, --quick 3)")
    ap.add_argument("--changes", type=int, help="topics created while the pages are open (default 5, --quick 2)")
    args = ap.parse_args(argv)
    window = args.window or (3.0 if args.quick else 10.0)
    changes = args.changes or (2 if args.quick else 5)

    with local_ray_run("bench-console-live") as run:
        dep = deploy(ClusterSpec(
            namesrv_count=2, brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b")], profile="fast",
            namespace=run.namespace, data_dir=os.path.join(run.data_dir, "cluster"), console=True,
            namesrv_port=None, broker_port=None,  # Ray only, as the console asks: no TCP port to collide with
        ))
        run.deployments.append(dep)
        print(f"\n== 2 NameServers, brokers broker-a and broker-b (fast profile), console {dep.console_url}; "
              f"{window:g} s with no page open, then {args.pages} pages open ({', '.join(PAGES)}, round robin: "
              f"each loaded, then its event stream held) for {window:g} s, then {changes} topics created, each then "
              "given 3 queues a broker", flush=True)
        got = asyncio.run(measure(dep, args.pages, window, changes))

        idle, open_ = got["idle"], got["open"]
        print()
        print(ratio_table([(f"console requests/s, {k}", idle[k], open_[k]) for k in idle],
                          "no page open", f"{args.pages} pages open", digits=2))
        print("\n== time to first render (full page, warm collector)")
        for page, s in got["first_render"].items():
            print(f"  {page:<10} {s * 1000:8.1f} ms")
        print("\n== a route change reaching the open topics pages, after every NameServer answered the new route")
        for what in ("created", "changed"):
            d = got[what]
            print(f"  topic {what:<8} {len(d)} deliveries, p50 {pct_ms(d, 0.5):6.0f} ms, max {max(d) * 1000:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
