"""The RocketMQ 5 proxy's pure core (RocketMQ's proxy module, cluster mode): the gRPC MessagingService
mapped onto NameServers and brokers (descriptors, routes, sends, transactions, settings, status
codes); its actors are in `actors/proxy/`."""
