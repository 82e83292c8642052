"""A broker's message store (RocketMQ's store module): the commit log in segment files, its records,
checkpoint, recovery and retention; consume queues in `queue/`, the message index in `index/`,
replication in `ha/`."""
