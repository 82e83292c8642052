"""Subscription groups (RocketMQ's broker/subscription): each consumer group's config on a broker."""
