"""Delayed and timed delivery (RocketMQ's broker/schedule): parking messages and moving them when due."""
