"""The operations behind the mqadmin verbs (RocketMQ's DefaultMQAdminExt), over either transport.

Queries (cluster info, topic list, route, KV value) go to the first NameServer that answers, as a
RocketMQ client does; changes (KV, config, write permission, topic deletion) go to every NameServer
of the list and report each one's outcome. Topic creation and deletion reach the master brokers
found through the cluster info, as mqadmin's CommandUtil does.
"""

from __future__ import annotations

from typing import Any

from clients.admin.transport import AdminTransport, Reply, ServerUnreachable, unreachable
from namesrv.protocol.codes import RequestCode, ResponseCode
from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import ClusterInfo, TopicConfig, TopicRouteData


class MQAdminError(RuntimeError):
    """An admin operation failed; the message is one line for the user."""


class MQAdminExt:
    def __init__(self, transport: AdminTransport) -> None:
        self.transport = transport

    # ------------------------------------------------------------------ plumbing
    def first(self, code: int, ext: dict[str, Any] | None = None) -> tuple[str, Reply]:
        """Ask the NameServers in order until one answers (any answer, error codes included)."""
        failures = []
        for ns in self.transport.namesrvs():
            try:
                return ns, self.transport.call_namesrv(ns, code, ext)
            except ServerUnreachable as e:
                failures.append(str(e))
        raise MQAdminError(f"no NameServer of {self.transport.where} answered: {'; '.join(failures)}")

    def each(self, code: int, ext: dict[str, Any] | None = None,
             props: dict[str, str] | None = None) -> dict[str, Reply]:
        """Ask every NameServer; an unreachable one is an UNREACHABLE reply, not an exception."""
        out = {}
        for ns in self.transport.namesrvs():
            try:
                out[ns] = self.transport.call_namesrv(ns, code, ext, props)
            except ServerUnreachable as e:
                out[ns] = unreachable(e)
        return out

    @staticmethod
    def failures(replies: dict[str, Reply]) -> str | None:
        """None when every reply succeeded, else one line naming each failure."""
        bad = [f"{ns}: {r.describe()}" for ns, r in replies.items() if not r.ok]
        return "; ".join(bad) if bad else None

    def _ok(self, ns: str, reply: Reply, what: str) -> Reply:
        if not reply.ok:
            raise MQAdminError(f"{what} on {ns} failed: {reply.describe()}")
        return reply

    # ------------------------------------------------------------------ queries
    def examine_broker_cluster_info(self) -> ClusterInfo:
        ns, reply = self.first(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.from_wire(self._ok(ns, reply, "cluster info").body)

    def fetch_all_topic_list(self) -> list[str]:
        ns, reply = self.first(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(self._ok(ns, reply, "topic list").body.get("topicList", []))

    def topic_lists(self) -> dict[str, list[str] | str]:
        """Every NameServer's topic list, or why it has none."""
        return {ns: sorted(r.body.get("topicList", [])) if r.ok else r.describe()
                for ns, r in self.each(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).items()}

    def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        ns, reply = self.first(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if reply.code == ResponseCode.TOPIC_NOT_EXIST:
            raise MQAdminError(f"topic {topic!r} does not exist: {ns} has no route for it")
        return TopicRouteData.from_wire(self._ok(ns, reply, f"route of {topic}").body)

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        ns, reply = self.first(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        if reply.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return self._ok(ns, reply, "KV query").ext.get("value")

    def get_namesrv_config(self) -> dict[str, dict[str, str] | str]:
        """Every NameServer's config (camelCase keys), or why it gave none."""
        return {ns: dict(r.body or {}) if r.ok else r.describe()
                for ns, r in self.each(RequestCode.GET_NAMESRV_CONFIG).items()}

    # ------------------------------------------------------------------ brokers through the cluster info
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

    def create_and_update_topic_config(self, broker_addr: str, tc: TopicConfig) -> None:
        try:
            reply = self.transport.update_topic(broker_addr, tc)
        except ServerUnreachable as e:
            raise MQAdminError(f"broker {broker_addr}: {e}") from None
        self._ok(broker_addr, reply, f"create topic {tc.topic_name}")

    def fetch_broker_runtime_stats(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (what mqadmin clusterList and brokerStatus show)."""
        try:
            reply = self.transport.broker_runtime_info(broker_addr)
        except ServerUnreachable as e:
            raise MQAdminError(f"broker {broker_addr}: {e}") from None
        table = self._ok(broker_addr, reply, "get runtime info").body
        if not isinstance(table, dict) or not isinstance(table.get("table"), dict):
            raise MQAdminError(f"broker {broker_addr}: runtime info is not a KVTable")
        return {str(k): str(v) for k, v in table["table"].items()}

    def delete_topic_in_broker(self, broker_addrs: list[str], topic: str) -> None:
        for addr in broker_addrs:
            try:
                reply = self.transport.delete_topic_in_broker(addr, topic)
            except ServerUnreachable as e:
                raise MQAdminError(f"broker {addr}: {e}") from None
            self._ok(addr, reply, f"delete topic {topic}")

    # ------------------------------------------------------------------ changes on every NameServer
    def delete_topic_in_namesrv(self, cluster: str | None, topic: str) -> dict[str, Reply]:
        ext = {"topic": topic} | ({"clusterName": cluster} if cluster else {})
        return self.each(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    def create_and_update_kv_config(self, namespace: str, key: str, value: str) -> dict[str, Reply]:
        return self.each(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    def delete_kv_config(self, namespace: str, key: str) -> dict[str, Reply]:
        return self.each(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    def update_namesrv_config(self, props: dict[str, str]) -> dict[str, Reply]:
        return self.each(RequestCode.UPDATE_NAMESRV_CONFIG, props=props)

    def wipe_write_perm_of_broker(self, broker_name: str) -> dict[str, Reply]:
        return self.each(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})

    def add_write_perm_of_broker(self, broker_name: str) -> dict[str, Reply]:
        return self.each(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
