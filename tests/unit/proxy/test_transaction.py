"""Transaction ids, END_TRANSACTION headers and orphaned-transaction recovery (namesrv.proxy.transaction)."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from namesrv.protocol.message.decoder import MessageExt
from namesrv.proxy.descriptors import load
from namesrv.proxy.status import ProxyError
from namesrv.proxy.transaction import HalfLocation, decode_transaction_id, end_transaction_header, recover_command

P = load()


@given(broker=st.from_regex(r"[A-Za-z0-9_.-]{1,40}", fullmatch=True), clo=st.integers(0, 2 ** 62),
       tsto=st.integers(0, 2 ** 62))
def test_a_transaction_id_names_its_half(broker: str, clo: int, tsto: int) -> None:
    loc = HalfLocation(broker, clo, tsto)
    assert decode_transaction_id(loc.encode()) == loc


@given(text=st.text(max_size=60))
def test_any_other_text_is_an_invalid_transaction_id(text: str) -> None:
    try:
        loc = decode_transaction_id(text)
    except ProxyError as e:
        assert e.code == "INVALID_TRANSACTION_ID"
    else:
        assert loc.commit_log_offset >= 0 and loc.tran_state_table_offset >= 0 and loc.broker_name


def test_end_transaction_header() -> None:
    h = end_transaction_header("T", HalfLocation("broker-a", 100, 7), "MID", 1, False)
    assert (h["producerGroup"], h["commitOrRollback"], h["commitLogOffset"], h["tranStateTableOffset"]) == \
        ("T", "8", "100", "7")
    assert end_transaction_header("T", HalfLocation("b", 0, 0), "M", 2, True)["commitOrRollback"] == "12"
    back = end_transaction_header("T", HalfLocation("b", 0, 0), "M", 0, True)
    assert (back["commitOrRollback"], back["fromTransactionCheck"]) == ("0", "true")


def test_a_check_back_becomes_a_recover_command() -> None:
    half = MessageExt("T", 1, 5, 4096, 1_700_000_000_000, 1_700_000_000_000, "127.0.0.1:5000", "127.0.0.1:10911",
                      b"orphan", {"UNIQ_KEY": "MID1", "TAGS": "t", "KEYS": "a b", "PGROUP": "T", "color": "red",
                                  "TRAN_MSG": "true"})
    cmd = recover_command({"brokerName": "broker-a", "commitLogOffset": "4096", "tranStateTableOffset": "5",
                           "topic": "T"}, half)
    parsed = P.new("RecoverOrphanedTransactionCommand")
    json_format.ParseDict(cmd, parsed)
    assert decode_transaction_id(parsed.transaction_id) == HalfLocation("broker-a", 4096, 5)
    m = parsed.message
    assert (m.body, m.system_properties.message_id, m.system_properties.tag) == (b"orphan", "MID1", "t")
    assert list(m.system_properties.keys) == ["a", "b"] and dict(m.user_properties) == {"color": "red"}
    with pytest.raises(ProxyError):
        recover_command({"brokerName": "broker-a"}, half)
