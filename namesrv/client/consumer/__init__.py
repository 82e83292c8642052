"""The consumer core (RocketMQ's DefaultMQPushConsumerImpl without its threads and sockets): settings,
subscriptions, process queues, listeners' answers. Pure: no Ray, no sockets."""
