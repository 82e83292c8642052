"""The NameServer as an async Ray actor: thin methods over its `NamesrvController`.

One method per request code, named as the code in lower case (`register_broker`,
`get_routeinfo_by_topic`, ...), plus `process(request)` for any code, the route-change long-poll
(`listen_for_change`), snapshot collection and inspection. NameServers never talk to each other.

How a Ray method refuses (one convention, as RocketMQ turns every failure into a response code):
a method named after a request code, and `process`, answers a `RemotingResponse` whose code and
remark are the refusal's, exactly as the same request over TCP (a request that is not one at all
included: SYSTEM_ERROR). A method answering plain data raises `MQServerError`
(namesrv.remoting.command) with the code and remark when it refuses: `listen_for_change` with held
versions that are not {topic: int} (SYSTEM_ERROR) or credentials the ACL refuses (NO_PERMISSION, as
the route query would be answered); Ray hands it to the caller as a RayTaskError that is also an
MQServerError. No method answers an error dict or raises a bare ValueError or PermissionError.
"""

from __future__ import annotations

import gc
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from actors.namesrv.housekeeping import BrokerChannel
from actors.namesrv.lifecycle import NamesrvController, RemovalEvent
from actors.namesrv.status import namesrv_status
from actors.runtime.metrics import namesrv_metrics
from actors.runtime.ray_info import advertised_address, was_restarted
from namesrv.common.loop_probe import LoopProbe
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.remoting.wire_log import WireRecord
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.long_poll import RouteChange, check_topic_versions
from namesrv.routeinfo.snapshot import DEFAULT_READER

if TYPE_CHECKING:
    import pyarrow as pa


class NameServerActor:
    def __init__(
        self, name: str, config: NamesrvConfig | None = None, data_dir: str | None = None,
        remoting: RemotingServerConfig | None = None,
    ) -> None:
        """`remoting` None: reachable over Ray only; else also a RocketMQ remoting server over TCP."""
        self.name = name
        node_dir = Path(data_dir).expanduser() / name if data_dir else None
        config = (config or NamesrvConfig()).model_copy()
        if node_dir is not None:
            config.kv_config_path = str(node_dir / "kvConfig.json")
            config.config_store_path = str(node_dir / "namesrv.json")
        self.reconstructed = was_restarted()
        self.controller = NamesrvController(name, config, node_dir, remoting=remoting, metrics=namesrv_metrics(name),
                                            restarted=self.reconstructed)
        self.remoting_address: str | None = None
        self._probe: LoopProbe | None = None
        if remoting is not None:
            self.remoting_address = advertised_address(remoting, self.controller.remoting.port)
        if self.reconstructed:
            self.controller.snapshots.resume_after_restart()
        self.controller.start()
        # Everything loaded so far (Ray's worker, the imports, a restored table) lives as long as the
        # process: out of the collector's sight, so no full collection walks it again (see
        # actors.namesrv.requests.FREEZE_AFTER_BYTES for the tables a registration grows).
        gc.freeze()

    async def shutdown(self) -> None:
        """Stop every background step and watch; the actor can then be killed without loose ends."""
        await self.controller.shutdown()

    # ------------------------------------------------------------------ request entry points
    async def _call(self, code: int, ext: dict[str, Any], body: bytes | None = None,
                    channel: BrokerChannel | None = None) -> RemotingResponse:
        """One request through the NameServer's pipeline, exactly as a TCP frame goes."""
        return await resolve(self.controller.pipeline.handle(RemotingRequest(code, ext, body), RequestContext(channel)))

    async def process(self, request: RemotingRequest, channel: BrokerChannel | None = None) -> RemotingResponse:
        """Generic entry: any request code, as a network front end would pass it."""
        if not isinstance(request, RemotingRequest):
            return error(ResponseCode.SYSTEM_ERROR, f"request must be a RemotingRequest, got {type(request).__name__}")
        return await resolve(self.controller.pipeline.handle(request, RequestContext(channel)))

    async def register_broker(
        self, body: bytes | None = None, *, channel: BrokerChannel | None = None, **ext: Any
    ) -> RemotingResponse:
        """Applied in slices: a broker with 10,000s of topics never holds other requests for long."""
        return await self._call(RequestCode.REGISTER_BROKER, ext, body, channel)

    async def unregister_broker(self, *, channel: BrokerChannel | None = None, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.UNREGISTER_BROKER, ext, None, channel)

    async def query_data_version(self, body: bytes | None = None, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.QUERY_DATA_VERSION, ext, body)

    async def broker_heartbeat(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.BROKER_HEARTBEAT, ext)

    async def get_routeinfo_by_topic(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)

    async def get_broker_cluster_info(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_BROKER_CLUSTER_INFO, ext)

    async def wipe_write_perm_of_broker(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, ext)

    async def add_write_perm_of_broker(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.ADD_WRITE_PERM_OF_BROKER, ext)

    async def get_all_topic_list_from_nameserver(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, ext)

    async def delete_topic_in_namesrv(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    async def register_topic_in_namesrv(self, body: bytes | None = None, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, ext, body)

    async def get_topics_by_cluster(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_TOPICS_BY_CLUSTER, ext)

    async def get_system_topic_list_from_ns(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, ext)

    async def put_kv_config(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.PUT_KV_CONFIG, ext)  # answered once durable

    async def get_kv_config(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_KV_CONFIG, ext)

    async def delete_kv_config(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.DELETE_KV_CONFIG, ext)  # answered once durable

    async def get_kvlist_by_namespace(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_KVLIST_BY_NAMESPACE, ext)

    async def update_namesrv_config(self, body: bytes | None = None, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.UPDATE_NAMESRV_CONFIG, ext, body)

    async def get_namesrv_config(self, **ext: Any) -> RemotingResponse:
        return await self._call(RequestCode.GET_NAMESRV_CONFIG, ext)

    # ------------------------------------------------------------------ route-change push
    async def listen_for_change(
        self, topic_versions: dict[str, int], timeout_s: float | None = None, auth: dict[str, str] | None = None
    ) -> dict[str, RouteChange]:
        """Long-poll: {topic: RouteChange(version, route)} for every held topic whose route version
        differs from the caller's, as soon as one does, or {} after the timeout. `route` is None for
        a topic that has no route (any more). With ACL on, `auth` (AccessKey, Signature over the
        held topics) must pass as a route query would. A refused poll raises MQServerError:
        SYSTEM_ERROR for malformed `topic_versions`, NO_PERMISSION for the ACL's refusal."""
        check_topic_versions(topic_versions)
        self.controller.check_long_poll(topic_versions, auth or {})
        return await self.controller.long_poll.listen_for_change(topic_versions, timeout_s)

    # ------------------------------------------------------------------ snapshots and inspection
    async def drain_snapshots(self, take_now: bool = True, reader: str = DEFAULT_READER,
                              lease_ms: int | None = None) -> list[pa.RecordBatch]:
        """Hand over every snapshot buffered since `reader`'s previous drain; `take_now` adds one of
        this instant. A snapshot is forgotten once every reader has taken it (one reader: at once).
        Each drain renews `reader`'s lease (`lease_ms`, at least `snapshot_reader_lease_ms`): the
        NameServer takes snapshots only while some reader holds one."""
        return await self.controller.snapshots.drain(take_now, reader, lease_ms)

    async def release_snapshot_reader(self, reader: str) -> None:
        """`reader` is done collecting: it no longer holds snapshots back from being forgotten."""
        self.controller.snapshots.release(reader)

    async def get_status(self) -> dict[str, Any]:
        status = namesrv_status(self.controller)
        status.update(pid=os.getpid(), node_id=ray.get_runtime_context().get_node_id(),
                      reconstructed=self.reconstructed, remoting_address=self.remoting_address,
                      remoting=asdict(self.controller.remoting.stats()))
        return status

    async def get_removals(self) -> list[RemovalEvent]:
        return list(self.controller.removals)

    async def dump_tables(self) -> dict[str, object]:
        return self.controller.rim.dump_tables()

    async def get_wire_log(self) -> list[WireRecord]:
        """The most recent requests served over TCP, oldest first."""
        return self.controller.wire_log.records()

    async def get_remoting_address(self) -> str | None:
        """host:port of this NameServer's RocketMQ remoting server (what a client's namesrvAddr lists)."""
        return self.remoting_address

    async def loop_probe(self, since: float = 0.0) -> dict[str, Any]:
        """The event loop's stalls after `since` (monotonic seconds) and why (`namesrv.common.loop_probe`);
        the probe starts on the first call (diagnosis: benchmarks), and the first report is empty."""
        if self._probe is None:
            self._probe = LoopProbe()
            self._probe.start()
        return self._probe.report(since)

    async def ping(self) -> str:
        return self.name
