"""The NameServer's core wired for a test: RouteInfoManager registrations with RocketMQ's shapes,
requests over the wire (`Wire`), REGISTER_BROKER's headers and body, and everything a request may
change as canonical bytes (`state`)."""

from __future__ import annotations

import json

from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.constants import Perm
from namesrv.protocol.models import DataVersion, RegisterBrokerResult, TopicConfig, TopicConfigSerializeWrapper
from namesrv.remoting.codec import encode_command
from namesrv.remoting.command import to_request
from namesrv.remoting.frame_decoder import FrameDecoder
from namesrv.remoting.wire_command import CURRENT_VERSION, RemotingCommand, SerializeType
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager
from namesrv.routeinfo.wire_encoder import WireEncoder

CLUSTER = "DefaultCluster"
BROKER_A = "broker-a"
BROKER_B = "broker-b"
MASTER_A = "10.0.0.1:10911"
SLAVE_A = "10.0.0.2:10911"
MASTER_B = "10.0.0.3:10911"
HA_MASTER_A = "10.0.0.1:10912"
HA_SLAVE_A = "10.0.0.2:10912"
RW = int(Perm.READ | Perm.WRITE)



def register(
    rim: RouteInfoManager,
    *topics: str,
    name: str = BROKER_A,
    addr: str = MASTER_A,
    broker_id: int = 0,
    cluster: str = CLUSTER,
    version: tuple[int, int] = (1, 1),
    queues: int = 8,
    perm: int = RW,
    ha: str = HA_MASTER_A,
    filters: list[str] | None = None,
    channel: object = None,
    timeout: int | None = None,
) -> RegisterBrokerResult:
    return rim.register_broker(
        cluster,
        addr,
        name,
        broker_id,
        ha,
        wrapper(*topics, version=version, queues=queues, perm=perm),
        filters,
        channel,
        timeout,
    )


class Wire:
    """A processor behind the wire adapter; `call` goes through real frame encoding both ways."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.clock = ManualClock()
        self.rim = RouteInfoManager(config or NamesrvConfig(), self.clock)
        self.processor = DefaultRequestProcessor(self.rim, KVConfigManager(None))
        self.encoder = WireEncoder()

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None, version: int = 63,
             kind: SerializeType = SerializeType.JSON, opaque: int = 5) -> RemotingCommand:
        request = RemotingCommand(code, opaque, 0, 1, version, None, ext, body, kind)
        [decoded] = FrameDecoder().feed(encode_command(request))
        response = self.processor.process_request(to_request(decoded), "tcp:peer#1")
        answer = self.encoder.encode(decoded, response)
        frame = self.encoder.encode_frame(decoded, response)  # what the TCP pipeline writes
        if isinstance(frame, RemotingCommand):
            assert frame == answer
        else:
            assert frame[0] + frame[1] == encode_command(answer), "an encoded frame is the command's bytes"
        [wire_answer] = FrameDecoder().feed(encode_command(answer))
        assert wire_answer.opaque == opaque and wire_answer.is_response and wire_answer.serialize_type is kind
        assert wire_answer.version == CURRENT_VERSION
        return wire_answer

def broker_body(topics: dict[str, int], counter: int = 1) -> dict:
    """A RegisterBrokerBody as a RocketMQ 5.x broker writes it (attributes, stateVersion and all)."""
    return {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": 1_700_000_000_000},
            "topicConfigTable": {
                t: {"attributes": {}, "order": False, "perm": 6, "readQueueNums": q, "topicFilterType": "SINGLE_TAG",
                    "topicName": t, "topicSysFlag": 0, "writeQueueNums": q}
                for t, q in topics.items()
            },
            "topicQueueMappingInfoMap": {},
        },
    }

def register_ext(body: bytes, broker_id: int = 0, addr: str = MASTER_A, **extra: str) -> dict[str, str]:
    return {"brokerAddr": addr, "brokerId": str(broker_id), "brokerName": BROKER_A, "clusterName": CLUSTER,
            "haServerAddr": "10.0.0.1:10912", "bodyCrc32": str(body_crc32(body)), "compressed": "false",
            "enableActingMaster": "false", **extra}











def wrapper(
    *topics: str, version: tuple[int, int] = (1, 1), queues: int = 8, perm: int = RW
) -> TopicConfigSerializeWrapper:
    table = {t: TopicConfig(topic_name=t, read_queue_nums=queues, write_queue_nums=queues, perm=perm) for t in topics}
    return TopicConfigSerializeWrapper(topic_config_table=table, data_version=DataVersion(*version))


def state(processor: DefaultRequestProcessor, *, drop_heartbeat_times: bool = False) -> bytes:
    """Everything a request may change, as canonical bytes (the fuzz test reuses this)."""
    tables = processor.rim.dump_tables()
    if drop_heartbeat_times:
        for live in tables["brokerLiveTable"].values():  # type: ignore[union-attr]
            live.pop("lastUpdateTimestamp")
    return json.dumps(
        {
            "tables": tables,
            "index": {k: sorted(v) for k, v in sorted(processor.rim.tables.broker_topics.items())},
            "kv": processor.kv.table,
            "config": processor.config.model_dump(),
            "route_seq": processor.rim.route_seq,
        },
        sort_keys=True,
        default=repr,
    ).encode()
