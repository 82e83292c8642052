"""The console's dead-letter pieces that need no server: the DLQ topic of a typed group name, the
time range of the form, a dead letter's row, and the copy a resend stores."""

from __future__ import annotations

import pytest

from actors.console.dlq import DEFAULT_RANGE_MS, DlqError, dead_letter, dlq_topic, resend_copy, time_range
from namesrv.protocol.message.decoder import MessageExt


def test_a_group_name_gives_its_dlq_topic_and_a_bad_one_is_refused():
    assert dlq_topic(" Orders_cg ") == ("Orders_cg", "%DLQ%Orders_cg")
    for bad in ("", "two words", "x" * 300, "semi;colon"):
        with pytest.raises(DlqError, match="consumer group"):
            dlq_topic(bad)


def test_the_time_range_defaults_to_the_last_day_and_refuses_nonsense():
    assert time_range("", "", 10 * DEFAULT_RANGE_MS) == (9 * DEFAULT_RANGE_MS, 10 * DEFAULT_RANGE_MS)
    assert time_range("5", "", 100) == (5, 100)
    assert time_range(" 5 ", "7", 100) == (5, 7)
    with pytest.raises(DlqError, match="the start 8 is after the end 7"):
        time_range("8", "7", 100)
    for bad in ("yesterday", "-1", "1.5", "9" * 19):
        with pytest.raises(DlqError, match="ms since the epoch"):
            time_range(bad, "", 100)


def dead(props: dict[str, str]) -> MessageExt:
    return MessageExt("%DLQ%g", 0, 3, 4096, 1_000, 900, "10.0.0.1:5", "10.0.0.2:10911", b"body", props, flag=7,
                      reconsume_times=2)


def test_a_dead_letters_row_names_its_original_topic():
    props = {"RETRY_TOPIC": "Orders", "KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "AC11"}
    row = dead_letter("ID", "%DLQ%g", props, 2, 1_000, "é".encode() * 600)
    assert (row.original_topic, row.reconsume_times, row.keys, row.tags, row.unique_key) == ("Orders", 2, "k1 k2",
                                                                                             "TagA", "AC11")
    assert len(row.body) == 600 and row.msg_id == "ID"
    assert dead_letter("ID", "%DLQ%g", {}, 0, 0, b"\xff").original_topic == "%DLQ%g"  # no RETRY_TOPIC: its own


def test_a_resend_goes_to_the_groups_retry_topic_with_the_messages_own_properties_only():
    props = {"RETRY_TOPIC": "Orders", "KEYS": "k", "TAGS": "T", "UNIQ_KEY": "AC11", "origin": "app",
             "ORIGIN_MESSAGE_ID": "X", "DELAY": "3", "REAL_TOPIC": "%RETRY%g", "REAL_QID": "0",
             "TIMER_OUT_MS": "5", "TIMER_DELAY_MS": "9", "TRAN_MSG": "true", "PGROUP": "p"}
    topic, copy = resend_copy(dead(props), "g")
    assert topic == "%RETRY%g"
    assert copy == {"RETRY_TOPIC": "Orders", "KEYS": "k", "TAGS": "T", "UNIQ_KEY": "AC11", "origin": "app",
                    "ORIGIN_MESSAGE_ID": "X"}
    assert resend_copy(dead({}), "g") == ("%RETRY%g", {})
