"""The message index (RocketMQ's store/index): messages by key and time."""
