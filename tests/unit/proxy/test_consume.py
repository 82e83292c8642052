"""The consumption RPCs' pure mapping (namesrv.proxy.consume): the v2 receipt handle round trip
and its refusals, the pop header, the polling and invisible-time rules and what a popped message shows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namesrv.broker.pop.extra_info import ExtraInfo
from namesrv.protocol.message.decoder import MessageExt
from namesrv.protocol.types import InvalidInput
from namesrv.proxy import consume as cm
from namesrv.proxy.status import ProxyError

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_0123456789", min_size=1, max_size=20)
offsets = st.integers(min_value=0, max_value=10**18 - 1)  # the brokers take 18 digits
handles = st.builds(
    cm.ReceiptHandle,
    st.builds(ExtraInfo, offsets, offsets, st.integers(1, 2**40), st.sampled_from([0, 999]),
              st.sampled_from(["0", "1", "2"]), names, st.integers(0, 1023), offsets),
    st.one_of(st.just(-1), offsets))


@given(handles)
def test_a_receipt_handle_round_trips_and_hands_the_broker_its_extra_info(h: cm.ReceiptHandle) -> None:
    text = h.encode()
    assert cm.decode_receipt_handle(text) == h
    assert len(text.split(" ")) == 9
    assert cm.ack_header("G", "T", h)["extraInfo"] == " ".join(text.split(" ")[:8])
    assert cm.ack_header("G", "T", h)["queueId"] == str(h.extra.queue_id)


def test_the_8_field_extra_info_is_a_handle_without_commit_log_offset() -> None:
    h = cm.decode_receipt_handle("5 1000 2000 0 0 broker-a 3 7")
    assert (h.extra.broker_name, h.extra.queue_id, h.extra.msg_queue_offset, h.commit_log_offset) == \
        ("broker-a", 3, 7, -1)
    with pytest.raises(ProxyError) as e:
        cm.send_back_header("G", "T", h, "m")  # ForwardMessageToDLQ needs the commit-log offset
    assert e.value.code == "INVALID_RECEIPT_HANDLE"


@pytest.mark.parametrize("text", [
    "", "garbage", "1 2 3", "5 1000 2000 0 0 broker-a 3", "5 1000 2000 0 0 broker-a 3 7 9 10",
    "x 1000 2000 0 0 broker-a 3 7 9", "5 1000 2000 0 7 broker-a 3 7 9", "5 1000 2000 0 0  3 7 9",
    "5 1000 2000 0 0 broker-a 3 7 nine", "5 1000 2000 0 0 broker-a 3 7 -5", "5 1000 2000 0 0 broker-a -3 7 9",
])
def test_malformed_handles_are_invalid_receipt_handles(text: str) -> None:
    with pytest.raises(ProxyError) as e:
        cm.decode_receipt_handle(text)
    assert e.value.code == "INVALID_RECEIPT_HANDLE"


@given(st.text(max_size=60))
def test_any_text_decodes_or_is_refused_with_invalid_receipt_handle(text: str) -> None:
    try:
        h = cm.decode_receipt_handle(text)
    except ProxyError as e:
        assert e.code == "INVALID_RECEIPT_HANDLE"
    else:
        assert cm.decode_receipt_handle(h.encode()) == h


def test_an_expired_handle_is_refused() -> None:
    text = "5 1000 2000 0 0 broker-a 3 7 99"
    assert cm.live_handle(text, 2999).commit_log_offset == 99
    with pytest.raises(ProxyError) as e:
        cm.live_handle(text, 3000)
    assert (e.value.code, e.value.message) == ("INVALID_RECEIPT_HANDLE", "receipt handle is expired")


def test_a_change_answer_makes_the_new_handle() -> None:
    old = cm.decode_receipt_handle("5 1000 2000 0 1 broker-a 3 7 99")
    new = cm.changed_handle(old, {"popTime": "5000", "invisibleTime": "9000", "reviveQid": "0"})
    assert new.encode() == "5 5000 9000 0 1 broker-a 3 7 99"
    with pytest.raises(ProxyError):
        cm.changed_handle(old, {"popTime": "5000"})
    back = cm.send_back_header("G", "T", old, "mid")
    assert (back["offset"], back["delayLevel"], back["originTopic"]) == ("99", "-1", "%RETRY%G_T")


def test_pop_header_polling_and_invisible_rules() -> None:
    h = cm.pop_header("G", "T", 64, 30_000, 20_000, 1, "TagA || TagB", 123)
    assert (h["queueId"], h["maxMsgNums"], h["expType"], h["exp"], h["initMode"]) == ("-1", "32", "TAG",
                                                                                     "TagA || TagB", "1")
    assert cm.pop_header("G", "T", 1, 1, 0, 0, "", 0)["exp"] == "*"
    assert cm.pop_header("G", "T", 1, 1, 0, 2, "a > 1", 0)["expType"] == "SQL92"
    for args in [(1, "", 2), (1, "x", 9), (0, "*", 1)]:
        with pytest.raises(ProxyError):
            cm.pop_header("G", "T", args[0], 1, 0, args[2], args[1], 0)
    assert cm.polling_ms(1_000, None, 5_000, 20_000) == 5_000
    assert cm.polling_ms(60_000, None, 5_000, 20_000) == 20_000
    assert cm.polling_ms(15_000, 10_000, 5_000, 20_000) == 10_000
    with pytest.raises(ProxyError) as e:
        cm.polling_ms(15_000, 1_000, 5_000, 20_000)
    assert e.value.code == "ILLEGAL_POLLING_TIME"
    with pytest.raises(ProxyError) as e:
        cm.check_invisible(999, 1_000, 10_000)
    assert e.value.code == "ILLEGAL_INVISIBLE_TIME"
    with pytest.raises(ProxyError):
        cm.check_invisible(10_001, 1_000, 10_000)
    with pytest.raises(ProxyError) as e:
        cm.check_group("bad group")
    assert e.value.code == "ILLEGAL_CONSUMER_GROUP"


def test_a_popped_messages_type_handle_and_user_properties() -> None:
    props = {"TAGS": "TagA", "UNIQ_KEY": "ID1", "color": "red", "POP_CK": "5 1000 2000 0 1 broker-a 3 7"}
    m = MessageExt("T", 3, 7, 4242, 0, 0, "", "", b"body", props)
    assert cm.popped_handle(m).encode() == "5 1000 2000 0 1 broker-a 3 7 4242"
    assert cm.user_properties(props) == {"color": "red"}
    assert [cm.message_type(p) for p in ({}, {"__SHARDINGKEY": "g"}, {"TIMER_DELIVER_MS": "1"}, {"DELAY": "2"},
                                          {"TRAN_MSG": "true", "__SHARDINGKEY": "g"})] == \
        ["NORMAL", "FIFO", "DELAY", "DELAY", "TRANSACTION"]
    for ck in (None, "5 1000"):
        with pytest.raises(ProxyError):
            cm.popped_handle(MessageExt("T", 3, 7, 4242, 0, 0, "", "", b"", {} if ck is None else {"POP_CK": ck}))


def test_a_groups_policy_is_read_from_its_config_and_bad_configs_are_refused() -> None:
    assert cm.group_policy(b'{"groupName":"G","consumeMessageOrderly":true,"retryMaxTimes":3}') == \
        cm.GroupPolicy(fifo=True, retry_max_times=3)
    assert cm.group_policy(b'{"groupName":"G"}') == cm.GroupPolicy()
    for bad in (b"", b"[1]", b'{"consumeMessageOrderly":"yes"}', b'{"retryMaxTimes":-1}', b'{"retryMaxTimes":true}'):
        with pytest.raises(InvalidInput):
            cm.group_policy(bad)


def test_a_fifo_groups_pop_is_orderly_and_its_attempts_come_from_order_count_info() -> None:
    assert cm.pop_header("G", "T", 8, 30_000, 5_000, 1, "*", 0, fifo=True)["order"] == "true"
    assert cm.pop_header("G", "T", 8, 30_000, 5_000, 1, "*", 0)["order"] == "false"
    found = [MessageExt("T", q, o, 0, 0, 0, "", "", b"") for q, o in ((0, 5), (0, 6), (1, 2))]
    assert cm.order_attempts({"orderCountInfo": "0 0 2,1;0 1 0"}, found) == [2, 1, 0]
    assert cm.order_attempts({}, found) == [0, 0, 0], "no summary: first deliveries"
    with pytest.raises(InvalidInput):
        cm.order_attempts({"orderCountInfo": "0 0"}, found)
