"""Direct sends: a Ray-native producer's own remoting connection to each broker it learned from a
route (what RocketMQ's clients do over Netty), instead of one Ray actor call per message.

Ray stays how brokers are found, deployed and watched: the route still comes from the NameServer
actors (pushed by their long-poll), and a broker whose route address is not a TCP `host:port` (one
started without a client port) is still sent to by actor call (`RayBrokerTransport`). What goes
over the connection is SEND_MESSAGE with the header and signature a broker's Ray `send_message`
builds (`ray_send_ext`), so both ways store the same message and pass the same ACL; a body of at
least `compressMsgBodyOverHowmuch` bytes goes deflated (namesrv.protocol.message.compression; an
actor-call send is not compressed), a batch as one SEND_BATCH_MESSAGE (namesrv.client.batch). The
producer heartbeats each broker it sends to (its group, for mqadmin producerConnection).

A sync send costs one request frame and one answer on an open connection, where an actor call costs
Ray's task submission, serialisation and reply (~1-2 ms on a 2-core machine; `bench_clients`).
Requests from many threads share one connection per broker, matched to their answers by opaque:
whichever waiting thread holds the read turn reads for all of them, so a lone sync sender reads its
own answer with no thread hand-off.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future

from clients.impl.client_instance import RayBrokerTransport
from namesrv.acl.plain_acl import signature
from namesrv.client.batch import MessageBatch
from namesrv.client.errors import MQBrokerError, RemotingError
from namesrv.client.message import Message
from namesrv.client.reply import MSG_TYPE, REPLY_MESSAGE_FLAG
from namesrv.client.send_async import AnswerCallback
from namesrv.client.send_result import SendResult
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from namesrv.protocol.message.codec import ray_send_ext
from namesrv.protocol.message.compression import COMPRESS_MSG_BODY_OVER_HOWMUCH, compress_body, uncompressed_body
from namesrv.protocol.message.properties import string_to_properties
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import ONEWAY_FLAG, FrameError, LanguageCode, RemotingCommand

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
CLIENT_VERSION = 479
"""MQVersion V5_3_3, as the NameServer answers with."""
HEARTBEAT_INTERVAL_S = 30.0
"""RocketMQ's heartbeatBrokerInterval (30 s)."""


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
        cmd = RemotingCommand(code, next(self._opaques), ONEWAY_FLAG, LanguageCode.PYTHON, CLIENT_VERSION, None, ext,
                              body)
        self._write(encode_command(cmd))

    def answer(self, request: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None) -> None:
        """Answer a request the broker sent (nothing for a oneway one; RemotingError: the
        connection is gone)."""
        if request.flag & ONEWAY_FLAG:
            return
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


def _send_result(answer: RemotingCommand | RemotingResponse, broker_addr: str, mq: MessageQueue,
                 msg_id: str) -> SendResult:
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

    def __init__(self, fallback: RayBrokerTransport, producer_group: str, client_id: str = "",
                 compress_over: int = COMPRESS_MSG_BODY_OVER_HOWMUCH) -> None:
        self.fallback = fallback
        self.credentials = fallback.credentials
        self.producer_group = producer_group
        self.client_id = client_id
        """Sent in the producer's HEART_BEAT (none when empty)."""
        self.compress_over = compress_over
        """Bodies of at least this many bytes are sent deflated (compressMsgBodyOverHowmuch)."""
        self._lock = threading.Lock()
        self._connections: dict[str, BrokerConnection] = {}
        self._heard: dict[str, float] = {}
        """Broker address -> when this producer last sent it a heartbeat (monotonic s)."""
        _TRANSPORTS.add(self)

    def close(self) -> None:
        _TRANSPORTS.discard(self)
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close("producer shut down")

    def _connection(self, addr: str, host: str, port: int) -> BrokerConnection:
        conn = self._open_connection(addr, host, port)
        if self._heartbeat_due(addr):
            self._heartbeat(addr, conn)
        return conn

    def _open_connection(self, addr: str, host: str, port: int) -> BrokerConnection:
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
            fresh.on_request = self._broker_request
            self._connections[addr] = fresh
            self._heard.pop(addr, None)  # a new connection: the broker knows this producer on it once told
            return fresh

    # ------------------------------------------------------------------ request-reply
    def keep_reading(self, timeout_s: float) -> Callable[[], None]:
        """Read every open connection of this transport for up to `timeout_s` (the returned call
        stops it sooner): a pushed reply arrives on whichever connection the broker picked."""
        with self._lock:
            connections = [c for c in self._connections.values() if c.broken is None]
        releases = []
        for conn in connections:
            try:
                releases.append(conn.keep_reading(timeout_s))
            except RemotingError:  # closed meanwhile: nothing comes on it
                continue

        def release() -> None:
            for r in releases:
                r()
        return release

    def _broker_request(self, conn: BrokerConnection, request: RemotingCommand) -> None:
        """PUSH_REPLY_MESSAGE_TO_CLIENT (ClientRemotingProcessor.receiveReplyMessage): the reply
        completes its request's future and is answered SUCCESS; anything else is not supported."""
        if request.code != BrokerRequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            conn.answer(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported")
            return
        ext = request.ext_fields or {}
        props = string_to_properties(ext.get("properties"))
        try:
            body = uncompressed_body(request.body or b"", int(ext.get("sysFlag", "0") or 0))
        except (InvalidInput, ValueError) as e:
            conn.answer(request, ResponseCode.SYSTEM_ERROR, f"reply body: {e}")
            return
        reply = Message(ext.get("topic", ""), body, props.get("TAGS"), props.get("KEYS"), props)
        if not REQUESTS.complete(props.get("CORRELATION_ID", ""), reply):
            log.warning("a reply for no request waiting here (correlation id %s)", props.get("CORRELATION_ID"))
        conn.answer(request, ResponseCode.SUCCESS)


    def _heartbeat_due(self, addr: str) -> bool:
        """A connection's first use, then at most every HEARTBEAT_INTERVAL_S of sending."""
        if not self.client_id:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._heard.get(addr, -HEARTBEAT_INTERVAL_S) < HEARTBEAT_INTERVAL_S:
                return False
            self._heard[addr] = now
            return True

    def _heartbeat(self, addr: str, conn: BrokerConnection) -> None:
        """HEART_BEAT (oneway) with this producer's group, as RocketMQ's producers register with
        each broker: mqadmin producerConnection lists them, and a broker forgets a producer silent
        for 120 s (this one sends only while it sends messages)."""
        body = json.dumps({"clientID": self.client_id, "producerDataSet": [{"groupName": self.producer_group}],
                           "consumerDataSet": []}).encode()
        auth = signature({}, body, self.credentials)
        try:
            conn.oneway(BrokerRequestCode.HEART_BEAT, auth or {}, body)
        except RemotingError as e:  # the send that follows meets the same broken connection
            log.debug("heartbeat to %s not sent: %s", addr, e)

    def _request(self, mq: MessageQueue, msg: Message, msg_id: str,
                 default_topic: str | None) -> tuple[int, dict[str, str], bytes]:
        """(request code, header, body) of one send: SEND_BATCH_MESSAGE for a batch (its messages
        carry their own ids; never compressed, as RocketMQ's client), else SEND_MESSAGE with a body
        deflated when it is large enough (the sysFlag says so)."""
        batch = isinstance(msg, MessageBatch)
        ext = ray_send_ext(mq.topic, mq.queue_id, msg.wire_properties(), None if batch else msg_id,
                           default_topic if default_topic is not None else AUTO_CREATE_TOPIC_KEY_TOPIC)
        ext["producerGroup"] = self.producer_group
        if batch:
            code, body = BrokerRequestCode.SEND_BATCH_MESSAGE, bytes(msg.body)
            ext["batch"] = "true"
        else:
            body, sys_flag = compress_body(bytes(msg.body), self.compress_over)
            code, ext["sysFlag"] = BrokerRequestCode.SEND_MESSAGE, str(sys_flag)
            if msg.properties.get(MSG_TYPE) == REPLY_MESSAGE_FLAG:  # a responder's reply (MessageUtil)
                code = BrokerRequestCode.SEND_REPLY_MESSAGE
        auth = signature(ext, body, self.credentials)
        return code, (ext | auth if auth else ext), body

    def _send_by_actor(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
                       default_topic: str | None) -> SendResult:
        """A batch to a broker with no TCP address: the same request through its actor's pipeline."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        from namesrv.remoting.command import RemotingRequest

        code, ext, body = self._request(mq, msg, msg_id, default_topic)
        handle = self.fallback.handle(self.fallback.actor_of(mq.broker_name, broker_addr))
        try:
            answer = ray.get(handle.process.remote(RemotingRequest(code, ext, body)), timeout=max(timeout_ms, 1) / 1000)
        except (GetTimeoutError, RayActorError) as e:
            raise RemotingError(f"broker {broker_addr}: {type(e).__name__}") from None
        return _send_result(answer, broker_addr, mq, msg_id)

    def send(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
             default_topic: str | None) -> SendResult:
        where = tcp_address(broker_addr)
        if where is None:
            if isinstance(msg, MessageBatch):
                return self._send_by_actor(broker_addr, mq, msg, msg_id, timeout_ms, default_topic)
            return self.fallback.send(broker_addr, mq, msg, msg_id, timeout_ms, default_topic)
        code, ext, body = self._request(mq, msg, msg_id, default_topic)
        conn = self._connection(broker_addr, *where)
        answer = conn.invoke(code, ext, body, max(timeout_ms, 1) / 1000)
        return _send_result(answer, broker_addr, mq, msg_id)

    def send_async(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str, timeout_ms: int,
                   default_topic: str | None, callback: AnswerCallback) -> bool:
        """SEND_MESSAGE written on the broker's connection without waiting (`invoke_async`): the
        callback gets the SendResult, or the MQBrokerError / RemotingError of the attempt. False
        for a broker with no TCP address (the engine sends to it blocking, by actor call)."""
        where = tcp_address(broker_addr)
        if where is None:
            return False
        code, ext, body = self._request(mq, msg, msg_id, default_topic)
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

        conn.invoke_async(code, ext, body, max(timeout_ms, 1) / 1000, answered)
        return True

    def send_oneway(self, broker_addr: str, mq: MessageQueue, msg: Message, msg_id: str) -> None:
        where = tcp_address(broker_addr)
        if where is None:
            self.fallback.send_oneway(broker_addr, mq, msg, msg_id)
            return
        code, ext, body = self._request(mq, msg, msg_id, None)
        self._connection(broker_addr, *where).oneway(code, ext, body)


class RequestFutureHolder:
    """The process's requests waiting for their reply, by correlation id (RocketMQ's
    RequestFutureHolder, a singleton: the producers of one process share one client id, so the
    broker pushes a reply down whichever of their connections it finds; any of them completes it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Message]] = {}

    def expect(self, correlation_id: str) -> Future[Message]:
        future: Future[Message] = Future()
        with self._lock:
            self._futures[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        with self._lock:
            self._futures.pop(correlation_id, None)

    def complete(self, correlation_id: str, reply: Message) -> bool:
        with self._lock:
            future = self._futures.pop(correlation_id, None)
        if future is None or future.done():
            return False
        future.set_result(reply)
        return True

    @staticmethod
    def keep_reading(timeout_s: float) -> Callable[[], None]:
        """Read every open broker connection of every producer of this process for up to `timeout_s`."""
        releases = [t.keep_reading(timeout_s) for t in list(_TRANSPORTS)]

        def release() -> None:
            for r in releases:
                r()
        return release


REQUESTS = RequestFutureHolder()
_TRANSPORTS: weakref.WeakSet[DirectBrokerTransport] = weakref.WeakSet()
"""Every direct transport of this process (a reply may come down any of their connections)."""
