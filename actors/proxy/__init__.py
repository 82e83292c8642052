"""RocketMQ 5 gRPC proxy actors (cluster mode): `apache.rocketmq.v2.MessagingService` served with
grpc.aio, mapped onto the NameServer actors (routes) and the brokers' TCP remoting ports
(namesrv.proxy holds the pure mapping)."""
