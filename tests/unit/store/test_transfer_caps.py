"""One pull takes at most RocketMQ's transfer caps from the store, checked before bodies are read
(issue 22, point 6): 32 messages / 256 KiB for messages in memory, 8 / 64 KiB on disk, the first
message always, whatever maxMsgNums asks."""

from __future__ import annotations

from pathlib import Path

from namesrv.broker.config import BrokerConfig
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.message.types import MessageInner, StoredMessage
from namesrv.store.message_store import MessageStore
from namesrv.store.transfer_caps import MAX_SCAN_ENTRIES, TransferCaps
from tests.support.broker import Broker, decode_messages

KIB = 1024


def fill(broker: Broker, count: int, size: int, queue_id: int = 0) -> None:
    for i in range(count):
        assert broker.send(bytes([i % 256]) * size, queue_id=queue_id).code == ResponseCode.SUCCESS


def pulled(broker: Broker, offset: int = 0, max_nums: int = 100_000) -> tuple[int, list[int], int]:
    answer = broker.pull(offset, maxMsgNums=max_nums)
    assert answer.ext_fields is not None
    offsets = [m["queue_offset"] for m in decode_messages(answer.body or b"")]
    return answer.code, offsets, int(answer.ext_fields["nextBeginOffset"])


def test_max_msg_nums_is_capped_at_32_messages_in_memory(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    fill(broker, 100, 10)
    code, offsets, next_offset = pulled(broker)
    assert code == ResponseCode.SUCCESS and offsets == list(range(32)) and next_offset == 32
    assert pulled(broker, 32, 5)[1] == list(range(32, 37)), "a smaller maxMsgNums still applies"


def test_bytes_are_capped_at_256_kib_in_memory_and_the_first_message_always_goes(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    fill(broker, 6, 100 * KIB)
    assert pulled(broker)[1] == [0, 1], "a third 100 KiB message would pass 256 KiB"
    big = Broker(tmp_path / "big")
    fill(big, 3, 1024 * KIB)
    assert pulled(big)[1] == [0], "one message over the cap is delivered alone"


def test_messages_on_disk_are_capped_at_8_messages_and_64_kib(tmp_path: Path) -> None:
    """With access_message_in_memory_max_ratio 0, no message counts as in memory."""
    broker = Broker(tmp_path, access_message_in_memory_max_ratio=0)
    fill(broker, 20, 10)
    assert pulled(broker)[1] == list(range(8))
    fill(broker, 4, 30 * KIB, queue_id=1)
    answer = broker.pull(0, queue_id=1, maxMsgNums=32)
    assert [m["queue_offset"] for m in decode_messages(answer.body or b"")] == [0, 1]


def test_the_caps_are_broker_config_fields_with_rocketmqs_names() -> None:
    config = BrokerConfig(max_transfer_count_on_message_in_memory=4, max_transfer_bytes_on_message_in_disk=1)
    assert config.transfer_caps() == TransferCaps(4, 256 * KIB, 8, 1, 40)
    assert BrokerConfig().transfer_caps() == TransferCaps()


def test_the_store_reads_no_record_past_a_cap(tmp_path: Path) -> None:
    """Every record the read looks at goes through `matches`: none past the cap is read."""
    log = MessageStore(tmp_path / "store")
    for i in range(50):
        log.append(MessageInner("T", 0, b"x" * (40 * KIB), {"i": str(i)}))
    read: list[int] = []

    def matches(m: StoredMessage) -> bool:
        read.append(m.queue_offset)
        return True

    result = log.read_messages("T", 0, 0, 1_000_000, TransferCaps(), matches)
    assert [m.queue_offset for m in result.messages] == read == list(range(6)), "6 x 40 KiB fit in 256 KiB"
    assert result.next_offset == 6
    read.clear()
    result = log.read_messages("T", 0, 0, 1_000_000, TransferCaps(), lambda m: bool(read.append(0)))
    assert len(read) == 50 and result.messages == [] and result.next_offset == 50, "filtered ones are dropped"


def test_a_filtering_pull_looks_at_a_bounded_window(tmp_path: Path) -> None:
    log = MessageStore(tmp_path / "store")
    for _ in range(MAX_SCAN_ENTRIES + 10):
        log.append(MessageInner("T", 0, b"x", {"TAGS": "A"}))
    result = log.read_messages("T", 0, 0, 1 << 30, TransferCaps(), lambda m: False)
    assert result.records == MAX_SCAN_ENTRIES and result.next_offset == MAX_SCAN_ENTRIES
