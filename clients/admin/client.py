"""Admin API (RocketMQ's mqadmin / DefaultMQAdminExt, the parts that matter for routes).

Works on any Deployment: one just started by this driver, or one found by name with `connect`.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from actors.launcher import Deployment
from clients.namesrv_client import NameServerClient
from namesrv.acl.plain_acl import ACCESS_KEY, SIGNATURE, SessionCredentials, signed
from namesrv.protocol.broker_headers import create_topic_ext
from namesrv.protocol.constants import MASTER_ID, Perm
from namesrv.protocol.models import ClusterInfo, TopicRouteData
from namesrv.remoting.command import RemotingResponse

log = logging.getLogger(__name__)


class AdminError(RuntimeError):
    pass


def _ok(resp: RemotingResponse, what: str) -> RemotingResponse:
    if not resp.ok:
        raise AdminError(f"{what}: code {resp.code} {resp.remark}")
    return resp


class AdminClient:
    def __init__(self, deployment: Deployment, timeout_s: float = 10.0,
                 credentials: SessionCredentials | None = None) -> None:
        """`credentials`: an admin account, for NameServers with ACL on."""
        self.dep = deployment
        self.timeout_s = timeout_s
        self.credentials = credentials
        self.namesrv = NameServerClient(list(deployment.namesrvs), deployment.spec.namespace,
                                        call_timeout_ms=int(timeout_s * 1000), credentials=credentials)

    def _get(self, ref: Any) -> Any:
        return ray.get(ref, timeout=self.timeout_s)

    # ------------------------------------------------------------------ routes
    def route(self, topic: str, namesrv: str | None = None) -> TopicRouteData | None:
        """The topic's route on one NameServer (the first by default); None when it has none."""
        return self.namesrv.get_topic_route_on(namesrv or next(iter(self.dep.namesrvs)), topic)

    def routes_everywhere(self, topic: str) -> dict[str, TopicRouteData | None]:
        return {name: self.route(topic, name) for name in self.dep.namesrvs}

    def cluster_info(self, namesrv: str | None = None) -> ClusterInfo:
        return self.namesrv.get_cluster_info(namesrv or next(iter(self.dep.namesrvs)))

    def _broker_auth(self, ext: dict[str, str]) -> dict[str, str] | None:
        """AccessKey and Signature for a broker's Ray method that builds the request `ext`."""
        if self.credentials is None:
            return None
        return {k: v for k, v in signed(ext, None, self.credentials).items() if k in (ACCESS_KEY, SIGNATURE)}

    # ------------------------------------------------------------------ topics
    def create_topic(
        self,
        topic: str,
        cluster: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        order: bool = False,
    ) -> dict[str, Any]:
        """Create `topic` on every master broker (of `cluster`, or all), so its queues spread over the
        whole cluster instead of the one broker auto-create would pick. Returns per-broker outcomes."""
        masters = [
            addr for addr, spec in self.dep.broker_specs.items()
            if spec.broker_id == MASTER_ID and addr in self.dep.brokers and (cluster is None or spec.cluster == cluster)
        ]
        if not masters:
            raise AdminError(f"no master broker in cluster {cluster!r}")
        auth = self._broker_auth(create_topic_ext(topic, read_queue_nums, write_queue_nums, perm, order))
        refs = {
            addr: self.dep.brokers[addr].create_topic.remote(topic, read_queue_nums, write_queue_nums, perm, order,
                                                             auth)
            for addr in masters
        }
        outcomes = {addr: _ok(self._get(ref), f"create {topic} on {addr}").ext_fields for addr, ref in refs.items()}
        log.info("topic %s created on %s", topic, ", ".join(masters))
        return outcomes

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Delete on the brokers, then on every NameServer (mqadmin deleteTopic's two steps)."""
        brokers = [
            a for a, s in self.dep.broker_specs.items()
            if a in self.dep.brokers and (cluster is None or s.cluster == cluster)
        ]
        for addr in brokers:
            _ok(self._get(self.dep.brokers[addr].delete_topic.remote(topic, self._broker_auth({"topic": topic}))),
                f"delete {topic} on {addr}")
        ext = {"topic": topic} | ({"clusterName": cluster} if cluster else {})
        for name, ns in self.dep.namesrvs.items():
            _ok(self._get(ns.delete_topic_in_namesrv.remote(**signed(ext, None, self.credentials))),
                f"delete {topic} on {name}")

    def wipe_write_perm_of_broker(self, broker_name: str) -> dict[str, int]:
        return {
            name: _ok(self._get(ns.wipe_write_perm_of_broker.remote(
                **signed({"brokerName": broker_name}, None, self.credentials))), "wipe perm").ext_fields[
                "wipeTopicCount"
            ]
            for name, ns in self.dep.namesrvs.items()
        }

    def add_write_perm_of_broker(self, broker_name: str) -> dict[str, int]:
        return {
            name: _ok(self._get(ns.add_write_perm_of_broker.remote(
                **signed({"brokerName": broker_name}, None, self.credentials))), "add perm").ext_fields[
                "addTopicCount"
            ]
            for name, ns in self.dep.namesrvs.items()
        }

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """Every NameServer's view plus every broker's own account; unreachable ones are marked."""
        namesrvs: dict[str, Any] = {}
        for name, handle in self.dep.namesrvs.items():
            try:
                namesrvs[name] = self._get(handle.get_status.remote())
            except Exception as e:
                namesrvs[name] = {"name": name, "error": type(e).__name__}
        brokers: dict[str, Any] = {}
        for addr, handle in self.dep.brokers.items():
            try:
                brokers[addr] = self._get(handle.get_runtime_info.remote())
            except Exception as e:
                brokers[addr] = {"broker_addr": addr, "error": type(e).__name__}
        return {"namesrvs": namesrvs, "brokers": brokers}
