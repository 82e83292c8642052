"""A broker as a Ray actor: the actor, its lifecycle owner, registration with every NameServer, status
and Broker2Client; replication in `ha/`."""
