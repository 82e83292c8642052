"""RocketMQ's EndTransactionProcessor: END_TRANSACTION (37), a producer committing or rolling back a
half message (namesrv.broker.transaction.service), on its own or answering a check-back. Oneway on the
wire: the answer is for Ray callers and tests. Adding a transaction code means writing its handler
here and adding one line to `handlers`."""

from __future__ import annotations

import asyncio
import logging

from namesrv.broker.context import BrokerContext
from namesrv.broker.role import DEPOSED_REMARK, FLUSH_SLAVE_TIMEOUT_REMARK
from namesrv.broker.schedule import delivery as schedule
from namesrv.broker.transaction.service import COMMIT_TYPE, ROLLBACK_TYPE, TransactionError, committed
from namesrv.protocol.broker_headers import EndTransactionRequestHeader, request_header
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import Answer, Handler, RequestContext

log = logging.getLogger(__name__)


class EndTransactionProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.ending: set[int] = set()
        """Halves whose END_TRANSACTION is being applied (a second one waits its turn, then no-ops)."""
        self.handlers: dict[int, Handler] = {BrokerRequestCode.END_TRANSACTION: self.end_transaction}

    def end_transaction(self, cmd: RemotingRequest, client: RequestContext) -> Answer:
        h = request_header(cmd, EndTransactionRequestHeader)
        self.ctx.guard.check_send()  # a slave writes nothing of its own (RocketMQ refuses it there too)
        if h.commit_or_rollback not in (COMMIT_TYPE, ROLLBACK_TYPE):  # still unknown: nothing to do yet
            log.info("producer %s: transaction %s still unknown%s", client.remote, h.transaction_id,
                     " (check-back)" if h.from_transaction_check else "")
            return cmd.response(ResponseCode.SUCCESS)
        return self._end(cmd, h)

    async def _end(self, cmd: RemotingRequest, h: EndTransactionRequestHeader) -> RemotingResponse:
        ctx = self.ctx
        txn = ctx.transactions
        try:
            half = await asyncio.to_thread(txn.find_half, h.producer_group, h.tran_state_table_offset,
                                           h.commit_log_offset)
        except TransactionError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        offset = half.queue_offset
        txn.catch_up()  # a promoted slave: the decisions its old master made came with the log
        if txn.state.is_resolved(offset) or offset in self.ending:
            return cmd.response(ResponseCode.SUCCESS, "transaction already ended")
        self.ending.add(offset)
        try:
            if h.commit_or_rollback == COMMIT_TYPE:
                real = committed(half)
                stored = schedule.transform(real, len(ctx.delay_levels_ms), ctx.clock(),
                                            ctx.config.timer_precision_ms, ctx.config.timer_max_delay_sec)
                if await asyncio.to_thread(txn.committed_already, half, stored.topic):
                    log.warning("transaction %s: its committed message is stored already, its op record was "
                                "not (a broker died between them): only the op record is written", h.transaction_id)
                else:
                    put = await ctx.store.put(stored)
                    if stored.topic == real.topic:  # its held pulls woken once readable (read_fence)
                        ctx.fence.written(put.commit_log_offset + put.store_size, real.topic, real.queue_id)
                    else:
                        ctx.on_parked()
            op = await ctx.store.put(txn.op_record(offset))
            txn.state.resolve(offset)
        finally:
            self.ending.discard(offset)
        # answered once the decision is held as a send is (a SYNC_MASTER's SyncStateSet)
        code = await ctx.guard.replicated(op.commit_log_offset + op.store_size)
        if code == ResponseCode.SERVICE_NOT_AVAILABLE:
            return cmd.response(code, DEPOSED_REMARK)
        if code != ResponseCode.SUCCESS:
            return cmd.response(code, FLUSH_SLAVE_TIMEOUT_REMARK)
        log.debug("transaction %s %s", h.transaction_id, "committed" if h.commit_or_rollback == COMMIT_TYPE
                  else "rolled back")
        return cmd.response(ResponseCode.SUCCESS)
