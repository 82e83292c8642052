"""The NameServer as a Ray actor: the actor, its lifecycle owner, its request stage, snapshots, status
and channel watches."""
