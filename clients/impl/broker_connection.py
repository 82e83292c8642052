"""A client's own remoting connection to one broker (what RocketMQ's clients keep over Netty), shared
by every thread that sends on it: requests matched to their answers by opaque, whichever waiting
thread holds the read turn reading for all of them (a lone sync sender reads its own answer with no
thread hand-off); async requests read by a pump thread while any are outstanding. A connection made
with `on_request` also listens: its reader runs for as long as it is open, and every request the
broker sends on its own (NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET,
GET_CONSUMER_RUNNING_INFO, a pushed reply) is handed to `on_request`; one set later is called while
the connection is read anyway (`keep_reading`). Used by the producer's direct transport
(clients.impl.broker_tcp) and the consumers (clients.consumer.broker_api).
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable

from namesrv.client.errors import RemotingError
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import CURRENT_VERSION, ONEWAY_FLAG, FrameError, LanguageCode, RemotingCommand

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0


AnswerHandler = Callable[[RemotingCommand | None, BaseException | None], None]
"""An async request's completion: (answer, None), or (None, RemotingError) when none will come."""
SWEEP_S = 0.05
"""How often a reader looks for async requests past their deadline (and how long it blocks in one
read while any are outstanding)."""


class _Waiter:
    """A thread waiting for the answer to one request."""

    __slots__ = ("answer", "event")

    def __init__(self) -> None:
        self.answer: RemotingCommand | None = None
        self.event = threading.Event()
        """Set when its answer is in, the connection broke, or the read turn is free to take."""


class _Pending:
    """An async request: nobody waits for it; whoever reads hands its answer to `handler`."""

    __slots__ = ("deadline", "handler")

    def __init__(self, handler: AnswerHandler, deadline: float) -> None:
        self.handler = handler
        self.deadline = deadline


RequestHandler = Callable[["BrokerConnection", RemotingCommand], None]
"""What a client does with a request the broker sends on its own down the connection
(NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_RUNNING_INFO, ...): run on
the connection's reader, so it must hand the work on and return at once; it answers a request that
awaits one with `BrokerConnection.answer`."""
LISTEN_READ_S = 0.5
"""How long the reader of a listening connection blocks in one read while nothing is outstanding."""


class BrokerConnection:
    """One TCP connection to one broker, shared by every thread sending to it. With `on_request`,
    the connection also listens: a reader runs for as long as it is open (not only while async
    requests are outstanding), and every request the broker sends is handed to `on_request`."""

    def __init__(self, host: str, port: int, on_request: RequestHandler | None = None) -> None:
        self.address = f"{host}:{port}"
        self.on_request = on_request
        """Called (on the reading thread) with each request the broker sends on this connection;
        set later (not listening), it is called while the connection is read anyway (`keep_reading`)."""
        self._listening = on_request is not None
        try:
            self._sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise RemotingError(f"cannot connect to broker {self.address}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaques = itertools.count(1)
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        """Guards the waiters, the read turn and `broken`."""
        self._reading = False
        self._waiters: dict[int, _Waiter] = {}
        self._pending: dict[int, _Pending] = {}
        """Async requests by opaque (`invoke_async`)."""
        self._pump_running = False
        self._pump_wake = threading.Event()
        self._next_sweep = 0.0
        self._decoder = FrameDecoder()
        self.broken: str | None = None
        """Why the connection is unusable (None: it is fine); a broken one is replaced."""
        self._holds = itertools.count(-1, -1)
        """Keys of `keep_reading` holds among the async requests (negative: never an opaque)."""
        if self._listening:
            self._pump_running = True
            threading.Thread(target=self._pump, name=f"broker-{self.address}-listener", daemon=True).start()

    def close(self, reason: str = "closed") -> None:
        with self._lock:
            if self.broken is None:
                self.broken = reason
            for waiter in self._waiters.values():
                waiter.event.set()
            pending, self._pending = list(self._pending.values()), {}
            self._pump_wake.set()
        self._sock.close()
        lost = RemotingError(f"lost connection to broker {self.address}: {self.broken}")
        for p in pending:
            _call(p.handler, None, lost)

    def oneway(self, code: int, ext: dict[str, str], body: bytes) -> None:
        cmd = RemotingCommand(code, next(self._opaques), ONEWAY_FLAG, LanguageCode.PYTHON, CURRENT_VERSION, None, ext,
                              body)
        self._write(encode_command(cmd))

    def answer(self, request: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None) -> None:
        """Answer a request the broker sent (nothing for a oneway one; RemotingError: the
        connection is gone)."""
        if request.flag & ONEWAY_FLAG:
            return
        self._write(encode_command(RemotingCommand(code, request.opaque, 1, LanguageCode.PYTHON, CURRENT_VERSION,
                                                   remark, None, body)))

    def invoke(self, code: int, ext: dict[str, str], body: bytes, timeout_s: float) -> RemotingCommand:
        """Send one request and wait for its answer (RemotingError: none within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        opaque = next(self._opaques)
        frame = encode_command(RemotingCommand(code, opaque, 0, LanguageCode.PYTHON, CURRENT_VERSION, None, ext, body))
        waiter = _Waiter()
        with self._lock:
            self._waiters[opaque] = waiter
        try:
            self._write(frame)
            return self._await(waiter, deadline)
        finally:
            with self._lock:
                del self._waiters[opaque]  # an answer coming later finds no waiter: dropped

    def invoke_async(self, code: int, ext: dict[str, str], body: bytes, timeout_s: float,
                     handler: AnswerHandler) -> None:
        """Send one request and return at once; `handler` runs exactly once, with the answer or a
        RemotingError (none within `timeout_s`, or the connection lost), on whichever thread reads
        the connection then: a sync sender holding the read turn, or this connection's reader
        thread, started while async requests are outstanding. Raises RemotingError when the request
        could not be written (then `handler` is never called)."""
        opaque = next(self._opaques)
        frame = encode_command(RemotingCommand(code, opaque, 0, LanguageCode.PYTHON, CURRENT_VERSION, None, ext, body))
        with self._lock:
            if self.broken is not None:
                raise RemotingError(f"connection to broker {self.address} is closed: {self.broken}")
            self._pending[opaque] = _Pending(handler, time.monotonic() + timeout_s)
            start = not self._pump_running
            self._pump_running = True
        if start:
            threading.Thread(target=self._pump, name=f"broker-{self.address}-reader", daemon=True).start()
        try:
            self._write(frame)
        except RemotingError:
            with self._lock:
                self._pending.pop(opaque, None)
            raise

    def keep_reading(self, timeout_s: float) -> Callable[[], None]:
        """Read this connection for up to `timeout_s` even with no answer outstanding, so a request
        the broker sends (a pushed reply) reaches `on_request`; the returned call stops it sooner."""
        key = next(self._holds)
        with self._lock:
            if self.broken is not None:
                raise RemotingError(f"connection to broker {self.address} is closed: {self.broken}")
            self._pending[key] = _Pending(lambda answer, error: None, time.monotonic() + timeout_s)
            start = not self._pump_running
            self._pump_running = True
        if start:
            threading.Thread(target=self._pump, name=f"broker-{self.address}-reader", daemon=True).start()

        def release() -> None:
            with self._lock:
                self._pending.pop(key, None)
        return release

    def _pump(self) -> None:
        """The reader of async answers: takes the read turn whenever nobody holds it and reads
        until no async request is outstanding (then it ends; the next `invoke_async` starts another),
        or, on a listening connection, until the connection closes."""
        listening = self._listening
        while True:
            with self._lock:
                if (not self._pending and not listening) or self.broken is not None:
                    self._pump_running = False
                    return
                read = not self._reading
                if read:
                    self._reading = True
                else:
                    self._pump_wake.clear()
            if not read:  # a sync sender reads for everyone; it wakes this thread when it is done
                self._pump_wake.wait(SWEEP_S)
                self._sweep()
                continue
            try:
                if listening:
                    self._read_until(lambda: False, time.monotonic() + (SWEEP_S if self._pending else LISTEN_READ_S))
                else:
                    self._read_until(lambda: not self._pending, time.monotonic() + SWEEP_S)
            except RemotingError:
                pass  # the connection is closed: close() failed every outstanding request
            finally:
                self._hand_over(None)

    def _sweep(self) -> None:
        """Fail the async requests past their deadline (at most every SWEEP_S)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_S
        with self._lock:
            late = [o for o, p in self._pending.items() if p.deadline <= now]
            expired = [self._pending.pop(o) for o in late]
        for p in expired:  # an answer coming later finds no request: dropped
            _call(p.handler, None, RemotingError(f"broker {self.address} did not answer in time"))

    def _hand_over(self, waiter: _Waiter | None) -> None:
        """Give the read turn up: to one sync waiter still without its answer, else to the
        async reader."""
        with self._lock:
            self._reading = False
            for other in self._waiters.values():
                if other is not waiter and other.answer is None:
                    other.event.set()
                    return
            if self._pending:
                self._pump_wake.set()

    def _write(self, frame: bytes) -> None:
        if self.broken is not None:
            raise RemotingError(f"connection to broker {self.address} is closed: {self.broken}")
        try:
            with self._write_lock:
                self._sock.sendall(frame)
        except OSError as e:
            self.close(f"write failed: {e}")
            raise RemotingError(f"lost connection to broker {self.address}: {e}") from None

    def _await(self, waiter: _Waiter, deadline: float) -> RemotingCommand:
        while True:
            with self._lock:
                if waiter.answer is not None:
                    return waiter.answer
                if self.broken is not None:
                    raise RemotingError(f"lost connection to broker {self.address}: {self.broken}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemotingError(f"broker {self.address} did not answer in time")
                read = not self._reading
                if read:
                    self._reading = True  # this thread reads for every waiter until its own answer is in
                else:
                    waiter.event.clear()
            if not read:
                waiter.event.wait(remaining)
                continue
            try:
                self._read_until(lambda: waiter.answer is not None, deadline)
            finally:
                self._hand_over(waiter)

    def _read_until(self, done: Callable[[], bool], deadline: float) -> None:
        """Read answers (handing each to its waiter or async handler) until `done()` or time is up."""
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._pending:
                self._sweep()
                remaining = min(remaining, SWEEP_S)
            try:
                self._sock.settimeout(remaining)
                data = self._sock.recv(1 << 16)
            except TimeoutError:
                return
            except OSError as e:
                self.close(f"read failed: {e}")
                raise RemotingError(f"lost connection to broker {self.address}: {e}") from None
            if not data:
                self.close("closed by the broker")
                raise RemotingError(f"broker {self.address} closed the connection")
            try:
                commands = self._decoder.feed(data)
            except FrameError as e:
                self.close(f"bad frame: {e}")
                raise RemotingError(f"broker {self.address} sent a bad frame: {e}") from None
            answered: list[tuple[_Pending, RemotingCommand]] = []
            requests: list[RemotingCommand] = []
            with self._lock:
                for cmd in commands:
                    if not cmd.is_response:
                        requests.append(cmd)
                        continue
                    other = self._waiters.get(cmd.opaque)
                    if other is not None:
                        other.answer = cmd
                        other.event.set()
                    elif (pending := self._pending.pop(cmd.opaque, None)) is not None:
                        answered.append((pending, cmd))
                    # else a late answer nobody awaits any more: dropped
            for pending, cmd in answered:
                _call(pending.handler, cmd, None)
            for cmd in requests:
                self._serve(cmd)

    def _serve(self, request: RemotingCommand) -> None:
        """A request from the broker: to `on_request`, else answered as not supported."""
        try:
            if self.on_request is not None:
                self.on_request(self, request)
            else:
                self.answer(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"request type {request.code} not supported")
        except Exception:  # a handler's bug must not stop the reader of every other answer
            log.exception("a request (code %d) from broker %s could not be served", request.code, self.address)


def _call(handler: AnswerHandler, answer: RemotingCommand | None, error: BaseException | None) -> None:
    try:
        handler(answer, error)
    except Exception:  # a handler's bug must not stop the reader of every other answer
        log.exception("an async answer's handler failed")


