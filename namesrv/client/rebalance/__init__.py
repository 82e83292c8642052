"""A consumer group's queue allocation (RocketMQ's client/consumer/rebalance): which of a topic's
queues one member consumes, given every member of the group. Pure: no Ray, no sockets."""
