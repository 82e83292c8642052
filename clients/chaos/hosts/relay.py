"""A delaying TCP relay (issue 36, item 3): latency for the test bed, whose kernel has no `netem`.

    python -m clients.chaos.hosts.relay --forward 0=10.78.0.3:9876 --delay-ms 50 [--reply-delay-ms 0]
                                        [--jitter-ms 5 --seed 1] [--buffer-kib 4096] [--bind ADDR]

Each `--forward LISTEN=HOST:PORT` listens on LISTEN (0: a free port the kernel picks) and relays every
connection it accepts to HOST:PORT, both ways. Each chunk read is held before it is written on:
`--delay-ms` towards HOST:PORT, `--reply-delay-ms` on the way back (the same unless given, so a round
trip takes at least twice the delay; 0 one way makes a one-way delay), each hold ± a jitter drawn
from `random.Random(seed)` and never below 0. A chunk is never written before the one read before
it in the same direction (a jittered hold is raised to its predecessor's), so order is kept. A
connection's end travels as a chunk does: a FIN read one side is a FIN written the other side, as
late as the data before it; a reset or a failed write on either side aborts both.

Backpressure: each direction holds at most `--buffer-kib` (plus one read of 64 KiB); past it the
relay stops reading that side, and the kernel's window tells the sender to wait. So memory is
bounded, and a direction's throughput is at most the buffer over its delay.

Once every listener is bound, the relay prints one line, `ready LISTEN=HOST:PORT ...` with the ports
it got (`parse_ready`), and nothing else on stdout. On SIGTERM or SIGINT it stops accepting, stops
reading, writes what it holds at once, closes every connection (a FIN to both ends; an abort past
`STOP_GRACE_S`) and exits 0.

What it cannot delay: the TCP handshake (the relay's kernel answers the SYN at once; the first
bytes are the first thing held), and the connection to HOST:PORT, made when a client's is accepted
(refused there: the client's connection is reset, not refused). Only the standard library: it starts
in a fraction of a second inside a host's namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import random
import signal
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger("relay")

CHUNK = 64 * 1024
"""The most one read takes from a socket (one held chunk)."""
STOP_GRACE_S = 2.0
"""After SIGTERM, how long the held bytes may take to go out before every connection is aborted."""


@dataclass(frozen=True)
class Forward:
    """Listen on `listen` (0: any free port), relay to `host`:`port`."""

    listen: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listen}={self.host}:{self.port}"


def _port(text: str, what: str, allow_zero: bool) -> int:
    if not text.isdigit() or not (0 if allow_zero else 1) <= int(text) <= 65535:
        raise ValueError(f"{what} must be a port {'0' if allow_zero else '1'}..65535, got {text!r}")
    return int(text)


def parse_forward(text: str) -> Forward:
    """`LISTEN=HOST:PORT` (e.g. `0=127.0.0.1:9876`); ValueError saying what is wrong."""
    listen, eq, target = text.partition("=")
    host, colon, port = target.rpartition(":")
    if not eq or not colon or not host:
        raise ValueError(f"a forward is LISTEN=HOST:PORT (e.g. 0=127.0.0.1:9876), got {text!r}")
    return Forward(_port(listen, "the listening port", True), host, _port(port, "the target port", False))


def format_ready(forwards: Sequence[Forward]) -> str:
    return "ready " + " ".join(map(str, forwards))


def parse_ready(line: str) -> list[Forward]:
    """The forwards a relay's ready line names, with the ports it listens on."""
    words = line.split()
    if not words or words[0] != "ready":
        raise ValueError(f"not a relay's ready line: {line!r}")
    return [parse_forward(w) for w in words[1:]]


@dataclass(frozen=True)
class Holds:
    """How long each chunk is held, in ms: `delay_ms` towards the target, `reply_delay_ms` back,
    each ± a jitter up to `jitter_ms` (never below 0) drawn from `random.Random(seed)`."""

    delay_ms: float
    reply_delay_ms: float
    jitter_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "reply_delay_ms", "jitter_ms"):
            value = getattr(self, name)
            if not value >= 0:  # also NaN
                raise ValueError(f"{name} must be 0 or more, got {value!r}")

    def drawer(self) -> Callable[[float], float]:
        """A function from a direction's delay to one chunk's hold in seconds (seeded)."""
        rng = random.Random(self.seed)
        jitter = self.jitter_ms

        def hold_s(base_ms: float) -> float:
            return max(0.0, base_ms + (rng.uniform(-jitter, jitter) if jitter else 0.0)) / 1000.0
        return hold_s


class Line:
    """One direction's held chunks, (due time, bytes) first in first out, bounded by bytes: `put`
    waits while `limit` bytes are held (so a chunk may take it to at most `limit` + one chunk). An
    empty chunk is the end of the stream; None, put by `stop`, the relay's stop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[tuple[float, bytes | None]] = deque()
        self._bytes = 0
        self._changed = asyncio.Condition()

    @property
    def held(self) -> int:
        return self._bytes

    async def put(self, due: float, chunk: bytes) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._bytes < self.limit)
            self._items.append((due, chunk))
            self._bytes += len(chunk)
            self._changed.notify_all()

    async def get(self) -> tuple[float, bytes | None]:
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._items))
            due, chunk = self._items.popleft()
            self._bytes -= len(chunk or b"")
            self._changed.notify_all()
            return due, chunk

    async def stop(self) -> None:
        """Put the stop mark behind what is held, whatever the limit."""
        async with self._changed:
            self._items.append((0.0, None))
            self._changed.notify_all()


async def _read(reader: asyncio.StreamReader, line: Line, hold_s: Callable[[], float]) -> None:
    """Read chunks into `line`, each due its hold after it was read (never before the one before);
    the end of the stream goes in as an empty chunk."""
    loop = asyncio.get_running_loop()
    last_due = 0.0
    while True:
        chunk = await reader.read(CHUNK)
        last_due = max(loop.time() + hold_s(), last_due)
        await line.put(last_due, chunk)
        if not chunk:
            return


async def _write(line: Line, writer: asyncio.StreamWriter, hurry: asyncio.Event) -> None:
    """Write each chunk of `line` when it is due (at once once `hurry` is set); an empty chunk
    half-closes `writer` (a FIN), the stop mark ends without one."""
    loop = asyncio.get_running_loop()
    while True:
        due, chunk = await line.get()
        if chunk is None:
            return
        wait = due - loop.time()
        if wait > 0 and not hurry.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hurry.wait(), wait)
        if not chunk:
            if writer.can_write_eof():
                writer.write_eof()
            return
        writer.write(chunk)
        await writer.drain()


class Connection:
    """One relayed connection: a client's, accepted, and the relay's own to the target."""

    def __init__(self, relay: Relay, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self.relay = relay
        self.client, self.server = client, server
        limit = relay.buffer_bytes
        self.up, self.down = Line(limit), Line(limit)
        self._readers: list[asyncio.Task[None]] = []
        self.task = asyncio.current_task()
        """The task relaying it (the listener's callback's)."""

    async def run(self) -> None:
        """Relay until both directions have ended (then close both sides) or one side fails (then
        abort both)."""
        relay, holds = self.relay, self.relay.holds
        failed: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                self._readers = [
                    tg.create_task(_read(self.client[0], self.up, lambda: relay.hold_s(holds.delay_ms))),
                    tg.create_task(_read(self.server[0], self.down, lambda: relay.hold_s(holds.reply_delay_ms))),
                ]
                tg.create_task(_write(self.up, self.server[1], relay.hurry))
                tg.create_task(_write(self.down, self.client[1], relay.hurry))
        except* OSError as group:  # a reset, a refused write
            failed = group.exceptions[0]
        if failed is not None:
            log.debug("connection failed: %s", failed)
            self.abort()
        else:
            await self.close()

    async def stop(self) -> None:
        """Read no more; what is held goes out (the relay's `hurry`), then `run` closes both sides."""
        for task in self._readers:
            task.cancel()
        await self.up.stop()
        await self.down.stop()

    async def close(self) -> None:
        for _, writer in (self.server, self.client):
            writer.close()
        for _, writer in (self.server, self.client):
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def abort(self) -> None:
        for _, writer in (self.server, self.client):
            writer.transport.abort()


class Relay:
    """Listeners for the forwards, the connections they accepted, and how it all stops."""

    def __init__(self, forwards: Sequence[Forward], holds: Holds, buffer_bytes: int, bind: str = "0.0.0.0") -> None:
        if buffer_bytes < 1:
            raise ValueError(f"the buffer must hold at least 1 byte, got {buffer_bytes}")
        self.forwards = list(forwards)
        self.holds = holds
        self.hold_s = holds.drawer()
        self.buffer_bytes = buffer_bytes
        self.bind = bind
        self.hurry = asyncio.Event()
        self.connections: set[Connection] = set()
        self._servers: list[asyncio.Server] = []
        self._stopped = asyncio.Event()

    async def start(self) -> list[Forward]:
        """Bind every listener; the forwards with the ports they got."""
        bound = []
        for f in self.forwards:
            server = await asyncio.start_server(functools.partial(self._accept, forward=f), self.bind, f.listen)
            self._servers.append(server)
            bound.append(Forward(server.sockets[0].getsockname()[1], f.host, f.port))
        return bound

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, forward: Forward) -> None:
        if self._stopped.is_set():
            writer.transport.abort()
            return
        try:
            server = await asyncio.open_connection(forward.host, forward.port)
        except OSError as e:
            log.debug("cannot reach %s:%d: %s", forward.host, forward.port, e)
            writer.transport.abort()
            return
        conn = Connection(self, (reader, writer), server)
        self.connections.add(conn)
        try:
            await conn.run()
        except BaseException:  # cancelled at the exit, or a bug: no socket left open
            conn.abort()
            raise
        finally:
            self.connections.discard(conn)

    def stop(self) -> None:
        """Stop accepting and reading; held bytes go out at once (see `serve`)."""
        self._stopped.set()
        self.hurry.set()

    async def serve(self, ready: Callable[[list[Forward]], None]) -> None:
        """Start, tell `ready`, relay until `stop()`, then close every connection (held bytes written
        first, within STOP_GRACE_S; past it, aborted)."""
        ready(await self.start())
        await self._stopped.wait()
        for server in self._servers:
            server.close()
        conns = list(self.connections)
        for conn in conns:
            await conn.stop()
        runs = [c.task for c in conns if c.task is not None]
        if runs:
            await asyncio.wait(runs, timeout=STOP_GRACE_S)
        for conn in list(self.connections):
            conn.abort()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m clients.chaos.hosts.relay", description=__doc__.split("\n")[0])
    p.add_argument("--forward", action="append", required=True, type=_arg(parse_forward),
                   help="LISTEN=HOST:PORT (LISTEN 0: any free port); repeat for more ports")
    p.add_argument("--delay-ms", type=_arg(_ms), required=True, help="hold towards HOST:PORT")
    p.add_argument("--reply-delay-ms", type=_arg(_ms), default=None, help="hold back (default: --delay-ms)")
    p.add_argument("--jitter-ms", type=_arg(_ms), default=0.0, help="± this much on each hold, seeded")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--buffer-kib", type=int, default=4096, help="held per direction at most")
    p.add_argument("--bind", default="0.0.0.0", help="the listeners' address")
    p.add_argument("--verbose", action="store_true", help="log each connection's failure on stderr")
    return p.parse_args(argv)


def _ms(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError(f"a delay is 0 ms or more, got {text!r}")
    return value


def _arg(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse type whose ValueError message is what the user sees."""
    def convert(text: str) -> object:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert


async def _main(args: argparse.Namespace) -> None:
    holds = Holds(args.delay_ms, args.delay_ms if args.reply_delay_ms is None else args.reply_delay_ms,
                  args.jitter_ms, args.seed)
    relay = Relay(args.forward, holds, args.buffer_kib * 1024, args.bind)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, relay.stop)
    await relay.serve(lambda bound: print(format_ready(bound), flush=True))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="relay %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
