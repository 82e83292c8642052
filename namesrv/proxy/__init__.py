"""The RocketMQ 5 proxy's pure core (RocketMQ's proxy module): the gRPC MessagingService mapped onto
NameServers and brokers goes here; its actors go in `actors/`."""
