"""The local offset store (namesrv/client/offsets.py): RocketMQ's offsets file, written whole, read
back; increase-only updates; the offset table a broker's RESET_CONSUMER_CLIENT_OFFSET carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from namesrv.client.offsets import NO_OFFSET, LocalFileOffsetStore, ReadOffsetType, offset_table_of
from namesrv.protocol.models import MessageQueue

A0, A1, B0 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1), MessageQueue("U", "broker-b", 0)


def test_offsets_survive_in_rocketmqs_file_form(tmp_path: Path) -> None:
    path = tmp_path / "g" / "offsets.json"
    path.parent.mkdir()
    store = LocalFileOffsetStore(path)
    store.update_offset(A0, 5)
    store.update_offset(B0, 7)
    store.persist_all()
    text = path.read_text()
    assert text.startswith('{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:5'), text
    again = LocalFileOffsetStore(path)
    assert again.clone_offset_table() == {A0: 5, B0: 7}
    assert again.read_offset(A1) == NO_OFFSET and again.read_offset(A1, ReadOffsetType.READ_FROM_STORE) == NO_OFFSET


def test_persist_all_writes_only_the_queues_asked_for(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path / "o.json")
    store.update_offset(A0, 1)
    store.update_offset(A1, 2)
    store.persist_all({A1})
    assert LocalFileOffsetStore(tmp_path / "o.json").clone_offset_table() == {A1: 2}
    assert not list(tmp_path.glob("*.tmp*")), "no temp file left behind"


def test_persisting_one_queue_keeps_the_others_in_the_file(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path / "o.json")
    store.update_offset(A0, 1)
    store.update_offset(B0, 3)
    store.persist(A0)
    assert LocalFileOffsetStore(tmp_path / "o.json").clone_offset_table() == {A0: 1, B0: 3}


def test_increase_only_never_moves_an_offset_back() -> None:
    store = LocalFileOffsetStore()
    store.update_offset(A0, 10)
    store.update_offset(A0, 4, increase_only=True)
    assert store.read_offset(A0) == 10
    store.update_offset(A0, 4)
    assert store.read_offset(A0) == 4
    store.remove_offset(A0)
    assert store.read_offset(A0, ReadOffsetType.READ_FROM_MEMORY) == NO_OFFSET
    store.persist_all()  # no path: memory only, nothing written


def test_a_reset_offset_body_reads_as_a_table() -> None:
    body = b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:42,' \
           b'{"brokerName":"broker-b","queueId":0,"topic":"U"}:0}}'
    assert offset_table_of(body) == {A1: 42, B0: 0}
    with pytest.raises(ValueError, match="no offsetTable"):
        offset_table_of(json.dumps({"other": 1}).encode())
