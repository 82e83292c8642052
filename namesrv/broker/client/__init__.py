"""Who consumes from a broker (RocketMQ's broker/client, offset, filter and longpolling): consumers,
their offsets, subscription filters and held pulls."""
