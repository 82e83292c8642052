"""A big registration applied in slices: between slices every route is whole, faults in between
(the broker removed, a newer registration, the host giving up) leave consistent tables, bad input is
found before anything is written, and the end state equals a registration applied at once."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from namesrv.common.clock import ManualClock
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.models import DataVersion
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.protocol.register_body_base import SLICE
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.registration import ALL
from namesrv.routeinfo.route_info_manager import RouteInfoManager

CLUSTER = "DefaultCluster"
ADDR = "10.0.0.1:10911"
N = 5 * SLICE + 7


def fresh(**config: Any) -> DefaultRequestProcessor:
    return DefaultRequestProcessor(RouteInfoManager(NamesrvConfig(**config), ManualClock()), KVConfigManager(None))


def topics(n: int, queues: int = 8, prefix: str = "T") -> dict[str, Any]:
    return {f"{prefix}{i}": {"topicName": f"{prefix}{i}", "readQueueNums": queues, "writeQueueNums": queues,
                             "perm": 6} for i in range(n)}


def registration(table: dict[str, Any], counter: int = 1, addr: str = ADDR, wire: bool = False,
                 channel: str = "ch1") -> RemotingRequest:
    raw = {"topicConfigSerializeWrapper": {"topicConfigTable": table,
                                           "dataVersion": {"timestamp": 1, "counter": counter}}}
    header: dict[str, Any] = {"clusterName": CLUSTER, "brokerAddr": addr, "brokerName": "broker-a", "brokerId": 0,
                              "haServerAddr": "10.0.0.1:10912"}
    if wire:
        return RemotingRequest(RequestCode.REGISTER_BROKER, {k: str(v) for k, v in header.items()},
                               json.dumps(raw).encode(), wire=True, version=479)
    return RemotingRequest(RequestCode.REGISTER_BROKER, header, encode_body(raw))


def steps(p: DefaultRequestProcessor, request: RemotingRequest, channel: str = "ch1"
          ) -> Generator[None, None, RemotingResponse]:
    return p.process_steps(request, channel)


def finish(gen: Generator[None, None, RemotingResponse]) -> tuple[RemotingResponse, int]:
    slices = 0
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value, slices
        slices += 1


def queues_of(p: DefaultRequestProcessor, topic: str) -> int | None:
    route = p.rim.pickup_topic_route_data(topic)
    if route is None:
        return None
    (qd,) = route.queue_datas
    return qd.read_queue_nums


def test_sliced_registration_ends_as_one_applied_at_once() -> None:
    sliced, at_once = fresh(), fresh()
    response, slices = finish(steps(sliced, registration(topics(N))))
    assert response.code == ResponseCode.SUCCESS and slices >= N // SLICE
    at_once.process_request(registration(topics(N)), "ch1")  # the sync driver runs the same steps
    assert sliced.rim.dump_tables() == at_once.rim.dump_tables()
    assert not sliced.rim.registering and sliced.rim.registered_addrs() == {ADDR}


def test_between_slices_each_topic_is_either_old_or_new_and_the_broker_is_not_yet_registered() -> None:
    p = fresh()
    finish(steps(p, registration(topics(N, queues=4))))
    gen = steps(p, registration(topics(N, queues=8), counter=2))
    seen_mixed = False
    while True:
        try:
            next(gen)
        except StopIteration as done:
            assert done.value.code == ResponseCode.SUCCESS
            break
        counts = {queues_of(p, f"T{i}") for i in range(N)}
        assert counts <= {4, 8}, counts  # never a half-written queue entry
        seen_mixed |= counts == {4, 8}
        assert p.rim.is_broker_topic_config_changed(ADDR, _version(2))  # still counts as a change
        if ADDR in p.rim.registering:  # begun: the not-ready gate waits for it to finish
            assert ADDR not in p.rim.registered_addrs()
    assert seen_mixed, "the registration was applied in one slice"
    assert {queues_of(p, f"T{i}") for i in range(N)} == {8}
    assert not p.rim.is_broker_topic_config_changed(ADDR, _version(2))


def _version(counter: int) -> DataVersion:
    return DataVersion(1, counter)


def test_a_broker_removed_mid_registration_leaves_nothing_behind() -> None:
    p = fresh()
    before = p.rim.dump_tables()
    gen = steps(p, registration(topics(N)))
    while p.rim.registering.get(ADDR) is None or p.rim.registering[ADDR].written == 0:
        next(gen)  # until the first slice of topics is written
    assert p.rim.on_channel_destroy(ADDR, "ch1")  # its connection closed
    response, _ = finish(gen)
    assert response.code == ResponseCode.SYSTEM_ERROR and "removed during its registration" in response.remark
    assert p.rim.dump_tables() == before and not p.rim.registering


def test_a_newer_registration_of_the_same_broker_wins_over_one_in_flight() -> None:
    p = fresh()
    old = steps(p, registration(topics(N, queues=4), counter=1))
    while p.rim.registering.get(ADDR) is None:
        next(old)  # begun, not finished
    new_response, _ = finish(steps(p, registration(topics(N, queues=8), counter=2), channel="ch2"))
    old_response, _ = finish(old)
    assert new_response.code == old_response.code == ResponseCode.SUCCESS
    assert old_response.remark is not None and "superseded" in old_response.remark
    assert {queues_of(p, f"T{i}") for i in range(N)} == {8}
    assert p.rim.broker_live_table[ADDR].channel == "ch2"
    assert not p.rim.is_broker_topic_config_changed(ADDR, _version(2))


def test_an_older_registration_finishing_its_reading_late_changes_nothing() -> None:
    p = fresh()
    old = steps(p, registration(topics(N, queues=4), counter=1, wire=True))  # JSON: read in slices
    next(old)  # arrived and reading, nothing begun
    assert not p.rim.registering
    finish(steps(p, registration(topics(N, queues=8), counter=2), channel="ch2"))
    after_new = p.rim.dump_tables()
    old_response, _ = finish(old)
    assert old_response.code == ResponseCode.SUCCESS and "superseded" in (old_response.remark or "")
    assert p.rim.dump_tables() == after_new


def test_a_truncated_body_is_refused_before_anything_is_written() -> None:
    p = fresh()
    finish(steps(p, registration(topics(10))))
    before = p.rim.dump_tables()
    request = registration(topics(N, queues=2), counter=2, wire=True)
    request = RemotingRequest(request.code, request.ext_fields, request.body[: len(request.body) * 2 // 3],
                              wire=True, version=479)
    response, _ = finish(steps(p, request))
    assert response.code == ResponseCode.SYSTEM_ERROR and "invalid request" in response.remark
    assert p.rim.dump_tables() == before


def test_invalid_topics_are_left_out_and_named_while_the_others_register() -> None:
    p = fresh()
    table = topics(SLICE * 2) | {"Bad": {"topicName": "Bad", "readQueueNums": -1, "writeQueueNums": 1, "perm": 6},
                                 "Key": {"topicName": "Other", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    response, _ = finish(steps(p, registration(table)))
    assert response.code == ResponseCode.SUCCESS
    assert "2 invalid topics not registered" in response.remark and "Bad" in response.remark
    assert p.rim.topic_count_of("broker-a") == SLICE * 2


def test_a_host_giving_up_mid_registration_leaves_the_next_one_to_write_everything() -> None:
    p = fresh()
    gen = steps(p, registration(topics(N, queues=4)))
    while p.rim.registering.get(ADDR) is None or p.rim.registering[ADDR].written == 0:
        next(gen)
    gen.close()  # the actor was shut down or the request cancelled
    assert not p.rim.registering
    assert p.rim.topics_wanted(ADDR, "broker-a", 0, _version(1)) == ALL  # its version was never recorded
    response, _ = finish(steps(p, registration(topics(N, queues=4))))
    assert response.code == ResponseCode.SUCCESS and p.rim.topic_count_of("broker-a") == N


def test_an_unchanged_registration_does_not_read_its_topics() -> None:
    p = fresh()
    finish(steps(p, registration(topics(N))))
    seq = p.rim.route_seq
    response, slices = finish(steps(p, registration(topics(N))))  # msgpack: the table is skipped
    assert response.code == ResponseCode.SUCCESS and slices == 0 and p.rim.route_seq == seq


def test_a_deleted_topic_comes_back_with_an_unchanged_registration_in_slices() -> None:
    p = fresh()
    finish(steps(p, registration(topics(N))))
    assert p.rim.delete_topic("T3") and p.rim.delete_topic(f"T{N - 1}")
    assert p.rim.topics_wanted(ADDR, "broker-a", 0, _version(1)) == {"T3", f"T{N - 1}"}
    response, _ = finish(steps(p, registration(topics(N), wire=True)))
    assert response.code == ResponseCode.SUCCESS
    assert queues_of(p, "T3") == 8 and queues_of(p, f"T{N - 1}") == 8 and not p.rim.has_missing_topics("broker-a")


def test_topics_the_broker_dropped_are_removed_only_after_the_whole_table_was_written() -> None:
    p = fresh(delete_topic_with_broker_registration=True)
    finish(steps(p, registration(topics(N))))
    response, _ = finish(steps(p, registration(topics(SLICE), counter=2)))
    assert response.code == ResponseCode.SUCCESS and p.rim.topic_count_of("broker-a") == SLICE
