"""The broker's ACL over real sockets decides on the values the processor uses (issue 25, point 1):
a field spelled twice cannot be checked under one name and used under the other."""

from __future__ import annotations

import asyncio
from pathlib import Path

from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.wire_command import SerializeType
from tests.support.security_servers import APP, Client, broker_server


def test_a_v2_send_cannot_name_an_allowed_topic_by_letter_and_a_denied_one_by_name(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_server(tmp_path) as bc:
            c = await Client.connect(bc.remoting.port)
            for kind in SerializeType:
                answer = await c.invoke(Code.SEND_MESSAGE_V2, {"a": "PG", "b": "Allowed", "e": 0, "topic": "Denied"},
                                        b"payload", APP, kind)
                assert answer.code != ResponseCode.SUCCESS, answer.remark
                assert "topic" in (answer.remark or "")
            assert bc.store.max_offset("Denied", 0) == 0, "nothing landed in the denied topic"
            ok = await c.invoke(Code.SEND_MESSAGE_V2, {"a": "PG", "b": "Allowed", "e": 0}, b"payload", APP)
            assert ok.code == ResponseCode.SUCCESS and bc.store.max_offset("Allowed", 0) == 1
            c.close()

    asyncio.run(scenario())


def test_an_offset_commit_cannot_name_its_group_in_python_spelling(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_server(tmp_path) as bc:
            c = await Client.connect(bc.remoting.port)
            at = {"topic": "Allowed", "queueId": 0, "commitOffset": 5}
            denied = await c.invoke(Code.UPDATE_CONSUMER_OFFSET, at | {"consumerGroup": "DeniedGroup"}, None, APP)
            assert denied.code == ResponseCode.NO_PERMISSION
            snake = await c.invoke(Code.UPDATE_CONSUMER_OFFSET, at | {"consumer_group": "DeniedGroup"}, None, APP)
            assert snake.code != ResponseCode.SUCCESS, "consumer_group is not RocketMQ's name: no group given"
            both = await c.invoke(Code.UPDATE_CONSUMER_OFFSET,
                                  at | {"consumerGroup": "G", "consumer_group": "DeniedGroup"}, None, APP)
            assert both.code == ResponseCode.SUCCESS, both.remark
            assert bc.offsets.query_offset("DeniedGroup", "Allowed", 0) == -1, "no offset of the denied group"
            assert bc.offsets.query_offset("G", "Allowed", 0) == 5, "the group the ACL checked is the one written"
            c.close()

    asyncio.run(scenario())


def test_messages_by_key_and_by_id_need_sub_on_their_own_topic(tmp_path: Path) -> None:
    """QUERY_MESSAGE needs SUB on the topic it names; VIEW_MESSAGE_BY_ID on the topic of the message
    it finds, whatever topic the request names."""
    from namesrv.protocol.message.decoder import decode_messages
    from namesrv.protocol.message.types import MessageInner

    async def scenario() -> None:
        async with broker_server(tmp_path) as bc:
            c = await Client.connect(bc.remoting.port)
            allowed = bc.store.append(MessageInner("Allowed", 0, b"a", {"KEYS": "k"}, "UA"))
            denied = bc.store.append(MessageInner("Denied", 0, b"d", {"KEYS": "k"}, "UD"))
            q = {"key": "k", "maxNum": "5", "beginTimestamp": "0", "endTimestamp": str(2**63 - 1)}
            ok = await c.invoke(Code.QUERY_MESSAGE, q | {"topic": "Allowed"}, None, APP)
            assert ok.code == ResponseCode.SUCCESS and [m.body for m in decode_messages(ok.body or b"")] == [b"a"]
            refused = await c.invoke(Code.QUERY_MESSAGE, q | {"topic": "Denied"}, None, APP)
            assert refused.code == ResponseCode.NO_PERMISSION and not refused.body
            seen = await c.invoke(Code.VIEW_MESSAGE_BY_ID, {"offset": allowed.commit_log_offset}, None, APP)
            assert [m.body for m in decode_messages(seen.body or b"")] == [b"a"]
            for ext in ({"offset": denied.commit_log_offset},
                        {"offset": denied.commit_log_offset, "topic": "Allowed"}):
                hidden = await c.invoke(Code.VIEW_MESSAGE_BY_ID, ext, None, APP)
                assert hidden.code == ResponseCode.NO_PERMISSION and not hidden.body, hidden.remark
            c.close()

    asyncio.run(scenario())
