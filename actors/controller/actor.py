"""The controller (RocketMQ 5's controller mode, RIP-44) as one async Ray actor.

It holds a `ControllerCore` (namesrv/controller) and gives it three things from Ray:

- a durable history: every event is written to Ray's GCS key-value store (namespaced, under
  `controller/<name>`) before it is applied or answered, and the log is compacted into a snapshot
  every `snapshot_every_events`; a (re)started actor rebuilds its state from there in `__init__`;
- liveness: brokers heartbeat (BROKER_HEARTBEAT) every second; a heartbeat may carry the broker
  actor's channel (`BrokerChannel`), which the actor watches like the NameServer does
  (actors.controller.channels), so a broker actor's definite death is acted on at once (not Ray's
  verdict on its node: a cut-off node's actors may still run, so that is left to the heartbeat
  timeout, by which a master's lease has fenced it: namesrv.broker.lease); `report_actor_death`
  takes deaths seen elsewhere;
- a control loop: the expired-heartbeat scan and the inactive-master scan, which elects.

Why the state is safe in the GCS KV (the issue's question, and design §8's answer):

- One writer. The actor is named and started `lifetime="detached"`, `max_restarts=-1`: Ray runs at
  most one instance at a time and restarts it (re-running `__init__`, which reloads the log) when
  its worker or node dies. Every request that changes state goes through its `EventScheduler`
  (actors.controller.scheduler), one at a time: check, persist, apply, answer. A change whose write
  failed is never applied nor acknowledged.
- Fenced anyway. Should a stale instance outlive its replacement (a partitioned node), its next
  write loses: events are written put-if-absent at the next index and the snapshot index is read
  back, so a stale writer finds out before it announces anything: it refuses that change and
  reloads the state from the log (`stale_reloads`), so it can never fork the history.
- Durable as the cluster. The GCS lives on the head node: it outlives any worker or other node, so
  killing the actor or its node loses nothing. The head node's own death loses the GCS, and with it
  this state, unless the cluster runs with GCS fault tolerance (an external Redis,
  RAY_REDIS_ADDRESS), which is also what keeps detached actors alive across a head restart.
- No consensus of our own: ordering comes from the single actor, durability from the GCS.

While the controller is down, routing and sends keep working (brokers keep their roles); only
elections wait. After a restart its heartbeat table is empty, so elections caused by missing
heartbeats wait one heartbeat timeout (`election_grace_ms`); a reported death does not wait.

Brokers learn of a new master from the answer to their next heartbeat (it carries the set's master
and epochs) or at once by long-polling `wait_for_change` (RocketMQ pushes NOTIFY_BROKER_ROLE_CHANGED).

How a Ray method refuses (one convention, as RocketMQ turns every failure into a response code):
a method named after a controller request code answers a `ControllerResult`, the controller's
response (code, remark, header, body: what its TCP answer is encoded from), whose code and remark
are the refusal's (CONTROLLER_INVALID_REQUEST, CONTROLLER_NOT_LEADER, ...). A method answering
anything else raises `MQServerError` (namesrv.remoting.command) with the code and remark when it
refuses (`set_failpoint`, `wait_failpoint` with an unknown failpoint: CONTROLLER_INVALID_REQUEST);
Ray hands it to the caller as a RayTaskError that is also an MQServerError. No method answers an
error dict or raises a bare ValueError or PermissionError.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import ray

from actors.controller.channels import BrokerChannels
from actors.controller.gcs_kv import KV_NAMESPACE, GcsKV
from actors.controller.scheduler import EventScheduler
from actors.namesrv.housekeeping import BrokerChannel
from actors.runtime.ray_info import advertised_address
from namesrv.common.control_loop import ControlLoop
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.controller.config import ControllerConfig
from namesrv.controller.core import ControllerCore
from namesrv.controller.event_log import EventLog
from namesrv.controller.heartbeat import BrokerIdentity
from namesrv.controller.replicas_info_manager import ControllerResult
from namesrv.controller.wire import WireCall, WireRequestError, decode_request, encode_result
from namesrv.protocol.codes import ResponseCode
from namesrv.remoting.command import RemotingRequest, RemotingResponse, error
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.pipeline import Answer, RequestContext, RequestPipeline
from namesrv.remoting.server import RemotingServer
from namesrv.remoting.wire_command import RemotingCommand
from namesrv.routeinfo.wire_encoder import wants_standard_json

log = logging.getLogger(__name__)

CONTROLLER_NAME = "controller"


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def kv_prefix(ray_namespace: str, name: str) -> str:
    return f"{ray_namespace}/{name}"


class ControllerActor:
    def __init__(self, namespace: str, name: str = CONTROLLER_NAME, config: ControllerConfig | None = None,
                 kv_namespace: str = KV_NAMESPACE, remoting: RemotingServerConfig | None = None) -> None:
        """`namespace`: the Ray namespace the actor is named in (its state's key prefix; the runtime
        context inside the actor reports the creating job's namespace instead). `remoting`: also
        serve RocketMQ's controller codes over TCP."""
        self.name = name
        self.config = config or ControllerConfig()
        self.reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        self.incarnation = uuid.uuid4().hex[:12]
        self.prefix = kv_prefix(namespace, name)
        started = time.monotonic()
        self.core = ControllerCore(self.config, monotonic_ms, EventLog(GcsKV(kv_namespace), self.prefix))
        self.restore_ms = (time.monotonic() - started) * 1000
        assert self.core.event_log is not None
        self.restored_events = self.core.event_log.last_index
        self.elections = 0
        self.loop = ControlLoop(name)
        self.scheduler = EventScheduler(name, self.core)
        """Every change: checked, persisted, applied, answered, one at a time."""
        self.channels = BrokerChannels(name, self.loop, self._on_broker_dead)
        scan_s = self.config.scan_not_active_broker_interval_ms / 1000
        self.loop.every("scan-not-active-broker", scan_s, self._scan_not_active_broker, initial_delay_s=scan_s)
        master_scan_s = self.config.scan_inactive_master_interval_ms / 1000
        self.loop.every("scan-inactive-master", master_scan_s, self._reelect, initial_delay_s=master_scan_s)
        self.pipeline = RequestPipeline(name, self._encode)
        """Every TCP request: decoded into a call of this actor's methods, answered as RocketMQ's."""
        self.pipeline.register_default(self._serve)
        self.remoting = RemotingServer(
            name, lambda conn, cmd: self.pipeline.handle_command(cmd, RequestContext(conn.token, conn.peer)),
            self.channels.connection_closed, remoting.server_channel_max_idle_time_seconds if remoting else 0,
            lambda coro: self.loop.spawn("remoting-request", coro))
        self.remoting_address: str | None = None
        if remoting is not None:
            self.remoting.bind(remoting.listen_host, remoting.listen_port)  # a taken port fails the start
            self.remoting_address = advertised_address(remoting, self.remoting.port)
            self.loop.spawn("remoting-serve", self.remoting.serve())
        self.loop.start()
        log.info("%s: restored %d events (snapshot at %d) in %.1f ms%s", name, self.restored_events,
                 self.core.event_log.snapshot_index, self.restore_ms, " after a restart" if self.reconstructed else "")

    async def shutdown(self) -> None:
        await self.remoting.stop()
        await self.loop.shutdown()

    # ------------------------------------------------------------------ TCP (RocketMQ's remoting protocol)
    def _serve(self, request: RemotingRequest, ctx: RequestContext) -> Answer:
        try:
            call = decode_request(request.code, request.ext_fields, request.body)
        except KeyError:
            return error(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")
        except WireRequestError as e:
            return error(Code.CONTROLLER_INVALID_REQUEST, str(e))
        return self._wire_call(ctx, call)

    async def _wire_call(self, ctx: RequestContext, call: WireCall) -> RemotingResponse:
        result: ControllerResult = await getattr(self, call.method)(**call.kwargs)
        if call.method == "heartbeat" and result.ok:  # a broker's connection is its channel (RocketMQ)
            self.channels.bind(BrokerIdentity(call.kwargs["broker_name"], call.kwargs["broker_id"]), ctx.channel)
        return RemotingResponse(int(result.code), result.remark, payload=result)

    @staticmethod
    def _encode(cmd: RemotingCommand, response: RemotingResponse) -> RemotingCommand:
        if isinstance(response.payload, ControllerResult):
            answer = encode_result(response.payload, wants_standard_json(cmd))
            return cmd.response(answer.code, answer.remark, answer.ext_fields, answer.body)
        return cmd.response(int(response.code), response.remark, None, response.body)

    # ------------------------------------------------------------------ failpoints (fault-injection tests)
    async def set_failpoint(self, name: str) -> None:
        """Hold the next change at `name` ("before-persist" or "after-persist") for good: a test
        then kills the actor there. An unknown name raises MQServerError."""
        self.scheduler.set_failpoint(name)

    async def wait_failpoint(self, name: str, timeout_s: float) -> bool:
        """True once a change is held at `name`; MQServerError for a failpoint not set."""
        return await self.scheduler.wait_failpoint(name, timeout_s)

    # ------------------------------------------------------------------ liveness and elections
    def _on_broker_dead(self, ident: BrokerIdentity) -> None:
        self.loop.spawn("actor-death", self.report_actor_death(ident.broker_name, ident.broker_id))

    async def _scan_not_active_broker(self) -> None:
        expired = self.core.scan_not_active_brokers()
        for ident in expired:
            self.channels.record_death(ident, "heartbeat expired")
        masters = {n: s.master_broker_id for n, s in self.core.manager.sync_state_info.items()}
        if any(masters.get(i.broker_name) == i.broker_id for i in expired):
            await self._reelect()

    async def _reelect(self) -> None:
        for broker_name in self.core.broker_sets_to_reelect():
            await self._elect_by_controller(broker_name)

    async def _elect_by_controller(self, broker_name: str) -> ControllerResult:
        result = await self.scheduler.mutate(lambda: self.core.check_elect_master(broker_name))
        if result.ok:
            self.elections += 1
            log.warning("%s: elected broker %s of %s as master, epoch %s", self.name,
                        result.header.get("masterBrokerId"), broker_name, result.header.get("masterEpoch"))
        else:
            log.warning("%s: election for %s: %s %s", self.name, broker_name, result.code, result.remark)
        return result

    async def report_actor_death(self, broker_name: str, broker_id: int) -> ControllerResult | None:
        """A broker actor is definitely dead (Ray says so): no timeout; its set is re-elected at once
        if it was the master. Returns the election's answer, or None when none was needed."""
        if self.core.report_broker_dead(broker_name, broker_id):
            return await self._elect_by_controller(broker_name)
        return None

    # ------------------------------------------------------------------ requests (RocketMQ's codes)
    async def heartbeat(self, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int, *,
                        heartbeat_timeout_ms: int | None = None, epoch: int | None = None,
                        max_offset: int | None = None, confirm_offset: int | None = None,
                        election_priority: int | None = None, channel: BrokerChannel | None = None) -> ControllerResult:
        """BROKER_HEARTBEAT (904). `channel`: the broker actor to watch for a definite death. A
        heartbeat that arrives after its channel closed (sent just before the broker died) is refused:
        it must not make a dead broker look alive again."""
        if channel is not None and self.channels.is_closed(channel.token):
            return ControllerResult(Code.CONTROLLER_BROKER_NOT_ALIVE, f"channel {channel.token} is closed")
        result = self.core.heartbeat(cluster_name, broker_name, broker_addr, broker_id,
                                     heartbeat_timeout_ms=heartbeat_timeout_ms, epoch=epoch, max_offset=max_offset,
                                     confirm_offset=confirm_offset, election_priority=election_priority)
        if result.ok and channel is not None:
            self.channels.watch(BrokerIdentity(broker_name, broker_id), channel)
        return result

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""
        return self.core.get_next_broker_id(cluster_name, broker_name)

    async def apply_broker_id(self, cluster_name: str, broker_name: str, applied_broker_id: int,
                              register_check_code: str) -> ControllerResult:
        """CONTROLLER_APPLY_BROKER_ID (1013)."""
        return await self.scheduler.mutate(lambda: self.core.check_apply_broker_id(
            cluster_name, broker_name, applied_broker_id, register_check_code))

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              broker_address: str) -> ControllerResult:
        """CONTROLLER_REGISTER_BROKER (1003)."""
        return await self.scheduler.mutate(lambda: self.core.check_register_broker(
            cluster_name, broker_name, broker_id, broker_address))

    async def alter_sync_state_set(self, broker_name: str, master_broker_id: int, master_epoch: int,
                                   new_sync_state_set: list[int], sync_state_set_epoch: int) -> ControllerResult:
        """CONTROLLER_ALTER_SYNC_STATE_SET (1001)."""
        return await self.scheduler.mutate(lambda: self.core.check_alter_sync_state_set(
            broker_name, master_broker_id, master_epoch, new_sync_state_set, sync_state_set_epoch))

    async def elect_master(self, broker_name: str, broker_id: int | None = None,
                           designate_elect: bool = False) -> ControllerResult:
        """CONTROLLER_ELECT_MASTER (1002): a broker asking with its id, or an admin designating one."""
        result = await self.scheduler.mutate(
            lambda: self.core.check_elect_master(broker_name, broker_id, designate_elect))
        if result.ok:
            self.elections += 1
        return result

    async def clean_broker_data(self, broker_name: str, broker_ids: list[int] | None = None,
                                clean_living_broker: bool = False) -> ControllerResult:
        return await self.scheduler.mutate(lambda: self.core.check_clean_broker_data(broker_name, broker_ids,
                                                                            clean_living_broker))

    async def get_replica_info(self, broker_name: str) -> ControllerResult:
        """CONTROLLER_GET_REPLICA_INFO (1004)."""
        return self.core.get_replica_info(broker_name)

    async def get_sync_state_data(self, broker_names: list[str] | None = None) -> ControllerResult:
        """CONTROLLER_GET_SYNC_STATE_DATA (1006); None: every broker set."""
        return self.core.get_sync_state_data(broker_names)

    async def get_metadata(self) -> ControllerResult:
        """CONTROLLER_GET_METADATA_INFO (1005): one controller, always the leader."""
        address = self.remoting_address or self.name
        return ControllerResult(header={"group": self.name, "controllerLeaderId": self.name,
                                        "controllerLeaderAddress": address, "isLeader": True,
                                        "peers": f"{self.name}:{address};"})

    # ------------------------------------------------------------------ role changes (NOTIFY_BROKER_ROLE_CHANGED)
    async def wait_for_change(self, known: dict[str, tuple[int, int]],
                              timeout_s: float) -> dict[str, ControllerResult]:
        """Long-poll: the replica info of every broker set whose (masterEpoch, syncStateSetEpoch)
        differs from `known`, as soon as there is one, or {} after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            changed = {n: self.core.get_replica_info(n) for n, epochs in self.core.epochs().items()
                       if n in known and tuple(known[n]) != epochs}
            if changed:
                return changed
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            if not await self.scheduler.wait_change(remaining):
                return {}

    # ------------------------------------------------------------------ inspection
    async def stats(self) -> dict[str, Any]:
        event_log = self.core.event_log
        assert event_log is not None
        return {
            "name": self.name,
            "reconstructed": self.reconstructed,
            "incarnation": self.incarnation,
            "restored_events": self.restored_events,
            "restore_ms": self.restore_ms,
            "last_index": event_log.last_index,
            "snapshot_index": event_log.snapshot_index,
            "stale_reloads": self.scheduler.stale_reloads,
            "elections": self.elections,
            "deaths": list(self.channels.deaths),
            "in_grace": self.core.in_grace(),
            "live_brokers": sorted((i.broker_name, i.broker_id) for i in self.core.heartbeats.live),
            "watched_channels": self.channels.watch_count,
            "remoting_address": self.remoting_address,
            "epochs": self.core.epochs(),
            "sets": self._sets(),
        }

    def _sets(self) -> dict[str, dict[str, Any]]:
        """Each broker set as the controller holds it: master, epochs, SyncStateSet, replicas."""
        manager = self.core.manager
        out: dict[str, dict[str, Any]] = {}
        for name, sync in sorted(manager.sync_state_info.items()):
            info = manager.replica_info.get(name)
            out[name] = {"master_broker_id": sync.master_broker_id, "master_epoch": sync.master_epoch,
                         "master_address": info.address_of(sync.master_broker_id) if info is not None else None,
                         "sync_state_set": sorted(sync.sync_state_set),
                         "sync_state_set_epoch": sync.sync_state_set_epoch,
                         "replicas": {str(i): a for i, a in info.broker_id_table().items()} if info is not None else {}}
        return out

    async def run_scan_now(self) -> None:
        """Run both scans at once (tests and admin tools)."""
        await self._scan_not_active_broker()
        await self._reelect()
