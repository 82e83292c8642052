"""A consumer's remoting calls to brokers (RocketMQ's MQClientAPIImpl, the consumer's part), over
one listening connection per broker (`clients.impl.broker_connection.BrokerConnection`): what the broker
sends down it on its own (NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET) goes to
`on_request`.

Consumers need brokers with a TCP address in their routes (RocketMQ's consumers speak TCP): a broker
whose route address is an actor name is refused with MQClientError. One error convention: a broker's
error code raises MQBrokerError, no answer (or no connection) raises RemotingError.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from clients.impl.broker_connection import AnswerHandler, BrokerConnection, RequestHandler
from namesrv.acl.plain_acl import SessionCredentials, signature
from namesrv.client.errors import MQBrokerError, MQClientError
from namesrv.client.offsets import OffsetNotFound
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.models import MessageQueue
from namesrv.remoting.config import host_port
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 3.0
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
"""PullSysFlag's bits."""


class ConsumerBrokerApi:
    """The calls, each to one broker address; connections opened on first use and replaced when broken."""

    def __init__(self, client_id: str, on_request: RequestHandler, credentials: SessionCredentials | None = None,
                 timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.client_id = client_id
        self.on_request = on_request
        self.credentials = credentials
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._connections: dict[str, BrokerConnection] = {}

    def close(self) -> None:
        with self._lock:
            conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            conn.close("consumer shut down")

    def connection(self, addr: str) -> BrokerConnection:
        where = host_port(addr)
        if where is None:
            raise MQClientError(f"broker {addr} has no TCP address: consumers reach brokers over RocketMQ's protocol "
                                "(deploy brokers with a client port)")
        with self._lock:
            conn = self._connections.get(addr)
            if conn is not None and conn.broken is None:
                return conn
        fresh = BrokerConnection(*where, on_request=self.on_request)
        with self._lock:
            conn = self._connections.get(addr)
            if conn is not None and conn.broken is None:
                fresh.close("not needed")
                return conn
            self._connections[addr] = fresh
            return fresh

    def _signed(self, ext: dict[str, Any], body: bytes | None) -> dict[str, str]:
        ext = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in ext.items() if v is not None}
        auth = signature(ext, body, self.credentials)
        return ext | auth if auth else ext

    def invoke(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None,
               timeout_s: float | None = None) -> RemotingCommand:
        """One request, its answer whatever its code (RemotingError: none)."""
        return self.connection(addr).invoke(code, self._signed(ext, body), body or b"", timeout_s or self.timeout_s)

    def _ok(self, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None,
            timeout_s: float | None = None) -> RemotingCommand:
        answer = self.invoke(addr, code, ext, body, timeout_s)
        if answer.code != ResponseCode.SUCCESS:
            raise MQBrokerError(answer.code, answer.remark, addr)
        return answer

    # ------------------------------------------------------------------ membership
    def heartbeat(self, addr: str, consumer_data: list[dict[str, Any]]) -> None:
        body = json.dumps({"clientID": self.client_id, "producerDataSet": [],
                           "consumerDataSet": consumer_data}).encode()
        self._ok(addr, BrokerRequestCode.HEART_BEAT, {}, body)

    def unregister(self, addr: str, group: str) -> None:
        self._ok(addr, BrokerRequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "consumerGroup": group})

    def consumer_id_list(self, addr: str, group: str) -> list[str]:
        answer = self._ok(addr, BrokerRequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        ids = fastjson.loads(answer.body or b"{}").get("consumerIdList") or []
        return [str(i) for i in ids]

    # ------------------------------------------------------------------ offsets
    def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int:
        answer = self.invoke(addr, BrokerRequestCode.QUERY_CONSUMER_OFFSET,
                             {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id,
                              "setZeroIfNotFound": False})
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            raise OffsetNotFound(f"{group} has no offset on {mq}")
        if answer.code != ResponseCode.SUCCESS:
            raise MQBrokerError(answer.code, answer.remark, addr)
        return int((answer.ext_fields or {})["offset"])

    def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        self._ok(addr, BrokerRequestCode.UPDATE_CONSUMER_OFFSET,
                 {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset})

    def _offset(self, addr: str, code: int, ext: dict[str, Any]) -> int:
        return int((self._ok(addr, code, ext).ext_fields or {})["offset"])

    def max_offset(self, addr: str, mq: MessageQueue) -> int:
        return self._offset(addr, BrokerRequestCode.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})

    def min_offset(self, addr: str, mq: MessageQueue) -> int:
        return self._offset(addr, BrokerRequestCode.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})

    def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._offset(addr, BrokerRequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                            {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": timestamp_ms})

    # ------------------------------------------------------------------ messages
    def pull_async(self, addr: str, header: dict[str, Any], timeout_s: float, handler: AnswerHandler) -> None:
        """PULL_MESSAGE without waiting: `handler` gets the answer or the error (RemotingError when
        it could not even be written: then the handler is not called)."""
        self.connection(addr).invoke_async(BrokerRequestCode.PULL_MESSAGE, self._signed(header, None), b"",
                                           timeout_s, handler)

    def send_back(self, addr: str, group: str, commit_log_offset: int, delay_level: int, origin_msg_id: str,
                  origin_topic: str, max_reconsume_times: int) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker puts the message into the group's retry topic (or DLQ)."""
        self._ok(addr, BrokerRequestCode.CONSUMER_SEND_MSG_BACK,
                 {"offset": commit_log_offset, "group": group, "delayLevel": delay_level, "originMsgId": origin_msg_id,
                  "originTopic": origin_topic, "unitMode": False, "maxReconsumeTimes": max_reconsume_times})

    # ------------------------------------------------------------------ orderly locks
    def lock_batch(self, addr: str, group: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        body = json.dumps({"consumerGroup": group, "clientId": self.client_id,
                           "mqSet": [mq.to_wire() for mq in mqs]}).encode()
        answer = self._ok(addr, BrokerRequestCode.LOCK_BATCH_MQ, {}, body)
        return {MessageQueue.from_wire(d) for d in fastjson.loads(answer.body or b"{}").get("lockOKMQSet") or []}

    def unlock_batch(self, addr: str, group: str, mqs: list[MessageQueue]) -> None:
        body = json.dumps({"consumerGroup": group, "clientId": self.client_id,
                           "mqSet": [mq.to_wire() for mq in mqs]}).encode()
        self._ok(addr, BrokerRequestCode.UNLOCK_BATCH_MQ, {}, body)
