"""Admin: one client, RocketMQ's DefaultMQAdminExt over TCP or Ray (`client`, `transport`,
`tcp_admin`), the mqadmin verbs (`mqadmin*`), the deploy/inspect verbs (`cli`) and `top`.

`AdminClient(deployment)` is DefaultMQAdminExt over a Deployment's actors, under its older name."""

from clients.admin.client import AdminClient, AdminError, DefaultMQAdminExt
from clients.admin.client_brokers import MQAdminError

__all__ = ["AdminClient", "AdminError", "DefaultMQAdminExt", "MQAdminError"]
