"""RocketMQ namespaces (NamespaceUtil): a client with a namespace names its topics and groups
`ns%resource` on the wire (`%RETRY%ns%group` for a retry topic) and strips it from what comes back.
System topics (TBW102, rmq_sys_*, ...) and system groups (CID_RMQ_SYS_*) are never wrapped."""

from __future__ import annotations

from namesrv.protocol.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_PREFIX, SYSTEM_TOPICS

NAMESPACE_SEPARATOR = "%"
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"


def _is_system(resource: str) -> bool:
    return resource in SYSTEM_TOPICS or resource.startswith((RMQ_SYS_PREFIX, SYS_CONSUMER_GROUP_PREFIX))


def _split_prefix(resource: str) -> tuple[str, str]:
    """('%RETRY%' | '%DLQ%' | '', the rest)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if resource.startswith(prefix):
            return prefix, resource[len(prefix):]
    return "", resource


def wrap_namespace(namespace: str | None, resource: str) -> str:
    """`resource` in `namespace` (NamespaceUtil.wrapNamespace): unchanged without a namespace, for a
    system resource, or when it is in the namespace already."""
    if not namespace or not resource or _is_system(resource):
        return resource
    prefix, rest = _split_prefix(resource)
    if rest.startswith(namespace + NAMESPACE_SEPARATOR):
        return resource
    return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{rest}"


def without_namespace(namespace: str | None, resource: str) -> str:
    """`resource` with `namespace` taken off (NamespaceUtil.withoutNamespace(resource, namespace)):
    unchanged when it is not in that namespace."""
    if not namespace or not resource or _is_system(resource):
        return resource
    prefix, rest = _split_prefix(resource)
    if not rest.startswith(namespace + NAMESPACE_SEPARATOR):
        return resource
    return prefix + rest[len(namespace) + 1:]
