"""What a consumer answers GET_CONSUMER_RUNNING_INFO with (RocketMQ's ConsumerRunningInfo, the fields
this consumer really has): `mqadmin consumerStatus` asks a broker, which hands the request down the
consumer's connection."""

from __future__ import annotations

import time

from clients.consumer.core import ConsumerCore
from namesrv.client.offsets import ReadOffsetType
from namesrv.protocol.running_info import ConsumerRunningInfo
from namesrv.remoting.wire_command import CURRENT_VERSION_DESC


def running_info(core: ConsumerCore, started_ms: int) -> ConsumerRunningInfo:
    cfg = core.config
    props = {"PROP_CONSUME_TYPE": core.consume_type, "PROP_CLIENT_VERSION": CURRENT_VERSION_DESC,
             "PROP_CONSUMER_START_TIMESTAMP": str(started_ms), "PROP_CONSUMEORDERLY": str(core.orderly).lower(),
             "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_thread_min), "messageModel": cfg.message_model.value,
             "consumeFromWhere": cfg.consume_from_where.value, "pullBatchSize": str(cfg.pull_batch_size),
             "pullThresholdForQueue": str(cfg.pull_threshold_for_queue),
             "allocateMessageQueueStrategy": cfg.strategy.name}
    if core.namesrv_names:
        props["PROP_NAMESERVER_ADDR"] = ";".join(core.namesrv_names)
    now_mono, now_ms = time.monotonic(), int(time.time() * 1000)
    with core._pq_lock:
        held = dict(core.process_queues)
    table = {mq: {"commitOffset": core.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY),
                  "cachedMsgCount": pq.cached_count, "cachedMsgSizeInMiB": pq.cached_bytes // (1024 * 1024),
                  "cachedMsgMaxOffset": pq.max_offset, "locked": pq.locked, "droped": pq.dropped,
                  "lastPullTimestamp": now_ms - int((now_mono - pq.last_pull_s) * 1000)}
             for mq, pq in held.items()}
    return ConsumerRunningInfo(props, [s.to_wire() for s in core.subscriptions.values()], table)
