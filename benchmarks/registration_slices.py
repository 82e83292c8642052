"""Where a NameServer's event loop spends a registration, slice by slice (bench_registration's
diagnosis, run in the benchmark's own process).

The same code the NameServer actor runs on its loop for a REGISTER_BROKER over TCP, driven here
step by step with a clock around each piece that holds the loop: the frame decode (as the
transport delivers 64 KiB reads), every slice of the sliced registration (`NamesrvController._steps`
advanced once, named by the function it paused in), the `after_change` between slices, the request's
completion (`NamesrvRequests.done`: metrics, gc.freeze) and the answer's encoding; then the first (uncached) and a
cached route query of a topic every broker hosts. Each piece is timed as wall time and as this
thread's CPU time (`time.thread_time`), so a machine busy with other work shows as wall >> CPU,
not as cost. Garbage collections in between are timed through `gc.callbacks`.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from actors.namesrv.lifecycle import NamesrvController
from namesrv.protocol.codes import RequestCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import to_request
from namesrv.remoting.frame_decoder import FrameDecoder, decode_frame
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.remoting.wire_command import LanguageCode, RemotingCommand
from namesrv.routeinfo.config import NamesrvConfig

READ_SIZE = 64 * 1024


@dataclass
class Piece:
    """One kind of work that holds the loop: how often, total and worst wall/CPU ms."""

    count: int = 0
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    max_wall_ms: float = 0.0
    max_cpu_ms: float = 0.0

    def add(self, wall_s: float, cpu_s: float) -> None:
        self.count += 1
        self.wall_ms += wall_s * 1000
        self.cpu_ms += cpu_s * 1000
        self.max_wall_ms = max(self.max_wall_ms, wall_s * 1000)
        self.max_cpu_ms = max(self.max_cpu_ms, cpu_s * 1000)


@dataclass
class Profile:
    pieces: dict[str, Piece] = field(default_factory=lambda: collections.defaultdict(Piece))
    gc: dict[int, Piece] = field(default_factory=lambda: collections.defaultdict(Piece))

    def timed(self, label: str, fn: Any, *args: Any) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        out = fn(*args)
        self.pieces[label].add(time.perf_counter() - w, time.thread_time() - c)
        return out


class GcTimer:
    """Times every garbage collection (by generation) while installed."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.started: tuple[float, float] | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = (time.perf_counter(), time.thread_time())
        elif self.started is not None:
            w, c = self.started
            self.profile.gc[int(info["generation"])].add(time.perf_counter() - w, time.thread_time() - c)
            self.started = None


def _paused_in(steps: Any) -> str:
    """The innermost generator function a sliced request is paused in (where its slice ended)."""
    frame_of = steps
    name = "?"
    while frame_of is not None:
        frame = getattr(frame_of, "gi_frame", None)
        if frame is None:
            break
        name = frame.f_code.co_name
        frame_of = getattr(frame_of, "gi_yieldfrom", None)
    return name


def _chunks(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), READ_SIZE):
        yield data[i : i + READ_SIZE]


def register_once(controller: NamesrvController, profile: Profile, frame: bytes, token: str) -> None:
    """One registration as the actor's loop runs it, each loop-holding piece timed."""
    decoder = FrameDecoder()
    cmds: list[RemotingCommand] = []
    for chunk in _chunks(frame):
        cmds += profile.timed("frame read + decode (per 64 KiB read)", decoder.feed, chunk)
    (cmd,) = cmds
    request = profile.timed("to_request", to_request, cmd)
    steps = controller.processor.process_steps(request, token)
    while True:
        w, c = time.perf_counter(), time.thread_time()
        try:
            next(steps)
        except StopIteration as done:
            profile.pieces["slice: last (finish, answer)"].add(time.perf_counter() - w, time.thread_time() - c)
            response = done.value
            break
        profile.pieces[f"slice: paused in {_paused_in(steps)}"].add(time.perf_counter() - w, time.thread_time() - c)
        profile.timed("after_change between slices", controller.after_change)
    assert response.ok, response.remark
    profile.timed("done (gc.freeze, after_change)", controller.requests.done, request, token, response)
    profile.timed("answer encode", controller.wire.encode, cmd, response)


def route_query(controller: NamesrvController, profile: Profile, topic: str, label: str) -> None:
    cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, 0, LanguageCode.JAVA, 479, None, {"topic": topic})

    def answer() -> RemotingCommand:
        answer = controller.pipeline.handle_command(cmd, RequestContext("", "127.0.0.1:2"))
        if isinstance(answer, tuple):  # a route answer leaves the TCP pipeline as its encoded frame
            head, body = answer
            answer = decode_frame((head + body)[4:])
        assert isinstance(answer, RemotingCommand)
        return answer

    out = profile.timed(label, answer)
    assert out.code == 0, out.remark


@dataclass
class LoopTurns:
    """Loop turns seen by a probe task while registrations ran concurrently through `process_async`."""

    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0


async def _probe(turns: LoopTurns, done: asyncio.Event) -> None:
    """Yield to the loop and time how long until it comes back: one full turn of everyone else's work
    (what a route query read in that turn waits at most)."""
    clock, cpu = time.perf_counter, time.thread_time
    while not done.is_set():
        w, c = clock(), cpu()
        await asyncio.sleep(0)
        turns.wall_ms.append((clock() - w) * 1000)
        turns.cpu_ms.append((cpu() - c) * 1000)


async def _concurrent(controller: NamesrvController, cmds: list[RemotingCommand]) -> LoopTurns:
    turns, done = LoopTurns(), asyncio.Event()
    probe = asyncio.create_task(_probe(turns, done))
    await asyncio.sleep(0)
    started = time.perf_counter()
    answers = await asyncio.gather(*(resolve(controller.pipeline.handle(
        to_request(c), RequestContext(f"conn-{c.opaque}", "127.0.0.1:1"))) for c in cmds))
    turns.seconds = time.perf_counter() - started
    done.set()
    await probe
    assert all(a.ok for a in answers), [a.remark for a in answers if not a.ok][:3]
    return turns


def concurrent_loop_turns(brokers: int, bodies: dict[str, bytes], header: Any) -> dict[str, LoopTurns]:
    """Every broker's registration started at once on one loop (as the actor gets them over TCP,
    SLICED_IN_FLIGHT processed at a time), per phase ({phase: body}); the loop turns a probe saw."""

    async def run() -> dict[str, LoopTurns]:
        config = NamesrvConfig(snapshot_interval_ms=0, not_ready_window_ms=0,
                               broker_channel_expired_time_ms=3_600_000)
        controller = NamesrvController("turns", config, None)
        out = {}
        for phase, body in bodies.items():
            cmds = [RemotingCommand(RequestCode.REGISTER_BROKER, i + 1, 0, LanguageCode.JAVA, 479, None,
                                    header(i, body), body) for i in range(brokers)]
            out[phase] = await _concurrent(controller, cmds)
        return out

    frozen = gc.get_freeze_count()
    try:
        return asyncio.run(run())
    finally:
        gc.unfreeze()
        if frozen:
            gc.freeze()


def profile_registrations(brokers: int, bodies: dict[str, bytes], header: Any, topic: str) -> dict[str, Profile]:
    """Register `brokers` brokers with each body in turn ({phase: body}), in this process, through
    an actor's controller; {phase: Profile}. `header(i)` gives broker i's ext fields for a body."""
    return asyncio.run(_profile(brokers, bodies, header, topic))


async def _profile(brokers: int, bodies: dict[str, bytes], header: Any, topic: str) -> dict[str, Profile]:
    config = NamesrvConfig(snapshot_interval_ms=0, not_ready_window_ms=0, broker_channel_expired_time_ms=3_600_000)
    controller = NamesrvController("profile", config, None)
    out: dict[str, Profile] = {}
    frozen = gc.get_freeze_count()
    for phase, body in bodies.items():
        profile = out[phase] = Profile()
        timer = GcTimer(profile)
        gc.callbacks.append(timer)
        try:
            for i in range(brokers):
                cmd = RemotingCommand(RequestCode.REGISTER_BROKER, i + 1, 0, LanguageCode.JAVA, 479, None,
                                      header(i, body), body)
                register_once(controller, profile, encode_command(cmd), f"conn-{i}")
            route_query(controller, profile, topic, f"route query, {brokers} brokers, first after the phase")
            route_query(controller, profile, topic, f"route query, {brokers} brokers, cached answer")
        finally:
            gc.callbacks.remove(timer)
    del controller
    gc.unfreeze()  # what the controller froze (this process is not a NameServer)
    if frozen:
        gc.freeze()
    return out
