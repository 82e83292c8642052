"""What a broker sends its clients on its own (RocketMQ's Broker2Client) over their own connections:
oneway, NOTIFY_CONSUMER_IDS_CHANGED to a consumer group's members and CHECK_TRANSACTION_STATE to a
producer of a half message's group (it answers END_TRANSACTION); and, awaiting the client's answer
(callClient), the requests the admin codes hand on to a client (GET_CONSUMER_RUNNING_INFO)."""

from __future__ import annotations

import itertools
import logging

from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.transaction.service import PGROUP, as_checked, check_back_header
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.protocol.constants import TRANS_CHECK_MAX_TIME_TOPIC
from namesrv.protocol.message.codec import encode_message_ext, offset_msg_id
from namesrv.protocol.models import TopicConfig
from namesrv.remoting.codec import encode_command
from namesrv.remoting.connection import Connection
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import ONEWAY_FLAG, RemotingCommand

log = logging.getLogger(__name__)


class Broker2Client:
    def __init__(self, identity: BrokerIdentity, remoting: RemotingServer, processor: BrokerProcessor) -> None:
        self.identity = identity
        self.remoting = remoting
        self.processor = processor
        self._opaque = itertools.count(1)

    def _open(self, token: str) -> Connection | None:
        conn = self.remoting.connection(token)
        if conn is None or conn.transport is None or conn.transport.is_closing():
            return None
        return conn

    def _send(self, conn: Connection, cmd: RemotingCommand) -> None:
        if conn.transport is not None:
            conn.transport.write(encode_command(cmd))

    async def call_client(self, token: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send the client on connection `token` a request and await its answer without blocking
        the loop (ClientCallError: not connected or its connection closed; ClientCallTimeout)."""
        return await self.remoting.invoke(token, request, timeout_s)

    def notify_consumer_ids_changed(self, group: str, channels: list[str]) -> None:
        """Tell the group's members to rebalance now."""
        for token in channels:
            conn = self._open(token)
            if conn is not None:
                self._send(conn, RemotingCommand(BrokerRequestCode.NOTIFY_CONSUMER_IDS_CHANGED, next(self._opaque),
                                                 ONEWAY_FLAG, ext_fields={"consumerGroup": group}))

    def reset_offsets(self, requests: list[tuple[str, RemotingCommand]]) -> int:
        """RESET_CONSUMER_CLIENT_OFFSET to each member (oneway, Broker2Client.resetOffset); a member
        without a TCP connection here (a Ray-native consumer) is not told: it reads the offsets the
        broker committed. Returns how many were told."""
        told = 0
        for token, request in requests:
            conn = self._open(token)
            if conn is not None:
                request.opaque, request.flag = next(self._opaque), ONEWAY_FLAG
                self._send(conn, request)
                told += 1
        return told

    async def check_transactions(self) -> None:
        """Ask a producer of its group about every half unresolved too long; drop (and log) one
        checked transactionCheckMax times (TransactionalMessageCheckService)."""
        txn = self.processor.context.transactions
        to_check, to_drop = await txn.scan_for_check()
        for half in to_drop:
            log.warning("transaction %s of %s dropped into %s: unresolved after %d check-backs", half.msg_id,
                        half.properties.get(PGROUP), TRANS_CHECK_MAX_TIME_TOPIC, txn.check_max)
            self._check_max_time_topic()
            await self.processor.store.put(txn.discard_copy(half))
            await self.processor.store.put(txn.op_record(half.queue_offset))
            txn.state.resolve(half.queue_offset)
            txn.discarded += 1
        addr = self.identity.broker_addr
        for half in to_check:
            channels = self.processor.context.producers.channels_of(half.properties.get(PGROUP, ""))
            conn = next((c for p in channels if (c := self._open(p.channel)) is not None), None)
            if conn is None:  # none over TCP: a Ray-native producer asks for it (BrokerActor.check_transactions)
                continue
            txn.checked(half.queue_offset)
            header = check_back_header(half, self.identity.broker_name, offset_msg_id(addr, half.commit_log_offset))
            self._send(conn, RemotingCommand(BrokerRequestCode.CHECK_TRANSACTION_STATE, next(self._opaque),
                                             ONEWAY_FLAG, ext_fields=header,
                                             body=encode_message_ext(as_checked(half), addr)))

    def _check_max_time_topic(self) -> None:
        """TRANS_CHECK_MAX_TIME_TOPIC exists once a half is discarded into it (as RocketMQ creates it)."""
        topics = self.processor.context.topics
        if TRANS_CHECK_MAX_TIME_TOPIC not in topics.topic_config_table:
            topics.update_topic_config(TopicConfig(topic_name=TRANS_CHECK_MAX_TIME_TOPIC, read_queue_nums=1,
                                                   write_queue_nums=1))
