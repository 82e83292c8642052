"""RocketMQ 5's controller (RIP-44) as a pure core: replica tables, elections, heartbeats, the event log.

No Ray here: the actor in `actors/controller/actor.py` holds a `ControllerCore`, feeds it heartbeats
and Ray's actor deaths, and gives its event log a home that outlives the actor (Ray's GCS KV).
"""
