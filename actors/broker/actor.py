"""A broker as an async Ray actor: thin methods over its `BrokerController`.

Clients reach it two ways: RocketMQ's remoting protocol on its TCP port (the address it registers,
`host:port`, which any RocketMQ client dials), and Ray calls on the actor, named
`<brokerName>-<brokerId>` (`broker_actor_name`), which the Ray-native producer and consumer use.
Both go through the same processor, store and rules. With `proxy` config (RocketMQ 5's local mode)
it also serves the gRPC MessagingService on its remoting port + 2 (actors.broker.local_proxy), whose
requests to this broker go through the same pipeline in process.

How a Ray method refuses (one convention, as RocketMQ turns every failure into a response code):

- a method answering a request code (`process`, `send_message`, `create_topic`, `delete_topic`,
  `update_broker_permission`, `heart_beat`, `end_transaction`) answers a `RemotingResponse`; a
  refusal is its code and remark, exactly as the same request over TCP (bad arguments included:
  an illegal message is MESSAGE_ILLEGAL, a bad queue id or config SYSTEM_ERROR);
- `pull_message` answers a page whose `code` and `remark` are the response's, refusals included;
- a method answering plain data (`check_transactions`, `ha_transfer`, `ha_connect`,
  `ha_epoch_entries`) raises `MQServerError` (namesrv.remoting.command) with the code and remark
  when it refuses (NO_PERMISSION from the ACL, SYSTEM_ERROR otherwise); Ray hands it to the caller
  as a RayTaskError that is also an MQServerError.

No method answers an error dict or raises a bare ValueError or PermissionError.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import Any

import ray
from pydantic import ValidationError

from actors.broker.lifecycle import BrokerController
from actors.broker.local_proxy import LocalProxy
from actors.broker.status import broker_status, ha_info, runtime_info
from actors.controller.actor import CONTROLLER_NAME
from actors.namesrv.housekeeping import SUPERSEDED, BrokerChannel
from actors.runtime.metrics import broker_metrics
from actors.runtime.ray_info import advertised_address
from namesrv.acl.plain_acl import credentials_only
from namesrv.broker.config import BrokerConfig
from namesrv.broker.metadata_log import message_count
from namesrv.broker.processor.types import PullOutcome
from namesrv.protocol.broker_headers import (
    DEFAULT_CONSUMER_GROUP,
    broker_permission_body,
    end_transaction_ext,
    pull_message_ext,
    topic_config_ext,
)
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.constants import AUTO_CREATE_TOPIC_KEY_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, MASTER_ID, Perm
from namesrv.protocol.message.codec import ray_send_ext
from namesrv.protocol.message.compression import uncompressed_body
from namesrv.protocol.message.properties import REAL_TOPIC
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.types import InvalidInput, check_name, check_topic, describe_errors
from namesrv.proxy.settings import ProxyConfig
from namesrv.remoting.command import MQServerError, RemotingRequest, RemotingResponse, error
from namesrv.remoting.config import RemotingServerConfig
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.store.ha.wire import TransferRequest, peer_call_ext

log = logging.getLogger(__name__)


def broker_actor_name(broker_name: str, broker_id: int) -> str:
    """The Ray actor name of a broker: the one place that maps a route's broker to its actor."""
    return f"{broker_name}-{broker_id}"


def _controller_deployed(namespace: str) -> bool:
    """A controller runs in this namespace: the broker is in controller mode (RocketMQ 5 needs
    enableControllerMode=true in the broker's config; here deploying the controller is enough)."""
    try:
        ray.get_actor(CONTROLLER_NAME, namespace=namespace)
    except ValueError:
        return False
    return True


class StoreMissingError(RuntimeError):
    """A broker asked to restart where its store is not (another node, or its data gone)."""


def _with_payload(resp: RemotingResponse) -> RemotingResponse:
    """A topic admin answer for a Ray caller: what the change did, as extFields."""
    if resp.ok and isinstance(resp.payload, dict):
        return RemotingResponse(resp.code, resp.remark, dict(resp.payload))
    return resp


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _served(reply: dict[str, Any]) -> dict[str, Any]:
    """A replication reply of HAMasterService, or its refusal ({"error", "remark"}, the shape the
    TCP transport encodes) raised as MQServerError with the remark HA_TRANSFER answers over TCP."""
    if "error" in reply:
        raise MQServerError(ResponseCode.SYSTEM_ERROR, f"{reply['error']}: {reply['remark']}")
    return reply


def store_path(store_root: str, actor_name: str) -> Path:
    """A broker's own directory under the deployment's data dir, on the broker's node."""
    return Path(store_root).expanduser() / actor_name


class BrokerActor:
    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        store_root: str,
        namesrv_names: list[str],
        namespace: str,
        config: BrokerConfig | None = None,
        remoting: RemotingServerConfig | None = None,
        require_store: bool = False,
        proxy: dict[str, Any] | None = None,
    ) -> None:
        """`remoting` None: reachable over Ray only, and its address is its actor name.
        `require_store`: refuse to start (StoreMissingError) when this node holds no commit log of
        this broker: a restart must find its data, not start empty somewhere else.
        `proxy`: ProxyConfig fields of a local-mode gRPC proxy in this broker (None: none); it needs
        the TCP port (ValueError without)."""
        check_name(cluster_name, "clusterName")
        check_name(broker_name, "brokerName")
        self.actor_name = broker_actor_name(broker_name, broker_id)
        log_file = store_path(store_root, self.actor_name) / "store" / "commitlog"
        if require_store and not log_file.is_dir():
            raise StoreMissingError(
                f"broker {self.actor_name}: no store at {log_file} on node {ray.get_runtime_context().get_node_id()} "
                f"({ray.util.get_node_ip_address()}); refusing to start it empty (restart it with start_empty "
                f"/ --start-empty to accept losing its messages)")
        proxy_config = ProxyConfig(**proxy) if proxy is not None else None  # refused before anything starts
        if proxy_config is not None and remoting is None:
            raise ValueError(f"broker {self.actor_name}: a local-mode proxy needs the broker's TCP port")
        self._closed = asyncio.Event()
        me = ray.get_runtime_context().current_actor
        config = (config or BrokerConfig()).model_copy()
        controller_mode = config.enable_controller_mode or _controller_deployed(namespace)
        self.controller = BrokerController(
            cluster_name, broker_name, broker_id, store_path(store_root, self.actor_name),
            config, namesrv_names, namespace, remoting,
            advertise=lambda port: advertised_address(remoting, port) if remoting is not None else self.actor_name,
            channel_of=lambda token: BrokerChannel(me, token), ray_name=self.actor_name,
            metrics=broker_metrics(self.actor_name), master_name=broker_actor_name(broker_name, MASTER_ID),
            controller_mode=controller_mode,
        )
        self.controller.start()
        self.proxy = LocalProxy(self.actor_name, self.controller, proxy_config, namespace, namesrv_names,
                                remoting.listen_host) if proxy_config is not None and remoting is not None else None
        rec = self.controller.store.recovery
        log.info("broker %s[%d] %s up (incarnation %s), %d messages in store, %d re-read past the checkpoint "
                 "(from offset %d) in %.1f ms%s%s%s",
                 broker_name, broker_id, self.broker_addr, self.controller.incarnation,
                 message_count(self.controller.store), rec.records, rec.scanned_from,
                 self.controller.recovery_ms,
                 f", dropped {rec.consume_queue_entries_dropped} consume-queue entries past the log's end"
                 if rec.consume_queue_entries_dropped else "",
                 f", truncated {rec.truncated_bytes} torn bytes" if rec.truncated_bytes else "",
                 f", skipped corrupt ranges {rec.corrupt_ranges}" if rec.corrupt_ranges else "")
        # Everything loaded so far (Ray's worker, the imports, the recovered tables) lives as long as
        # the process: out of the collector's sight, or every full collection walks it again and
        # stalls the loop and the store's writer behind the GIL (tens of ms; docs/performance.md).
        gc.freeze()

    @property
    def broker_addr(self) -> str:
        return self.controller.identity.broker_addr

    async def proxy_endpoint(self) -> str | None:
        """The gRPC endpoint of this broker's local-mode proxy once it serves (None without one);
        raises the OSError of a port it could not bind."""
        return await self.proxy.serving() if self.proxy is not None else None

    async def proxy_status(self) -> dict[str, Any] | None:
        """The local-mode proxy's calls and broker requests (actors.proxy.server), None without one."""
        return self.proxy.status() if self.proxy is not None else None

    # ------------------------------------------------------------------ registration and topics
    async def register_broker_all(self, force_full: bool = False) -> dict[str, str]:
        """Register with every NameServer at once; returns {namesrv: outcome} for each."""
        return await self.controller.registrar.register_broker_all(force_full)

    async def create_topic(self, topic: str, read_queue_nums: int = 8, write_queue_nums: int = 8,
                           perm: int = int(Perm.READ | Perm.WRITE), order: bool = False,
                           auth: dict[str, str] | None = None) -> RemotingResponse:
        """UPDATE_AND_CREATE_TOPIC: create or update a topic, persist it, then register with every
        NameServer before answering (ext_fields: changed, registered). With ACL on, `auth`
        (AccessKey, Signature over `topic_config_ext(TopicConfig(...))` of the same fields) must be an
        admin's."""
        try:
            tc = TopicConfig(topic_name=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                             perm=perm, order=order)
        except ValidationError as e:
            return error(ResponseCode.SYSTEM_ERROR, f"invalid topic config: {describe_errors(e)}")
        ext = topic_config_ext(tc)
        return _with_payload(await self._handle(BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, ext, None, auth))

    async def delete_topic(self, topic: str, auth: dict[str, str] | None = None) -> RemotingResponse:
        """DELETE_TOPIC_IN_BROKER (ext_fields: deleted, registered); an admin's `auth` with ACL on."""
        return _with_payload(await self._handle(BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": str(topic)}, None,
                                                auth))

    async def update_broker_permission(self, perm: int, auth: dict[str, str] | None = None) -> RemotingResponse:
        """UPDATE_BROKER_CONFIG of brokerPermission (ext_fields: registered); an admin's `auth`
        (over `broker_permission_body(perm)`) with ACL on."""
        if not isinstance(perm, int) or isinstance(perm, bool):
            return error(ResponseCode.SYSTEM_ERROR, f"invalid broker permission {perm!r}")
        return _with_payload(await self._handle(BrokerRequestCode.UPDATE_BROKER_CONFIG, {},
                                                broker_permission_body(perm), auth))

    async def get_topic_config_table(self) -> dict[str, dict[str, Any]]:
        return {n: tc.to_wire() for n, tc in self.controller.topics.topic_config_table.items()}

    # ------------------------------------------------------------------ requests (the Ray path)
    async def process(self, request: RemotingRequest) -> RemotingResponse:
        """Any request code, through the same pipeline as a TCP frame (ACL, processors)."""
        if not isinstance(request, RemotingRequest):
            return error(ResponseCode.SYSTEM_ERROR, f"request must be a RemotingRequest, got {type(request).__name__}")
        return await resolve(self.controller.pipeline.handle(request, RequestContext()))

    async def _handle(self, code: int, ext: dict[str, str], body: bytes | None,
                      auth: dict[str, str] | None) -> RemotingResponse:
        return await resolve(self.controller.pipeline.handle(RemotingRequest(code, ext | credentials_only(auth), body),
                                                             RequestContext()))

    async def heart_beat(self, client_id: str, body: bytes, version: int,
                         auth: dict[str, str] | None = None) -> RemotingResponse:
        """HEART_BEAT from a Ray-native client, known as channel `ray:<client_id>` (a Ray call has
        no connection: the client leaves when its heartbeats stop, after 120 s)."""
        request = RemotingRequest(BrokerRequestCode.HEART_BEAT, credentials_only(auth), body, version=version)
        return await resolve(self.controller.pipeline.handle(request, RequestContext(f"ray:{client_id}")))

    async def send_message(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
        msg_id: str | None = None,
        default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        auth: dict[str, str] | None = None,
    ) -> RemotingResponse:
        """SEND_MESSAGE: store one message; SUCCESS only once it is written (and fsynced with
        SYNC_FLUSH). With ACL on, `auth` (AccessKey, Signature over `ray_send_ext(...)` and the body)
        must grant PUB. The arguments' types are checked here; everything else as over TCP."""
        if not isinstance(body, bytes) or not body:
            return error(ResponseCode.MESSAGE_ILLEGAL, "message body must be non-empty bytes")
        if properties is not None and not (isinstance(properties, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in properties.items())):
            return error(ResponseCode.MESSAGE_ILLEGAL, "properties must map strings to strings")
        if not isinstance(default_topic_queue_nums, int) or isinstance(default_topic_queue_nums, bool):
            return error(ResponseCode.MESSAGE_ILLEGAL, "defaultTopicQueueNums must be an integer")
        if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
            return error(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal")
        try:
            check_topic(topic)
        except InvalidInput as e:
            return error(ResponseCode.MESSAGE_ILLEGAL, str(e))
        ext = ray_send_ext(topic, queue_id, properties, msg_id, default_topic, default_topic_queue_nums)
        resp = await self._handle(BrokerRequestCode.SEND_MESSAGE, ext, body, auth)
        if not resp.ok:
            return resp
        f = resp.ext_fields
        return RemotingResponse(ext_fields={
            "status": "SEND_OK",
            "msgId": msg_id or f["msgId"],
            "offsetMsgId": f["msgId"],
            "topic": topic,
            "brokerName": self.controller.identity.broker_name,
            "queueId": int(f["queueId"]),
            "queueOffset": int(f["queueOffset"]),
        })

    async def pull_message(self, topic: str, queue_id: int, offset: int, max_nums: int = 32,
                           consumer_group: str = DEFAULT_CONSUMER_GROUP,
                           auth: dict[str, str] | None = None) -> dict[str, Any]:
        """PULL_MESSAGE of one queue from `offset`: {code, remark, messages, next_begin_offset,
        min_offset, max_offset}; `next_begin_offset` is where the next pull starts. A refusal is
        its code and remark with no messages (a bad offset or count: SYSTEM_ERROR). With ACL on,
        `auth` (AccessKey, Signature over `pull_message_ext(...)`) must grant SUB on the topic and
        the group."""
        if not _is_int(offset) or offset < 0 or not _is_int(max_nums) or max_nums <= 0:
            return {"code": int(ResponseCode.SYSTEM_ERROR), "remark": f"invalid pull: offset {offset!r} must be >= 0 "
                    f"and maxMsgNums {max_nums!r} > 0", "messages": [], "next_begin_offset": 0, "min_offset": 0,
                    "max_offset": 0}
        ext = pull_message_ext(str(topic), queue_id, offset, max_nums, str(consumer_group))
        resp = await self._handle(BrokerRequestCode.PULL_MESSAGE, ext, None, auth)
        outcome = resp.payload
        msgs = outcome.messages if isinstance(outcome, PullOutcome) else []
        f = resp.ext_fields
        return {
            "code": int(resp.code),
            "remark": resp.remark,
            "messages": [{"queue_offset": m.queue_offset, "msg_id": m.msg_id or m.properties.get("UNIQ_KEY", ""),
                          "properties": m.properties, "body": _readable_body(m.body, m.sys_flag),
                          "sys_flag": m.sys_flag, "store_timestamp": m.store_timestamp,
                          "born_timestamp": m.born_timestamp, "reconsume_times": m.reconsume_times}
                         for m in msgs],
            "next_begin_offset": int(f.get("nextBeginOffset", offset)),
            "min_offset": int(f.get("minOffset", 0)),
            "max_offset": int(f.get("maxOffset", self.controller.processor.context.fence.max_offset(topic, queue_id))),
        }

    # ------------------------------------------------------------------ replication (actors.broker.ha.service)
    def _peer_only(self, ext: dict[str, str], auth: dict[str, str] | None) -> None:
        """With ACL on, a replication call must be signed (over `ext`) by a broker or admin account,
        as HA_TRANSFER over TCP: a refusal raises MQServerError (NO_PERMISSION and why)."""
        acl = self.controller.acl
        if acl is None:
            return
        refused = acl.before(RemotingRequest(BrokerRequestCode.HA_TRANSFER, ext | credentials_only(auth)),
                             RequestContext())
        if refused is not None:
            raise MQServerError.of(refused)

    async def ha_transfer(self, slave_id: int, from_offset: int, max_bytes: int, wait_ms: int,
                          channel: BrokerChannel | None = None, ack_offset: int | None = None,
                          stream: int = 0, auth: dict[str, str] | None = None) -> dict[str, Any]:
        """A slave asks for the records after `from_offset` (and acknowledges everything before, or
        before `ack_offset` when pipelined: see HAMasterService.transfer); `channel`: its actor,
        watched so its death takes it out of the SyncStateSet at once. A refused transfer (bad
        arguments, a read the master cannot serve) raises MQServerError: SYSTEM_ERROR with the
        remark HA_TRANSFER answers over TCP ("<kind>: <why>"). With ACL on, `auth` over the
        request's fields (`TransferRequest.ext_fields`) must be a broker's or an admin's."""
        self._peer_only(TransferRequest(slave_id, from_offset, max_bytes, wait_ms, ack_offset, stream).ext_fields(),
                        auth)
        return _served(await self.controller.ha_master.transfer(slave_id, from_offset, max_bytes, wait_ms, channel,
                                                                ack_offset, stream))

    async def ha_connect(self, slave_id: int, channel: BrokerChannel | None = None,
                         auth: dict[str, str] | None = None) -> dict[str, Any]:
        """A slave about to replicate over TCP asks where (see HAMasterService.connect); a bad
        slave id raises MQServerError (SYSTEM_ERROR); `auth` over `peer_call_ext("ha_connect", id)`."""
        self._peer_only(peer_call_ext("ha_connect", slave_id), auth)
        return _served(self.controller.ha_master.connect(slave_id, channel))

    async def ha_metadata(self, slave_id: int = 0, auth: dict[str, str] | None = None) -> dict[str, Any]:
        """What a slave copies every slave_sync_interval_ms (topics, groups, offsets, delay offsets);
        `auth` over `peer_call_ext("ha_metadata", slave_id)` with ACL on."""
        self._peer_only(peer_call_ext("ha_metadata", slave_id), auth)
        return self.controller.ha_master.metadata()

    async def ha_epoch_entries(self, slave_id: int = 0, auth: dict[str, str] | None = None) -> dict[str, Any]:
        """This broker's epoch entries [(epoch, start, end)], last epoch and log end: what a
        returning replica finds its consistent point against (controller mode; RocketMQ's
        GET_BROKER_EPOCH_CACHE). A broker not in controller mode raises MQServerError
        (SYSTEM_ERROR), as RocketMQ answers that request there. `auth` over
        `peer_call_ext("ha_epoch_entries", slave_id)` with ACL on."""
        self._peer_only(peer_call_ext("ha_epoch_entries", slave_id), auth)
        replicas = self.controller.replicas
        if replicas is None:
            raise MQServerError(ResponseCode.SYSTEM_ERROR, "this request only for controllerMode: "
                                                           "this broker is not in controller mode")
        return replicas.epoch_entries()

    async def status(self) -> dict[str, Any]:
        """Role and replication at a glance (actors.broker.status.broker_status)."""
        return broker_status(self.controller, self.actor_name)

    async def get_ha_info(self) -> dict[str, Any]:
        """Role and replication state: a master's SyncStateSet and slave lags, a slave's offsets."""
        return ha_info(self.controller)

    async def end_transaction(self, producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                              commit_or_rollback: int, from_transaction_check: bool = False,
                              auth: dict[str, str] | None = None) -> RemotingResponse:
        """END_TRANSACTION: commit (8) or roll back (12) a half message; `auth` over
        `end_transaction_ext(...)` with ACL on."""
        ext = end_transaction_ext(str(producer_group), tran_state_table_offset, commit_log_offset, commit_or_rollback,
                                  from_transaction_check)
        return await self._handle(BrokerRequestCode.END_TRANSACTION, ext, None, auth)

    async def check_transactions(self, producer_group: str, auth: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The half messages of `producer_group` due for a check-back, each counted as one check: a
        Ray-native producer asks for them (over TCP the broker sends CHECK_TRANSACTION_STATE). With
        ACL on, `auth` over {"producerGroup": group} must authenticate: a refusal raises
        MQServerError (NO_PERMISSION and why). A slave answers none (RocketMQ runs its check service
        on the master alone): its halves are offsets of its own log, which a restarted old master
        holds a diverged tail of until it truncates, and a producer's answer goes to the master,
        where those offsets may name another half."""
        c = self.controller
        if c.acl is not None:
            ext = {"producerGroup": str(producer_group)} | credentials_only(auth)
            refused = c.acl.before(RemotingRequest(BrokerRequestCode.END_TRANSACTION, ext), RequestContext())
            if refused is not None:
                raise MQServerError.of(refused)
        if not c.role.writable:  # a master's service, as over TCP: a slave's halves are its master's to check
            return []
        due = await c.processor.context.transactions.due_for_group(producer_group)
        return [{"tranStateTableOffset": h.queue_offset, "commitLogOffset": h.commit_log_offset,
                 "msgId": h.properties.get("UNIQ_KEY", h.msg_id), "topic": h.properties.get(REAL_TOPIC, h.topic),
                 "body": h.body, "properties": dict(h.properties)} for h in due]

    async def get_max_offset(self, topic: str, queue_id: int) -> int:
        """GET_MAX_OFFSET's answer: what a reader may see (namesrv.broker.read_fence)."""
        return self.controller.processor.context.fence.max_offset(topic, queue_id)

    # ------------------------------------------------------------------ lifecycle
    async def wait_closed(self, token: str | None = None) -> str:
        """Pends until graceful shutdown; a NameServer's channel watch. Fails at once if we die.
        Answers SUPERSEDED at once when `token` is not this incarnation's (Ray restarted us: the
        incarnation the caller watched is gone)."""
        if token is not None and token != self.controller.token:
            return SUPERSEDED
        await self._closed.wait()
        return self.controller.token

    async def shutdown(self) -> dict[str, str]:
        """Graceful: stop the local-mode proxy, unregister from every NameServer (in parallel), stop
        serving, close the store."""
        if self.proxy is not None:
            await self.proxy.stop()
        outcomes = await self.controller.shutdown()
        self._closed.set()
        return outcomes

    async def get_broker_runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO on the Ray path: what mqadmin clusterList / brokerStatus show."""
        return self.controller.processor.runtime_info()

    async def get_runtime_info(self) -> dict[str, Any]:
        """Store, recovery, registration, remoting and consumers (actors.broker.status.runtime_info)."""
        return runtime_info(self.controller, self.actor_name)

    async def ping(self) -> str:
        return self.broker_addr

    async def await_role(self, timeout_s: float) -> bool:
        """Controller mode: whether the controller has decided this broker's role, waiting up to
        `timeout_s` for it (True at once without a controller: the role is the configured one)."""
        replicas = self.controller.replicas
        if replicas is None:
            return True
        try:
            await asyncio.wait_for(replicas.role_decided.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


def _readable_body(body: bytes, sys_flag: int) -> bytes:
    """A pulled body as its producer wrote it (inflated when it was compressed); one that does not
    inflate is handed on as stored, its sysFlag beside it, rather than failing the whole pull."""
    try:
        return uncompressed_body(body, sys_flag)
    except InvalidInput as e:
        log.warning("a pulled body marked compressed is handed on as stored: %s", e)
        return body
