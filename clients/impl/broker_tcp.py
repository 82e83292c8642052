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
Requests from many threads share one connection per broker (clients.impl.broker_connection).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future

from clients.impl.broker_connection import BrokerConnection
from clients.impl.client_instance import RayBrokerTransport
from namesrv.acl.plain_acl import signature
from namesrv.client.batch import MessageBatch
from namesrv.client.errors import MQBrokerError, RemotingError
from namesrv.client.message import Message
from namesrv.client.reply import MSG_TYPE, REPLY_MESSAGE_FLAG
from namesrv.client.send_async import AnswerCallback
from namesrv.client.send_result import SendResult
from namesrv.protocol.broker_headers import SendMessageRequestHeader
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from namesrv.protocol.message.codec import ray_send_ext
from namesrv.protocol.message.compression import COMPRESS_MSG_BODY_OVER_HOWMUCH, compress_body, uncompressed_body
from namesrv.protocol.message.properties import string_to_properties
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingResponse
from namesrv.remoting.config import host_port
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 30.0
"""RocketMQ's heartbeatBrokerInterval (30 s)."""


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
                 compress_over: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
                 heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
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
        self.heartbeat_interval_s = heartbeat_interval_s
        self._stopped = threading.Event()
        self._heartbeats: threading.Thread | None = None
        _TRANSPORTS.add(self)

    def start_heartbeats(self) -> None:
        """Heartbeat every broker this producer has a connection to, every `heartbeat_interval_s`,
        also while it sends nothing (MQClientInstance's sendHeartbeatToAllBroker): an idle producer
        stays in the brokers' producer tables (mqadmin producerConnection, transaction check-backs)."""
        if self.client_id and self._heartbeats is None:
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                name=f"{self.client_id}-{self.producer_group}-heartbeat")
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(self.heartbeat_interval_s):
            with self._lock:
                connections = [(addr, c) for addr, c in self._connections.items() if c.broken is None]
            for addr, conn in connections:
                if self._heartbeat_due(addr):
                    self._heartbeat(addr, conn)

    def close(self) -> None:
        _TRANSPORTS.discard(self)
        self._stopped.set()
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
        """A connection's first use, then at most once per heartbeat interval."""
        if not self.client_id:
            return False
        now, interval = time.monotonic(), self.heartbeat_interval_s
        with self._lock:
            if now - self._heard.get(addr, -interval) < interval:
                return False
            self._heard[addr] = now
            return True

    def _heartbeat(self, addr: str, conn: BrokerConnection) -> None:
        """HEART_BEAT (oneway) with this producer's group, as RocketMQ's producers register with
        each broker: mqadmin producerConnection lists them, and a broker forgets a producer silent
        for 120 s (`start_heartbeats` keeps an idle one known)."""
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
        if batch:  # with SendMessageRequestHeaderV2's letters, as RocketMQ's clients: its brokers read no other
            code, body = BrokerRequestCode.SEND_BATCH_MESSAGE, bytes(msg.body)
            ext["batch"] = "true"
            ext = SendMessageRequestHeader.to_v2(ext)
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
        where = host_port(broker_addr)
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
        where = host_port(broker_addr)
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
        where = host_port(broker_addr)
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
