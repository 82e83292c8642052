"""What every server actor uses of Ray: named-actor handles, metrics and what Ray says about the actor
itself."""
