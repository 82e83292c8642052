"""Direct sends: a Ray-native producer's own remoting connection to each broker it learned from a
route (what RocketMQ's clients do over Netty), instead of one Ray actor call per message.

Ray stays how brokers are found, deployed and watched: the route still comes from the NameServer
actors (pushed by their long-poll), and a broker whose route address is not a TCP `host:port` (one
started without a client port) is still sent to by actor call (`RayBrokerTransport`). What goes
over the connection is SEND_MESSAGE with the header and signature a broker's Ray `send_message`
builds (`ray_send_ext`), so both ways store the same message and pass the same ACL.

A sync send costs one request frame and one answer on an open connection, where an actor call costs
Ray's task submission, serialisation and reply (~1-2 ms on a 2-core machine; `bench_clients`).
Requests from many threads share one connection per broker, matched to their answers by opaque:
whichever waiting thread holds the read turn reads for all of them, so a lone sync sender reads its
own answer with no thread hand-off.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable

from clients.impl.client_instance import RayBrokerTransport
from namesrv.acl.plain_acl import signature
from namesrv.client.errors import MQBrokerError, RemotingError
from namesrv.client.message import Message
from namesrv.client.send_async import AnswerCallback
from namesrv.client.send_result import SendResult
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from namesrv.protocol.message.codec import ray_send_ext
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.codec import encode_command
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import ONEWAY_FLAG, FrameError, LanguageCode, RemotingCommand

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
CLIENT_VERSION = 479
"""MQVersion V5_3_3, as the NameServer answers with."""


def tcp_address(addr: str) -> tuple[str, int] | None:
    """`host:port` of a route's broker address; None for a name that is no TCP address."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


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
        self._on_request = on_request
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
        if on_request is not None:
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
        cmd = RemotingCommand(code, next(self._opaques), ONEWAY_FLAG, LanguageCode.PYTHON, CLIENT_VERSION, None, ext,
                              body)
        self._write(encode_command(cmd))

    def answer(self, request: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None) -> None:
        """Answer a request the broker sent (RemotingError: the connection is gone)."""
        self._write(encode_command(RemotingCommand(code, request.opaque, 1, LanguageCode.PYTHON, CLIENT_VERSION,
                                                   remark, None, body)))

    def invoke(self, code: int, ext: dict[str, str], body: bytes, timeout_s: float) -> RemotingCommand:
        """Send one request and wait for its answer (RemotingError: none within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        opaque = next(self._opaques)
        frame = encode_command(RemotingCommand(code, opaque, 0, LanguageCode.PYTHON, CLIENT_VERSION, None, ext, body))
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
        frame = encode_command(RemotingCommand(code, opaque, 0, LanguageCode.PYTHON, CLIENT_VERSION, None, ext, body))
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

    def _pump(self) -> None:
        """The reader of async answers: takes the read turn whenever nobody holds it and reads
        until no async request is outstanding (then it ends; the next `invoke_async` starts another),
        or, on a listening connection, until the connection closes."""
        listening = self._on_request is not None
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
        """Hand a broker's own request to `on_request` (dropped, as before, without one)."""
        if self._on_request is None:
            log.debug("broker %s sent request code %d: nobody listens", self.address, request.code)
            return
        try:
            self._on_request(self, request)
        except Exception:  # a handler's bug must not stop the reader of every answer
            log.exception("handling request code %d from broker %s failed", request.code, self.address)


def _call(handler: AnswerHandler, answer: RemotingCommand | None, error: BaseException | None) -> None:
    try:
        handler(answer, error)
    except Exception:  # a handler's bug must not stop the reader of every other answer
        log.exception("an async answer's handler failed")


def _send_result(answer: RemotingCommand, broker_addr: str, mq: MessageQueue, msg_id: str) -> SendResult:
    """The SendResult of SEND_MESSAGE's answer (MQBrokerError for an error code or a bad answer)."""
    if answer.code != ResponseCode.SUCCESS:
        raise MQBrokerError(answer.code, answer.remark or "", mq.broker_name)
    f = answer.ext_fields or {}
    try:
        return SendResult("SEND_OK", msg_id, f["msgId"], MessageQueue(mq.topic, mq.broker_name, int(f["queueId"])),
                          int(f["queueOffset"]))
    except (KeyError, ValueError) as e:
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"broker {broker_addr} answered without {e}",
                            mq.broker_name) from None


class DirectBrokerTransport:
    """The send engine's transport: SEND_MESSAGE over a connection of its own to each broker with a
    TCP address in the route, an actor call (`fallback`) to any other."""

    def __init__(self, fallback: RayBrokerTransport, producer_group: str) -> None:
        self.fallback = fallback
        self.credentials = fallback.credentials
        self.producer_group = producer_group
        self._lock = threading.Lock()
        self._connections: dict[str, BrokerConnection] = {}

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close("producer shut down")

    def _connection(self, addr: str, host: str, port: int) -> BrokerConnection:
        with self._lock:
            conn = self._connections.get(addr)
            if conn is not None and conn.broken is None:
                return conn
        fresh = BrokerConnection(host, port)  # outside the lock: a slow connect holds up no other broker
        with self._lock:
            conn = self._connections.get(addr)
            if conn is not None and conn.broken is None:
                fresh.close("not needed")
                return conn
            self._connections[addr] = fresh
            return fresh

    def _request(self, mq: MessageQueue, msg: Message, msg_id: str,
                 default_topic: str | None) -> tuple[dict[str, str], bytes]:
        ext = ray_send_ext(mq.topic, mq.queue_id, msg.wire_properties(), msg_id,
                           default_topic if default_topic is not None else AUTO_CREATE_TOPIC_KEY_TOPIC)
        ext["producerGroup"] = self.producer_group
        body = bytes(msg.body)
        auth = signature(ext, body, self.credentials)
        return (ext | auth if auth else ext), body

    def send(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
             default_topic: str | None) -> SendResult:
        where = tcp_address(broker_addr)
        if where is None:
            return self.fallback.send(broker_addr, mq, msg, msg_id, timeout_ms, default_topic)
        ext, body = self._request(mq, msg, msg_id, default_topic)
        conn = self._connection(broker_addr, *where)
        answer = conn.invoke(BrokerRequestCode.SEND_MESSAGE, ext, body, max(timeout_ms, 1) / 1000)
        return _send_result(answer, broker_addr, mq, msg_id)

    def send_async(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
                   default_topic: str | None, callback: AnswerCallback) -> bool:
        """SEND_MESSAGE written on the broker's connection without waiting (`invoke_async`): the
        callback gets the SendResult, or the MQBrokerError / RemotingError of the attempt. False
        for a broker with no TCP address (the engine sends to it blocking, by actor call)."""
        where = tcp_address(broker_addr)
        if where is None:
            return False
        ext, body = self._request(mq, msg, msg_id, default_topic)
        conn = self._connection(broker_addr, *where)

        def answered(answer: RemotingCommand | None, error: BaseException | None) -> None:
            if answer is None:
                callback(None, error)
                return
            try:
                result = _send_result(answer, broker_addr, mq, msg_id)
            except MQBrokerError as e:
                callback(None, e)
                return
            callback(result, None)

        conn.invoke_async(BrokerRequestCode.SEND_MESSAGE, ext, body, max(timeout_ms, 1) / 1000, answered)
        return True

    def send_oneway(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str) -> None:
        where = tcp_address(broker_addr)
        if where is None:
            self.fallback.send_oneway(broker_addr, mq, msg, msg_id)
            return
        ext, body = self._request(mq, msg, msg_id, None)
        self._connection(broker_addr, *where).oneway(BrokerRequestCode.SEND_MESSAGE, ext, body)
