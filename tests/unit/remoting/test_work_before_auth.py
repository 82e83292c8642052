"""No work before authentication, and no body parse that is not linear (issue 25, point 4): an
unsigned request is refused before its body is looked at, and malformed JSON built to make a
backtracking scanner go quadratic is refused in one pass. The bodies are big enough that the old
quadratic scan would run for hours: such a test fails by its timeout, not by a stopwatch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from namesrv.acl.plain_acl import PlainAccessValidator, SessionCredentials, signed
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from tests.support.security_servers import ACL_YAML, BROKER, Client, broker_server, namesrv_server

ESCAPED_QUOTES = b'{"a":"' + b'\\"' * 1_000_000  # an unterminated string of escaped quotes, 2 MB
BARE_KEY_THEN_QUOTES = b'{0:' + b'"' * 2_000_001  # a bare key, then a million empty strings unterminated


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body", [ESCAPED_QUOTES, BARE_KEY_THEN_QUOTES, b"{" + b" ," * 1_000_000,
                                  b"{," + b" " * 1_000_000 + b"1" * 1_000_000])
def test_malformed_json_is_refused_in_one_pass(body: bytes) -> None:
    with pytest.raises(fastjson.JsonError):
        fastjson.loads(body)


def test_bare_keys_still_read_inside_and_outside_strings() -> None:
    assert fastjson.loads(b'{0:"a\\",1:b",-2 :{3:[4]},"k\\\\":5}') == {"0": 'a",1:b', "-2": {"3": [4]}, "k\\": 5}


def test_the_broker_acl_parses_nothing_for_an_unauthenticated_request() -> None:
    validator = PlainAccessValidator.from_yaml(ACL_YAML)
    parsed: list[int] = []

    def resources() -> dict[str, int]:
        parsed.append(1)
        return {}

    code = BrokerRequestCode.HEART_BEAT
    wrong = SessionCredentials(access_key="app", secret_key="not-the-secret")
    for ext in ({}, {"AccessKey": "nobody"}, signed({}, b"{}", wrong)):
        assert validator.check_broker(code, ext, b"{}", "127.0.0.1:1", resources) is not None
    assert parsed == [], "refused before anything was parsed"
    app = SessionCredentials(access_key="app", secret_key="app-secret-1")
    assert validator.check_broker(code, signed({}, b"{}", app), b"{}", "127.0.0.1:1", resources) is None
    assert parsed == [1]


@pytest.mark.timeout(120)
def test_an_unsigned_heartbeat_is_refused_before_its_body_is_parsed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_server(tmp_path) as bc:
            c = await Client.connect(bc.remoting.port)
            answer = await c.invoke(BrokerRequestCode.HEART_BEAT, {}, ESCAPED_QUOTES)
            assert answer.code == ResponseCode.NO_PERMISSION
            assert bc.acl.rejections == {"missing_access_key": 1}
            c.close()

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_a_signed_malformed_registration_is_refused_in_one_pass(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with namesrv_server(tmp_path) as ns:
            c = await Client.connect(ns.remoting.port)
            ident = {"clusterName": "C", "brokerAddr": "127.0.0.1:10911", "brokerName": "b", "brokerId": 0}
            for body in (ESCAPED_QUOTES, BARE_KEY_THEN_QUOTES):
                answer = await c.invoke(RequestCode.REGISTER_BROKER, ident, body, BROKER)
                assert answer.code == ResponseCode.SYSTEM_ERROR and "not JSON" in (answer.remark or "")
            assert ns.rim.broker_addr_table == {}, "nothing registered"
            c.close()

    asyncio.run(scenario())
