"""Replication over TCP (HA_TRANSFER, namesrv.store.ha.wire and actors.broker.ha.tcp), no Ray: the
request and answer encodings, bad requests refused with a clear error and nothing changed, and a
slave's connection against a real remoting server and a real master's commit log (records, the
long poll woken by a new record, the acknowledgement, the ACL's broker check, a lost connection)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.broker.ha.master import HAMasterService
from actors.broker.ha.tcp import HAConnection
from namesrv.acl.plain_acl import AclManager, SessionCredentials
from namesrv.acl.rpc_hook import AclHook, check_broker
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.wire import BrokerWireEncoder
from namesrv.broker.role import RoleGuard
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import ManualClock
from namesrv.common.waiting import wait_until_async
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext, RequestPipeline
from namesrv.remoting.server import RemotingServer
from namesrv.store.ha.wire import TransferRequest, parse_transfer_answer, parse_transfer_request, transfer_answer
from namesrv.store.message_store import MessageStore
from namesrv.store.types import BrokerRole, FlushDiskType

GOOD = {"slaveId": "1", "fromOffset": "0", "maxBytes": "1048576", "waitMs": "0"}
ACL_YAML = """
accounts:
  - accessKey: user
    secretKey: user-secret
    defaultTopicPerm: PUB|SUB
  - accessKey: brokers
    secretKey: broker-secret
    broker: true
"""
BROKER = SessionCredentials(access_key="brokers", secret_key="broker-secret")
USER = SessionCredentials(access_key="user", secret_key="user-secret")


def test_request_round_trips_as_strings() -> None:
    plain = TransferRequest(2, 4096, 1 << 20, 1_000)
    assert plain.ext_fields() == {"slaveId": "2", "fromOffset": "4096", "maxBytes": "1048576", "waitMs": "1000"}
    assert parse_transfer_request(plain.ext_fields(), None) == plain
    piped = TransferRequest(2, 8192, 1 << 20, 1_000, ack_offset=4096, stream=2**47)
    assert parse_transfer_request(piped.ext_fields(), b"") == piped
    assert parse_transfer_request({"slaveId": 2, "fromOffset": 0, "maxBytes": 1, "waitMs": 0}, None) \
        == TransferRequest(2, 0, 1, 0), "a Ray call into the pipeline may send ints"


@pytest.mark.parametrize(
    ("ext", "body", "says"),
    [(GOOD | {"fromOffset": "12x"}, None, "fromOffset must be a decimal integer"),
     (GOOD | {"fromOffset": "-5"}, None, "fromOffset -5 is outside"),
     (GOOD | {"fromOffset": "9" * 40}, None, "fromOffset must be a decimal integer"),
     (GOOD | {"waitMs": "600000"}, None, "waitMs 600000 is outside"),
     (GOOD | {"maxBytes": "0"}, None, "maxBytes 0 is outside"),
     (GOOD | {"slaveId": "0"}, None, "slaveId 0 is outside"),
     (GOOD | {"slaveId": True}, None, "slaveId must be an integer, got bool"),
     (GOOD | {"slaveId": 1.5}, None, "slaveId must be an integer, got float"),
     (GOOD | {"fromOffset": [1]}, None, "fromOffset must be an integer, got list"),
     ({k: v for k, v in GOOD.items() if k != "waitMs"}, None, "waitMs is missing"),
     (GOOD | {"ackOffset": "10"}, None, "stream is missing"),
     (GOOD, b"x" * 100, "takes no body, got 100 bytes"),
     (["slaveId"], None, "extFields must be a map")],
)
def test_bad_requests_are_refused_clearly(ext: Any, body: bytes | None, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        parse_transfer_request(ext, body)


def test_answer_round_trips_and_errors_keep_their_kind() -> None:
    reply = {"offset": 100, "data": b"records", "master_max": 300, "waited_ms": 1.25, "moved": False,
             "confirm_offset": 180}
    code, remark, ext, body = transfer_answer(reply)
    assert (code, remark, body) == (ResponseCode.SUCCESS, None, b"records")
    assert parse_transfer_answer(code, remark, ext, body) == reply
    empty = transfer_answer({"offset": 300, "data": b"", "master_max": 300, "waited_ms": 1000.0, "moved": True})
    assert parse_transfer_answer(*empty) == {"offset": 300, "data": b"", "master_max": 300, "waited_ms": 1000.0,
                                             "moved": True, "confirm_offset": None}
    past = parse_transfer_answer(ResponseCode.SUCCESS, None, {"offset": "1", "masterMax": "5", "confirmOffset": "6"},
                                 None)
    assert past["error"] == "BadAnswer" and "confirm offset 6" in past["remark"]
    refused = transfer_answer({"error": "ReplicaAhead", "remark": "replica asks from 9, past 5", "master_max": 5})
    assert refused[0] == ResponseCode.SYSTEM_ERROR and refused[2] == {"masterMax": "5"}
    assert parse_transfer_answer(*refused) == {"error": "ReplicaAhead", "remark": "replica asks from 9, past 5"}
    assert parse_transfer_answer(ResponseCode.SUCCESS, None, {"offset": "x", "masterMax": "1"}, None)["error"] \
        == "BadAnswer"
    assert parse_transfer_answer(ResponseCode.SUCCESS, None, {"offset": "-1", "masterMax": "1"}, None)["error"] \
        == "BadAnswer"


def master(tmp_path: Path) -> tuple[HAMasterService, MessageStore, RoleGuard]:
    clock = ManualClock()
    config = BrokerConfig(broker_role=BrokerRole.SYNC_MASTER)
    store = MessageStore(tmp_path / "m", FlushDiskType.SYNC_FLUSH, clock)
    guard = RoleGuard(config, 0, clock)
    return HAMasterService(store, guard, TopicConfigManager(None, clock), ConsumerOffsetManager(None), config), \
        store, guard


async def put(store: MessageStore, i: int) -> int:
    r = await store.put(MessageInner("T", 0, b"x" * 50, {}, f"id{i}"))
    return r.commit_log_offset + r.store_size


def test_a_malformed_request_changes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        svc, store, guard = master(tmp_path)
        await put(store, 0)
        pipeline = RequestPipeline("m", BrokerWireEncoder("127.0.0.1:1").encode)
        pipeline.register(svc.processor.handlers)
        bad = RemotingRequest(BrokerRequestCode.HA_TRANSFER, GOOD | {"fromOffset": "oops"}, None, wire=True)
        answer = pipeline.handle(bad, RequestContext("c", "127.0.0.1:2"))
        assert isinstance(answer, RemotingResponse) and answer.code == ResponseCode.SYSTEM_ERROR
        assert "fromOffset must be a decimal integer" in (answer.remark or "")
        assert guard.sync.acks == {} and svc.bytes_sent == 0, "not acknowledged, nothing sent"
        store.close()

    asyncio.run(scenario())


async def serve(pipeline: RequestPipeline) -> tuple[RemotingServer, int]:
    """A remoting server on a free loopback port answering through `pipeline`."""
    server = RemotingServer("m", lambda conn, cmd: pipeline.handle_command(cmd, RequestContext(conn.token, conn.peer)),
                            lambda conn, why: None, 0, lambda coro: asyncio.ensure_future(coro))
    port = server.bind("127.0.0.1", 0)
    await server.serve()
    return server, port


def test_a_slave_connection_replicates_waits_and_is_checked_by_the_acl(tmp_path: Path) -> None:
    async def scenario() -> None:
        svc, store, guard = master(tmp_path)
        first = await put(store, 0)
        acl_file = tmp_path / "plain_acl.yml"
        acl_file.write_text(ACL_YAML)
        pipeline = RequestPipeline("m", BrokerWireEncoder("127.0.0.1:1").encode)
        pipeline.add_hook(AclHook(AclManager(str(acl_file)), check_broker))
        pipeline.register(svc.processor.handlers)
        server, port = await serve(pipeline)
        conn = HAConnection(f"127.0.0.1:{port}", BROKER)
        await conn.open()
        try:
            got = await conn.transfer(TransferRequest(1, 0, 1 << 20, 0), 5)
            assert (got["offset"], got["data"], got["master_max"]) == (0, store.read_raw(0, first).data, first)
            assert guard.sync.acks[1] == 0
            # The long poll: asked from the end, answered when the next record is written.
            waiting = asyncio.ensure_future(conn.transfer(TransferRequest(1, first, 1 << 20, 5_000), 10))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            second = await put(store, 1)
            woke = await asyncio.wait_for(waiting, 5)
            assert (woke["offset"], woke["offset"] + len(woke["data"]), woke["master_max"]) == (first, second, second)
            assert guard.sync.acks[1] == first, "the request acknowledged what the slave holds"
            # A client account is no broker: refused, and its request acknowledges nothing.
            user = HAConnection(f"127.0.0.1:{port}", USER)
            await user.open()
            refused = await user.transfer(TransferRequest(2, 0, 1 << 20, 0), 5)
            assert "Need broker permission" in refused["remark"] and 2 not in guard.sync.acks
            unsigned = HAConnection(f"127.0.0.1:{port}", None)
            await unsigned.open()
            assert "error" in await unsigned.transfer(TransferRequest(3, 0, 1 << 20, 0), 5)
            user.close()
            unsigned.close()
            # A lost connection fails the request waiting on it at once.
            pending = asyncio.ensure_future(conn.transfer(TransferRequest(1, second, 1 << 20, 5_000), 10))
            await asyncio.sleep(0.05)
            await server.stop()
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(pending, 5)
            assert conn.closed
        finally:
            conn.close()
            await server.stop()
            store.close()

    asyncio.run(scenario())


def test_connecting_to_nothing_is_a_connection_error() -> None:
    async def scenario() -> None:
        with pytest.raises(ConnectionError, match=r"cannot connect to master 127\.0\.0\.1:1"):
            await HAConnection("127.0.0.1:1", None).open()
        with pytest.raises(ValueError, match="bad master address"):
            await HAConnection("nowhere", None).open()

    asyncio.run(scenario())


def test_a_big_batch_arrives_whole_and_in_order(tmp_path: Path) -> None:
    """A catch-up's batch (megabytes, read off the master's loop) over the same connection."""
    async def scenario() -> None:
        svc, store, _ = master(tmp_path)
        end = 0
        for i in range(600):
            r = await store.put(MessageInner("T", i % 4, bytes([i % 251]) * 4000, {}, f"id{i}"))
            end = r.commit_log_offset + r.store_size
        pipeline = RequestPipeline("m", BrokerWireEncoder("127.0.0.1:1").encode)
        pipeline.register(svc.processor.handlers)
        server, port = await serve(pipeline)
        conn = HAConnection(f"127.0.0.1:{port}", None)
        await conn.open()
        try:
            got = await conn.transfer(TransferRequest(1, 0, 4 << 20, 0), 10)
            assert end > 2 << 20 and (got["offset"], len(got["data"]), got["master_max"]) == (0, end, end)
            assert got["data"] == store.read_raw(0, end).data
        finally:
            conn.close()
            await server.stop()
            store.close()

    asyncio.run(scenario())


def test_a_slaves_closed_connection_takes_it_out_of_the_sync_state_set_at_once(tmp_path: Path) -> None:
    """RocketMQ drops a slave from the SyncStateSet when its HA connection closes: so here, when its
    last replication connection closes (long before haMaxTimeSlaveNotCatchup); a request read before
    the close but run after it acknowledges nothing; the slave rejoins once it asks again, caught up."""
    async def scenario() -> None:
        svc, store, guard = master(tmp_path)
        end = await put(store, 0)
        pipeline = RequestPipeline("m", BrokerWireEncoder("127.0.0.1:1").encode)
        pipeline.register(svc.processor.handlers)
        tokens: list[str] = []
        server = RemotingServer("m", lambda conn, cmd: tokens.append(conn.token) or pipeline.handle_command(
                                    cmd, RequestContext(conn.token, conn.peer)),
                                lambda conn, why: svc.processor.connection_closed(conn.token), 0,
                                lambda coro: asyncio.ensure_future(coro))
        svc.processor.is_open = lambda token: server.connection(token) is not None
        gone: list[int] = []
        svc.processor.on_slave_disconnected = lambda slave_id: (gone.append(slave_id), guard.slave_gone(slave_id))
        port = server.bind("127.0.0.1", 0)
        await server.serve()
        first, second = HAConnection(f"127.0.0.1:{port}", None), HAConnection(f"127.0.0.1:{port}", None)
        try:
            await first.open()
            await second.open()
            for conn in (first, second):
                assert (await conn.transfer(TransferRequest(1, end, 1 << 20, 0), 5))["offset"] == end
            assert 1 in guard.sync.members and guard.sync.acks[1] == end
            second_token = tokens[-1]
            first.close()  # the slave still has a connection
            await wait_until_async(lambda: len(server.connections) == 1, 5, "the first connection closed")
            assert gone == [] and 1 in guard.sync.members
            second.close()
            await wait_until_async(lambda: gone == [1], 5, "the slave gone")
            assert 1 not in guard.sync.members and 1 not in guard.sync.acks
            late = RemotingRequest(BrokerRequestCode.HA_TRANSFER, TransferRequest(1, end, 1, 0).ext_fields(), None,
                                   wire=True)
            answer = pipeline.handle(late, RequestContext(second_token, "127.0.0.1:2"))
            assert isinstance(answer, RemotingResponse) and answer.code == ResponseCode.SYSTEM_ERROR
            assert 1 not in guard.sync.acks, "a request of a closed connection acknowledges nothing"
            again = HAConnection(f"127.0.0.1:{port}", None)
            await again.open()
            await again.transfer(TransferRequest(1, end, 1 << 20, 0), 5)
            assert 1 in guard.sync.members, "caught up again: back in"
            again.close()
        finally:
            first.close()
            second.close()
            await server.stop()
            store.close()

    asyncio.run(scenario())
