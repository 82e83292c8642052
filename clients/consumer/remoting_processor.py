"""What a consumer answers when a broker calls it down its connection (RocketMQ's
ClientRemotingProcessor, the consumer's codes), on the connection's reader, never blocking it:

- NOTIFY_CONSUMER_IDS_CHANGED (a member joined or left): rebalance now;
- RESET_CONSUMER_CLIENT_OFFSET (`resetOffsetByTime` on a live group): jump to the offsets of the
  body, on a thread of its own;
- GET_CONSUMER_RUNNING_INFO: the consumer's runtime info (`running_info`, set by the consumer);
- CONSUME_MESSAGE_DIRECTLY: the listener once on the message of the body (`consume_directly`), on a
  thread of its own; a consumer without one says the group is not here, as RocketMQ's does;
- any other code: REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clients.impl.broker_connection import BrokerConnection
from namesrv.client.errors import RemotingError
from namesrv.client.offsets import offset_table_of
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.consume_directly import ConsumeMessageDirectlyResult
from namesrv.protocol.message.decoder import MessageExt, decode_messages
from namesrv.protocol.models import MessageQueue
from namesrv.protocol.running_info import ConsumerRunningInfo
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.wire_command import RemotingCommand

log = logging.getLogger(__name__)


class ClientRemotingProcessor:
    def __init__(self, group: str, client_id: str, members_changed: Callable[[], None],
                 reset_offsets: Callable[[str, dict[MessageQueue, int]], None]) -> None:
        self.group = group
        self.client_id = client_id
        self._members_changed = members_changed
        self._reset_offsets = reset_offsets
        self.running_info: Callable[[], ConsumerRunningInfo] | None = None
        """GET_CONSUMER_RUNNING_INFO's answer (the consumer sets it)."""
        self.consume_directly: Callable[[MessageExt, str], ConsumeMessageDirectlyResult] | None = None
        """CONSUME_MESSAGE_DIRECTLY's answer: the listener run once on (message, broker name) (a push
        consumer sets it once started; None answers as RocketMQ answers for a consumer that has none)."""

    def process_request(self, conn: BrokerConnection, request: RemotingCommand) -> None:
        """A broker's own request, on the connection's reader: hand it on, never block."""
        if request.code == BrokerRequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            log.info("%s: the broker %s says the members of %s changed", self.client_id, conn.address,
                     (request.ext_fields or {}).get("consumerGroup"))
            self._members_changed()
        elif request.code == BrokerRequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            ext = request.ext_fields or {}
            try:
                table = offset_table_of(request.body or b"")
            except ValueError as e:
                log.warning("RESET_CONSUMER_CLIENT_OFFSET from %s unreadable: %s", conn.address, e)
                return
            topic = str(ext.get("topic") or "")
            threading.Thread(target=self._reset_offsets, args=(topic, table), daemon=True).start()
            if not request.is_oneway:
                conn.answer(request, ResponseCode.SUCCESS)
        elif request.code == BrokerRequestCode.GET_CONSUMER_RUNNING_INFO and self.running_info is not None:
            body = fastjson.dumps(self.running_info().to_wire())
            conn.answer(request, ResponseCode.SUCCESS, None, body)
        elif request.code == BrokerRequestCode.CONSUME_MESSAGE_DIRECTLY:
            threading.Thread(target=self._consume_directly, args=(conn, request), name=f"{self.group}-direct",
                             daemon=True).start()
        elif not request.is_oneway:
            conn.answer(request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f"request code {request.code} not supported by this consumer")

    def _consume_directly(self, conn: BrokerConnection, request: RemotingCommand) -> None:
        """CONSUME_MESSAGE_DIRECTLY (ClientRemotingProcessor.consumeMessageDirectly): the listener once
        on the message of the body; a consumer with no listener for the group says the group is not here."""
        ext = request.ext_fields or {}
        group = str(ext.get("consumerGroup") or "")
        try:
            if group != self.group or self.consume_directly is None:
                conn.answer(request, ResponseCode.SYSTEM_ERROR,
                            f"The Consumer Group <{group}> not exist in this consumer")
                return
            try:
                [msg] = decode_messages(request.body or b"")
            except (InvalidInput, ValueError) as e:
                conn.answer(request, ResponseCode.SYSTEM_ERROR, f"the body is not one message: {e}")
                return
            result = self.consume_directly(msg, str(ext.get("brokerName") or ""))
            conn.answer(request, ResponseCode.SUCCESS, None, result.encode())
        except RemotingError as e:
            log.info("%s: answering CONSUME_MESSAGE_DIRECTLY on %s failed: %s", self.client_id, conn.address, e)
