"""A broker's replication and failover on Ray (RocketMQ's HAService and ReplicasManager): transport,
master side, TCP transfer and the replicas manager."""
