"""Admin: the API (RocketMQ's DefaultMQAdminExt, the route parts) and the deploy/inspect CLI verbs."""

from clients.admin.client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError"]
