"""Interop with RocketMQ's own clients: the real C++ client (PyPI `rocketmq`) driven in its own
process."""
