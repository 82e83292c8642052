"""The admin client: RocketMQ's DefaultMQAdminExt, its method names in Python style, over either
transport (`clients.admin.transport`): TCP to a namesrvAddr, or the actors of a Ray deployment.

Queries (cluster info, topic list, route, KV value) go to the first NameServer that answers, as a
RocketMQ client does, and return RocketMQ's typed models (ClusterInfo, TopicRouteData, ...);
changes (KV, config, write permission, topic deletion) go to every NameServer and report each one's
outcome as a `RemotingResponse`. Topics are created and deleted on the master brokers found through
the cluster info, as mqadmin's CommandUtil does.

`AdminClient(deployment)` is the same client over a Deployment this driver holds (started here or
found with `actors.deployment.launcher.connect`); it finds the master brokers from the deployment's own specs,
so it works before the brokers' first registration lands, and adds `status()`.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, TypeVar

from clients.admin.brokers import MQAdminError, checked
from clients.admin.groups import GroupOperations
from clients.admin.transport import AdminTransport, RayTransport, ServerUnreachable, describe, unreachable
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.protocol.broker_headers import topic_config_ext
from namesrv.protocol.codes import BrokerRequestCode, RequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID, Perm
from namesrv.protocol.models import ClusterInfo, ConfigProperties, TopicConfig, TopicList, TopicRouteData
from namesrv.remoting.command import RemotingResponse

log = logging.getLogger(__name__)

T = TypeVar("T")

Outcomes = dict[str, RemotingResponse]
"""Each NameServer's (or broker's) answer to a change; an unreachable one has code UNREACHABLE."""


def failures(outcomes: Outcomes) -> str | None:
    """None when every answer succeeded, else one line naming each failure."""
    bad = [f"{who}: {describe(r)}" for who, r in outcomes.items() if not r.ok]
    return "; ".join(bad) if bad else None


def require_all(outcomes: Outcomes, what: str) -> Outcomes:
    bad = failures(outcomes)
    if bad is not None:
        raise MQAdminError(f"{what} failed on {bad}")
    return outcomes


class DefaultMQAdminExt(GroupOperations):
    """view_message / query_message: see clients.admin.messages; the per-broker queries:
    clients.admin.brokers."""

    error = MQAdminError

    def __init__(self, transport: AdminTransport) -> None:
        self.transport = transport

    @classmethod
    def over_tcp(cls, namesrv_addr: str, timeout_s: float = 3.0,
                 credentials: SessionCredentials | None = None) -> DefaultMQAdminExt:
        """RocketMQ's remoting protocol to `namesrv_addr` ("host:port;host:port") and the brokers."""
        from clients.admin.tcp import TcpTransport

        return cls(TcpTransport(namesrv_addr, timeout_s, credentials))

    @classmethod
    def over_ray(cls, deployment: Any, timeout_s: float = 5.0,
                 credentials: SessionCredentials | None = None) -> DefaultMQAdminExt:
        """The actors of a Deployment (`actors.deployment.launcher.deploy` or `connect`)."""
        return cls(RayTransport(deployment, timeout_s, credentials))

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> DefaultMQAdminExt:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    def _namesrv(self, namesrv: str | None, code: int, ext: dict[str, Any] | None = None) -> tuple[str, Any]:
        """Ask `namesrv`, or the NameServers in order until one answers (error codes included; one
        still in its not-ready window after a restart is passed over while others remain)."""
        names = [namesrv] if namesrv is not None else self.transport.namesrvs()
        problems = []
        for i, ns in enumerate(names):
            try:
                resp = self.transport.call_namesrv(ns, code, ext)
            except ServerUnreachable as e:
                problems.append(str(e))
                continue
            if not resp.not_ready or i == len(names) - 1:
                return ns, resp
            problems.append(f"{ns}: {describe(resp)}")
        raise MQAdminError(f"no NameServer of {self.transport.where} answered: {'; '.join(problems)}")

    def each_namesrv(self, code: int, ext: dict[str, Any] | None = None,
                     props: dict[str, str] | None = None) -> Outcomes:
        """Ask every NameServer; an unreachable one is an UNREACHABLE answer, not an exception."""
        out = {}
        for ns in self.transport.namesrvs():
            try:
                out[ns] = self.transport.call_namesrv(ns, code, ext, props)
            except ServerUnreachable as e:
                out[ns] = unreachable(e)
        return out

    # ------------------------------------------------------------------ queries
    def examine_broker_cluster_info(self, namesrv: str | None = None) -> ClusterInfo:
        ns, resp = self._namesrv(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)
        info: ClusterInfo = checked(ns, resp, "cluster info").payload
        return info

    def fetch_all_topic_list(self) -> list[str]:
        ns, resp = self._namesrv(None, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        topics: TopicList = checked(ns, resp, "topic list").payload
        return sorted(topics.topic_list)

    def topic_lists(self) -> dict[str, list[str] | str]:
        """Every NameServer's topic list, or why it has none."""
        return {ns: sorted(r.payload.topic_list) if r.ok else describe(r)
                for ns, r in self.each_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).items()}

    def topic_route_on(self, namesrv: str | None, topic: str) -> TopicRouteData | None:
        """The topic's route on `namesrv` (None: the first that answers); None when it has none."""
        ns, resp = self._namesrv(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        route: TopicRouteData = checked(ns, resp, f"route of {topic}").payload
        return route

    def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        route = self.topic_route_on(None, topic)
        if route is None:
            raise MQAdminError(f"topic {topic!r} does not exist: no NameServer of {self.transport.where} "
                               "has a route for it")
        return route

    def routes_everywhere(self, topic: str) -> dict[str, TopicRouteData | None]:
        """The topic's route on every NameServer (None where it has none)."""
        return {ns: self.topic_route_on(ns, topic) for ns in self.transport.namesrvs()}

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        ns, resp = self._namesrv(None, RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return checked(ns, resp, "KV query").ext_fields.get("value")

    def kv_config_everywhere(self, namespace: str, key: str) -> Outcomes:
        """GET_KV_CONFIG on every NameServer (the value in each answer's ext_fields)."""
        return self.each_namesrv(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})

    def get_namesrv_config(self) -> dict[str, dict[str, str] | str]:
        """Every NameServer's config (camelCase keys), or why it gave none."""
        out: dict[str, dict[str, str] | str] = {}
        for ns, r in self.each_namesrv(RequestCode.GET_NAMESRV_CONFIG).items():
            config: ConfigProperties | None = r.payload
            out[ns] = (dict(config.properties) if config is not None else {}) if r.ok else describe(r)
        return out

    # ------------------------------------------------------------------ brokers
    @staticmethod
    def master_addrs_of_cluster(info: ClusterInfo, cluster: str) -> list[str]:
        """CommandUtil.fetchMasterAddrByClusterName: the masters' addresses; an unknown cluster or
        one without a master is an error."""
        if cluster not in info.cluster_addr_table:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise MQAdminError(f"no cluster {cluster!r} (clusters: {known})")
        masters = sorted(
            bd.broker_addrs[MASTER_ID] for name in info.cluster_addr_table[cluster]
            if (bd := info.broker_addr_table.get(name)) is not None and MASTER_ID in bd.broker_addrs
        )
        if not masters:
            raise MQAdminError(f"cluster {cluster!r} has no master broker")
        return masters

    @staticmethod
    def broker_addrs(info: ClusterInfo) -> set[str]:
        return {addr for bd in info.broker_addr_table.values() for addr in bd.broker_addrs.values()}

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        """The master brokers of `cluster` (None: of every cluster), from the cluster info."""
        info = self.examine_broker_cluster_info()
        clusters = sorted(info.cluster_addr_table) if cluster is None else [cluster]
        if not clusters:
            raise MQAdminError(f"no master broker: no cluster registered with {self.transport.where}")
        return sorted({a for c in clusters for a in self.master_addrs_of_cluster(info, c)})

    def broker_addrs_of(self, cluster: str | None = None) -> list[str]:
        """Every broker (masters and slaves) of `cluster` (None: all), from the cluster info."""
        info = self.examine_broker_cluster_info()
        names = (set(info.broker_addr_table) if cluster is None else info.cluster_addr_table.get(cluster, set()))
        return sorted(a for n in names if (bd := info.broker_addr_table.get(n)) for a in bd.broker_addrs.values())

    def create_and_update_topic_config(self, broker_addr: str, tc: TopicConfig) -> dict[str, Any]:
        """UPDATE_AND_CREATE_TOPIC on one broker; what it answered (changed, registered)."""
        resp = self._broker(broker_addr, BrokerRequestCode.UPDATE_AND_CREATE_TOPIC, topic_config_ext(tc),
                            f"create topic {tc.topic_name}")
        return dict(resp.payload) if isinstance(resp.payload, dict) else dict(resp.ext_fields)

    def create_topic(self, topic: str, cluster: str | None = None, read_queue_nums: int = 8,
                     write_queue_nums: int = 8, perm: int = int(Perm.READ | Perm.WRITE),
                     order: bool = False) -> dict[str, dict[str, Any]]:
        """Create `topic` on every master broker (of `cluster`, or all), so its queues spread over the
        whole cluster instead of the one broker auto-create would pick. Returns each broker's answer."""
        from pydantic import ValidationError

        from namesrv.protocol.types import describe_errors

        try:
            tc = TopicConfig(topic_name=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                             perm=perm, order=order)
        except ValidationError as e:
            raise MQAdminError(f"invalid topic config: {describe_errors(e)}") from None
        masters = self.master_addrs(cluster)
        outcomes = {addr: self.create_and_update_topic_config(addr, tc) for addr in masters}
        log.info("topic %s created on %s", topic, ", ".join(masters))
        return outcomes

    def delete_topic_in_broker(self, broker_addrs: list[str], topic: str) -> None:
        for addr in broker_addrs:
            self._broker(addr, BrokerRequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}, f"delete topic {topic}")

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """mqadmin deleteTopic's two steps: from the brokers (of `cluster`, or all), then from every
        NameServer; raises when any refused."""
        self.delete_topic_in_broker(self.broker_addrs_of(cluster), topic)
        require_all(self.delete_topic_in_namesrv(cluster, topic), f"deleting topic {topic} from the NameServers")

    # ------------------------------------------------------------------ changes on every NameServer
    def delete_topic_in_namesrv(self, cluster: str | None, topic: str) -> Outcomes:
        ext = {"topic": topic} | ({"clusterName": cluster} if cluster else {})
        return self.each_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    def create_and_update_kv_config(self, namespace: str, key: str, value: str) -> Outcomes:
        return self.each_namesrv(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    def delete_kv_config(self, namespace: str, key: str) -> Outcomes:
        return self.each_namesrv(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    def update_namesrv_config(self, props: dict[str, str]) -> Outcomes:
        return self.each_namesrv(RequestCode.UPDATE_NAMESRV_CONFIG, props=props)

    def write_perm_outcomes(self, broker_name: str, wipe: bool) -> Outcomes:
        """WIPE_ (or ADD_) WRITE_PERM_OF_BROKER on every NameServer; each answer carries its
        wipeTopicCount (addTopicCount)."""
        code = RequestCode.WIPE_WRITE_PERM_OF_BROKER if wipe else RequestCode.ADD_WRITE_PERM_OF_BROKER
        return self.each_namesrv(code, {"brokerName": broker_name})

    def wipe_write_perm_of_broker(self, broker_name: str) -> dict[str, int]:
        """Each NameServer's count of topics it took write permission from; raises when any refused."""
        outcomes = require_all(self.write_perm_outcomes(broker_name, wipe=True), "wipe perm")
        return {ns: int(r.ext_fields["wipeTopicCount"]) for ns, r in outcomes.items()}

    def add_write_perm_of_broker(self, broker_name: str) -> dict[str, int]:
        outcomes = require_all(self.write_perm_outcomes(broker_name, wipe=False), "add perm")
        return {ns: int(r.ext_fields["addTopicCount"]) for ns, r in outcomes.items()}


class AdminClient(DefaultMQAdminExt):
    """DefaultMQAdminExt over the actors of a Deployment this driver holds: the deployment's own
    specs find its masters before the first registration lands, and `status()` asks every actor."""

    def __init__(self, deployment: Any, timeout_s: float = 10.0,
                 credentials: SessionCredentials | None = None) -> None:
        """`credentials`: an admin account, for servers with ACL on."""
        super().__init__(RayTransport(deployment, timeout_s, credentials))
        self.dep = deployment
        self.timeout_s = timeout_s

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        """Each broker set's master among the deployment's live brokers: the one the NameServers
        have registered as brokerId 0 (after a failover, the elected one), else, for a set not
        registered yet, the one the spec started as brokerId 0."""
        try:
            info = self.examine_broker_cluster_info()
        except MQAdminError as e:
            log.info("no cluster info (%s): the spec's masters", e)
            info = ClusterInfo(broker_addr_table={}, cluster_addr_table={})
        sets: dict[str, list[tuple[str, int]]] = {}
        for addr, spec in self.dep.broker_specs.items():
            if addr in self.dep.brokers and (cluster is None or spec.cluster == cluster):
                sets.setdefault(spec.broker_name, []).append((addr, spec.broker_id))
        masters = []
        for name, members in sets.items():
            registered = bd.broker_addrs.get(MASTER_ID) if (bd := info.broker_addr_table.get(name)) else None
            if registered in {addr for addr, _ in members}:
                masters.append(registered)
            else:
                masters.extend(addr for addr, broker_id in members if broker_id == MASTER_ID)
        masters.sort()
        if not masters:
            raise MQAdminError(f"no master broker in cluster {cluster!r}")
        return masters

    def broker_addrs_of(self, cluster: str | None = None) -> list[str]:
        return sorted(a for a, s in self.dep.broker_specs.items()
                      if a in self.dep.brokers and (cluster is None or s.cluster == cluster))

    def route(self, topic: str, namesrv: str | None = None) -> TopicRouteData | None:
        """The topic's route on one NameServer (the first by default); None when it has none."""
        return self.topic_route_on(namesrv or self.transport.namesrvs()[0], topic)

    def cluster_info(self, namesrv: str | None = None) -> ClusterInfo:
        return self.examine_broker_cluster_info(namesrv or self.transport.namesrvs()[0])

    def status(self) -> dict[str, Any]:
        """Every NameServer's view plus every broker's own account; unreachable ones are marked."""
        import ray

        namesrvs: dict[str, Any] = {}
        for name, handle in self.dep.namesrvs.items():
            try:
                namesrvs[name] = ray.get(handle.get_status.remote(), timeout=self.timeout_s)
            except Exception as e:
                namesrvs[name] = {"name": name, "error": type(e).__name__}
        brokers: dict[str, Any] = {}
        for addr, handle in self.dep.brokers.items():
            try:
                brokers[addr] = ray.get(handle.get_runtime_info.remote(), timeout=self.timeout_s)
                # role, masterEpoch, role_log, replication lag (and the controller's view in controller mode)
                brokers[addr]["replica"] = ray.get(handle.status.remote(), timeout=self.timeout_s)
            except Exception as e:
                brokers[addr] = {"broker_addr": addr, "error": type(e).__name__}
        proxies: dict[str, Any] = {}
        for addr, handle in self.dep.brokers.items():  # local mode: the proxy inside each broker
            if "error" not in brokers[addr] and (local := ray.get(handle.proxy_status.remote(),
                                                                  timeout=self.timeout_s)) is not None:
                proxies[local["name"]] = local
        for name, handle in getattr(self.dep, "proxies", {}).items():
            try:
                proxies[name] = ray.get(handle.get_status.remote(), timeout=self.timeout_s)
            except Exception as e:
                proxies[name] = {"name": name, "error": type(e).__name__}
        console = None
        if getattr(self.dep, "console", None) is not None:
            console = {"url": getattr(self.dep, "console_url", None)}
        return {"namesrvs": namesrvs, "brokers": brokers, "proxies": proxies, "console": console}
