"""A controller-mode broker's side of failover (RocketMQ 5's ReplicasManager, RIP-44).

With a controller deployed (actors.controller.start) the controller, not brokerId/brokerRole, decides
which replica of a broker set is master. This object, inside the broker's event loop:

1. gets and applies its controller brokerId (ids start at 1), kept durably in its store
   (namesrv.broker.metadata), and applies the same pair again after a restart;
2. registers with the controller and, when the set has no master, asks to be elected;
3. heartbeats every `controller_heartbeat_interval_ms` with its epoch, its log's end and its actor
   channel (the controller then sees its death at once), and long-polls `wait_for_change`, so a
   role change arrives in milliseconds (RocketMQ pushes NOTIFY_BROKER_ROLE_CHANGED);
4. applies role changes (`change_to_master` / `change_to_slave`, below);
5. as master, keeps the controller's SyncStateSet: a slave that caught up joins locally at once and
   then at the controller; one that fell behind leaves only once the controller agreed.

Every controller call is an awaited Ray call with a timeout, never a blocking one, and a controller
that is down only delays elections: roles, sends and routing go on as they are.

Becoming master at epoch E: stop replicating, flush, `epoch_cache.append_entry(E, log end)`, role =
the configured master role, master-only services on, register with every NameServer as brokerId 0
with the DataVersion's stateVersion = E. Becoming slave: fence first (sends refused), master-only
services off, wait for stored-but-unanswered sends, register under its controller id, find the
consistent point against the new master's epoch entries, truncate the log and the epoch file there
(`truncations` reports it), adopt the master's epoch entries, then replicate from it.

Differences from RocketMQ 5.3: a broker deployed as a slave (brokerId > 0) waits
`controller_first_elect_delay_ms` before asking to be a new set's first master; the slave's epoch
entries are copied once per master term (at `change_to_slave`) instead of in every HA handshake;
replication is the Ray transport of actors.broker.ha.service, so the master's address is mapped to its
actor (`actor_of`). The delay-offset table is copied with the other metadata (every
`slave_sync_interval_ms`), so a promoted slave delivers scheduled messages from where its master
was at the last copy (what the master delivered after it is delivered again: at least once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from ray.exceptions import RayError

from actors.broker.ha.replica_owner import ReplicaOwner
from actors.broker.ha.service import HAClient
from actors.controller.actor import CONTROLLER_NAME
from actors.namesrv.housekeeping import BrokerChannel
from actors.runtime.handles import ActorHandles, is_tcp_address
from namesrv.acl.plain_acl import signature
from namesrv.broker.lease import MasterLease
from namesrv.broker.metadata import BrokerMetadata, load_metadata, save_metadata
from namesrv.common.clock import monotonic_clock
from namesrv.controller.codes import ControllerResponseCode as Code
from namesrv.protocol.constants import MASTER_ID
from namesrv.remoting.command import MQServerError
from namesrv.store.ha.epoch_cache import EpochEntry, EpochFileCache, find_consistent_point
from namesrv.store.ha.transfer import ReplicationError
from namesrv.store.ha.wire import peer_call_ext
from namesrv.store.types import BrokerRole

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 5.0
"""A controller call that has not answered in this long is given up (the controller is down)."""
WAIT_FOR_CHANGE_S = 10.0
RETRY_S = 0.3
SYNC_STATE_INTERVAL_S = 0.2
SENDS_DRAIN_S = 5.0
MASTER_EPOCH_WAIT_S = 5.0


class ReplicasManager:
    def __init__(self, owner: ReplicaOwner, namespace: str, deployed_id: int, master_role: BrokerRole,
                 channel: BrokerChannel | None, controller_name: str = CONTROLLER_NAME) -> None:
        self.owner = owner
        self.namespace = namespace
        self.deployed_id = deployed_id
        self.master_role = master_role
        self.channel = channel
        self.controller_name = controller_name
        self._handles = ActorHandles(namespace)
        ident = owner.identity
        self.cluster_name, self.broker_name, self.addr = ident.cluster_name, ident.broker_name, ident.broker_addr
        self.metadata_path = owner.store_dir / "config" / "brokerMetadata.json"
        meta = load_metadata(self.metadata_path, self.cluster_name, self.broker_name)
        self.metadata: BrokerMetadata | None = meta
        self.epoch_cache = EpochFileCache.load(owner.store_dir / "store" / "epochFileCheckpoint.json")
        self.master_id: int | None = None
        self.master_addr: str | None = None
        self.master_epoch = -1
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = -1
        self.registered = False
        """Joined the controller (id applied, registered): the role is the controller's from now on."""
        self.role_decided = asyncio.Event()
        self.truncations: list[dict[str, Any]] = []
        self.controller_errors = 0
        self.last_controller_error: str | None = None
        self.diverged: str | None = None
        self._lock = asyncio.Lock()
        self._ha_task: asyncio.Task[None] | None = None
        lease_ms = owner.config.controller_master_lease_ms
        self.lease = MasterLease(lease_ms, monotonic_clock) if lease_ms is not None else None
        owner.role.lease = self.lease

    @property
    def broker_id(self) -> int | None:
        return self.metadata.broker_id if self.metadata is not None else None

    # ------------------------------------------------------------------ controller calls
    async def _call(self, method: str, *args: Any, timeout_s: float = CALL_TIMEOUT_S, **kwargs: Any) -> Any:
        """The controller's answer, or None when it is down or slow (never raises)."""
        try:
            handle = await self._handles.aget(self.controller_name)
            return await asyncio.wait_for(getattr(handle, method).remote(*args, **kwargs), timeout_s)
        except (RayError, TimeoutError, ValueError) as e:
            self._handles.forget(self.controller_name)
            self.controller_errors += 1
            text = f"{method}: {type(e).__name__}"
            if text != self.last_controller_error:
                log.warning("%s: controller call %s failed: %s", self.addr, method, e)
            self.last_controller_error = text
            return None

    # ------------------------------------------------------------------ joining
    async def run(self) -> None:
        """Join the controller, then follow its role changes until cancelled (shutdown)."""
        while not await self._guarded(self._join()):
            await asyncio.sleep(RETRY_S)
        self.registered = True
        while True:
            known = (self.master_epoch, self.sync_state_set_epoch)
            changes = await self._call("wait_for_change", {self.broker_name: known},
                                       WAIT_FOR_CHANGE_S, timeout_s=WAIT_FOR_CHANGE_S + CALL_TIMEOUT_S)
            for result in (changes or {}).values():
                if result.ok:
                    await self._guarded(self.apply(result.header, result.body))
            if changes is None or (changes and known == (self.master_epoch, self.sync_state_set_epoch)):
                await asyncio.sleep(RETRY_S)  # controller down, or a change this replica cannot take

    async def _guarded(self, step: Coroutine[Any, Any, bool | None]) -> bool:
        """A step whose failure (a store or epoch file that could not be written) is logged and
        retried by the next change or heartbeat, instead of ending the follow loop."""
        try:
            return bool(await step)
        except (OSError, ValueError, ReplicationError) as e:  # EpochCacheError, BrokerMetadataError: ValueErrors
            log.exception("%s: controller-mode step failed: %s", self.addr, e)
            await asyncio.sleep(RETRY_S)
            return False

    async def _join(self) -> bool:
        if self.metadata is None:
            got = await self._call("get_next_broker_id", self.cluster_name, self.broker_name)
            if got is None or not got.ok:
                return False
            meta = BrokerMetadata(self.cluster_name, self.broker_name, int(got.header["nextBrokerId"]),
                                  f"{self.addr};{int(time.time() * 1000)}")
            applied = await self._call("apply_broker_id", self.cluster_name, self.broker_name, meta.broker_id,
                                       meta.register_check_code)
            if applied is None or not applied.ok:
                return False  # another replica took that id first: ask again
            await asyncio.to_thread(save_metadata, self.metadata_path, meta)
            self.metadata = meta
            log.info("%s: controller granted brokerId %d in %s", self.addr, meta.broker_id, self.broker_name)
        else:  # a restart (or a controller that lost its state): claim the same pair again
            applied = await self._call("apply_broker_id", self.cluster_name, self.broker_name,
                                       self.metadata.broker_id, self.metadata.register_check_code)
            if applied is None:
                return False
            if not applied.ok:
                log.error("%s: controller refused our brokerId %d: %s", self.addr, self.metadata.broker_id,
                          applied.remark)
        my_id = self.metadata.broker_id
        self.owner.role.broker_id = my_id
        await self.heartbeat()  # alive before anything is decided: an election must count this replica
        reg = await self._call("register_broker", self.cluster_name, self.broker_name, my_id, self.addr)
        if reg is None or not reg.ok:
            return False
        if reg.header.get("masterBrokerId") is not None:
            await self.apply(reg.header, reg.body)
            return True
        if self.deployed_id != MASTER_ID:
            await asyncio.sleep(self.owner.config.controller_first_elect_delay_ms / 1000)
        await self._elect(my_id)
        return True

    async def _elect(self, my_id: int) -> None:
        elected = await self._call("elect_master", self.broker_name, my_id)
        if elected is not None and (elected.ok or elected.code == Code.CONTROLLER_MASTER_STILL_EXIST):
            await self.apply(elected.header, elected.body)

    # ------------------------------------------------------------------ periodic
    async def heartbeat(self) -> None:
        my_id = self.broker_id
        if my_id is None:
            return
        lease = self.lease
        sent_ms = lease.clock() if lease is not None else 0
        result = await self._call("heartbeat", self.cluster_name, self.broker_name, self.addr, my_id,
                                  epoch=self.epoch_cache.last_epoch(), max_offset=self.owner.store.size_bytes(),
                                  channel=self.channel)
        if result is not None and result.ok and lease is not None:
            lease.renewed(sent_ms)  # the controller heard from us no earlier than sent_ms
        if result is None or not self.registered:
            return
        h = result.header
        if result.ok and h.get("masterEpoch") is not None and int(h["masterEpoch"]) > self.master_epoch:
            await self.apply(h, None)  # deposed while the long poll was away: fence now

    async def maintain_sync_state_set(self) -> None:
        """Master only: tell the controller who joined; drop who fell behind once it agreed."""
        role = self.owner.role
        my_id = self.broker_id
        if not self.registered or not role.writable or my_id is None or self.master_id != my_id:
            return
        local = set(role.sync.members)
        stale = role.sync.stale()
        wanted = local - stale
        if wanted == self.sync_state_set:
            return
        result = await self._call("alter_sync_state_set", self.broker_name, my_id, self.master_epoch,
                                  sorted(wanted), self.sync_state_set_epoch)
        if result is None:
            return
        if not result.ok:
            log.warning("%s: alter SyncStateSet to %s refused: %s %s", self.addr, sorted(wanted), result.code,
                        result.remark)
            info = await self._call("get_replica_info", self.broker_name)
            if info is not None and info.ok:
                await self.apply(info.header, info.body)
            return
        self.sync_state_set = set(result.body["syncStateSet"])
        self.sync_state_set_epoch = int(result.body["syncStateSetEpoch"])
        if stale:
            role.remove_members(stale)

    # ------------------------------------------------------------------ role changes
    async def apply(self, header: dict[str, Any], body: dict[str, Any] | None) -> None:
        """A set's state from the controller (its master, epochs and SyncStateSet)."""
        async with self._lock:
            epoch = header.get("masterEpoch")
            if epoch is None or int(epoch) < self.master_epoch:
                return
            epoch = int(epoch)
            master_id = header.get("masterBrokerId")
            master_id = int(master_id) if master_id is not None else None
            master_addr = header.get("masterAddress")
            role = self.owner.role
            my_id = self.broker_id
            if master_id is not None and master_id == my_id:
                if not role.writable or role.master_epoch != epoch:
                    await self.change_to_master(epoch)
            elif master_id is None:
                if role.writable or self.master_id is not None:
                    await self.change_to_slave(None, None, epoch)
            elif role.writable or (master_id, master_addr, epoch) != (self.master_id, self.master_addr,
                                                                      self.master_epoch):
                await self.change_to_slave(master_id, master_addr, epoch)
            self.master_id, self.master_addr, self.master_epoch = master_id, master_addr, epoch
            if body is not None and "syncStateSet" in body:
                self.sync_state_set = set(body["syncStateSet"])
                self.sync_state_set_epoch = int(body.get("syncStateSetEpoch", header.get("syncStateSetEpoch", -1)))
            elif header.get("syncStateSetEpoch") is not None:
                self.sync_state_set_epoch = max(self.sync_state_set_epoch, int(header["syncStateSetEpoch"]))
            self.role_decided.set()

    async def change_to_master(self, epoch: int) -> None:
        owner, my_id = self.owner, self.broker_id
        assert my_id is not None
        await self._stop_replicating()
        await asyncio.to_thread(owner.store.flush)
        end = owner.store.size_bytes()
        cache = self.epoch_cache

        def record_term() -> None:
            if cache.last_epoch() == epoch:
                return  # this term is recorded already (the master restarted within its own term)
            cache.truncate_suffix_by_offset(end + 1)  # the old master's terms this log never reached
            cache.append_entry(epoch, end)

        await asyncio.to_thread(record_term)
        owner.processor.context.metadata.apply_new()  # every topic its log holds, under its own config
        owner.processor.context.transactions.catch_up()  # every decision of its old master
        owner.role.change_role(self.master_role, epoch, broker_id=my_id)
        self.sync_state_set = {my_id}
        owner.start_master_services()
        log.warning("%s: master of %s at epoch %d from offset %d", self.addr, self.broker_name, epoch, end)
        await owner.reregister(MASTER_ID, epoch)

    async def change_to_slave(self, master_id: int | None, master_addr: str | None, epoch: int) -> None:
        owner, my_id = self.owner, self.broker_id
        assert my_id is not None
        was_master = owner.role.writable
        owner.role.change_role(BrokerRole.SLAVE, epoch)  # the fence: refuse sends before anything else
        await owner.stop_master_services()
        deadline = time.monotonic() + SENDS_DRAIN_S
        while owner.processor.context.sends_waiting > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # stored-but-unanswered sends finish (answered as not acknowledged)
        await self._stop_replicating()
        log.warning("%s: slave of %s at epoch %d (master %s)%s", self.addr, self.broker_name, epoch, master_addr,
                    ", deposed" if was_master else "")
        await owner.reregister(my_id, epoch)
        if master_id is None or master_addr is None:
            return
        self._ha_task = owner.loop.spawn("ha-follow", self._follow(my_id, master_addr, epoch))

    async def _follow(self, my_id: int, master_addr: str, epoch: int) -> None:
        """Find the master's actor, reconcile with it (retried until it has recorded its term), then
        replicate from it until cancelled (the next role change)."""
        owner = self.owner
        while True:
            actor = await self.actor_of(master_addr)
            if actor is not None:
                try:
                    reconciled = await self._reconcile(actor, epoch)
                except (OSError, ValueError, ReplicationError) as e:  # retried: nothing copied before it
                    log.exception("%s: reconciling with %s failed: %s", self.addr, actor, e)
                    reconciled = False
                if reconciled is None:
                    return  # diverged: reported, nothing copied
                if reconciled:
                    break
            else:
                log.warning("%s: no actor serves master address %s yet", self.addr, master_addr)
            await asyncio.sleep(RETRY_S)
        client = HAClient(my_id, actor, self.namespace, owner.store, owner.topics, owner.offsets,
                          owner.processor.context.fence, owner.processor.context.metadata, owner.config,
                          owner.clock)
        client.channel = self.channel
        owner.ha_client = client
        owner.role.master_reachable = client.reachable
        await client.run()

    async def _reconcile(self, master_actor: str, epoch: int) -> bool | None:
        """Truncate what this log holds after the consistent point with the master's; adopt its
        epoch entries. False: the master has not recorded its term yet (ask again); None: the logs
        cannot be reconciled (reported in `diverged`, nothing is copied)."""
        owner = self.owner
        deadline = time.monotonic() + MASTER_EPOCH_WAIT_S
        while True:
            theirs: dict[str, Any] | None = None
            seen: object
            try:
                handle = await self._handles.aget(master_actor)
                me = self.broker_id or 0
                auth = signature(peer_call_ext("ha_epoch_entries", me), None, owner.config.credentials)
                theirs = await asyncio.wait_for(handle.ha_epoch_entries.remote(me, auth=auth), CALL_TIMEOUT_S)
                seen = theirs
            except MQServerError as e:  # it answered, refusing (not in controller mode yet)
                seen = f"refused: {e.remark}"
            except (RayError, TimeoutError, ValueError) as e:
                self._handles.forget(master_actor)
                seen = type(e).__name__
            if theirs is not None and theirs["last_epoch"] >= epoch:
                break
            if time.monotonic() > deadline:
                log.warning("%s: master %s has no entry for epoch %d yet (%s); retrying later", self.addr,
                            master_actor, epoch, seen)
                return False
            await asyncio.sleep(0.05)
        master_entries = [EpochEntry(e, s, end) for e, s, end in theirs["entries"]]
        local_end = owner.store.size_bytes()
        point = find_consistent_point(self.epoch_cache.entries(local_end), master_entries)
        if point is None:
            self.diverged = f"no common epoch with master {master_actor}; its log no longer starts where ours does"
            log.error("%s: %s", self.addr, self.diverged)
            return None
        if point < local_end:
            cut = await owner.store.truncate(point)  # the topic records and decisions cut go with it
            owner.role.log_cut(point)
            self.truncations.append({"atMs": int(time.time() * 1000), "epoch": epoch, "toOffset": point,
                                     "fromOffset": local_end, "bytes": cut})
            log.warning("%s: truncated %d bytes after offset %d (consistent point with %s)", self.addr, cut, point,
                        master_actor)
        pairs = [(e.epoch, e.start_offset) for e in master_entries]
        await asyncio.to_thread(self.epoch_cache.reset, pairs)
        return True

    async def _stop_replicating(self) -> None:
        """Stop following the master; returns once no batch of it can be appended any more (one
        being appended in a thread finishes first: the caller's flush waits for it)."""
        task, self._ha_task = self._ha_task, None
        if self.owner.ha_client is not None:
            self.owner.ha_client.stopped = True
        while task is not None and not task.done():
            task.cancel()  # again if need be: wait_for may swallow a cancel racing its result (bpo-42130)
            await asyncio.wait([task], timeout=0.1)
        self.owner.ha_client = None
        self.owner.role.master_reachable = lambda: False

    async def actor_of(self, addr: str) -> str | None:
        """The actor name of this set's broker at `addr` (ActorHandles.broker_actor), None if none."""
        if not is_tcp_address(addr):
            return addr
        try:
            return await asyncio.to_thread(self._handles.broker_actor, self.broker_name, addr)
        except (ValueError, RayError):
            return None

    # ------------------------------------------------------------------ inspection
    def epoch_entries(self) -> dict[str, Any]:
        """What a returning replica compares with (RocketMQ's GET_BROKER_EPOCH_CACHE, 1007)."""
        end = self.owner.store.size_bytes()
        return {"entries": [(e.epoch, e.start_offset, e.end_offset) for e in self.epoch_cache.entries(end)],
                "last_epoch": self.epoch_cache.last_epoch(), "max_offset": end}

    def status(self) -> dict[str, Any]:
        return {"controller_broker_id": self.broker_id, "registered": self.registered,
                "master_broker_id": self.master_id, "master_address": self.master_addr,
                "sync_state_set": sorted(self.sync_state_set), "sync_state_set_epoch": self.sync_state_set_epoch,
                "epoch_entries": self.epoch_entries()["entries"], "truncations": list(self.truncations),
                "controller_errors": self.controller_errors, "last_controller_error": self.last_controller_error,
                "diverged": self.diverged,
                "lease": self._lease_status()}

    def _lease_status(self) -> dict[str, Any] | None:
        lease = self.lease
        if lease is None:
            return None
        return {"valid": lease.valid(), "silent_ms": lease.silent_ms(), "lease_ms": lease.lease_ms,
                "refused": lease.refused}
