"""Replication's pure parts (RocketMQ's store/ha): what a master sends, the SyncStateSet, lag, the HA
wire and the epoch file."""
