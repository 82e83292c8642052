"""Consume queues (RocketMQ's store/queue): per-queue offsets into the commit log."""
