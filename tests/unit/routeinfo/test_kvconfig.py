"""KVConfigManager: namespaced settings, persisted atomically, refusing to guess at a corrupt file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from namesrv.common import persist
from namesrv.protocol.constants import ORDER_TOPIC_CONFIG_NAMESPACE
from namesrv.routeinfo.kvconfig import KVConfigError, KVConfigManager


@pytest.fixture
def kv_path(tmp_path: Path) -> Path:
    return tmp_path / "namesrv" / "kvConfig.json"


def reopened(path: Path) -> KVConfigManager:
    manager = KVConfigManager(path)
    manager.load()
    return manager


def test_put_get_and_list_by_namespace(kv: KVConfigManager) -> None:
    kv.put_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA", "broker-a:4;broker-b:4")
    kv.put_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicB", "broker-a:8")
    kv.put_kv_config("other", "TopicA", "x")

    assert kv.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA") == "broker-a:4;broker-b:4"
    assert kv.get_kv_config("other", "TopicA") == "x"
    assert kv.get_kv_config("other", "TopicB") is None
    assert kv.get_kv_config("missing", "TopicA") is None
    assert kv.get_kv_list_by_namespace(ORDER_TOPIC_CONFIG_NAMESPACE) == {
        "TopicA": "broker-a:4;broker-b:4",
        "TopicB": "broker-a:8",
    }
    assert kv.get_kv_list_by_namespace("missing") is None


def test_put_overwrites_value(kv: KVConfigManager) -> None:
    kv.put_kv_config("ns", "k", "one")
    kv.put_kv_config("ns", "k", "two")
    assert kv.get_kv_config("ns", "k") == "two"


def test_listing_is_a_copy(kv: KVConfigManager) -> None:
    kv.put_kv_config("ns", "k", "v")
    listing = kv.get_kv_list_by_namespace("ns")
    assert listing is not None
    listing["k"] = "changed"
    listing["new"] = "x"
    assert kv.table == {"ns": {"k": "v"}}


def test_delete_last_key_keeps_the_namespace_as_an_empty_table(kv: KVConfigManager) -> None:
    """RocketMQ's deleteKVConfig removes the key only: the namespace then lists as an empty table."""
    kv.put_kv_config("ns", "k1", "v1")
    kv.put_kv_config("ns", "k2", "v2")
    assert kv.delete_kv_config("ns", "k1") is True
    assert kv.table == {"ns": {"k2": "v2"}}
    assert kv.delete_kv_config("ns", "k2") is True
    assert kv.table == {"ns": {}}
    assert kv.get_kv_list_by_namespace("ns") == {}
    assert kv.delete_kv_config("ns", "k2") is False
    assert kv.delete_kv_config("never", "k") is False


def test_values_survive_a_restart(kv_path: Path) -> None:
    first = KVConfigManager(kv_path)
    first.load()  # no file yet: an empty table, not an error
    assert first.table == {}
    first.put_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA", "broker-a:4")
    first.put_kv_config("ns", "k", "v")
    first.put_kv_config("ns", "gone", "soon")
    first.delete_kv_config("ns", "gone")

    second = reopened(kv_path)

    assert second.table == {ORDER_TOPIC_CONFIG_NAMESPACE: {"TopicA": "broker-a:4"}, "ns": {"k": "v"}}
    assert second.get_kv_config(ORDER_TOPIC_CONFIG_NAMESPACE, "TopicA") == "broker-a:4"


def test_deleting_everything_survives_a_restart_as_empty(kv_path: Path) -> None:
    first = KVConfigManager(kv_path)
    first.put_kv_config("ns", "k", "v")
    first.delete_kv_config("ns", "k")
    assert reopened(kv_path).table == {"ns": {}}


def test_file_is_rocketmq_shaped_json(kv_path: Path) -> None:
    KVConfigManager(kv_path).put_kv_config("ns", "k", "v")
    assert json.loads(kv_path.read_text(encoding="utf-8")) == {"configTable": {"ns": {"k": "v"}}}


def test_writes_leave_no_temp_files_behind(kv_path: Path) -> None:
    manager = KVConfigManager(kv_path)
    for i in range(20):
        manager.put_kv_config("ns", f"k{i}", str(i))
    manager.delete_kv_config("ns", "k3")
    assert sorted(p.name for p in kv_path.parent.iterdir()) == ["kvConfig.json"]


def test_each_write_replaces_the_file_atomically(kv_path: Path) -> None:
    manager = KVConfigManager(kv_path)
    manager.put_kv_config("ns", "k", "v1")
    inode = kv_path.stat().st_ino
    manager.put_kv_config("ns", "k", "v2")
    assert kv_path.stat().st_ino != inode, "a new file renamed over the old one, not rewritten in place"


def test_unchanged_put_does_not_rewrite_the_file(kv_path: Path) -> None:
    manager = KVConfigManager(kv_path)
    manager.put_kv_config("ns", "k", "v")
    inode = kv_path.stat().st_ino
    manager.put_kv_config("ns", "k", "v")
    assert kv_path.stat().st_ino == inode


def test_failed_write_keeps_the_old_file_and_no_temp(kv_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = KVConfigManager(kv_path)
    manager.put_kv_config("ns", "k", "old")
    before = kv_path.read_bytes()

    def failing_replace(src: str, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persist.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        manager.put_kv_config("ns", "k", "new")
    monkeypatch.undo()

    assert manager.get_kv_config("ns", "k") == "old", "the table in memory is not ahead of the disk"
    assert kv_path.read_bytes() == before
    assert sorted(p.name for p in kv_path.parent.iterdir()) == ["kvConfig.json"]
    assert reopened(kv_path).get_kv_config("ns", "k") == "old"


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b"\xff\xfe\x00garbage",
        b'{"configTable": {"ns": {"k": "v"}',  # truncated
        b"[]",
        b'"configTable"',
        b"{}",
        b'{"other": {}}',
        b'{"configTable": []}',
        b'{"configTable": {"ns": ["k", "v"]}}',
        b'{"configTable": {"ns": {"k": 5}}}',
        b'{"configTable": {"ns": {"k": null}}}',
    ],
    ids=[
        "not-json",
        "empty",
        "binary",
        "truncated",
        "list",
        "string",
        "no-table",
        "wrong-key",
        "table-list",
        "namespace-list",
        "int-value",
        "null-value",
    ],
)
def test_corrupt_file_is_an_error_and_keeps_the_current_table(kv_path: Path, content: bytes) -> None:
    kv_path.parent.mkdir(parents=True)
    kv_path.write_bytes(content)
    manager = KVConfigManager(kv_path)
    manager.table = {"ns": {"current": "1"}}

    with pytest.raises(KVConfigError, match="cannot load KV config"):
        manager.load()

    assert manager.table == {"ns": {"current": "1"}}
    assert kv_path.read_bytes() == content, "a corrupt file is left for a person to inspect"


def test_in_memory_manager_never_touches_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    manager = KVConfigManager(None)
    manager.load()
    manager.put_kv_config("ns", "k", "v")
    manager.delete_kv_config("ns", "k")
    manager.persist()
    assert list(tmp_path.iterdir()) == []


def test_home_relative_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    manager = KVConfigManager("~/namesrv/kvConfig.json")
    manager.put_kv_config("ns", "k", "v")
    assert (tmp_path / "namesrv" / "kvConfig.json").exists()
    assert os.path.isabs(str(manager.path))
