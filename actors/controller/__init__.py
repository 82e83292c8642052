"""The HA controller (RocketMQ 5's controller mode) as a Ray actor, how to start or find it, and its
event log in Ray's GCS."""
