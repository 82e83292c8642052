"""The client internals (RocketMQ's client/impl): the client instance with its route cache, direct
broker connections, and the NameServer fetcher."""
