"""Consumers (RocketMQ's client/consumer)."""
